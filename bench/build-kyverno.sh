#!/usr/bin/env bash
# Builds Kyverno's admission controller (cmd/kyverno) and CLI (kubectl-kyverno) from the Go module proxy, as the
# side-by-side benchmark peers of bench/compare_kyverno.py and bench/compare_cli.py.  Only the benchmark path uses
# it; the normal test command never builds Kyverno.  The module is copied out of the module cache (its go.mod has
# replace directives, which rule out `go install`), built, and the binaries are cached under .cache/bin with a
# stamp (version + Go version); a rebuild happens only when either changes.
#
# Usage: bench/build-kyverno.sh [TARGET...]   targets: kyverno kubectl-kyverno (default), background-controller,
#        reports-controller (the peers of bench/bench_cluster_scale.py)
# Env:   KYVERNO_VERSION (default v1.19.1)
#        STOCKADE_KYVERNO_PREBUILT=DIR  reuse kyverno/kubectl-kyverno binaries already built from that version in DIR
#        STOCKADE_BUILD_PARALLELISM (default 2) limits concurrent compile jobs.
# Cold build on 2 cores: several minutes of module download and ~15-25 min of compilation; warm: seconds.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${KYVERNO_VERSION:-v1.19.1}"
bin_dir="$root/.cache/bin"
src_dir="$root/.cache/kyverno-src/$version"
mkdir -p "$bin_dir"

if ! command -v go >/dev/null 2>&1; then
  echo "build-kyverno: go is not installed" >&2
  exit 1
fi

stamp="kyverno-$version-$(go env GOVERSION)"
if [ "$#" -gt 0 ]; then targets=("$@"); else targets=(kyverno kubectl-kyverno); fi
up_to_date=1
for target in "${targets[@]}"; do
  if [ ! -x "$bin_dir/$target" ] || [ "$(cat "$bin_dir/$target.stamp" 2>/dev/null)" != "$stamp" ]; then
    up_to_date=0
  fi
done
if [ "$up_to_date" = 1 ]; then
  echo "build-kyverno: ${targets[*]} $version up to date ($bin_dir)"
  exit 0
fi

if [ -n "${STOCKADE_KYVERNO_PREBUILT:-}" ]; then
  for target in "${targets[@]}"; do
    if [ ! -x "$STOCKADE_KYVERNO_PREBUILT/$target" ]; then
      echo "build-kyverno: STOCKADE_KYVERNO_PREBUILT=$STOCKADE_KYVERNO_PREBUILT has no executable $target" >&2
      exit 1
    fi
    cp "$STOCKADE_KYVERNO_PREBUILT/$target" "$bin_dir/$target.tmp"
    mv "$bin_dir/$target.tmp" "$bin_dir/$target"
    echo "$stamp" > "$bin_dir/$target.stamp"
  done
  echo "build-kyverno: copied prebuilt binaries from $STOCKADE_KYVERNO_PREBUILT"
  exit 0
fi

if [ ! -f "$src_dir/go.mod" ]; then
  echo "build-kyverno: downloading github.com/kyverno/kyverno@$version"
  module_dir="$(cd "$(mktemp -d)" && GOFLAGS=-mod=mod go mod download -json "github.com/kyverno/kyverno@$version" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  rm -rf "$src_dir.tmp"
  mkdir -p "$(dirname "$src_dir")"
  cp -r "$module_dir" "$src_dir.tmp"
  chmod -R u+w "$src_dir.tmp"
  mv "$src_dir.tmp" "$src_dir"
fi

cd "$src_dir"
ldflags="-s -w -X github.com/kyverno/kyverno/pkg/version.BuildVersion=$version"
declare -A packages=([kyverno]=./cmd/kyverno [kubectl-kyverno]=./cmd/cli/kubectl-kyverno
  [background-controller]=./cmd/background-controller [reports-controller]=./cmd/reports-controller)
for target in "${targets[@]}"; do
  if [ -z "${packages[$target]:-}" ]; then
    echo "build-kyverno: unknown target $target (one of: ${!packages[*]})" >&2
    exit 2
  fi
  out="$bin_dir/$target"
  echo "build-kyverno: building $target $version (this takes a while on 2 cores)"
  start=$(date +%s)
  CGO_ENABLED=0 go build -p "${STOCKADE_BUILD_PARALLELISM:-2}" -trimpath -ldflags "$ldflags" -o "$out.tmp" "${packages[$target]}"
  mv "$out.tmp" "$out"
  echo "$stamp" > "$out.stamp"
  echo "build-kyverno: built $target in $(( $(date +%s) - start ))s"
done
