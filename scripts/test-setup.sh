#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine: the venv with test extras, Debian's
# docker-registry (a real OCI registry) and etcd, and the Go-built peers (cosign, kube-apiserver, kubectl, helm, the
# sigstore services) when their
# build scripts exist. Idempotent: re-running it only fills in what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e '.[test,server]'

need=()
command -v docker-registry >/dev/null 2>&1 || need+=(docker-registry)
command -v htpasswd >/dev/null 2>&1 || need+=(apache2-utils)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
command -v umoci >/dev/null 2>&1 || need+=(umoci)
command -v skopeo >/dev/null 2>&1 || need+=(skopeo)
# the Flux git transports are tested against a real sshd, and commit signing with real gpg
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
command -v gpg >/dev/null 2>&1 || need+=(gnupg)
# Trillian (under the keyless tests' Rekor) keeps its log in a throw-away PostgreSQL cluster
command -v initdb >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# Kyverno's module (its CRDs, a zip of a few MB, no build): the schema tests hold Stockade's schemas to them.
# Kubernetes v1.33.13's module (no build): its OpenAPI spec is what stockade/engine/mutate/_k8s_schema.py was
# generated from, and tests/unit/hack checks the table against it (hack/gen_k8s_schema.py).
if command -v go >/dev/null 2>&1; then
  GOFLAGS=-mod=mod go mod download github.com/kyverno/kyverno@v1.19.1 k8s.io/kubernetes@v1.33.13
fi

for builder in .ci/build-cosign.sh .ci/build-notation.sh .ci/build-sigstore.sh .ci/build-apiserver.sh .ci/build-helm.sh; do
  if [ -x "$builder" ]; then
    "$builder"
  fi
done
