#!/usr/bin/env bash
# Local control plane close to Kyverno's CI kind cluster, with `stockade serve` as the admission webhook
# (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK fake nodes; see stockade/testing/e2ecluster.py).
#
# Usage: hack/e2e-cluster.sh up|down|env [--state-dir DIR]
#   up    builds the missing binaries (.ci/build-apiserver.sh, .ci/build-kwok.sh), starts everything, prints timings
#   env   prints `export KUBECONFIG=... PATH=...` for kubectl/chainsaw:  eval "$(hack/e2e-cluster.sh env)"
#   down  stops the processes recorded by `up`
# Env:   PYTHON (default: the project's .venv, then python3), STOCKADE_E2E_SERVE_ARGS
#        (extra `stockade serve` flags).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/hack/e2e-lib.sh"
action="${1:-}"
case "$action" in
  up) e2e_build_cluster_binaries ;;
  down|env) ;;
  *) echo "usage: $0 up|down|env [--state-dir DIR]" >&2; exit 2 ;;
esac
cd "$root"
exec "$(e2e_python)" -m stockade.testing.e2ecluster "$@"
