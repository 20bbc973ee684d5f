"""cosign layout, key files, DSSE and certificate checks against a throw-away local registry."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timedelta, timezone
from typing import Iterator

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from stockade.images.attest import attest_image
from stockade.images.cosign import SIGNATURE_ANNOTATION, signature_tag, sign_image, simple_signing_payload, attach_layer, SIMPLE_SIGNING_MEDIA_TYPE
from stockade.images.keys import (
    KeyFormatError,
    KeyResolver,
    encrypt_cosign_private_key,
    generate_key_pair,
    load_cosign_private_key,
    public_key_pem,
    sign_payload,
)
from stockade.images.reference import parse_reference
from stockade.images.registry import RegistryClient
from stockade.images.verifier_api import SignatureOptions, VerificationFailure, VerificationUnavailable
from stockade.images.verify import CosignVerifier
from stockade.testing.registry import LocalRegistry
from stockade.testing.sigstore import FakeFulcio, FakeRekor

OPTIONS = SignatureOptions()


@pytest.fixture(scope="module")
def registry() -> Iterator[LocalRegistry]:
    with LocalRegistry() as local:
        yield local


@pytest.fixture(scope="module")
def client(registry: LocalRegistry) -> Iterator[RegistryClient]:
    with RegistryClient(**registry.client_options(), retries=0) as registry_client:
        yield registry_client


def push(client: RegistryClient, registry: LocalRegistry, name: str, content: bytes) -> tuple[str, str]:
    ref = parse_reference(f"{registry.host}/{name}")
    return str(ref), client.push_image(ref, [content])


def keys_attestor(key: object) -> dict:
    return {"keys": {"publicKeys": public_key_pem(key).decode()}}  # type: ignore[arg-type]


def test_cosign_key_file_roundtrip_and_wrong_password() -> None:
    private_pem, public_pem = generate_key_pair("secret")
    assert private_pem.startswith(b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----")
    key = load_cosign_private_key(private_pem, "secret")
    assert public_key_pem(key) == public_pem
    with pytest.raises(KeyFormatError, match="wrong password"):
        load_cosign_private_key(private_pem, "nope")
    legacy = private_pem.replace(b"SIGSTORE", b"COSIGN")
    assert public_key_pem(load_cosign_private_key(legacy, "secret")) == public_pem


@pytest.mark.parametrize(
    "key",
    [ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP384R1()), rsa.generate_private_key(65537, 2048), ed25519.Ed25519PrivateKey.generate()],
    ids=["p256", "p384", "rsa", "ed25519"],
)
def test_sign_and_verify_each_key_type(client: RegistryClient, registry: LocalRegistry, key: object) -> None:
    image, digest = push(client, registry, f"keys/{type(key).__name__.lower()}:v1", type(key).__name__.encode())
    sign_image(client, parse_reference(image), key)  # type: ignore[arg-type]
    CosignVerifier(client).verify_signature(image, digest, keys_attestor(key), OPTIONS)
    other = ec.generate_private_key(ec.SECP256R1())
    with pytest.raises(VerificationFailure, match="invalid signature"):
        CosignVerifier(client).verify_signature(image, digest, keys_attestor(other), OPTIONS)


def test_missing_signature_fails(client: RegistryClient, registry: LocalRegistry) -> None:
    image, digest = push(client, registry, "unsigned/app:v1", b"unsigned")
    with pytest.raises(VerificationFailure, match="no signatures found"):
        CosignVerifier(client).verify_signature(image, digest, keys_attestor(ec.generate_private_key(ec.SECP256R1())), OPTIONS)


def test_signature_for_another_digest_is_rejected(client: RegistryClient, registry: LocalRegistry) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    image, digest = push(client, registry, "copied/app:v1", b"victim")
    other_digest = "sha256:" + "0" * 64
    payload = simple_signing_payload(parse_reference(image), other_digest)
    annotations = {SIGNATURE_ANNOTATION: base64.b64encode(sign_payload(key, payload)).decode()}
    attach_layer(client, parse_reference(image), digest, payload, SIMPLE_SIGNING_MEDIA_TYPE, annotations, "sig")
    with pytest.raises(VerificationFailure, match="signature is for digest sha256:0000"):
        CosignVerifier(client).verify_signature(image, digest, keys_attestor(key), OPTIONS)


def test_tampered_payload_is_rejected(client: RegistryClient, registry: LocalRegistry) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    image, digest = push(client, registry, "tampered/app:v1", b"tamper")
    payload = simple_signing_payload(parse_reference(image), digest, {"env": "prod"})
    signature = base64.b64encode(sign_payload(key, payload)).decode()
    tampered = payload.replace(b'"prod"', b'"test"')
    attach_layer(client, parse_reference(image), digest, tampered, SIMPLE_SIGNING_MEDIA_TYPE, {SIGNATURE_ANNOTATION: signature}, "sig")
    with pytest.raises(VerificationFailure, match="invalid signature"):
        CosignVerifier(client).verify_signature(image, digest, keys_attestor(key), OPTIONS)


def test_annotations_and_repository_override(client: RegistryClient, registry: LocalRegistry) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    image, digest = push(client, registry, "annotated/app:v1", b"annotated")
    sig_repo = f"{registry.host}/signatures/store"
    sign_image(client, parse_reference(image), key, annotations={"team": "payments"}, repository=sig_repo)
    verifier = CosignVerifier(client)
    with pytest.raises(VerificationFailure, match="no signatures found"):
        verifier.verify_signature(image, digest, keys_attestor(key), OPTIONS)
    with_repo = SignatureOptions(repository=sig_repo, annotations={"team": "payments"})
    verifier.verify_signature(image, digest, keys_attestor(key), with_repo)
    with pytest.raises(VerificationFailure, match="annotation mismatch"):
        verifier.verify_signature(image, digest, keys_attestor(key), SignatureOptions(repository=sig_repo, annotations={"team": "ops"}))


def test_attestation_roundtrip_subject_binding(client: RegistryClient, registry: LocalRegistry) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    image, digest = push(client, registry, "attested/app:v1", b"attested")
    attest_image(client, parse_reference(image), key, "https://example.com/scan/v1", {"critical": 0})
    statements = CosignVerifier(client).fetch_attestations(image, digest, keys_attestor(key), OPTIONS, "https://example.com/scan/v1")
    assert [s["predicate"] for s in statements] == [{"critical": 0}]
    with pytest.raises(VerificationFailure, match="DSSE"):
        CosignVerifier(client).fetch_attestations(image, digest, keys_attestor(ec.generate_private_key(ec.SECP256R1())), OPTIONS, "https://example.com/scan/v1")


def test_registry_down_is_unavailable(registry: LocalRegistry) -> None:
    with RegistryClient(insecure_registries=["127.0.0.1:9"], retries=0, timeout=2) as dead:
        verifier = CosignVerifier(dead)
        with pytest.raises(VerificationUnavailable):
            verifier.resolve_digest("127.0.0.1:9/app:v1")
        with pytest.raises(VerificationUnavailable):
            verifier.verify_signature("127.0.0.1:9/app:v1", "sha256:" + "1" * 64, keys_attestor(ec.generate_private_key(ec.SECP256R1())), OPTIONS)


def test_key_resolver_providers() -> None:
    _, public_pem = generate_key_pair("x")
    secret = {"data": {"cosign.pub": base64.b64encode(public_pem).decode()}}
    resolver = KeyResolver(secret_getter=lambda ns, name: secret if (ns, name) == ("kyverno", "keys") else {})
    assert len(resolver.resolve("k8s://kyverno/keys")) == 1
    with pytest.raises(VerificationFailure, match="no cosign.pub"):
        resolver.resolve("k8s://kyverno/other")
    with pytest.raises(VerificationUnavailable, match="awskms is not configured"):
        resolver.resolve("awskms:///arn:aws:kms:us-east-1:1:key/abc")
    with pytest.raises(VerificationUnavailable, match="no Kubernetes secret access"):
        KeyResolver().resolve("k8s://a/b")
    kms = KeyResolver(kms_providers={"gcpkms": lambda uri: public_pem})
    assert len(kms.resolve("gcpkms://projects/p/locations/l/keyRings/r/cryptoKeys/k")) == 1


# -- certificates and keyless -----------------------------------------------------------------------------------
def _cert(subject_key, issuer_key, issuer_name, *, ca: bool, san: str | None = None, issuer_url: str = "", days: int = 1, not_before=None) -> x509.Certificate:
    now = not_before or datetime.now(timezone.utc) - timedelta(minutes=5)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca" if ca else "leaf")]) if ca or not san else x509.Name([])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name or name)
        .public_key(subject_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=not ca, content_commitment=False, key_encipherment=False, data_encipherment=False, key_agreement=False, key_cert_sign=ca, crl_sign=ca, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(subject_key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
    )
    if not ca:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.RFC822Name(san or "dev@example.com")]), critical=True)
        if issuer_url:
            der = b"\x0c" + bytes([len(issuer_url)]) + issuer_url.encode()
            builder = builder.add_extension(x509.UnrecognizedExtension(x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8"), der), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(certificate: x509.Certificate) -> str:
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


@pytest.fixture(scope="module")
def pki():
    root_key = ec.generate_private_key(ec.SECP384R1())
    root = _cert(root_key, root_key, None, ca=True, days=365)
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = _cert(leaf_key, root_key, root.subject, ca=False, san="dev@example.com", issuer_url="https://issuer.example.com")
    return root, leaf_key, leaf


def test_keyless_with_roots_subject_and_issuer(client: RegistryClient, registry: LocalRegistry, pki) -> None:
    root, leaf_key, leaf = pki
    image, digest = push(client, registry, "keyless/app:v1", b"keyless")
    sign_image(client, parse_reference(image), leaf_key, certificate_pem=_pem(leaf))
    verifier = CosignVerifier(client)
    good = {"keyless": {"roots": _pem(root), "subject": "dev@example.com", "issuer": "https://issuer.example.com"}}
    verifier.verify_signature(image, digest, good, OPTIONS)
    verifier.verify_signature(image, digest, {"keyless": {"roots": _pem(root), "subjectRegExp": r".*@example\.com", "issuerRegExp": r"https://issuer\..*"}}, OPTIONS)
    # Kyverno's wording (cpol cosign matchCertificateData / matchExtensions)
    with pytest.raises(VerificationFailure, match=r"^subject mismatch: expected eve@example\.com, received dev@example\.com$"):
        verifier.verify_signature(image, digest, {"keyless": {"roots": _pem(root), "subject": "eve@example.com"}}, OPTIONS)
    with pytest.raises(VerificationFailure, match=r"^issuer mismatch: expected https://other, received https://issuer\.example\.com$"):
        verifier.verify_signature(image, digest, {"keyless": {"roots": _pem(root), "issuer": "https://other"}}, OPTIONS)
    other_root_key = ec.generate_private_key(ec.SECP384R1())
    other_root = _cert(other_root_key, other_root_key, None, ca=True, days=365)
    with pytest.raises(VerificationFailure, match="chain"):
        verifier.verify_signature(image, digest, {"keyless": {"roots": _pem(other_root)}}, OPTIONS)
    with pytest.raises(VerificationUnavailable, match="roots"):
        verifier.verify_signature(image, digest, {"keyless": {"subject": "dev@example.com"}}, OPTIONS)
    late = CosignVerifier(client, clock=lambda: datetime.now(timezone.utc) + timedelta(days=30))
    with pytest.raises(VerificationFailure, match="chain"):
        late.verify_signature(image, digest, good, OPTIONS)


def test_certificates_attestor(client: RegistryClient, registry: LocalRegistry, pki) -> None:
    root, leaf_key, leaf = pki
    image, digest = push(client, registry, "certs/app:v1", b"certs")
    sign_image(client, parse_reference(image), leaf_key, certificate_pem=_pem(leaf))
    verifier = CosignVerifier(client)
    verifier.verify_signature(image, digest, {"certificates": {"cert": _pem(leaf), "certChain": _pem(root)}}, OPTIONS)
    verifier.verify_signature(image, digest, {"certificates": {"certChain": _pem(root)}}, OPTIONS)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other_leaf = _cert(other_key, other_key, None, ca=False, san="x@example.com")
    with pytest.raises(VerificationFailure, match="does not match"):
        verifier.verify_signature(image, digest, {"certificates": {"cert": _pem(other_leaf)}}, OPTIONS)


def test_signature_tag() -> None:
    assert signature_tag("sha256:abc") == "sha256-abc.sig"
    assert signature_tag("sha256:abc", "att") == "sha256-abc.att"


def test_keyless_regexps_are_unanchored_like_cosign(pki) -> None:
    # cosign's validateCertIdentity checks subjectRegExp/issuerRegExp with Go's regexp.MatchString: an unanchored
    # search, so a pattern matching part of the SAN or issuer accepts it, and anchors are the policy author's job.
    _, _, leaf = pki
    check = CosignVerifier._check_keyless_identity
    check(leaf, {"subjectRegExp": "example", "issuerRegExp": r"issuer\.example"})
    check(leaf, {"subjectRegExp": r"^dev@example\.com$", "issuerRegExp": r"^https://issuer\.example\.com$"})
    with pytest.raises(VerificationFailure, match="subject mismatch"):
        check(leaf, {"subjectRegExp": "^example"})
    with pytest.raises(VerificationFailure, match="issuer mismatch"):
        check(leaf, {"issuerRegExp": r"com/$"})
    with pytest.raises(VerificationFailure, match="invalid subjectRegExp: error parsing regexp: invalid or unsupported Perl syntax"):
        check(leaf, {"subjectRegExp": "(?=dev)"})


def test_cluster_policy_keyless_ctlog_pubkey_checks_embedded_scts(client: RegistryClient, registry: LocalRegistry) -> None:
    """A keyless entry's `ctlog.pubkey` (Kyverno's custom CT log key): the certificate's SCT must verify with it,
    unless `ctlog.ignoreSCT`; without the field no SCT is required (the public log's key is not fetched offline)."""
    fulcio, ct_log, other_log = FakeFulcio(), FakeRekor(), FakeRekor()
    leaf_key, leaf = fulcio.issue("dev@example.com", "https://issuer.example.com", ct_log=ct_log)
    image, digest = push(client, registry, "keyless/sct:v1", b"sct")
    sign_image(client, parse_reference(image), leaf_key, certificate_pem=_pem(leaf), chain_pem=fulcio.chain_pem)
    verifier = CosignVerifier(client)

    def keyless(**ctlog: object) -> dict:
        return {"keyless": {"roots": fulcio.root_pem, "subject": "dev@example.com", "ctlog": ctlog}}

    verifier.verify_signature(image, digest, keyless(pubkey=ct_log.public_pem), OPTIONS)
    with pytest.raises(VerificationFailure, match="no embedded SCT is from a trusted CT log"):
        verifier.verify_signature(image, digest, keyless(pubkey=other_log.public_pem), OPTIONS)
    verifier.verify_signature(image, digest, keyless(pubkey=other_log.public_pem, ignoreSCT=True), OPTIONS)
