"""verifyImages end to end: a local OCI registry with a cosign-style signature, `stockade serve`, a real apiserver."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from webhook_cluster import Kube, Serve, pod

from stockade.images.cosign import sign_image
from stockade.images.keys import public_key_pem
from stockade.images.reference import parse_reference
from stockade.images.registry import RegistryClient
from stockade.testing.apiserver import ControlPlane, find_binary
from stockade.testing.registry import LocalRegistry


@pytest.fixture(scope="module")
def signing_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture(scope="module")
def signed_registry(signing_key: ec.EllipticCurvePrivateKey) -> Iterator[tuple[LocalRegistry, str, str, str, str]]:
    """(registry, signed image, its digest, unsigned image, public key PEM)."""
    with LocalRegistry() as registry, RegistryClient(**registry.client_options(), retries=0) as client:
        key = signing_key
        signed = f"{registry.host}/team/signed:v1"
        unsigned = f"{registry.host}/team/unsigned:v1"
        digest = client.push_image(parse_reference(signed), [b"signed layer"])
        client.push_image(parse_reference(unsigned), [b"unsigned layer"])
        sign_image(client, parse_reference(signed), key)
        yield registry, signed, digest, unsigned, public_key_pem(key).decode()


@pytest.fixture()
def verifying_serve(control_plane: ControlPlane, kube: Kube, signed_registry: tuple[LocalRegistry, str, str, str, str], tmp_path: Path) -> Iterator[Serve]:
    registry, _, _, _, public_key = signed_registry
    key_block = "".join(f"              {line}\n" for line in public_key.strip().splitlines())
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "verify.yaml").write_text(
        f"""apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: signed-images
