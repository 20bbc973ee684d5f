#!/usr/bin/env bash
# Build the Notary Project CLI (notation) from the Go module proxy into <repo>/.cache/bin.
# tests/integration/cosign/test_ivpol_notary.py signs with it (ImageValidatingPolicy `notary` attestors).
# The proxy answers 403 ("not available") for this module's version list, which `@latest` and `go install
# pkg@version` both read, so the pinned module is downloaded and built from a copy of its source.
# Usage: .ci/build-notation.sh        (idempotent: skips when the pinned binary exists)
set -euo pipefail

NOTATION_VERSION="${NOTATION_VERSION:-v1.3.2}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="${repo_root}/.cache/bin"
target="${bin_dir}/notation"
stamp="${bin_dir}/.notation-version"

if [[ -x "${target}" && -f "${stamp}" && "$(cat "${stamp}")" == "${NOTATION_VERSION}" ]]; then
    echo "notation ${NOTATION_VERSION} already built at ${target}"
    exit 0
fi

command -v go >/dev/null || { echo "go toolchain not found (need Go >= 1.23)" >&2; exit 1; }
mkdir -p "${bin_dir}"
export GOFLAGS="${GOFLAGS:--p=1}"
export CGO_ENABLED=0
echo "building notation ${NOTATION_VERSION} into ${bin_dir}"
source_dir="$(go mod download -json "github.com/notaryproject/notation@${NOTATION_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -d "${source_dir}" ]] || { echo "go mod download did not yield a source directory" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
cp -r "${source_dir}/." "${work}/"
chmod -R u+w "${work}"
(cd "${work}" && nice -n 10 go build -o "${target}" ./cmd/notation)
echo "${NOTATION_VERSION}" > "${stamp}"
"${target}" version
