"""ImageValidatingPolicy verification against a real registry, with signatures made by the real cosign.

Keys, certificates and keyless identities (a Fulcio-like CA and a Rekor-like log key generated here, offline),
attestations read with extractPayload, caching bound to the digest, and the attacks each must deny.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from stockade.celpolicy.testing import CelPolicyRun
from stockade.engine.match import RequestInfo
from stockade.images.keys import encrypt_cosign_private_key, generate_key_pair
from stockade.images.reference import parse_reference
from stockade.images.registry import RegistryClient
from stockade.images.verify import CosignVerifier
from stockade.testing.registry import LocalRegistry
from stockade.testing.sigstore import FakeFulcio, FakeRekor, trusted_root_json

REPO_ROOT = Path(__file__).resolve().parents[3]
COSIGN = Path(os.environ.get("STOCKADE_COSIGN", REPO_ROOT / ".cache" / "bin" / "cosign"))
PASSWORD = "ivpol-pass"
REGISTRY_FLAGS = ("--allow-insecure-registry", "--allow-http-registry")
IDENTITY = "https://github.com/acme/app/.github/workflows/release.yaml@refs/heads/main"
ISSUER = "https://token.actions.githubusercontent.com"
IGNORE_TLOG = {"insecureIgnoreTlog": True, "insecureIgnoreSCT": True}


def cosign(*args: str, cwd: Path, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    if not COSIGN.exists():
        pytest.fail(f"cosign binary not found at {COSIGN}; build it with `.ci/build-cosign.sh`")
    full_env = {**os.environ, "COSIGN_PASSWORD": PASSWORD, "COSIGN_YES": "true", "HOME": str(cwd), **(env or {})}
    result = subprocess.run([str(COSIGN), *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        pytest.fail(f"cosign {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


@dataclass
class Signer:
    """A cosign key pair (cosign's own file format) in a working directory."""

    directory: Path

    @property
    def public_pem(self) -> str:
        return (self.directory / "cosign.pub").read_text()


@pytest.fixture(scope="module")
def registry() -> Iterator[LocalRegistry]:
    with LocalRegistry() as local:
        yield local


@pytest.fixture(scope="module")
def client(registry: LocalRegistry) -> Iterator[RegistryClient]:
    with RegistryClient(**registry.client_options(), retries=0) as registry_client:
        yield registry_client


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Signer:
    directory = tmp_path_factory.mktemp("ivpol-keys")
    cosign("generate-key-pair", cwd=directory)
    return Signer(directory)


@pytest.fixture(scope="module")
def fulcio() -> FakeFulcio:
    return FakeFulcio()


@pytest.fixture(scope="module")
def rekor() -> FakeRekor:
    return FakeRekor()


def push(client: RegistryClient, registry: LocalRegistry, name: str, content: bytes | None = None) -> tuple[str, str]:
    """(tag reference, digest) of a fresh single-layer image."""
    ref = parse_reference(f"{registry.host}/{name}")
    return str(ref), client.push_image(ref, [content or name.encode()])


def pinned(image: str, digest: str) -> str:
    return f"{image.rsplit(':', 1)[0]}@{digest}"


def policy(attestors: list[dict[str, Any]], validations: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "validationActions": ["Deny"],
        "matchConstraints": {
            "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]
        },
        "matchImageReferences": [{"glob": "127.0.0.1*"}],
        "attestors": attestors,
        "validations": validations,
    }
    body.update(spec)
    return {"apiVersion": "policies.kyverno.io/v1beta1", "kind": "ImageValidatingPolicy", "metadata": {"name": "ivp"}, "spec": body}


SIGNED_BY_ALL = [{"expression": "images.containers.map(i, verifyImageSignatures(i, [attestors.signer])).all(e, e > 0)", "message": "unsigned image"}]


def pod(*images: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]},
    }


def evaluate(client: RegistryClient, document: dict[str, Any], resource: dict[str, Any], verifier: CosignVerifier | None = None) -> tuple[str, str]:
    run = CelPolicyRun(documents=[document], image_verifier=verifier or CosignVerifier(client))
    rules = [rule for response in run.responses(resource, "CREATE", RequestInfo(), {}) for rule in response.rules]
    assert len(rules) == 1, rules
    return rules[0].status, rules[0].message


