#!/usr/bin/env bash
# Build the cosign CLI from the Go module proxy into <repo>/.cache/bin.
# The integration tests under tests/integration/cosign/ use this binary as an
# independent signer/verifier; Debian does not package cosign.
# Usage: .ci/build-cosign.sh        (idempotent: skips when the pinned binary exists)
set -euo pipefail

COSIGN_VERSION="${COSIGN_VERSION:-v2.6.5}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="${repo_root}/.cache/bin"
target="${bin_dir}/cosign"
stamp="${bin_dir}/.cosign-version"

if [[ -x "${target}" && -f "${stamp}" && "$(cat "${stamp}")" == "${COSIGN_VERSION}" ]]; then
    echo "cosign ${COSIGN_VERSION} already built at ${target}"
    exit 0
fi

command -v go >/dev/null || { echo "go toolchain not found (need Go >= 1.23)" >&2; exit 1; }
mkdir -p "${bin_dir}"
# Small machines: build one package at a time so the build does not starve other work.
export GOFLAGS="${GOFLAGS:--p=1}"
export GOBIN="${bin_dir}"
export CGO_ENABLED=0
echo "building cosign ${COSIGN_VERSION} into ${bin_dir} (this takes several minutes)"
nice -n 10 go install "github.com/sigstore/cosign/v2/cmd/cosign@${COSIGN_VERSION}"
echo "${COSIGN_VERSION}" > "${stamp}"
"${target}" version | head -5
