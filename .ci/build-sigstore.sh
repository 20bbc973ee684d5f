#!/usr/bin/env bash
# Builds a local sigstore stack from the Go module proxy into <repo>/.cache/bin for the keyless integration tests
# (tests/integration/webhook/test_webhook_keyless_sigstore_cluster.py): real cosign signs keyless against it and `stockade serve` verifies.
#   fulcio     github.com/sigstore/fulcio (the CA; the tests run it as a file CA with a local OIDC issuer)
#   tesseract  github.com/transparency-dev/tesseract posix (a CT log on plain files, the one Fulcio's own compose uses)
#   rekor-server, trillian_log_server, trillian_log_signer
#              Rekor v1 (v1.5.4: later releases need go1.27) on Trillian, whose storage is PostgreSQL here
# Each binary is pinned below and rebuilt only when its pin or the Go version changes (stamp next to the binary).
# Usage: .ci/build-sigstore.sh [fulcio] [tesseract] [rekor-server] [trillian_log_server] [trillian_log_signer]  (default: all)
# Cold builds (empty GOCACHE, module cache partly warm, 2 cores shared with other work, load 3-6): fulcio 94 s,
# tesseract 72 s, trillian_log_server 189 s + trillian_log_signer 8 s, then rekor-server 197 s on that cache; about
# 9.3 min in all. Warm (stamps match): well under a second.
# Env:   STOCKADE_BUILD_PARALLELISM (default 2) limits concurrent compile jobs.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="$root/.cache/bin"
mkdir -p "$bin_dir"
command -v go >/dev/null 2>&1 || { echo "build-sigstore: go is not installed" >&2; exit 1; }

declare -A package=(
  [fulcio]="github.com/sigstore/fulcio@v1.8.8"
  [tesseract]="github.com/transparency-dev/tesseract/cmd/tesseract/posix@v0.1.1"
  [rekor-server]="github.com/sigstore/rekor/cmd/rekor-server@v1.5.4"
  [trillian_log_server]="github.com/google/trillian/cmd/trillian_log_server@v1.7.3"
  [trillian_log_signer]="github.com/google/trillian/cmd/trillian_log_signer@v1.7.3"
)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fulcio tesseract rekor-server trillian_log_server trillian_log_signer)

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

# Trillian's PostgreSQL schema from the same pinned module, next to its binaries: the tests load it into a fresh
# database (Debian's PostgreSQL binaries run it).
if [[ " ${targets[*]} " == *" trillian_log_server "* ]]; then
  trillian_module="github.com/google/trillian@${package[trillian_log_server]##*@}"
  trillian_dir="$(go mod download -json "$trillian_module" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  cp "$trillian_dir/storage/postgresql/schema/storage.sql" "$bin_dir/trillian-postgresql.sql.tmp"
  mv "$bin_dir/trillian-postgresql.sql.tmp" "$bin_dir/trillian-postgresql.sql"
fi
