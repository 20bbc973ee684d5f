#!/usr/bin/env bash
# Builds the helm v3 CLI from the Go module proxy into <repo>/.cache/bin/helm.
# tests/integration/install/ uses it to lint and render deploy/helm/stockade and to
# re-render deploy/install.yaml (hack/render-install.sh); Debian does not package helm.
# Usage: .ci/build-helm.sh     (idempotent: skips when the pinned version is already built)
# Cold build on 2 cores: a few minutes of module download plus several minutes of compiling.
# Env:   HELM_VERSION (default below), STOCKADE_BUILD_PARALLELISM (default 1).
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="${repo_root}/.cache/bin"
target="${bin_dir}/helm"
stamp="${target}.stamp"

command -v go >/dev/null || { echo "build-helm: go toolchain not found" >&2; exit 1; }
wanted="${HELM_VERSION}-$(go env GOVERSION)"
if [[ -x "${target}" && -f "${stamp}" && "$(cat "${stamp}")" == "${wanted}" ]]; then
    echo "build-helm: helm ${HELM_VERSION} is up to date (${target})"
    exit 0
fi

mkdir -p "${bin_dir}"
# Build outside any module so go install resolves helm's own go.mod; -p keeps the build from starving
# other work on small machines.
cd "$(mktemp -d)"
export GOFLAGS="-mod=mod -buildvcs=false -p=${STOCKADE_BUILD_PARALLELISM:-1}"
export CGO_ENABLED=0
echo "build-helm: building helm ${HELM_VERSION} into ${bin_dir} (this takes several minutes)"
start=$(date +%s)
# helm reports its version from internal/version; without these flags `helm version` says v3.x-dev.
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
tmp_bin="$(pwd)/bin"
GOBIN="${tmp_bin}" nice -n 10 go install -trimpath -ldflags "${ldflags}" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
mv "${tmp_bin}/helm" "${target}"
echo "${wanted}" > "${stamp}"
echo "build-helm: built helm in $(( $(date +%s) - start ))s: $("${target}" version --short)"
