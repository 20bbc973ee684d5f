"""Offline Sigstore trust material: Rekor public keys, Fulcio roots, TUF-style ``trusted_root.json``, Rekor SETs.

cosign attaches a Rekor bundle to each signature layer (annotation ``dev.sigstore.cosign/bundle``): the log entry's
``body``, ``integratedTime``, ``logIndex`` and ``logID``, plus a Signed Entry Timestamp (SET), which is the log key's
signature over the canonical JSON of those four fields.  Checking the SET against a configured Rekor key proves the
log accepted exactly this entry without contacting the log; the entry body must then name the very signature,
payload hash and signing key/certificate of the layer, or a valid SET of some *other* entry could be replayed.

sigstore-python is deliberately not used (see README, dependencies): it brings a dozen packages for what is
a JSON shape and one signature check over ``cryptography``.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from stockade.images.keys import PublicKey, load_public_key, verify_signature
from stockade.images.pem import KeyFormatError, split_pem
from stockade.images.verifier_api import InvalidAttestor, VerificationFailure

TRUSTED_ROOT_MEDIA_TYPE_PREFIX = "application/vnd.dev.sigstore.trustedroot+json"
MAX_TRUSTED_ROOT_BYTES = 1 << 20  # Kyverno's cap on inline trusted roots
MAX_BUNDLE_BYTES = 1 << 20
_MAX_CHAIN_CERTIFICATES = 12


def log_id(key: PublicKey) -> str:
    """Rekor's log ID: hex SHA-256 of the key's DER SubjectPublicKeyInfo."""
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


@dataclass(frozen=True)
class TrustRoot:
    """What keyless/transparency checks trust: Fulcio roots and intermediates, Rekor keys by log ID."""

    roots: tuple[x509.Certificate, ...] = ()
    intermediates: tuple[x509.Certificate, ...] = ()
    rekor_keys: Mapping[str, PublicKey] = field(default_factory=dict)
    ct_keys: Mapping[str, PublicKey] = field(default_factory=dict)


def rekor_keys_from_pem(text: str, field_name: str) -> dict[str, PublicKey]:
    """Every PUBLIC KEY block of a policy field (``ctlog.rekorPubKey``, ``ctlog.ctLogPubKey``), keyed by log ID."""
    blocks = split_pem(text)
    if not blocks:
        raise InvalidAttestor(f"{field_name}: no PEM public key found")
    keys: dict[str, PublicKey] = {}
    for block in blocks:
        try:
            key = load_public_key(block)
        except KeyFormatError as exc:
            raise InvalidAttestor(f"{field_name}: {exc}") from None
        keys[log_id(key)] = key
    return keys


def _b64(value: Any, where: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except ValueError:
        raise InvalidAttestor(f"trustedRoot: {where} is not valid base64") from None


def _valid_now(entry: Mapping[str, Any], now: datetime) -> bool:
    """Entries whose ``validFor`` window excludes ``now`` are not trusted (rotated-out keys and CAs)."""
    window = entry.get("validFor") or {}
    if not isinstance(window, Mapping):
        return True
    for bound in ("start", "end"):
        text = window.get(bound)
        if not text:
            continue
        try:
            moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
        except ValueError:
            raise InvalidAttestor(f"trustedRoot: validFor.{bound} {text!r} is not an RFC 3339 time") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        if (moment > now) if bound == "start" else (now > moment):
            return False
    return True


def parse_trusted_root(text: str, now: datetime | None = None) -> TrustRoot:
    """A Sigstore ``trusted_root.json`` (protobuf JSON, ``…trustedroot+json;version=0.1``): Fulcio CA chains and
    Rekor keys currently valid.  Errors name the field and are the policy's (InvalidAttestor)."""
    if len(text.encode()) > MAX_TRUSTED_ROOT_BYTES:
        raise InvalidAttestor(f"trustedRoot: {len(text.encode())} bytes, more than the {MAX_TRUSTED_ROOT_BYTES} allowed")
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise InvalidAttestor(f"trustedRoot: not JSON: {exc}") from None
    if not isinstance(document, Mapping):
        raise InvalidAttestor("trustedRoot: not a JSON object")
    media_type = str(document.get("mediaType") or "")
    if not media_type.startswith(TRUSTED_ROOT_MEDIA_TYPE_PREFIX):
        raise InvalidAttestor(f"trustedRoot: mediaType {media_type!r} is not {TRUSTED_ROOT_MEDIA_TYPE_PREFIX};version=0.1")
    moment = now or datetime.now(timezone.utc)
    roots: list[x509.Certificate] = []
    intermediates: list[x509.Certificate] = []
    for index, authority in enumerate(document.get("certificateAuthorities") or []):
        if not isinstance(authority, Mapping) or not _valid_now(authority, moment):
            continue
        raw = ((authority.get("certChain") or {}).get("certificates")) or []
        if len(raw) > _MAX_CHAIN_CERTIFICATES:
            raise InvalidAttestor(f"trustedRoot: certificateAuthorities[{index}] has {len(raw)} certificates (at most {_MAX_CHAIN_CERTIFICATES})")
        for position, entry in enumerate(raw):
            where = f"certificateAuthorities[{index}].certChain.certificates[{position}].rawBytes"
            try:
                certificate = x509.load_der_x509_certificate(_b64((entry or {}).get("rawBytes"), where))
            except ValueError as exc:
                raise InvalidAttestor(f"trustedRoot: {where}: {exc}") from None
            (roots if certificate.issuer == certificate.subject else intermediates).append(certificate)
    logs: dict[str, dict[str, PublicKey]] = {"tlogs": {}, "ctlogs": {}}
    for kind, found in logs.items():
        for index, tlog in enumerate(document.get(kind) or []):
            public = (tlog or {}).get("publicKey") or {}
            if not isinstance(public, Mapping) or not _valid_now(public, moment):
                continue
            der = _b64(public.get("rawBytes"), f"{kind}[{index}].publicKey.rawBytes")
            try:
                key: Any = serialization.load_der_public_key(der)
            except ValueError as exc:
                raise InvalidAttestor(f"trustedRoot: {kind}[{index}].publicKey: {exc}") from None
            found[log_id(key)] = key
    return TrustRoot(tuple(roots), tuple(intermediates), logs["tlogs"], logs["ctlogs"])


