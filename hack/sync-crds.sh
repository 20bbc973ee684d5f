#!/usr/bin/env bash
# Copies the CRDs (deploy/crds/*.yaml, the single source of truth) into the Helm chart's crds/ directory:
# Helm only installs CRDs from inside the chart and does not follow paths outside it.
# tests/unit/deploy/ fails when the copy drifts; run this (then hack/render-install.sh) after editing deploy/crds/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source_dir="$root/deploy/crds"
chart_crds="$root/deploy/helm/stockade/crds"
mkdir -p "$chart_crds"
find "$chart_crds" -maxdepth 1 -name '*.yaml' -delete
shopt -s nullglob
copied=0
for file in "$source_dir"/*.yaml; do
  cp "$file" "$chart_crds/"
  copied=$((copied + 1))
done
echo "sync-crds: copied $copied file(s) into ${chart_crds#"$root"/}"
