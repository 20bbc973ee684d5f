"""A policy whose verifyImages attestors carry unusable keys or certificates: the rule is an *error* naming the field
and the reason (nothing was verified), never a pass, never a traceback."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from stockade.engine.engine import Engine, Request
from stockade.engine.handlers.verify_images import verify_and_patch
from stockade.images.ivpol import IvpolImageVerifier
from stockade.images.keys import generate_key_pair
from stockade.images.reference import ImageReference
from stockade.images.verifier_api import InvalidAttestor, SignatureOptions
from stockade.images.verify import CosignVerifier
from stockade.policy.model import KyvernoPolicy

DIGEST = "sha256:" + "a" * 64
IMAGE = "ghcr.io/acme/app:1.0"


class ResolvingOnlyClient:
    """Answers digest lookups; anything else means the verifier went to the registry with a broken attestor."""

    def resolve_digest(self, reference: ImageReference) -> str:
        return DIGEST

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"registry asked for {name} although the attestor is unusable")


PUBLIC = generate_key_pair("x")[1].decode()
PRIVATE_PKCS8 = (
    ec.generate_private_key(ec.SECP256R1())
    .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    .decode()
)
TRUNCATED = "\n".join(PUBLIC.splitlines()[:-1])
GARBAGE_CERT = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"

CASES: dict[str, tuple[dict[str, Any], str]] = {
    "garbage-key": ({"keys": {"publicKeys": "-----BEGIN PUBLIC KEY-----\nnot base64 at all!\n-----END PUBLIC KEY-----"}}, "publicKeys: PUBLIC KEY PEM block is not valid base64"),
    "truncated-key": ({"keys": {"publicKeys": TRUNCATED}}, "publicKeys: PEM block has no matching END line (truncated?)"),
    "private-key-as-public": ({"keys": {"publicKeys": PRIVATE_PKCS8}}, "publicKeys: holds a PRIVATE KEY, expected a PUBLIC KEY"),
    "bad-der-key": ({"keys": {"publicKeys": "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----"}}, "publicKeys: invalid PUBLIC KEY PEM"),
    "garbage-cert": ({"certificates": {"cert": GARBAGE_CERT}}, "cert: invalid certificate PEM"),
    "key-as-cert": ({"certificates": {"cert": PUBLIC}}, "cert: holds a PUBLIC KEY PEM block, expected CERTIFICATE"),
    "truncated-chain": ({"certificates": {"certChain": "-----BEGIN CERTIFICATE-----\nMIIB"}}, "certChain: PEM block has no matching END line"),
    "garbage-roots": ({"keyless": {"roots": "roots, but not PEM", "subject": "x"}}, "roots: no PEM block found"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_library_raises_a_typed_error_naming_the_field(case: str) -> None:
    attestor, reason = CASES[case]
    verifier = CosignVerifier(ResolvingOnlyClient())  # type: ignore[arg-type]
    with pytest.raises(InvalidAttestor) as caught:
        verifier.verify_signature(IMAGE, DIGEST, attestor, SignatureOptions())
    assert reason in str(caught.value)


@pytest.mark.parametrize("case", sorted(CASES))
def test_policy_rule_is_an_error_result(case: str) -> None:
    attestor, reason = CASES[case]
    policy = KyvernoPolicy(
        {
            "apiVersion": "kyverno.io/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "check-images"},
            "spec": {
                "rules": [
                    {
                        "name": "verify",
                        "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                        "verifyImages": [{"imageReferences": ["ghcr.io/acme/*"], "attestors": [{"entries": [attestor]}]}],
                    }
                ]
            },
        }
    )
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": [{"name": "c", "image": IMAGE}]}}
    engine = Engine()
    pctx = engine.policy_context(policy, Request(resource=pod, operation="CREATE"))
    outcome = verify_and_patch(pctx, policy.rules[0], CosignVerifier(ResolvingOnlyClient()), None)  # type: ignore[arg-type]
    response = outcome.rule_response
    assert response is not None and response.status == "error"
    kind = next(iter(attestor))
    assert f".attestors[0].entries[0].{kind}: {reason}" in response.message
    assert "Traceback" not in response.message


@pytest.mark.parametrize("certs", [GARBAGE_CERT, PUBLIC, "-----BEGIN CERTIFICATE-----\nMIIB"])
def test_notary_certs_are_judged_like_cosign_certificates(certs: str) -> None:
    """ImageValidatingPolicy notary attestors and Kyverno cosign attestors read certificates with one function, so a
    bad certificate gets the same reason under either (only the field name differs)."""
    verifier = CosignVerifier(ResolvingOnlyClient())  # type: ignore[arg-type]
    with pytest.raises(InvalidAttestor) as cosign:
        verifier.verify_signature(IMAGE, DIGEST, {"certificates": {"cert": certs}}, SignatureOptions())
    with pytest.raises(InvalidAttestor) as notary:
        IvpolImageVerifier._notary_trust({"name": "n", "notary": {"certs": {"value": certs}}})
    assert str(cosign.value).startswith("cert: ")
    assert str(notary.value) == "attestor n: notary.certs: " + str(cosign.value).removeprefix("cert: ")
