#!/usr/bin/env bash
# Runs Kyverno's chainsaw e2e suite (../shared/e2e/kyverno-chainsaw) against `stockade serve` on the local
# control plane, one `chainsaw test --config .chainsaw.yaml` per suite folder as Kyverno's CI does, skipping the
# tests listed in tests/e2e/excluded.yaml.  Per-folder counts and failures: .cache/e2e/results/summary.json.
#
# Usage: hack/e2e-run.sh [FOLDER_OR_TEST ...] [--parallel N] [--no-cluster] [--chainsaw-arg=--assert-timeout=30s]
#   (default: every folder; --no-cluster reuses a cluster started by hack/e2e-cluster.sh up)
# Env:   STOCKADE_E2E_SHARED (default <repo>/../shared/e2e), PYTHON.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/hack/e2e-lib.sh"
e2e_build_cluster_binaries
"$root/.ci/build-chainsaw.sh"
cd "$root"
exec "$(e2e_python)" -m stockade.testing.e2erun "$@"
