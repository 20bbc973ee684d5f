"""ImageValidatingPolicy in `stockade serve` behind a real kube-apiserver: images signed by the real cosign (a key,
and keyless with a Fulcio-like CA and a Rekor SET checked offline through a trusted_root.json), digests pinned by
mutateDigest, unsigned images denied by the validating webhook."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from webhook_cluster import Kube, Serve, pod

from stockade.images.keys import encrypt_cosign_private_key
from stockade.images.reference import parse_reference
from stockade.images.registry import RegistryClient
from stockade.testing.apiserver import ControlPlane
from stockade.testing.registry import LocalRegistry
from stockade.testing.sigstore import FakeFulcio, FakeRekor, trusted_root_json

REPO_ROOT = Path(__file__).resolve().parents[3]
COSIGN = Path(os.environ.get("STOCKADE_COSIGN", REPO_ROOT / ".cache" / "bin" / "cosign"))
PASSWORD = "ivpol-serve"
FLAGS = ("--allow-insecure-registry", "--allow-http-registry")
IDENTITY = "https://github.com/acme/app/.github/workflows/release.yaml@refs/heads/main"
ISSUER = "https://token.actions.githubusercontent.com"


def cosign(*args: str, cwd: Path) -> str:
    if not COSIGN.exists():
        pytest.fail(f"cosign binary not found at {COSIGN}; build it with `.ci/build-cosign.sh`")
    env = {**os.environ, "COSIGN_PASSWORD": PASSWORD, "COSIGN_YES": "true", "HOME": str(cwd)}
    result = subprocess.run([str(COSIGN), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        pytest.fail(f"cosign {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def _indent(text: str, spaces: int) -> str:
    return "".join(" " * spaces + line + "\n" for line in text.strip().splitlines())


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The registry host, a key-signed image, a keyless-signed image (with a Rekor bundle), an unsigned one, and the
    trust material the policies name."""
    work = tmp_path_factory.mktemp("ivpol-serve")
    with LocalRegistry() as registry, RegistryClient(**registry.client_options(), retries=0) as client:
        found = {"host": registry.host}
        for name in ("keyed", "keyless", "unsigned"):
            ref = f"{registry.host}/ivp/{name}:v1"
            found[name] = ref
            found[f"{name}-digest"] = client.push_image(parse_reference(ref), [f"{name} layer".encode()])
        cosign("generate-key-pair", cwd=work)
        cosign("sign", "--key", "cosign.key", "--tlog-upload=false", *FLAGS, f"{registry.host}/ivp/keyed@{found['keyed-digest']}", cwd=work)
        found["public-key"] = (work / "cosign.pub").read_text()

        fulcio, rekor = FakeFulcio(), FakeRekor()
        key, certificate = fulcio.issue(IDENTITY, ISSUER)
        certificate_pem = certificate.public_bytes(serialization.Encoding.PEM).decode()
        (work / "leaf.pem").write_text(certificate_pem)
        (work / "chain.pem").write_text(fulcio.chain_pem)
        (work / "leaf.key").write_bytes(encrypt_cosign_private_key(key, PASSWORD))
        target = f"{registry.host}/ivp/keyless@{found['keyless-digest']}"
        payload = cosign("generate", *FLAGS, target, cwd=work).encode()
        (work / "payload.json").write_bytes(payload)
        signature = key.sign(payload, ec.ECDSA(hashes.SHA256()))
        (work / "sig.b64").write_text(base64.b64encode(signature).decode())
        bundle = rekor.bundle(rekor.hashedrekord_body(payload, signature, certificate_pem))
        (work / "bundle.json").write_text(json.dumps({"base64Signature": base64.b64encode(signature).decode(), "rekorBundle": bundle}))
        cosign("attach", "signature", "--payload", "payload.json", "--signature", "sig.b64", "--certificate", "leaf.pem",
               "--certificate-chain", "chain.pem", "--rekor-response", "bundle.json", *FLAGS, target, cwd=work)
        found["trusted-root"] = trusted_root_json(fulcio, rekor)
        yield found


@pytest.fixture()
def ivpol_serve(control_plane: ControlPlane, kube: Kube, images: dict[str, str], tmp_path: Path) -> Iterator[Serve]:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "ivpol.yaml").write_text(
        f"""apiVersion: policies.kyverno.io/v1beta1
kind: ImageValidatingPolicy
metadata:
  name: signed-images
spec:
  webhookConfiguration:
    timeoutSeconds: 20
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [pods]
  matchImageReferences:
  - glob: "{images['host']}/ivp/*"
  attestors:
  - name: key
    cosign:
      key:
        data: |
{_indent(images['public-key'], 10)}      ctlog:
        insecureIgnoreTlog: true
  - name: keyless
    cosign:
      keyless:
        identities:
        - subjectRegExp: "github.com/acme/"
          issuer: "{ISSUER}"
      ctlog:
        insecureIgnoreSCT: true
      trustedRoot:
        value: |
{_indent(images['trusted-root'], 10)}  validations:
  - expression: >-
      images.containers.map(i, verifyImageSignatures(i, [attestors.key, attestors.keyless])).all(e, e > 0)
    message: image is not signed by a trusted attestor
"""
    )
    server = Serve(control_plane, policies, tmp_path, extra_args=("--insecure-registry", images["host"], "--no-policy-reports"))
    try:
        server.wait_registered(kube)
        yield server
    finally:
        server.stop()


def test_signed_images_are_admitted_and_pinned_to_their_digest(ivpol_serve: Serve, kube: Kube, images: dict[str, str]) -> None:
    for kind in ("keyed", "keyless"):
        name = f"{kind}-{uuid.uuid4().hex[:6]}"
        status, body, _ = kube.request("POST", "/api/v1/namespaces/default/pods", pod(name, image=images[kind]))
        assert status == 201, (body, ivpol_serve.log())
        assert body["spec"]["containers"][0]["image"] == f"{images[kind]}@{images[kind + '-digest']}"


def test_unsigned_image_is_denied(ivpol_serve: Serve, kube: Kube, images: dict[str, str]) -> None:
    name = f"unsigned-{uuid.uuid4().hex[:6]}"
    status, body, _ = kube.request("POST", "/api/v1/namespaces/default/pods", pod(name, image=images["unsigned"]))
    assert status == 400, body
    assert "signed-images" in body["message"] and "image is not signed by a trusted attestor" in body["message"]


def test_images_outside_match_image_references_are_left_alone(ivpol_serve: Serve, kube: Kube) -> None:
    status, body, _ = kube.request("POST", "/api/v1/namespaces/default/pods", pod(f"other-{uuid.uuid4().hex[:6]}", image="nginx:1.27"))
    assert status == 201, (body, ivpol_serve.log())
    assert body["spec"]["containers"][0]["image"] == "nginx:1.27"
