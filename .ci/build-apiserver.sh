#!/usr/bin/env bash
# Builds kube-apiserver and kubectl from the k8s.io/kubernetes Go module (fetched
# through the Go module proxy) for the webhook integration tests, and on request
# kube-controller-manager and kube-scheduler for the e2e control plane
# (hack/e2e-cluster.sh).  Binaries are cached under .cache/bin and rebuilt only
# when hack/apiserver/go.mod changes.
#
# Usage: .ci/build-apiserver.sh [kube-apiserver] [kubectl] [kube-controller-manager] [kube-scheduler]
#        (default: kube-apiserver kubectl)
# Cold build of v1.36 on 2 cores shared with other work (load ~14): ~4 min module download + 19 min kube-apiserver
# + 3 min kubectl + 11.5 min kube-controller-manager + 0.5 min kube-scheduler; warm (same
# GOCACHE): seconds.  Also installs Debian's etcd-server when etcd is missing and we are root.
# Env:   STOCKADE_BUILD_PARALLELISM (default 2) limits concurrent compile jobs; STOCKADE_K8S_MODULE, STOCKADE_K8S_BIN_DIR below.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# STOCKADE_K8S_MODULE / STOCKADE_K8S_BIN_DIR build from another pinning module into another directory (the e2e
# suite's kubectl v1.35: hack/kubectl-e2e into .cache/bin/e2e)
module_dir="$(cd "${STOCKADE_K8S_MODULE:-$root/hack/apiserver}" && pwd)"
bin_dir="${STOCKADE_K8S_BIN_DIR:-$root/.cache/bin}"
mkdir -p "$bin_dir"
bin_dir="$(cd "$bin_dir" && pwd)"

if ! command -v go >/dev/null 2>&1; then
  echo "build-apiserver: go is not installed" >&2
  exit 1
fi

k8s_version="$(awk '/^require k8s.io\/kubernetes /{print $3}' "$module_dir/go.mod")"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(kube-apiserver kubectl)
fi

# etcd comes from Debian (etcd-server); install it when missing and we may.
if ! command -v etcd >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "build-apiserver: installing etcd-server"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
fi

cd "$module_dir"
if [ ! -s go.sum ]; then
  go mod tidy
fi

stamp="$(sha256sum go.mod | cut -c1-16)-$(go env GOVERSION)"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${k8s_version} -X k8s.io/client-go/pkg/version.gitVersion=${k8s_version}"
for target in "${targets[@]}"; do
  out="$bin_dir/$target"
  if [ -x "$out" ] && [ "$(cat "$out.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "build-apiserver: $target is up to date ($out)"
    continue
  fi
  echo "build-apiserver: building $target $k8s_version (this takes a while on 2 cores)"
  start=$(date +%s)
  CGO_ENABLED=0 go build -p "${STOCKADE_BUILD_PARALLELISM:-2}" -trimpath -ldflags "$ldflags" \
    -o "$out.tmp" "k8s.io/kubernetes/cmd/$target"
  mv "$out.tmp" "$out"
  echo "$stamp" > "$out.stamp"
  echo "build-apiserver: built $target in $(( $(date +%s) - start ))s"
done
