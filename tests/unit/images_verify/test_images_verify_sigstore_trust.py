"""Offline Sigstore trust: Rekor SETs, trusted_root.json, and the IVP attestor translation (no registry needed)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from stockade.images.ivpol import cosign_checks
from stockade.images.sigstore_trust import check_entry_binds_signature, parse_trusted_root, rekor_keys_from_pem, verify_set
from stockade.images.verifier_api import InvalidAttestor, VerificationFailure, VerificationUnavailable
from stockade.testing.sigstore import FakeFulcio, FakeRekor, trusted_root_json

IDENTITY, ISSUER = "dev@acme.example", "https://accounts.example"


@pytest.fixture(scope="module")
def fulcio() -> FakeFulcio:
    return FakeFulcio()


@pytest.fixture(scope="module")
def rekor() -> FakeRekor:
    return FakeRekor()


def _signed(fulcio: FakeFulcio, rekor: FakeRekor, payload: bytes = b'{"critical":{}}') -> tuple[dict[str, Any], bytes, str, Any]:
    from cryptography.hazmat.primitives import serialization

    key, certificate = fulcio.issue(IDENTITY, ISSUER)
    pem = certificate.public_bytes(serialization.Encoding.PEM).decode()
    signature = key.sign(payload, ec.ECDSA(hashes.SHA256()))
    return rekor.bundle(rekor.hashedrekord_body(payload, signature, pem)), signature, pem, key


def test_set_verifies_with_the_log_key_and_binds_the_signature(fulcio: FakeFulcio, rekor: FakeRekor) -> None:
    bundle, signature, pem, _ = _signed(fulcio, rekor)
    entry = verify_set(json.dumps(bundle), rekor_keys_from_pem(rekor.public_pem, "rekorPubKey"))
    check_entry_binds_signature(entry, signature=signature, payload=b'{"critical":{}}', certificate_pem=pem, key=None, dsse=False)
    with pytest.raises(VerificationFailure, match="another payload"):
        check_entry_binds_signature(entry, signature=signature, payload=b"other", certificate_pem=pem, key=None, dsse=False)
    with pytest.raises(VerificationFailure, match="another signature"):
        check_entry_binds_signature(entry, signature=b"x" + signature, payload=b'{"critical":{}}', certificate_pem=pem, key=None, dsse=False)
    _, other_cert = fulcio.issue(IDENTITY, ISSUER)
    from cryptography.hazmat.primitives import serialization

    other_pem = other_cert.public_bytes(serialization.Encoding.PEM).decode()
    with pytest.raises(VerificationFailure, match="another signing certificate"):
        check_entry_binds_signature(entry, signature=signature, payload=b'{"critical":{}}', certificate_pem=other_pem, key=None, dsse=False)


def test_tampered_or_foreign_sets_are_rejected(fulcio: FakeFulcio, rekor: FakeRekor) -> None:
    bundle, _, _, _ = _signed(fulcio, rekor)
    keys = rekor_keys_from_pem(rekor.public_pem, "rekorPubKey")
    tampered = json.loads(json.dumps(bundle))
    tampered["Payload"]["integratedTime"] += 3600  # back-dating or forward-dating the entry breaks the SET
    with pytest.raises(VerificationFailure, match="SET signature is invalid"):
        verify_set(json.dumps(tampered), keys)
    with pytest.raises(VerificationFailure, match="not a trusted Rekor key"):
        verify_set(json.dumps(bundle), rekor_keys_from_pem(FakeRekor().public_pem, "rekorPubKey"))
    with pytest.raises(VerificationFailure, match="malformed Rekor bundle"):
        verify_set('{"Payload": {}}', keys)
    with pytest.raises(VerificationFailure, match="needs a Rekor public key"):
        verify_set(json.dumps(bundle), {})


def test_trusted_root_yields_chain_and_log_keys(fulcio: FakeFulcio, rekor: FakeRekor) -> None:
    trust = parse_trusted_root(trusted_root_json(fulcio, rekor))
    assert trust.roots == (fulcio.root,) and trust.intermediates == (fulcio.intermediate,)
    assert list(trust.rekor_keys) == [rekor.log_id]
    # entries not yet valid are not trusted
    later = parse_trusted_root(trusted_root_json(fulcio, rekor), now=fulcio.now - timedelta(days=30))
    assert later.roots == () and later.rekor_keys == {}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("not json", "not JSON"),
        ('{"mediaType": "application/json"}', "mediaType"),
        ('{"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1", "tlogs": [{"publicKey": {"rawBytes": "%%%"}}]}', "tlogs[0].publicKey.rawBytes is not valid base64"),
        ("x" * (2 << 20), "more than the"),
    ],
)
def test_bad_trusted_roots_name_the_field(text: str, reason: str) -> None:
    with pytest.raises(InvalidAttestor, match=reason.replace("[", r"\[").replace("]", r"\]")):
        parse_trusted_root(text)


def test_ivp_attestor_translation(rekor: FakeRekor, fulcio: FakeFulcio) -> None:
    key_pem = "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----"
    ignore = {"insecureIgnoreTlog": True, "insecureIgnoreSCT": True}
    [check] = cosign_checks({"name": "k", "cosign": {"key": {"data": key_pem, "hashAlgorithm": "sha512"}, "ctlog": ignore, "source": {"repository": "reg.example/sigs"}, "annotations": {"env": "prod"}}})
    assert check.attestor == {"keys": {"publicKeys": key_pem, "signatureAlgorithm": "sha512"}}
    assert check.options.repository == "reg.example/sigs" and check.options.annotations == {"env": "prod"} and check.options.rekor_keys is None
    keyless = {"name": "kl", "cosign": {"keyless": {"identities": [{"subject": "a"}, {"subjectRegExp": "b", "issuer": "c"}], "roots": "R"}, "ctlog": {"rekorPubKey": rekor.public_pem, "insecureIgnoreSCT": True}}}
    checks = cosign_checks(keyless)
    assert [c.attestor["keyless"]["subject"] for c in checks] == ["a", ""] and checks[1].attestor["keyless"]["subjectRegExp"] == "b"
    assert checks[0].options.rekor_keys is not None and rekor.log_id in checks[0].options.rekor_keys
    with pytest.raises(VerificationUnavailable, match="ctlog.rekorPubKey or trustedRoot"):
        cosign_checks({"name": "k", "cosign": {"key": {"data": key_pem}}})
    with pytest.raises(VerificationUnavailable, match="insecureIgnoreSCT"):
        cosign_checks({"name": "kl", "cosign": {"keyless": {"identities": [{"subject": "a"}]}, "ctlog": {"insecureIgnoreTlog": True}}})
    with pytest.raises(InvalidAttestor, match="at least one identity"):
        cosign_checks({"name": "kl", "cosign": {"keyless": {"identities": []}, "ctlog": ignore}})
    with pytest.raises(InvalidAttestor, match="hashAlgorithm"):
        cosign_checks({"name": "k", "cosign": {"key": {"data": key_pem, "hashAlgorithm": "md5"}, "ctlog": ignore}})
    with pytest.raises(InvalidAttestor, match="attestor k: cosign.trustedRoot: not JSON"):
        cosign_checks({"name": "k", "cosign": {"key": {"data": key_pem}, "trustedRoot": {"value": "{"}}})
    trusted = cosign_checks({"name": "t", "cosign": {"key": {"data": key_pem}, "trustedRoot": {"value": trusted_root_json(fulcio, rekor)}}})
    assert trusted[0].options.rekor_keys is not None and rekor.log_id in trusted[0].options.rekor_keys


def test_embedded_sct_verified_against_the_ct_log_key(fulcio: FakeFulcio) -> None:
    from stockade.images.sigstore_trust import verify_embedded_scts

    ct_log = FakeRekor()
    _, certificate = fulcio.issue(IDENTITY, ISSUER, ct_log=ct_log)
    verify_embedded_scts(certificate, fulcio.intermediate, rekor_keys_from_pem(ct_log.public_pem, "ctLogPubKey"))
    with pytest.raises(VerificationFailure, match="no embedded SCT is from a trusted CT log"):
        verify_embedded_scts(certificate, fulcio.intermediate, rekor_keys_from_pem(FakeRekor().public_pem, "ctLogPubKey"))
    with pytest.raises(VerificationFailure, match="SCT signature is invalid"):
        verify_embedded_scts(certificate, FakeFulcio(name="other").intermediate, rekor_keys_from_pem(ct_log.public_pem, "ctLogPubKey"))
    _, bare = fulcio.issue(IDENTITY, ISSUER)
    with pytest.raises(VerificationFailure, match="no embedded SCT"):
        verify_embedded_scts(bare, fulcio.intermediate, rekor_keys_from_pem(ct_log.public_pem, "ctLogPubKey"))
    trust = parse_trusted_root(trusted_root_json(fulcio, FakeRekor(), ct_log))
    assert list(trust.ct_keys) == [ct_log.log_id]
