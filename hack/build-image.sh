#!/usr/bin/env bash
# Builds the Stockade OCI image without a container daemon, from Debian packages only:
#   layer 1: a Debian bookworm root filesystem from mmdebstrap (python3, python3-venv, ca-certificates, git);
#   layer 2: /opt/stockade, a venv holding the stockade wheel and its dependencies.
# The result is an OCI image layout (push it with skopeo). Both layers are cached under .cache/image, keyed by
# their inputs, so a rerun after a code change only rebuilds the venv layer.
#
# usage: hack/build-image.sh [OCI_LAYOUT_DIR] [TAG]     (defaults: .cache/image/oci, the package version)
# prints the manifest digest of the built image on the last line of stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO_ROOT=$PWD

for tool in mmdebstrap umoci /usr/bin/python3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "build-image: '$tool' not found; apt-get install mmdebstrap umoci python3-venv" >&2; exit 2; }
done

CACHE=$REPO_ROOT/.cache/image
LAYOUT=${1:-$CACHE/oci}
VERSION=$(/usr/bin/python3 -c 'import tomllib;print(tomllib.load(open("pyproject.toml","rb"))["project"]["version"])')
TAG=${2:-$VERSION}
COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
# reproducible layer tarballs: every file gets this mtime (the commit time when known)
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
export SOURCE_DATE_EPOCH
mkdir -p "$CACHE"

# -- layer 1: base root filesystem, cached by its package list --------------------------------------------------
PACKAGES=python3,python3-venv,ca-certificates,git
SUITE=bookworm
BASE_KEY=$(printf '%s %s minbase' "$SUITE" "$PACKAGES" | sha256sum | cut -c1-16)
BASE_TAR=$CACHE/base-$BASE_KEY.tar
if [ ! -f "$BASE_TAR" ]; then
  echo "build-image: mmdebstrap $SUITE ($PACKAGES)" >&2
  # minbase: dpkg + apt essentials only; docs, man pages and apt lists are dropped to keep the layer small
  mmdebstrap --quiet --variant=minbase --include="$PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    "$SUITE" "$CACHE/base-$BASE_KEY.partial.tar" >&2
  mv "$CACHE/base-$BASE_KEY.partial.tar" "$BASE_TAR"
fi

# -- layer 2: the venv, cached by the wheel set ------------------------------------------------------------------
WHEELS=$CACHE/wheels
mkdir -p "$WHEELS"
rm -f "$WHEELS"/stockade-*.whl
/usr/bin/python3 -m pip --version >/dev/null 2>&1 && PIP=(/usr/bin/python3 -m pip) || PIP=("$REPO_ROOT/.venv/bin/pip")
[ -x "${PIP[0]}" ] || PIP=(/work/main/.venv/bin/pip)
# dependencies come from the wheel cache after the first run (pip wheel skips wheels already in the directory)
"${PIP[@]}" wheel --quiet --disable-pip-version-check --wheel-dir "$WHEELS" ".[server]" >&2
VENV_KEY=$( (cd "$WHEELS" && sha256sum ./*.whl) | sha256sum | cut -c1-16)
VENV_TAR=$CACHE/venv-$VENV_KEY.tar
if [ ! -s "$VENV_TAR" ]; then
  echo "build-image: venv layer from $(ls "$WHEELS" | wc -l) wheels" >&2
  STAGE=$(mktemp -d "$CACHE/stage.XXXXXX")
  trap 'rm -rf "$STAGE"' EXIT
  # Debian's /usr/bin/python3 is the same path (and minor version) as in layer 1, so the venv's interpreter links hold
  /usr/bin/python3 -m venv "$STAGE/opt/stockade"
  "$STAGE/opt/stockade/bin/pip" install --quiet --disable-pip-version-check --no-index --find-links "$WHEELS" "stockade[server]" >&2
  "$STAGE/opt/stockade/bin/pip" uninstall --quiet --yes pip >&2
  # scripts were written with the staging path in their shebang; point them at the path inside the image
  grep -rlI --null "$STAGE/opt/stockade" "$STAGE/opt/stockade/bin" | xargs -0 -r sed -i "s#$STAGE/opt/stockade#/opt/stockade#g"
  # the root filesystem is read-only at run time: compile now, not on first import
  "$STAGE/opt/stockade/bin/python" -m compileall -q --invalidation-mode unchecked-hash "$STAGE/opt/stockade/lib" >&2 || true
  tar --create --file "$VENV_TAR.partial" --directory "$STAGE" --sort=name --numeric-owner --owner=0 --group=0 \
    --mtime="@$SOURCE_DATE_EPOCH" opt
  mv "$VENV_TAR.partial" "$VENV_TAR"
fi

# -- assemble: OCI layout, two layers, config --------------------------------------------------------------------
rm -rf "$LAYOUT"
umoci init --layout "$LAYOUT"
umoci new --image "$LAYOUT:$TAG"
HISTORY=(--history.created "$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)" --history.created_by "hack/build-image.sh")
umoci raw add-layer --image "$LAYOUT:$TAG" "${HISTORY[@]}" --history.comment "debian $SUITE: $PACKAGES" "$BASE_TAR"
umoci raw add-layer --image "$LAYOUT:$TAG" "${HISTORY[@]}" --history.comment "stockade $VERSION venv" "$VENV_TAR"
umoci config --image "$LAYOUT:$TAG" \
  --created "$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)" \
  --architecture amd64 --os linux \
  --config.user 65532:65532 \
  --config.entrypoint stockade --config.cmd serve --config.cmd --help \
  --config.workingdir / \
  --config.env PATH=/opt/stockade/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.env PYTHONDONTWRITEBYTECODE=1 --config.env PYTHONUNBUFFERED=1 \
  --config.exposedports 9443/tcp --config.exposedports 8000/tcp \
  --config.label org.opencontainers.image.title=stockade \
  --config.label "org.opencontainers.image.version=$VERSION" \
  --config.label "org.opencontainers.image.revision=$COMMIT" \
  --config.label org.opencontainers.image.description="Kyverno-compatible policy engine and admission webhook" \
  --no-history
umoci gc --layout "$LAYOUT"
# the manifest digest the tag now points at (what a registry will report after the push)
/usr/bin/python3 - "$LAYOUT" "$TAG" <<'EOF'
import json, sys
index = json.load(open(f"{sys.argv[1]}/index.json"))
print(next(m["digest"] for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == sys.argv[2]))
EOF