def key_attestor(public_pem: str, **cosign_fields: Any) -> dict[str, Any]:
    return {"name": "signer", "cosign": {"key": {"data": public_pem}, "ctlog": IGNORE_TLOG, **cosign_fields}}


# -- keys -----------------------------------------------------------------------------------------------------------
def test_key_signed_image_passes_unsigned_and_wrong_key_fail(client: RegistryClient, registry: LocalRegistry, signer: Signer) -> None:
    image, digest = push(client, registry, "ivp/keyed:v1")
    cosign("sign", "--key", "cosign.key", "--tlog-upload=false", *REGISTRY_FLAGS, pinned(image, digest), cwd=signer.directory)
    assert evaluate(client, policy([key_attestor(signer.public_pem)], SIGNED_BY_ALL), pod(pinned(image, digest))) == ("pass", "success")

    unsigned, unsigned_digest = push(client, registry, "ivp/unsigned:v1")
    assert evaluate(client, policy([key_attestor(signer.public_pem)], SIGNED_BY_ALL), pod(pinned(unsigned, unsigned_digest))) == ("fail", "unsigned image")

    _, other_public = generate_key_pair("x")
    assert evaluate(client, policy([key_attestor(other_public.decode())], SIGNED_BY_ALL), pod(pinned(image, digest)))[0] == "fail"


def test_verify_digest_fails_tags_and_count_is_per_attestor(client: RegistryClient, registry: LocalRegistry, signer: Signer) -> None:
    image, digest = push(client, registry, "ivp/counted:v1")
    cosign("sign", "--key", "cosign.key", "--tlog-upload=false", *REGISTRY_FLAGS, pinned(image, digest), cwd=signer.directory)
    assert evaluate(client, policy([key_attestor(signer.public_pem)], SIGNED_BY_ALL), pod(image)) == ("fail", f"image {image} does not have a digest")
    _, other_public = generate_key_pair("x")
    two = [key_attestor(signer.public_pem), {**key_attestor(other_public.decode()), "name": "other"}]
    counted = [{"expression": "images.containers.map(i, verifyImageSignatures(i, [attestors.signer, attestors.other])).all(e, e == 1)"}]
    assert evaluate(client, policy(two, counted), pod(pinned(image, digest))) == ("pass", "success")


def test_signature_for_another_digest_and_replay_from_another_repository_fail(client: RegistryClient, registry: LocalRegistry, signer: Signer) -> None:
    """Attacks: a signature copied onto another digest's tag, and a signature replayed from another repository."""
    victim, victim_digest = push(client, registry, "ivp/victim:v1")
    signed, signed_digest = push(client, registry, "ivp/signed-source:v1")
    cosign("sign", "--key", "cosign.key", "--tlog-upload=false", *REGISTRY_FLAGS, pinned(signed, signed_digest), cwd=signer.directory)
    source_tag = parse_reference(signed).repository().with_tag("sha256-" + signed_digest.split(":")[1] + ".sig")
    manifest, media_type, _ = client.get_manifest(source_tag)
    repo = parse_reference(signed).repository()
    victim_repo = parse_reference(victim).repository()
    for descriptor in [json.loads(manifest)["config"], *json.loads(manifest)["layers"]]:
        client.push_blob(victim_repo, client.get_blob(repo, descriptor["digest"]))
    client.push_manifest(victim_repo.with_tag("sha256-" + victim_digest.split(":")[1] + ".sig"), manifest, media_type)
    status, _ = evaluate(client, policy([key_attestor(signer.public_pem)], SIGNED_BY_ALL), pod(pinned(victim, victim_digest)))
    assert status == "fail"


def test_tag_repointed_after_verification_is_verified_again(client: RegistryClient, registry: LocalRegistry, signer: Signer) -> None:
    """The cache is bound to the digest: a re-pointed tag is a new digest, verified from scratch."""
    image, digest = push(client, registry, "ivp/repoint:v1", b"first")
    cosign("sign", "--key", "cosign.key", "--tlog-upload=false", *REGISTRY_FLAGS, pinned(image, digest), cwd=signer.directory)
    document = policy([key_attestor(signer.public_pem)], SIGNED_BY_ALL, validationConfigurations={"verifyDigest": False})
    verifier = CosignVerifier(client)
    run = CelPolicyRun(documents=[document], image_verifier=verifier)

    def status() -> str:
        return [r.status for response in run.responses(pod(image), "CREATE", RequestInfo(), {}) for r in response.rules][0]

    assert status() == "pass"
    assert status() == "pass"  # warm: served from the cache
    _, new_digest = push(client, registry, "ivp/repoint:v1", b"second, unsigned")
    assert new_digest != digest
    assert status() == "fail"


