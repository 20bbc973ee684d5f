"""A Fulcio-like CA and a Rekor-like log key for keyless tests, entirely offline.

`FakeFulcio` issues short code-signing certificates the way Fulcio does (SAN identity, OIDC issuer extensions
v1 and v2, codeSigning EKU) under root → intermediate; `FakeRekor` builds hashedrekord entries and signs their
Signed Entry Timestamps, producing the ``dev.sigstore.cosign/bundle`` cosign attaches (``--rekor-response``).
`trusted_root_json` renders both as a Sigstore ``trusted_root.json``.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

FULCIO_ISSUER_V1 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
FULCIO_ISSUER_V2 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8")
SCT_LIST = x509.ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")


def _pem(certificate: x509.Certificate) -> str:
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def _der_utf8(text: str) -> bytes:
    raw = text.encode()
    if len(raw) < 128:
        return b"\x0c" + bytes([len(raw)]) + raw
    length = len(raw).to_bytes((len(raw).bit_length() + 7) // 8, "big")
    return b"\x0c" + bytes([0x80 | len(length)]) + length + raw


def _der_octets(raw: bytes) -> bytes:
    if len(raw) < 128:
        return b"\x04" + bytes([len(raw)]) + raw
    length = len(raw).to_bytes((len(raw).bit_length() + 7) // 8, "big")
    return b"\x04" + bytes([0x80 | len(length)]) + length + raw


def _ca(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None, now: datetime, *, code_signing: bool = False
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "stockade-test"), x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, signer = issuer if issuer else (name, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None if issuer is None else 0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if issuer is not None:
        builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False)
    if code_signing:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
    return builder.sign(signer, hashes.SHA256())


@dataclass
class FakeFulcio:
    """root → intermediate → leaf, like Fulcio's public chain. `code_signing_intermediate` gives the intermediate the
    codeSigning EKU, as Fulcio's production intermediate has and as a real Fulcio requires of the CA it signs with."""

    name: str = "fake-fulcio"
    now: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    code_signing_intermediate: bool = False

    def __post_init__(self) -> None:
        self.root_key = ec.generate_private_key(ec.SECP384R1())
        self.root = _ca(f"{self.name} root", self.root_key, None, self.now)
        self.intermediate_key = ec.generate_private_key(ec.SECP384R1())
        self.intermediate = _ca(
            f"{self.name} intermediate", self.intermediate_key, (self.root.subject, self.root_key), self.now, code_signing=self.code_signing_intermediate
        )

    @property
    def root_pem(self) -> str:
        return _pem(self.root)

    @property
    def chain_pem(self) -> str:
        """cosign's --certificate-chain order: parent intermediate first, root last."""
        return _pem(self.intermediate) + _pem(self.root)

    def issue(
        self,
        identity: str,
        issuer: str,
        *,
        valid_for: timedelta = timedelta(minutes=10),
        not_before: datetime | None = None,
        ct_log: FakeRekor | None = None,
    ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        """A signing key and its certificate for an OIDC identity (email, or a URI such as a workflow); with
        `ct_log`, the certificate embeds that log's SCT over its precertificate, as Fulcio's do."""
        key = ec.generate_private_key(ec.SECP256R1())
        start = not_before or self.now - timedelta(minutes=1)
        san: x509.GeneralName = x509.UniformResourceIdentifier(identity) if "://" in identity else x509.RFC822Name(identity)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(self.intermediate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + valid_for)
            .add_extension(x509.SubjectAlternativeName([san]), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.intermediate_key.public_key()), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.UnrecognizedExtension(FULCIO_ISSUER_V1, issuer.encode()), critical=False)
            .add_extension(x509.UnrecognizedExtension(FULCIO_ISSUER_V2, _der_utf8(issuer)), critical=False)
        )
        certificate = builder.sign(self.intermediate_key, hashes.SHA256())
        if ct_log is not None:
            sct = ct_log.sct(certificate.tbs_certificate_bytes, self.intermediate, start)
            entry = len(sct).to_bytes(2, "big") + sct
            listing = len(entry).to_bytes(2, "big") + entry
            builder = builder.add_extension(x509.UnrecognizedExtension(SCT_LIST, _der_octets(listing)), critical=False)
            certificate = builder.sign(self.intermediate_key, hashes.SHA256())
        return key, certificate


