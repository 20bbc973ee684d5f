"""The supply-chain attack list, each against the real registry and signatures made by the real cosign.

Every attack goes through the admission core `stockade serve` uses (PolicyStore → evaluator.mutate) with a
verifyImages ClusterPolicy under Enforce, and must be denied; a genuinely signed image is admitted alongside, so
a denial cannot come from a broken setup.
"""

from __future__ import annotations

import base64
import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_cosign_interop import REGISTRY_FLAGS, cosign

from stockade.engine.handlers.verify_images import VerificationCache
from stockade.images.cosign import SIGNATURE_ANNOTATION, signature_tag
from stockade.images.reference import parse_reference
from stockade.images.registry import OCI_IMAGE_MANIFEST, RegistryClient, RegistryLimits
from stockade.images.verify import CosignVerifier
from stockade.testing.registry import LocalRegistry
from stockade.webhook.admission import AdmissionDecision, parse_review
from stockade.webhook.policystore import PolicyStore


@pytest.fixture(scope="module")
def registry() -> Iterator[LocalRegistry]:
    with LocalRegistry() as local:
        yield local


@pytest.fixture(scope="module")
def client(registry: LocalRegistry) -> Iterator[RegistryClient]:
    with RegistryClient(**registry.client_options(), retries=0) as registry_client:
        yield registry_client


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two cosign key pairs: `trusted` (in the policy) and `other`."""
    result = {}
    for name in ("trusted", "other"):
        directory = tmp_path_factory.mktemp(f"cosign-{name}")
        cosign("generate-key-pair", cwd=directory)
        result[name] = directory
    return result


@pytest.fixture(scope="module")
def policy_dir(registry: LocalRegistry, keys: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    public_key = (keys["trusted"] / "cosign.pub").read_text()
    key_block = "".join(f"              {line}\n" for line in public_key.strip().splitlines())
    policies = tmp_path_factory.mktemp("policies")
    (policies / "verify.yaml").write_text(
        f"""apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: signed-images
spec:
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
    return policies


@contextlib.contextmanager
def _evaluator(registry: LocalRegistry, policy_dir: Path, limits: RegistryLimits | None = None) -> Iterator[Any]:
    """The admission core as `stockade serve` builds it: policy store, cosign verifier, verification cache."""
    with RegistryClient(**registry.client_options(), retries=0, limits=limits) as registry_client:
        store = PolicyStore([str(policy_dir)], image_verifier=CosignVerifier(registry_client), verification_cache=VerificationCache())
        store.load()
        yield store.snapshot.evaluator  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def admission(registry: LocalRegistry, policy_dir: Path) -> Iterator[Any]:
    with _evaluator(registry, policy_dir) as evaluator:
        yield evaluator


def _admit(evaluator: Any, image: str) -> AdmissionDecision:
    name = f"p-{uuid.uuid4().hex[:6]}"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": {"containers": [{"name": "c", "image": image}]}}
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default",
            "name": name,
            "operation": "CREATE",
            "userInfo": {"username": "mallory", "groups": ["system:authenticated"]},
            "object": pod,
        },
    }
    decision: AdmissionDecision = evaluator.mutate(parse_review(review))
    return decision


def _push(client: RegistryClient, image: str, content: bytes) -> str:
    return client.push_image(parse_reference(image), [content])


def _cosign_sign(key_dir: Path, image: str, digest: str) -> None:
    cosign("sign", "--key", "cosign.key", "--tlog-upload=false", *REGISTRY_FLAGS, f"{image.rsplit(':', 1)[0]}@{digest}", cwd=key_dir)


def _signature_manifest(client: RegistryClient, image: str, digest: str) -> dict[str, Any]:
    repo = parse_reference(image).repository()
    body, _, _ = client.get_manifest(repo.with_tag(signature_tag(digest)))
    manifest: dict[str, Any] = json.loads(body)
    return manifest


def _put_signature_manifest(client: RegistryClient, image: str, digest: str, manifest: dict[str, Any]) -> None:
    repo = parse_reference(image).repository()
    client.push_manifest(repo.with_tag(signature_tag(digest)), json.dumps(manifest).encode(), OCI_IMAGE_MANIFEST)


def _copy_blobs(client: RegistryClient, source_image: str, target_image: str, manifest: dict[str, Any]) -> None:
    source, target = parse_reference(source_image).repository(), parse_reference(target_image).repository()
    for descriptor in [manifest["config"], *manifest["layers"]]:
        client.push_blob(target, client.get_blob(source, descriptor["digest"]))


def _denied(decision: AdmissionDecision, *fragments: str) -> None:
    assert not decision.allowed, "attack was admitted"
    message = " ".join(decision.message.split())  # the block message wraps long lines
    assert "signed-images:" in message and "verify-signature:" in message, message
    for fragment in fragments:
        assert fragment in message, message


def test_a_genuine_cosign_signature_is_admitted(admission: Any, client: RegistryClient, registry: LocalRegistry, keys: dict[str, Path]) -> None:
    image = f"{registry.host}/attacks/genuine:v1"
    digest = _push(client, image, b"genuine")
    _cosign_sign(keys["trusted"], image, digest)
    assert _admit(admission, image).allowed