def verify_embedded_scts(leaf: x509.Certificate, issuer: x509.Certificate, ct_keys: Mapping[str, PublicKey]) -> None:
    """Certificate transparency: one SCT embedded in `leaf` must be a trusted CT log's signature over the
    precertificate (RFC 6962 section 3.2: the TBS without the SCT list, bound to the issuer's key hash)."""
    if not ct_keys:
        raise VerificationFailure("certificate transparency check needs a CT log public key (ctlog.ctLogPubKey or trustedRoot ctlogs)")
    try:
        scts = leaf.extensions.get_extension_for_class(x509.PrecertificateSignedCertificateTimestamps).value
    except x509.ExtensionNotFound:
        raise VerificationFailure("certificate carries no embedded SCT (certificate transparency)") from None
    issuer_key_hash = hashlib.sha256(
        issuer.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    ).digest()
    tbs = leaf.tbs_precertificate_bytes
    for sct in scts:
        key = ct_keys.get(sct.log_id.hex())
        if key is None:
            continue
        moment = sct.timestamp.replace(tzinfo=timezone.utc)
        milliseconds = int(moment.timestamp()) * 1000 + moment.microsecond // 1000
        extensions = sct.extension_bytes
        signed = (
            b"\x00\x00" + milliseconds.to_bytes(8, "big") + b"\x00\x01" + issuer_key_hash
            + len(tbs).to_bytes(3, "big") + tbs + len(extensions).to_bytes(2, "big") + extensions
        )
        hash_name = getattr(sct.signature_hash_algorithm, "name", "sha256")
        try:
            verify_signature(key, sct.signature, signed, hash_name)
        except (VerificationFailure, KeyFormatError):
            raise VerificationFailure("embedded SCT signature is invalid") from None
        return
    raise VerificationFailure("no embedded SCT is from a trusted CT log")


@dataclass(frozen=True)
class LogEntry:
    """A Rekor entry whose SET verified: when it was logged and what its body says."""

    integrated_time: datetime
    log_index: int
    body: Mapping[str, Any]


