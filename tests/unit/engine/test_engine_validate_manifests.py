"""validate.manifests: objects signed in sigstore's annotation format, verified offline with our own signatures."""

import base64
import copy
import gzip
import io
import tarfile
from typing import Any

import yaml
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from stockade.engine.engine import Engine, Request
from stockade.policy.model import KyvernoPolicy

SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "apps"}, "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}}}


def keypair() -> tuple[ec.EllipticCurvePrivateKey, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return key, pem


ALICE, ALICE_PEM = keypair()
BOB, BOB_PEM = keypair()


def signed(resource: dict[str, Any], *signers: ec.EllipticCurvePrivateKey, bundle: bool = False) -> dict[str, Any]:
    text = yaml.safe_dump(resource).encode()
    if bundle:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            info = tarfile.TarInfo("manifest.yaml")
            info.size = len(text)
            archive.addfile(info, io.BytesIO(text))
        blob = buffer.getvalue()
    else:
        blob = text
    annotations = {"cosign.sigstore.dev/message": base64.b64encode(gzip.compress(blob)).decode()}
    for index, signer in enumerate(signers):
        key = "cosign.sigstore.dev/signature" + (f"_{index}" if index else "")
        annotations[key] = base64.b64encode(signer.sign(blob, ec.ECDSA(hashes.SHA256()))).decode()
    result = copy.deepcopy(resource)
    result["metadata"]["annotations"] = annotations
    return result


def policy(*attestor_sets: dict[str, Any], ignore_fields: list[dict[str, Any]] | None = None) -> KyvernoPolicy:
    manifests: dict[str, Any] = {"attestors": list(attestor_sets)}
    if ignore_fields:
        manifests["ignoreFields"] = ignore_fields
    rule = {"name": "signed", "match": {"any": [{"resources": {"kinds": ["Service"]}}]}, "validate": {"manifests": manifests}}
    return KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {"rules": [rule]}})


def entry(pem: str) -> dict[str, Any]:
    return {"keys": {"publicKeys": pem}}


def check(pol: KyvernoPolicy, resource: dict[str, Any]) -> tuple[str, str]:
    engine = Engine()
    rules = engine.validate(engine.policy_context(pol, Request(resource=resource))).rules
    return rules[0].status, rules[0].message


def test_plain_and_bundled_messages_verify_and_unsigned_fails() -> None:
    pol = policy({"count": 1, "entries": [entry(ALICE_PEM), entry(BOB_PEM)]})
    assert check(pol, signed(SERVICE, ALICE))[0] == "pass"
    assert check(pol, signed(SERVICE, BOB, bundle=True))[0] == "pass"
    status, message = check(pol, SERVICE)
    assert status == "fail" and "cosign.sigstore.dev/message is not found" in message


def test_changed_field_fails_added_field_and_ignored_field_pass() -> None:
    pol = policy({"entries": [entry(ALICE_PEM)]})
    tampered = signed(SERVICE, ALICE)
    tampered["spec"]["selector"]["app"] = "evil"
    status, message = check(pol, tampered)
    assert status == "fail" and "spec.selector.app" in message
    defaulted = signed(SERVICE, ALICE)
    defaulted["spec"]["clusterIP"] = "10.0.0.7"  # written by the apiserver after signing
    assert check(pol, defaulted)[0] == "pass"
    tolerant = policy({"entries": [entry(ALICE_PEM)]}, ignore_fields=[{"objects": [{"kind": "Service"}], "fields": ["spec.selector.*"]}])
    assert check(tolerant, tampered)[0] == "pass"


def test_count_defaults_to_every_entry_and_multi_pem_entries_expand() -> None:
    both = policy({"entries": [entry(ALICE_PEM), entry(BOB_PEM)]})
    assert check(both, signed(SERVICE, ALICE))[0] == "fail"
    assert check(both, signed(SERVICE, ALICE, BOB))[0] == "pass"
    one_entry_two_keys = policy({"entries": [entry(ALICE_PEM + "\n" + BOB_PEM)]})
    status, message = check(one_entry_two_keys, signed(SERVICE, BOB))
    assert status == "fail" and "verifiedCount 1; requiredCount 2" in message


def test_wrong_key_fails_and_broken_key_is_an_error() -> None:
    _, stranger = keypair()
    assert check(policy({"entries": [entry(stranger)]}), signed(SERVICE, ALICE))[0] == "fail"
    status, message = check(policy({"entries": [entry("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----")]}), signed(SERVICE, ALICE))
    assert status == "error" and ".attestors[0].entries[0].keys" in message