def test_tampered_signature_payload_fails(client: RegistryClient, registry: LocalRegistry, signer: Signer) -> None:
    image, digest = push(client, registry, "ivp/tampered:v1")
    cosign("sign", "--key", "cosign.key", "--tlog-upload=false", *REGISTRY_FLAGS, pinned(image, digest), cwd=signer.directory)
    repo = parse_reference(image).repository()
    tag = repo.with_tag("sha256-" + digest.split(":")[1] + ".sig")
    manifest = json.loads(client.get_manifest(tag)[0])
    layer = manifest["layers"][0]
    payload = json.loads(client.get_blob(repo, layer["digest"]))
    payload["optional"] = {"tampered": "yes"}
    tampered = json.dumps(payload).encode()
    layer["digest"], layer["size"] = client.push_blob(repo, tampered), len(tampered)
    client.push_manifest(tag, json.dumps(manifest).encode(), manifest["mediaType"])
    assert evaluate(client, policy([key_attestor(signer.public_pem)], SIGNED_BY_ALL), pod(pinned(image, digest)))[0] == "fail"


def test_tlog_required_by_default_is_an_error_without_trust_material(client: RegistryClient, registry: LocalRegistry, signer: Signer) -> None:
    image, digest = push(client, registry, "ivp/needs-tlog:v1")
    attestor = {"name": "signer", "cosign": {"key": {"data": signer.public_pem}}}
    status, message = evaluate(client, policy([attestor], SIGNED_BY_ALL), pod(pinned(image, digest)))
    assert status == "error" and "ctlog.rekorPubKey or trustedRoot" in message


def test_invalid_key_in_policy_is_an_error_naming_the_attestor(client: RegistryClient, registry: LocalRegistry) -> None:
    image, digest = push(client, registry, "ivp/badkey:v1")
    status, message = evaluate(client, policy([key_attestor("-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----")], SIGNED_BY_ALL), pod(pinned(image, digest)))
    assert status == "error" and "publicKeys" in message


def test_unreachable_registry_never_passes(client: RegistryClient) -> None:
    image = "127.0.0.1:9/ivp/down@sha256:" + "a" * 64
    _, public = generate_key_pair("x")
    verifier = CosignVerifier(RegistryClient(insecure_registries=["127.0.0.1:9"], retries=0))
    status, _ = evaluate(client, policy([key_attestor(public.decode())], SIGNED_BY_ALL), pod(image), verifier)
    assert status == "error"


# -- attestations ---------------------------------------------------------------------------------------------------
def test_attestation_verified_and_payload_checked_by_cel(client: RegistryClient, registry: LocalRegistry, signer: Signer) -> None:
    image, digest = push(client, registry, "ivp/attested:v1")
    predicate = signer.directory / "scan.json"
    predicate.write_text('{"scanner": "trivy", "critical": 0}')
    cosign("attest", "--key", "cosign.key", "--tlog-upload=false", *REGISTRY_FLAGS, "--type", "https://example.com/scan/v1",
           "--predicate", str(predicate), pinned(image, digest), cwd=signer.directory)
    validations = [
        {"expression": "images.containers.map(i, verifyAttestationSignatures(i, attestations.scan, [attestors.signer])).all(e, e > 0)", "message": "not attested"},
        {"expression": "images.containers.map(i, extractPayload(i, attestations.scan).predicate.critical == 0).all(e, e)", "message": "critical vulnerabilities"},
    ]
    attestations = [{"name": "scan", "intoto": {"type": "https://example.com/scan/v1"}}]
    document = policy([key_attestor(signer.public_pem)], validations, attestations=attestations)
    assert evaluate(client, document, pod(pinned(image, digest))) == ("pass", "success")

    strict = policy([key_attestor(signer.public_pem)], [validations[0], {**validations[1], "expression": validations[1]["expression"].replace("== 0", "> 5")}], attestations=attestations)
    assert evaluate(client, strict, pod(pinned(image, digest))) == ("fail", "critical vulnerabilities")

    other_type = policy([key_attestor(signer.public_pem)], validations, attestations=[{"name": "scan", "intoto": {"type": "https://example.com/other/v1"}}])
    assert evaluate(client, other_type, pod(pinned(image, digest))) == ("fail", "not attested")

    unread = policy([key_attestor(signer.public_pem)], [validations[1]], attestations=attestations)
    status, message = evaluate(client, unread, pod(pinned(image, digest)))
    assert status == "error" and "cannot be read before verifyAttestationSignatures" in message


