#!/usr/bin/env bash
# The kubectl Kyverno's e2e scripts run (v1.35, the minor of the kind cluster Kyverno's CI uses), built by
# .ci/build-apiserver.sh from hack/kubectl-e2e into .cache/bin/e2e, which the e2e runner puts first on the suite's PATH.
# kubectl v1.36's `kubectl debug` defaults to the general profile (SYS_PTRACE on the debug container); v1.35's to the
# legacy one, which Kyverno's ephemeral-container tests are written against.  Cold: about 3 min of compile.
set -euo pipefail
cd "$(dirname "$0")/.."
STOCKADE_K8S_MODULE=hack/kubectl-e2e STOCKADE_K8S_BIN_DIR=.cache/bin/e2e exec .ci/build-apiserver.sh kubectl
