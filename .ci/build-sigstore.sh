#!/usr/bin/env bash
# Builds a local sigstore stack from the Go module proxy into <repo>/.cache/bin for the keyless integration tests
# (tests/integration/webhook/test_webhook_keyless_sigstore_cluster.py): real cosign signs keyless against it and `stockade serve` verifies.
#   fulcio     github.com/sigstore/fulcio (the CA; our tests run it with --ca=ephemeralca and a local OIDC issuer)
#   tesseract  github.com/transparency-dev/tesseract posix (a CT log on plain files, the one Fulcio's own compose uses)
# Each binary is pinned below and rebuilt only when its pin or the Go version changes (stamp next to the binary).
# Usage: .ci/build-sigstore.sh [fulcio] [tesseract]     (default: all)
# Env:   STOCKADE_BUILD_PARALLELISM (default 2) limits concurrent compile jobs.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="$root/.cache/bin"
mkdir -p "$bin_dir"
command -v go >/dev/null 2>&1 || { echo "build-sigstore: go is not installed" >&2; exit 1; }

declare -A package=(
  [fulcio]="github.com/sigstore/fulcio@v1.8.8"
  [tesseract]="github.com/transparency-dev/tesseract/cmd/tesseract/posix@v0.1.1"
)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fulcio tesseract)

for target in "${targets[@]}"; do
  pkg="${package[$target]:-}"
  [ -n "$pkg" ] || { echo "build-sigstore: unknown target $target" >&2; exit 1; }
  out="$bin_dir/$target"
  stamp="$pkg-$(go env GOVERSION)"
  if [ -x "$out" ] && [ "$(cat "$out.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "build-sigstore: $target is up to date ($out)"
    continue
  fi
  echo "build-sigstore: building $pkg"
  start=$(date +%s)
  # `go install pkg@version` builds the module as released (its own go.mod, no replace directives), into a
  # scratch GOBIN so a half-written binary never sits at the stamped path.
  scratch="$(mktemp -d)"
  GOBIN="$scratch" CGO_ENABLED=0 nice -n 10 go install -p "${STOCKADE_BUILD_PARALLELISM:-2}" -trimpath -ldflags "-s -w" "$pkg"
  mv "$scratch"/* "$out"
  rmdir "$scratch"
  echo "$stamp" > "$out.stamp"
  echo "build-sigstore: built $target in $(( $(date +%s) - start ))s"
done