def test_get_image_data_reports_the_manifest(client: RegistryClient, registry: LocalRegistry) -> None:
    image, digest = push(client, registry, "ivp/data:v1")
    validations = [{"expression": f"images.containers.all(i, getImageData(i).digest == '{digest}' && size(getImageData(i).manifest.layers) == 1)"}]
    not_required = {"required": False}
    assert evaluate(client, policy([], validations, validationConfigurations=not_required), pod(pinned(image, digest))) == ("pass", "success")


def test_required_images_must_be_verified_by_some_policy_of_the_request(client: RegistryClient, registry: LocalRegistry, signer: Signer) -> None:
    """validationConfigurations.required (default on): a passing policy fails when an image it matched was verified
    by no policy of the request; another policy's verification counts (Kyverno's request-wide evidence)."""
    image, digest = push(client, registry, "ivp/required:v1")
    cosign("sign", "--key", "cosign.key", "--tlog-upload=false", *REGISTRY_FLAGS, pinned(image, digest), cwd=signer.directory)
    metadata_only = policy([], [{"expression": "images.containers.all(i, getImageData(i).digest != '')"}])
    metadata_only["metadata"]["name"] = "metadata-only"
    status, message = evaluate(client, metadata_only, pod(pinned(image, digest)))
    assert status == "fail" and message == f"image {pinned(image, digest)} is not verified: no policy performed a signature or attestation check on it"

    run = CelPolicyRun(documents=[metadata_only, policy([key_attestor(signer.public_pem)], SIGNED_BY_ALL)], image_verifier=CosignVerifier(client))
    results = {(r.policy_name, rule.status) for r in run.responses(pod(pinned(image, digest)), "CREATE", RequestInfo(), {}) for rule in r.rules}
    assert results == {("metadata-only", "pass"), ("ivp", "pass")}


# -- certificates and keyless ---------------------------------------------------------------------------------------
def _write_leaf(directory: Path, key: ec.EllipticCurvePrivateKey, certificate_pem: str, chain_pem: str) -> None:
    (directory / "leaf.key").write_bytes(encrypt_cosign_private_key(key, PASSWORD))
    (directory / "leaf.pem").write_text(certificate_pem)
    (directory / "chain.pem").write_text(chain_pem)


def _keyless_attestor(fulcio: FakeFulcio, ctlog: dict[str, Any], **identity: str) -> dict[str, Any]:
    return {"name": "signer", "cosign": {"keyless": {"identities": [identity], "roots": fulcio.root_pem}, "ctlog": ctlog}}


def _write_bundle(directory: Path, signature: bytes, bundle: dict[str, Any]) -> None:
    """cosign's --rekor-response file: a LocalSignedPayload carrying the Rekor bundle."""
    local = {"base64Signature": base64.b64encode(signature).decode(), "rekorBundle": bundle}
    (directory / "bundle.json").write_text(json.dumps(local))


