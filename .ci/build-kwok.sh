#!/usr/bin/env bash
# Builds the KWOK controller (sigs.k8s.io/kwok/cmd/kwok, pinned by hack/kwok/go.mod) into
# .cache/bin/kwok.  The e2e control plane (hack/e2e-cluster.sh) runs it to simulate nodes, so
# Pods reach Running without a kubelet -- the way Kyverno's CI uses KWOK.
# Rebuilt only when hack/kwok/go.mod or the Go version changes.
# Usage: .ci/build-kwok.sh
# Env:   STOCKADE_BUILD_PARALLELISM (default 2) limits concurrent compile jobs.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
module_dir="$root/hack/kwok"
bin_dir="$root/.cache/bin"
out="$bin_dir/kwok"
mkdir -p "$bin_dir"

command -v go >/dev/null 2>&1 || { echo "build-kwok: go is not installed" >&2; exit 1; }

cd "$module_dir"
[ -s go.sum ] || go mod tidy
# KWOK's own "fast" pod stages without pod-complete: in Kyverno's kind cluster a Job's Pod runs its command (the
# ttl tests wait for it to be Running), while KWOK's default would mark it Succeeded at once.
# `go list -m` does not download: on a cold module cache the directory would be empty
go mod download sigs.k8s.io/kwok
stages="$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage/pod/fast"
[ -f "$stages/pod-ready.yaml" ] || { echo "build-kwok: KWOK's pod stages not found under $stages" >&2; exit 1; }
# A running container's status also reports its resources, as a kubelet with in-place resize does (Kubernetes 1.33+):
# the API server refuses pods/resize for a Pod whose running containers report none ("node without support for resize").
{
  awk '
    /range \.spec\.containers/ { in_containers = 1 }
    /range \.spec\.initContainers/ { in_containers = 0 }
    { print }
    in_containers && /restartCount: 0/ {
      print "        resources: {{ if .resources }}{{ .resources | toJson }}{{ else }}{}{{ end }}"
    }
  ' "$stages/pod-ready.yaml"
  echo "---"
  cat "$stages/pod-delete.yaml"
} > "$bin_dir/kwok-pod-stages.yaml.tmp"
grep -q 'resources: {{ if .resources }}' "$bin_dir/kwok-pod-stages.yaml.tmp" \
  || { echo "build-kwok: KWOK's pod-ready stage changed shape; container resources were not added" >&2; exit 1; }
mv "$bin_dir/kwok-pod-stages.yaml.tmp" "$bin_dir/kwok-pod-stages.yaml"
stamp="$(sha256sum go.mod | cut -c1-16)-$(go env GOVERSION)"
if [ -x "$out" ] && [ "$(cat "$out.stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "build-kwok: kwok is up to date ($out)"
  exit 0
fi
version="$(awk '/^require sigs.k8s.io\/kwok /{print $3}' go.mod)"
echo "build-kwok: building kwok $version"
start=$(date +%s)
CGO_ENABLED=0 go build -p "${STOCKADE_BUILD_PARALLELISM:-2}" -trimpath -ldflags "-s -w" \
  -o "$out.tmp" sigs.k8s.io/kwok/cmd/kwok
mv "$out.tmp" "$out"
echo "$stamp" > "$out.stamp"
echo "build-kwok: built kwok in $(( $(date +%s) - start ))s"