spec:
  webhookTimeoutSeconds: 20
  rules:
  - name: verify-signature
    match:
      any:
      - resources:
          kinds: [Pod]
    verifyImages:
    - imageReferences: ["{registry.host}/*"]
      failureAction: Enforce
      attestors:
      - entries:
        - keys:
            publicKeys: |-
{key_block}"""
    )
    server = Serve(control_plane, policies, tmp_path, extra_args=("--insecure-registry", registry.host, "--no-policy-reports"))
    try:
        server.wait_registered(kube)
        yield server
    finally:
        server.stop()


def test_signed_image_is_admitted_and_pinned(verifying_serve: Serve, kube: Kube, signed_registry: tuple[LocalRegistry, str, str, str, str]) -> None:
    _, signed, digest, _, _ = signed_registry
    name = f"signed-{uuid.uuid4().hex[:6]}"
    status, body, _ = kube.request("POST", "/api/v1/namespaces/default/pods", pod(name, image=signed))
    assert status == 201, (body, verifying_serve.log())
    assert body["spec"]["containers"][0]["image"] == f"{signed}@{digest}"
    assert "kyverno.io/verify-images" in body["metadata"]["annotations"]


def test_unsigned_image_is_denied_by_mutating_webhook(verifying_serve: Serve, kube: Kube, signed_registry: tuple[LocalRegistry, str, str, str, str]) -> None:
    _, _, _, unsigned, _ = signed_registry
    name = f"unsigned-{uuid.uuid4().hex[:6]}"
    status, body, _ = kube.request("POST", "/api/v1/namespaces/default/pods", pod(name, image=unsigned))
    assert status == 400, body
    assert 'admission webhook "mutate.stockade.svc-fail" denied the request' in body["message"]
    assert f"resource Pod/default/{name} was blocked due to the following policies" in body["message"]
    assert "signed-images:" in body["message"] and "verify-signature" in body["message"]


@pytest.fixture(scope="module")
def deployment_images(signed_registry: tuple[LocalRegistry, str, str, str, str], signing_key: ec.EllipticCurvePrivateKey) -> dict[str, str]:
    """Three more signed images for a two-container Deployment: app v1, app v2 and a sidecar."""
    registry = signed_registry[0]
    images = {"app-v1": f"{registry.host}/team/app:v1", "app-v2": f"{registry.host}/team/app:v2", "sidecar": f"{registry.host}/team/sidecar:v1"}
    with RegistryClient(**registry.client_options(), retries=0) as client:
        for label, image in images.items():
            client.push_image(parse_reference(image), [f"{label} layer".encode()])
            sign_image(client, parse_reference(image), signing_key)
    return images


def _deployment(name: str, app_image: str, sidecar_image: str) -> dict[str, object]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": app_image}, {"name": "sidecar", "image": sidecar_image}]},
            },
        },
    }


def test_updating_one_image_of_a_two_container_deployment_is_admitted(
    verifying_serve: Serve, kube: Kube, deployment_images: dict[str, str]
) -> None:
    """Kyverno issue 7651: the unchanged, previously verified image must not turn the update into a denial."""
    name = f"two-{uuid.uuid4().hex[:6]}"
    status, created, _ = kube.request("POST", "/apis/apps/v1/namespaces/default/deployments", _deployment(name, deployment_images["app-v1"], deployment_images["sidecar"]))
    assert status == 201, (created, verifying_serve.log())
    containers = created["spec"]["template"]["spec"]["containers"]
    assert [c["image"].split("@")[0] for c in containers] == [deployment_images["app-v1"], deployment_images["sidecar"]]
    assert all("@sha256:" in c["image"] for c in containers)

    updated = dict(created)
    updated["spec"]["template"]["spec"]["containers"][0]["image"] = deployment_images["app-v2"]
    status, body, _ = kube.request("PUT", f"/apis/apps/v1/namespaces/default/deployments/{name}", updated)
    assert status == 200, (body, verifying_serve.log())
    images = [c["image"] for c in body["spec"]["template"]["spec"]["containers"]]
    assert images[0].startswith(deployment_images["app-v2"] + "@sha256:")
    assert images[1].startswith(deployment_images["sidecar"] + "@sha256:")
    recorded = body["metadata"]["annotations"]["kyverno.io/verify-images"]
    assert deployment_images["app-v2"].split(":v")[0] in recorded and "team/sidecar" in recorded


def _kubectl(control_plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    kubectl = find_binary("kubectl", "STOCKADE_KUBECTL")
    return subprocess.run([kubectl, "--kubeconfig", str(control_plane.kubeconfig), *args], capture_output=True, text=True, timeout=60, check=False)


def test_kubectl_annotate_cannot_forge_the_verification_record(
    verifying_serve: Serve, kube: Kube, control_plane: ControlPlane, deployment_images: dict[str, str], signed_registry: tuple[LocalRegistry, str, str, str, str]
) -> None:
    """Forged `pass` for an unsigned image (under a rule that never runs on Deployments), forged `fail` for a verified
    one, an invented policy, and removal: after each `kubectl annotate` the stored record is Stockade's own again."""
    unsigned = signed_registry[3]
    name = f"annotated-{uuid.uuid4().hex[:6]}"
    status, created, _ = kube.request("POST", "/apis/apps/v1/namespaces/default/deployments", _deployment(name, deployment_images["app-v1"], deployment_images["sidecar"]))
    assert status == 201, (created, verifying_serve.log())
    genuine = {key: created["metadata"]["annotations"][key] for key in ("kyverno.io/verify-images", "kyverno.io/verify-images-scoped")}
    verified_images = list(json.loads(genuine["kyverno.io/verify-images"]))
    assert len(verified_images) == 2 and set(json.loads(genuine["kyverno.io/verify-images"]).values()) == {"pass"}
    forged_flat = json.dumps({unsigned: "pass", verified_images[0]: "fail"})
    forged_scoped = json.dumps(
        {"version": 1, "policies": {"signed-images": {"verify-signature": {unsigned: "pass"}, "autogen-verify-signature": {verified_images[0]: "fail"}}, "ghost": {"r": {unsigned: "pass"}}}}
    )
    path = f"/apis/apps/v1/namespaces/default/deployments/{name}"
    for change in (
        [f"kyverno.io/verify-images={forged_flat}", f"kyverno.io/verify-images-scoped={forged_scoped}"],
        ["kyverno.io/verify-images-", "kyverno.io/verify-images-scoped-"],
    ):
        annotated = _kubectl(control_plane, "annotate", "--overwrite", "-n", "default", f"deployment/{name}", *change)
        assert annotated.returncode == 0, (annotated.stderr, verifying_serve.log())
        status, stored, _ = kube.request("GET", path)
        assert status == 200
        assert {key: stored["metadata"]["annotations"].get(key) for key in genuine} == genuine, change