def _sign_keyless_with_bundle(
    tmp: Path, image_ref: str, fulcio: FakeFulcio, rekor: FakeRekor, identity: str = IDENTITY, ct_log: FakeRekor | None = None
) -> None:
    """cosign attach signature with a payload we sign, the Fulcio-like chain and a Rekor bundle carrying a SET."""
    key, certificate = fulcio.issue(identity, ISSUER, ct_log=ct_log)
    certificate_pem = certificate.public_bytes(serialization.Encoding.PEM).decode()
    _write_leaf(tmp, key, certificate_pem, fulcio.chain_pem)
    payload = cosign("generate", *REGISTRY_FLAGS, image_ref, cwd=tmp).stdout.encode()
    (tmp / "payload.json").write_bytes(payload)
    signature = key.sign(payload, ec.ECDSA(hashes.SHA256()))
    (tmp / "sig.b64").write_text(base64.b64encode(signature).decode())
    bundle = rekor.bundle(rekor.hashedrekord_body(payload, signature, certificate_pem))
    _write_bundle(tmp, signature, bundle)
    cosign("attach", "signature", "--payload", "payload.json", "--signature", "sig.b64", "--certificate", "leaf.pem",
           "--certificate-chain", "chain.pem", "--rekor-response", "bundle.json", *REGISTRY_FLAGS, image_ref, cwd=tmp)


def test_certificate_attestor_with_chain(client: RegistryClient, registry: LocalRegistry, fulcio: FakeFulcio, tmp_path: Path) -> None:
    image, digest = push(client, registry, "ivp/cert:v1")
    key, certificate = fulcio.issue("dev@acme.example", ISSUER, valid_for=timedelta(days=1))
    certificate_pem = certificate.public_bytes(serialization.Encoding.PEM).decode()
    _write_leaf(tmp_path, key, certificate_pem, fulcio.chain_pem)
    cosign("sign", "--key", "leaf.key", "--certificate", "leaf.pem", "--certificate-chain", "chain.pem", "--tlog-upload=false",
           *REGISTRY_FLAGS, pinned(image, digest), cwd=tmp_path)
    attestor = {"name": "signer", "cosign": {"certificate": {"cert": {"value": certificate_pem}, "certChain": {"value": fulcio.chain_pem}}, "ctlog": IGNORE_TLOG}}
    assert evaluate(client, policy([attestor], SIGNED_BY_ALL), pod(pinned(image, digest))) == ("pass", "success")
    other = FakeFulcio(name="other")
    wrong_chain = {"name": "signer", "cosign": {"certificate": {"cert": {"value": certificate_pem}, "certChain": {"value": other.chain_pem}}, "ctlog": IGNORE_TLOG}}
    assert evaluate(client, policy([wrong_chain], SIGNED_BY_ALL), pod(pinned(image, digest)))[0] == "fail"


def test_keyless_identities_unanchored_regexes(client: RegistryClient, registry: LocalRegistry, fulcio: FakeFulcio, tmp_path: Path) -> None:
    image, digest = push(client, registry, "ivp/keyless:v1")
    key, certificate = fulcio.issue(IDENTITY, ISSUER, valid_for=timedelta(days=1))
    _write_leaf(tmp_path, key, certificate.public_bytes(serialization.Encoding.PEM).decode(), fulcio.chain_pem)
    cosign("sign", "--key", "leaf.key", "--certificate", "leaf.pem", "--certificate-chain", "chain.pem", "--tlog-upload=false",
           *REGISTRY_FLAGS, pinned(image, digest), cwd=tmp_path)
    ref = pod(pinned(image, digest))
    assert evaluate(client, policy([_keyless_attestor(fulcio, IGNORE_TLOG, subject=IDENTITY, issuer=ISSUER)], SIGNED_BY_ALL), ref)[0] == "pass"
    # cosign's regexp.MatchString: unanchored, so a fragment matches
    assert evaluate(client, policy([_keyless_attestor(fulcio, IGNORE_TLOG, subjectRegExp="acme/app/", issuerRegExp="actions")], SIGNED_BY_ALL), ref)[0] == "pass"
    assert evaluate(client, policy([_keyless_attestor(fulcio, IGNORE_TLOG, subjectRegExp="^acme", issuer=ISSUER)], SIGNED_BY_ALL), ref)[0] == "fail"
    assert evaluate(client, policy([_keyless_attestor(fulcio, IGNORE_TLOG, subject=IDENTITY, issuer="https://accounts.google.com")], SIGNED_BY_ALL), ref)[0] == "fail"
    assert evaluate(client, policy([_keyless_attestor(FakeFulcio(name="rogue"), IGNORE_TLOG, subject=IDENTITY, issuer=ISSUER)], SIGNED_BY_ALL), ref)[0] == "fail"


