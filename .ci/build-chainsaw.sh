#!/usr/bin/env bash
# Builds chainsaw (Kyverno's e2e test runner) from the source tarball beside the repository
# (../shared/e2e/chainsaw-src.tar.gz; its dependencies come from the Go module proxy) into .cache/bin/chainsaw for hack/e2e-run.sh.
# Rebuilt only when the tarball or the Go version changes.
# (The proxy does serve chainsaw v0.2.12, but it does not compile with Go 1.26: its test-main shim lacks
# testing.testDeps.ModulePath.  The tarball's newer source does.)
# Usage: .ci/build-chainsaw.sh
# Env:   STOCKADE_E2E_SHARED (default <repo>/../shared/e2e), CHAINSAW_SRC (tarball path, default
#        $STOCKADE_E2E_SHARED/chainsaw-src.tar.gz), STOCKADE_BUILD_PARALLELISM (default 2).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
shared="${STOCKADE_E2E_SHARED:-$root/../shared/e2e}"
src="${CHAINSAW_SRC:-$shared/chainsaw-src.tar.gz}"
bin_dir="$root/.cache/bin"
out="$bin_dir/chainsaw"
mkdir -p "$bin_dir"

command -v go >/dev/null 2>&1 || { echo "build-chainsaw: go is not installed" >&2; exit 1; }
[ -f "$src" ] || { echo "build-chainsaw: source tarball not found: $src" >&2; exit 1; }

stamp="$(sha256sum "$src" | cut -c1-16)-$(go env GOVERSION)"
if [ -x "$out" ] && [ "$(cat "$out.stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "build-chainsaw: chainsaw is up to date ($out)"
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tar xzf "$src" -C "$work"
echo "build-chainsaw: building chainsaw from $src"
start=$(date +%s)
(cd "$work/chainsaw" && CGO_ENABLED=0 go build -p "${STOCKADE_BUILD_PARALLELISM:-2}" -trimpath \
  -ldflags '-s -w' -o "$out.tmp" .)
mv "$out.tmp" "$out"
echo "$stamp" > "$out.stamp"
echo "build-chainsaw: built chainsaw in $(( $(date +%s) - start ))s"