@dataclass
class FakeRekor:
    """A log key and a counter: enough to produce the SETs cosign bundles carry."""

    key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    next_index: int = 1000

    @property
    def public_pem(self) -> str:
        return self.key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()

    @property
    def log_id(self) -> str:
        der = self.key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        return hashlib.sha256(der).hexdigest()

    def sct(self, precertificate_tbs: bytes, issuer: x509.Certificate, moment: datetime) -> bytes:
        """An RFC 6962 v1 SCT (TLS encoding) over a precertificate entry: this key acting as a CT log."""
        issuer_key_hash = hashlib.sha256(
            issuer.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        ).digest()
        milliseconds = int(moment.timestamp() * 1000).to_bytes(8, "big")
        signed = (
            b"\x00\x00" + milliseconds + b"\x00\x01" + issuer_key_hash
            + len(precertificate_tbs).to_bytes(3, "big") + precertificate_tbs + b"\x00\x00"
        )
        signature = self.key.sign(signed, ec.ECDSA(hashes.SHA256()))
        return b"\x00" + bytes.fromhex(self.log_id) + milliseconds + b"\x00\x00" + b"\x04\x03" + len(signature).to_bytes(2, "big") + signature

    def hashedrekord_body(self, payload: bytes, signature: bytes, signer_pem: str) -> dict[str, Any]:
        return {
            "apiVersion": "0.0.1",
            "kind": "hashedrekord",
            "spec": {
                "data": {"hash": {"algorithm": "sha256", "value": hashlib.sha256(payload).hexdigest()}},
                "signature": {"content": base64.b64encode(signature).decode(), "publicKey": {"content": base64.b64encode(signer_pem.encode()).decode()}},
            },
        }

    def bundle(self, body: dict[str, Any], integrated_time: datetime | None = None) -> dict[str, Any]:
        """cosign's RekorBundle: the entry and its SET (signature over the canonical JSON of the entry)."""
        moment = integrated_time or datetime.now(timezone.utc)
        payload = {
            "body": base64.b64encode(json.dumps(body, separators=(",", ":")).encode()).decode(),
            "integratedTime": int(moment.timestamp()),
            "logIndex": self.next_index,
            "logID": self.log_id,
        }
        self.next_index += 1
        canonical = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
        signature = self.key.sign(canonical, ec.ECDSA(hashes.SHA256()))
        return {"SignedEntryTimestamp": base64.b64encode(signature).decode(), "Payload": payload}


def trusted_root_json(fulcio: FakeFulcio, rekor: FakeRekor, ct_log: FakeRekor | None = None) -> str:
    """A Sigstore trusted_root.json (v0.1) naming the fake CA chain, log key and (optionally) CT log key."""
    def raw(certificate: x509.Certificate) -> dict[str, str]:
        return {"rawBytes": base64.b64encode(certificate.public_bytes(serialization.Encoding.DER)).decode()}

    start = (fulcio.now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    document = {
        "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
        "tlogs": [_log_entry(rekor, start)],
        "certificateAuthorities": [
            {
                "subject": {"organization": "stockade-test", "commonName": fulcio.name},
                "uri": "https://fulcio.invalid",
                "certChain": {"certificates": [raw(fulcio.intermediate), raw(fulcio.root)]},
                "validFor": {"start": start},
            }
        ],
        "ctlogs": [] if ct_log is None else [_log_entry(ct_log, start)],
        "timestampAuthorities": [],
    }
    return json.dumps(document, indent=2)


def _log_entry(log: FakeRekor, start: str) -> dict[str, Any]:
    der = log.key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return {
        "baseUrl": "https://log.invalid",
        "hashAlgorithm": "SHA2_256",
        "publicKey": {"rawBytes": base64.b64encode(der).decode(), "keyDetails": "PKIX_ECDSA_P256_SHA_256", "validFor": {"start": start}},
        "logId": {"keyId": base64.b64encode(bytes.fromhex(log.log_id)).decode()},
    }


__all__ = ["FakeFulcio", "FakeRekor", "trusted_root_json"]