def test_keyless_with_rekor_set_offline(client: RegistryClient, registry: LocalRegistry, fulcio: FakeFulcio, rekor: FakeRekor, tmp_path: Path) -> None:
    image, digest = push(client, registry, "ivp/keyless-tlog:v1")
    _sign_keyless_with_bundle(tmp_path, pinned(image, digest), fulcio, rekor)
    ref = pod(pinned(image, digest))
    with_key = {"rekorPubKey": rekor.public_pem, "insecureIgnoreSCT": True}
    assert evaluate(client, policy([_keyless_attestor(fulcio, with_key, subject=IDENTITY, issuer=ISSUER)], SIGNED_BY_ALL), ref) == ("pass", "success")
    # the same, trusting a TUF-style trusted_root.json instead of inline roots and key
    trusted = {"name": "signer", "cosign": {"keyless": {"identities": [{"subject": IDENTITY, "issuer": ISSUER}]},
                                            "trustedRoot": {"value": trusted_root_json(fulcio, rekor)}, "ctlog": {"insecureIgnoreSCT": True}}}
    assert evaluate(client, policy([trusted], SIGNED_BY_ALL), ref) == ("pass", "success")
    # another log's key: the SET does not verify
    other_log = {"rekorPubKey": FakeRekor().public_pem, "insecureIgnoreSCT": True}
    assert evaluate(client, policy([_keyless_attestor(fulcio, other_log, subject=IDENTITY, issuer=ISSUER)], SIGNED_BY_ALL), ref)[0] == "fail"
    # SCTs cannot be checked offline: not ignoring them is an error, never a pass
    status, message = evaluate(client, policy([_keyless_attestor(fulcio, {"rekorPubKey": rekor.public_pem}, subject=IDENTITY, issuer=ISSUER)], SIGNED_BY_ALL), ref)
    assert status == "error" and "insecureIgnoreSCT" in message


def test_keyless_certificate_is_checked_at_the_logged_time(client: RegistryClient, registry: LocalRegistry, fulcio: FakeFulcio, rekor: FakeRekor, tmp_path: Path) -> None:
    """A Fulcio certificate lives ten minutes; with a verified SET, validity is judged at the integrated time."""
    image, digest = push(client, registry, "ivp/expired-cert:v1")
    key, certificate = fulcio.issue(IDENTITY, ISSUER, not_before=fulcio.now - timedelta(hours=2))
    certificate_pem = certificate.public_bytes(serialization.Encoding.PEM).decode()
    _write_leaf(tmp_path, key, certificate_pem, fulcio.chain_pem)
    payload = cosign("generate", *REGISTRY_FLAGS, pinned(image, digest), cwd=tmp_path).stdout.encode()
    (tmp_path / "payload.json").write_bytes(payload)
    signature = key.sign(payload, ec.ECDSA(hashes.SHA256()))
    (tmp_path / "sig.b64").write_text(base64.b64encode(signature).decode())
    logged = rekor.bundle(rekor.hashedrekord_body(payload, signature, certificate_pem), integrated_time=fulcio.now - timedelta(hours=2) + timedelta(minutes=5))
    _write_bundle(tmp_path, signature, logged)
    cosign("attach", "signature", "--payload", "payload.json", "--signature", "sig.b64", "--certificate", "leaf.pem",
           "--certificate-chain", "chain.pem", "--rekor-response", "bundle.json", *REGISTRY_FLAGS, pinned(image, digest), cwd=tmp_path)
    ref = pod(pinned(image, digest))
    with_key = {"rekorPubKey": rekor.public_pem, "insecureIgnoreSCT": True}
    assert evaluate(client, policy([_keyless_attestor(fulcio, with_key, subject=IDENTITY, issuer=ISSUER)], SIGNED_BY_ALL), ref)[0] == "pass"
    # without the log, the expired certificate is judged now, and fails
    assert evaluate(client, policy([_keyless_attestor(fulcio, IGNORE_TLOG, subject=IDENTITY, issuer=ISSUER)], SIGNED_BY_ALL), ref)[0] == "fail"