def verify_set(bundle_text: str, rekor_keys: Mapping[str, PublicKey]) -> LogEntry:
    """Check a cosign ``dev.sigstore.cosign/bundle`` annotation's SET with the trusted Rekor keys."""
    if not rekor_keys:
        raise VerificationFailure("transparency log verification needs a Rekor public key (ctlog.rekorPubKey or trustedRoot)")
    if len(bundle_text) > MAX_BUNDLE_BYTES:
        raise VerificationFailure("Rekor bundle is larger than 1 MiB")
    try:
        bundle = json.loads(bundle_text)
        payload: dict[str, Any] = bundle["Payload"]
        entry: dict[str, Any] = {
            "body": str(payload["body"]),
            "integratedTime": int(payload["integratedTime"]),
            "logID": str(payload["logID"]),
            "logIndex": int(payload["logIndex"]),
        }
        set_signature = base64.b64decode(str(bundle["SignedEntryTimestamp"]), validate=True)
        body = json.loads(base64.b64decode(entry["body"], validate=True))
    except (ValueError, KeyError, TypeError):
        raise VerificationFailure("malformed Rekor bundle (expected SignedEntryTimestamp and Payload body/integratedTime/logIndex/logID)") from None
    key = rekor_keys.get(str(entry["logID"]))
    if key is None:
        raise VerificationFailure(f"Rekor bundle names log {entry['logID']}, which is not a trusted Rekor key")
    # RFC 8785 canonical form of this flat object: sorted keys, no whitespace (only strings and integers occur).
    canonical = json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    try:
        verify_signature(key, set_signature, canonical)
    except VerificationFailure:
        raise VerificationFailure("Rekor SET signature is invalid (bundle tampered or signed by another log)") from None
    if not isinstance(body, Mapping):
        raise VerificationFailure("Rekor entry body is not a JSON object")
    moment = datetime.fromtimestamp(int(entry["integratedTime"]), timezone.utc)
    return LogEntry(moment, int(entry["logIndex"]), body)


def _pem_or_der_equal(encoded: str, expected_pem: str, expected_key: PublicKey | None) -> bool:
    """Whether a Rekor body's base64 ``publicKey.content`` is the signer's certificate (or key)."""
    try:
        text = base64.b64decode(encoded, validate=True)
    except ValueError:
        return False
    if expected_pem:
        try:
            return x509.load_pem_x509_certificate(text) == x509.load_pem_x509_certificate(expected_pem.encode())
        except ValueError:
            pass
    if expected_key is not None:
        try:
            return load_public_key(text).public_numbers() == expected_key.public_numbers()  # type: ignore[union-attr]
        except (KeyFormatError, AttributeError):
            return False
    return False


def check_entry_binds_signature(
    entry: LogEntry, *, signature: bytes, payload: bytes, certificate_pem: str, key: PublicKey | None, dsse: bool
) -> None:
    """The logged entry must be this layer's: same signature, same payload hash, same signer."""
    kind = str(entry.body.get("kind") or "")
    spec = entry.body.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise VerificationFailure("Rekor entry has no spec")
    digest = hashlib.sha256(payload).hexdigest()
    if kind == "hashedrekord" and not dsse:
        logged_signature = (spec.get("signature") or {})
        logged_hash = ((spec.get("data") or {}).get("hash") or {}).get("value")
        if logged_hash != digest:
            raise VerificationFailure("Rekor entry is for another payload (hash mismatch)")
        try:
            same_signature = base64.b64decode(str(logged_signature.get("content") or ""), validate=True) == signature
        except ValueError:
            same_signature = False
        if not same_signature:
            raise VerificationFailure("Rekor entry carries another signature")
        signer = str((logged_signature.get("publicKey") or {}).get("content") or "")
        if not _pem_or_der_equal(signer, certificate_pem, key):
            raise VerificationFailure("Rekor entry names another signing certificate or key")
        return
    if kind in ("intoto", "dsse") and dsse:
        content = spec.get("content") if kind == "intoto" else spec
        logged = ((content or {}).get("payloadHash") or {}).get("value")
        envelope = json.loads(payload)
        statement = base64.b64decode(str(envelope.get("payload", "")))
        if logged not in (hashlib.sha256(statement).hexdigest(), digest):
            raise VerificationFailure("Rekor entry is for another attestation (payload hash mismatch)")
        return
    raise VerificationFailure(f"Rekor entry kind {kind!r} does not match a {'DSSE attestation' if dsse else 'signature'}")


__all__ = [
    "LogEntry",
    "TrustRoot",
    "check_entry_binds_signature",
    "log_id",
    "parse_trusted_root",
    "rekor_keys_from_pem",
    "verify_embedded_scts",
    "verify_set",
]
