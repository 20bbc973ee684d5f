#!/usr/bin/env bash
# Renders deploy/install.yaml (plain `kubectl apply -f` install) from the Helm chart with fixed values:
# release "stockade" in namespace "stockade", CRDs included, hooks left out (kubectl would run the pre-delete
# cleanup Job at install time).  tests/integration/install/ fails when the committed file drifts from this output.
# Usage: hack/render-install.sh [output]   (default: deploy/install.yaml; "-" for stdout)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
helm="${HELM:-$root/.cache/bin/helm}"
[ -x "$helm" ] || helm="$(command -v helm || true)"
[ -n "$helm" ] || { echo "render-install: helm not found (run .ci/build-helm.sh)" >&2; exit 1; }
output="${1:-$root/deploy/install.yaml}"
namespace=stockade

render() {
  cat <<HEADER
# stockade: the Helm chart deploy/helm/stockade rendered by hack/render-install.sh with default values into the
# namespace "$namespace" (do not edit by hand).  Install: kubectl apply --server-side -f install.yaml
# Uninstall: see deploy/README.md (remove the Deployment first so the last replica removes the webhooks).
---
apiVersion: v1
kind: Namespace
metadata:
  name: $namespace
  labels:
    app.kubernetes.io/name: stockade
    app.kubernetes.io/instance: stockade
    app.kubernetes.io/part-of: stockade
    # stockade's own pods meet the "restricted" Pod Security Standard
    pod-security.kubernetes.io/enforce: restricted
HEADER
  "$helm" template stockade "$root/deploy/helm/stockade" --namespace "$namespace" --include-crds --no-hooks
}

if [ "$output" = "-" ]; then
  render
else
  render > "$output.tmp"
  mv "$output.tmp" "$output"
  echo "render-install: wrote ${output#"$root"/}"
fi