def test_bundle_for_another_signature_is_rejected(client: RegistryClient, registry: LocalRegistry, fulcio: FakeFulcio, rekor: FakeRekor, tmp_path: Path) -> None:
    """A genuine SET of some other entry, attached to this signature, must not count as logged."""
    image, digest = push(client, registry, "ivp/replayed-set:v1")
    key, certificate = fulcio.issue(IDENTITY, ISSUER)
    certificate_pem = certificate.public_bytes(serialization.Encoding.PEM).decode()
    _write_leaf(tmp_path, key, certificate_pem, fulcio.chain_pem)
    payload = cosign("generate", *REGISTRY_FLAGS, pinned(image, digest), cwd=tmp_path).stdout.encode()
    (tmp_path / "payload.json").write_bytes(payload)
    signature = key.sign(payload, ec.ECDSA(hashes.SHA256()))
    (tmp_path / "sig.b64").write_text(base64.b64encode(signature).decode())
    unrelated = rekor.bundle(rekor.hashedrekord_body(b"other payload", key.sign(b"other payload", ec.ECDSA(hashes.SHA256())), certificate_pem))
    _write_bundle(tmp_path, signature, unrelated)
    cosign("attach", "signature", "--payload", "payload.json", "--signature", "sig.b64", "--certificate", "leaf.pem",
           "--certificate-chain", "chain.pem", "--rekor-response", "bundle.json", *REGISTRY_FLAGS, pinned(image, digest), cwd=tmp_path)
    with_key = {"rekorPubKey": rekor.public_pem, "insecureIgnoreSCT": True}
    assert evaluate(client, policy([_keyless_attestor(fulcio, with_key, subject=IDENTITY, issuer=ISSUER)], SIGNED_BY_ALL), pod(pinned(image, digest)))[0] == "fail"


def test_real_cosign_accepts_our_test_rekor_bundle_and_sct(registry: LocalRegistry, client: RegistryClient, fulcio: FakeFulcio, rekor: FakeRekor, tmp_path: Path) -> None:
    """Cross-check of the fixtures: cosign itself verifies the SET and the embedded SCT we computed, offline, with
    the test Rekor and CT log keys."""
    image, digest = push(client, registry, "ivp/cosign-crosscheck:v1")
    ct_log = FakeRekor()
    _sign_keyless_with_bundle(tmp_path, pinned(image, digest), fulcio, rekor, ct_log=ct_log)
    (tmp_path / "rekor.pub").write_text(rekor.public_pem)
    (tmp_path / "ctlog.pub").write_text(ct_log.public_pem)
    (tmp_path / "root.pem").write_text(fulcio.chain_pem)
    verified = cosign("verify", "--offline", "--certificate-chain", "root.pem", "--certificate-identity", IDENTITY,
                      "--certificate-oidc-issuer", ISSUER, *REGISTRY_FLAGS, pinned(image, digest), cwd=tmp_path,
                      env={"SIGSTORE_REKOR_PUBLIC_KEY": str(tmp_path / "rekor.pub"), "SIGSTORE_CT_LOG_PUBLIC_KEY_FILE": str(tmp_path / "ctlog.pub")},
                      check=False)
    assert verified.returncode == 0, verified.stderr
    # and so do we, with the SCT checked (no insecureIgnoreSCT)
    checked = {"rekorPubKey": rekor.public_pem, "ctLogPubKey": ct_log.public_pem}
    assert evaluate(client, policy([_keyless_attestor(fulcio, checked, subject=IDENTITY, issuer=ISSUER)], SIGNED_BY_ALL), pod(pinned(image, digest))) == ("pass", "success")
    trusted = {"name": "signer", "cosign": {"keyless": {"identities": [{"subject": IDENTITY, "issuer": ISSUER}]},
                                            "trustedRoot": {"value": trusted_root_json(fulcio, rekor, ct_log)}}}
    assert evaluate(client, policy([trusted], SIGNED_BY_ALL), pod(pinned(image, digest))) == ("pass", "success")
    other_ct = {"rekorPubKey": rekor.public_pem, "ctLogPubKey": FakeRekor().public_pem}
    assert evaluate(client, policy([_keyless_attestor(fulcio, other_ct, subject=IDENTITY, issuer=ISSUER)], SIGNED_BY_ALL), pod(pinned(image, digest)))[0] == "fail"