def test_tag_repointed_after_verification(admission: Any, client: RegistryClient, registry: LocalRegistry, keys: dict[str, Path]) -> None:
    image = f"{registry.host}/attacks/repointed:v1"
    _cosign_sign(keys["trusted"], image, _push(client, image, b"reviewed content"))
    assert _admit(admission, image).allowed  # verified, and now in the cache
    _push(client, image, b"evil content")  # same tag, other content, never signed
    _denied(_admit(admission, image), f"failed to verify image {image}: .attestors[0].entries[0].keys: no signatures found")


def test_signature_for_another_digest(admission: Any, client: RegistryClient, registry: LocalRegistry, keys: dict[str, Path]) -> None:
    signed = f"{registry.host}/attacks/other-digest:signed"
    unsigned = f"{registry.host}/attacks/other-digest:unsigned"
    signed_digest = _push(client, signed, b"signed content")
    _cosign_sign(keys["trusted"], signed, signed_digest)
    unsigned_digest = _push(client, unsigned, b"unsigned content")
    _put_signature_manifest(client, unsigned, unsigned_digest, _signature_manifest(client, signed, signed_digest))
    _denied(_admit(admission, unsigned), f"signature is for digest {signed_digest}, not {unsigned_digest}")


def test_signature_replayed_from_another_repository(admission: Any, client: RegistryClient, registry: LocalRegistry, keys: dict[str, Path]) -> None:
    victim = f"{registry.host}/attacks/victim:v1"
    attacker = f"{registry.host}/attacks/attacker:v1"
    victim_digest = _push(client, victim, b"victim content")
    _cosign_sign(keys["trusted"], victim, victim_digest)
    attacker_digest = _push(client, attacker, b"attacker content")
    manifest = _signature_manifest(client, victim, victim_digest)
    _copy_blobs(client, victim, attacker, manifest)
    _put_signature_manifest(client, attacker, attacker_digest, manifest)
    _denied(_admit(admission, attacker), f"signature is for digest {victim_digest}, not {attacker_digest}")


def test_wrong_key(admission: Any, client: RegistryClient, registry: LocalRegistry, keys: dict[str, Path]) -> None:
    image = f"{registry.host}/attacks/wrong-key:v1"
    _cosign_sign(keys["other"], image, _push(client, image, b"signed by someone else"))
    _denied(_admit(admission, image), "invalid signature")


def test_tampered_payload(admission: Any, client: RegistryClient, registry: LocalRegistry, keys: dict[str, Path]) -> None:
    image = f"{registry.host}/attacks/tampered:v1"
    digest = _push(client, image, b"tampered content")
    _cosign_sign(keys["trusted"], image, digest)
    manifest = _signature_manifest(client, image, digest)
    repo = parse_reference(image).repository()
    layer = manifest["layers"][0]
    payload = json.loads(client.get_blob(repo, layer["digest"]))
    payload["optional"] = {"approved-by": "mallory"}  # any change to the signed bytes
    tampered = json.dumps(payload).encode()
    layer.update(digest=client.push_blob(repo, tampered), size=len(tampered))
    assert base64.b64decode(layer["annotations"][SIGNATURE_ANNOTATION])  # the original signature is kept
    _put_signature_manifest(client, image, digest, manifest)
    _denied(_admit(admission, image), "invalid signature")


def test_oversized_signature_manifest(registry: LocalRegistry, policy_dir: Path, client: RegistryClient, keys: dict[str, Path]) -> None:
    """distribution itself refuses to store manifests over 4 MiB (our default cap), so a hostile registry is played
    by a verifier capped at 1 MiB reading a 2 MiB signature manifest from the real one: the same code path."""
    image = f"{registry.host}/attacks/oversized:v1"
    digest = _push(client, image, b"oversized content")
    _cosign_sign(keys["trusted"], image, digest)
    manifest = _signature_manifest(client, image, digest)
    manifest["annotations"] = {"padding": "x" * (2 * 1024 * 1024)}
    _put_signature_manifest(client, image, digest, manifest)
    with _evaluator(registry, policy_dir, RegistryLimits(max_manifest_bytes=1024 * 1024)) as capped:
        _denied(_admit(capped, image), "max_manifest_bytes limit of 1048576 bytes", f"{image.rsplit(':', 1)[0]}:{signature_tag(digest)}")


def test_ten_thousand_layer_signature_manifest(admission: Any, client: RegistryClient, registry: LocalRegistry, keys: dict[str, Path]) -> None:
    image = f"{registry.host}/attacks/many-layers:v1"
    digest = _push(client, image, b"many layers content")
    _cosign_sign(keys["trusted"], image, digest)
    manifest = _signature_manifest(client, image, digest)
    manifest["layers"] = manifest["layers"] * 10_000  # the genuine layer, repeated: still refused before any fetch
    _put_signature_manifest(client, image, digest, manifest)
    _denied(_admit(admission, image), "has 10000 layers, more than the max_signature_layers limit of 100")