def test_keyless_certificate_without_sct_fails_when_scts_are_checked(client: RegistryClient, registry: LocalRegistry, fulcio: FakeFulcio, rekor: FakeRekor, tmp_path: Path) -> None:
    image, digest = push(client, registry, "ivp/no-sct:v1")
    _sign_keyless_with_bundle(tmp_path, pinned(image, digest), fulcio, rekor)
    checked = {"rekorPubKey": rekor.public_pem, "ctLogPubKey": FakeRekor().public_pem}
    assert evaluate(client, policy([_keyless_attestor(fulcio, checked, subject=IDENTITY, issuer=ISSUER)], SIGNED_BY_ALL), pod(pinned(image, digest)))[0] == "fail"


# -- the CLI --------------------------------------------------------------------------------------------------------
def test_stockade_apply_verifies_image_validating_policies(client: RegistryClient, registry: LocalRegistry, signer: Signer, tmp_path: Path) -> None:
    import yaml

    image, digest = push(client, registry, "ivp/cli:v1")
    cosign("sign", "--key", "cosign.key", "--tlog-upload=false", *REGISTRY_FLAGS, pinned(image, digest), cwd=signer.directory)
    unsigned, unsigned_digest = push(client, registry, "ivp/cli-unsigned:v1")
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy([key_attestor(signer.public_pem)], SIGNED_BY_ALL)))
    (tmp_path / "signed.yaml").write_text(yaml.safe_dump(pod(pinned(image, digest))))
    bad = pod(pinned(unsigned, unsigned_digest))
    bad["metadata"]["name"] = "bad"
    (tmp_path / "unsigned.yaml").write_text(yaml.safe_dump(bad))

    def apply(resource: str, *extra: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-c", "from stockade.cli.main import main; main()", "apply", str(tmp_path / "policy.yaml"),
                   "-r", str(tmp_path / resource), *extra]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)

    passed = apply("signed.yaml", "--registry", "--insecure-registry", registry.host)
    assert passed.returncode == 0 and "pass: 1, fail: 0" in passed.stdout, passed.stdout + passed.stderr
    failed = apply("unsigned.yaml", "--registry", "--insecure-registry", registry.host)
    assert failed.returncode == 1 and "fail: 1" in failed.stdout and "unsigned image" in failed.stdout, failed.stdout + failed.stderr
    offline = apply("signed.yaml")
    assert offline.returncode == 1 and "error: 1" in offline.stdout and "--registry" in offline.stdout, offline.stdout + offline.stderr
    assert "Traceback" not in passed.stderr + failed.stderr + offline.stderr


def test_key_signature_with_rekor_bundle(client: RegistryClient, registry: LocalRegistry, rekor: FakeRekor, tmp_path: Path) -> None:
    """A key attestor with ctlog.rekorPubKey: the bundle's SET must verify and its entry must name the signing key
    (any of the policy's keys, not only the first)."""
    image, digest = push(client, registry, "ivp/key-tlog:v1")
    key = ec.generate_private_key(ec.SECP256R1())
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    payload = cosign("generate", *REGISTRY_FLAGS, pinned(image, digest), cwd=tmp_path).stdout.encode()
    (tmp_path / "payload.json").write_bytes(payload)
    signature = key.sign(payload, ec.ECDSA(hashes.SHA256()))
    (tmp_path / "sig.b64").write_text(base64.b64encode(signature).decode())
    _write_bundle(tmp_path, signature, rekor.bundle(rekor.hashedrekord_body(payload, signature, public_pem)))
    cosign("attach", "signature", "--payload", "payload.json", "--signature", "sig.b64", "--rekor-response", "bundle.json",
           *REGISTRY_FLAGS, pinned(image, digest), cwd=tmp_path)
    _, other_public = generate_key_pair("x")
    for keys in (public_pem, other_public.decode() + public_pem):
        attestor = {"name": "signer", "cosign": {"key": {"data": keys}, "ctlog": {"rekorPubKey": rekor.public_pem}}}
        assert evaluate(client, policy([attestor], SIGNED_BY_ALL), pod(pinned(image, digest))) == ("pass", "success")
    foreign_log = {"name": "signer", "cosign": {"key": {"data": public_pem}, "ctlog": {"rekorPubKey": FakeRekor().public_pem}}}
    assert evaluate(client, policy([foreign_log], SIGNED_BY_ALL), pod(pinned(image, digest)))[0] == "fail"
