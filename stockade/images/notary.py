"""Notary Project (notation) signatures: OCI referrers of artifact type ``application/vnd.cncf.notary.signature``
holding a JWS envelope, verified against the CA certificates an attestor trusts (``notary.x509`` signing scheme).

Signatures are found through the OCI referrers tag schema (an index tagged ``sha256-<hex>`` listing the referrers,
which notation maintains on registries without the referrers API).  A signature counts only when its JWS signature
verifies with the leaf of its ``x5c`` chain, the chain leads to a trusted certificate and is valid now, every
critical header is understood, it has not expired, and its payload names exactly the image digest.  At most
`MAX_SIGNATURE_ATTEMPTS` signatures are examined (Kyverno's setting), and envelopes are size-capped.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from stockade.images.reference import ImageReference
from stockade.images.registry import RegistryClient, RegistryError, RegistryNotFoundError
from stockade.images.verifier_api import VerificationFailure, VerificationUnavailable

NOTARY_SIGNATURE_ARTIFACT = "application/vnd.cncf.notary.signature"
JWS_MEDIA_TYPE = "application/jose+json"
COSE_MEDIA_TYPE = "application/cose"
PAYLOAD_CONTENT_TYPE = "application/vnd.cncf.notary.payload.v1+json"
MAX_SIGNATURE_ATTEMPTS = 10
MAX_ENVELOPE_BYTES = 1 << 20
MAX_CHAIN_LENGTH = 12
_UNDERSTOOD_CRITICAL = frozenset({"io.cncf.notary.signingScheme", "io.cncf.notary.expiry"})
_HASHES: dict[str, Callable[[], hashes.HashAlgorithm]] = {"256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512}


def _b64url(text: Any, what: str) -> bytes:
    value = str(text or "")
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except ValueError:
        raise VerificationFailure(f"notary signature: {what} is not base64url") from None


def referrers(client: RegistryClient, image: ImageReference, digest: str, artifact_type: str) -> list[Mapping[str, Any]]:
    """Descriptors of `digest`'s referrers of `artifact_type`, from the referrers tag schema index."""
    algorithm, _, hex_digest = digest.partition(":")
    try:
        body, _, _ = client.get_manifest(image.repository().with_tag(f"{algorithm}-{hex_digest}"))
    except RegistryNotFoundError:
        return []
    except RegistryError as exc:
        raise VerificationUnavailable(f"failed to fetch referrers of {image.name()}@{digest}: {exc}") from None
    try:
        index = json.loads(body)
        manifests = index.get("manifests") or []
    except (ValueError, AttributeError):
        raise VerificationFailure(f"referrers index of {image.name()}@{digest} is not an OCI index") from None
    return [m for m in manifests if isinstance(m, Mapping) and m.get("artifactType") == artifact_type]


def _verify_jws_signature(leaf: x509.Certificate, algorithm: str, signing_input: bytes, signature: bytes) -> None:
    key = leaf.public_key()
    family, size = algorithm[:2], algorithm[2:]
    factory = _HASHES.get(size)
    if factory is None:
        raise VerificationFailure(f"notary signature: unsupported JWS algorithm {algorithm!r}")
    try:
        if family == "PS" and isinstance(key, rsa.RSAPublicKey):
            digest = factory()
            key.verify(signature, signing_input, padding.PSS(mgf=padding.MGF1(digest), salt_length=digest.digest_size), factory())
        elif family == "ES" and isinstance(key, ec.EllipticCurvePublicKey):
            half = len(signature) // 2
            der = encode_dss_signature(int.from_bytes(signature[:half], "big"), int.from_bytes(signature[half:], "big"))
            key.verify(der, signing_input, ec.ECDSA(factory()))
        else:
            raise VerificationFailure(f"notary signature: algorithm {algorithm} does not match the certificate's key")
    except InvalidSignature:
        raise VerificationFailure("notary signature: invalid JWS signature") from None


def _check_chain(chain: list[x509.Certificate], trusted: list[x509.Certificate], now: datetime) -> None:
    """Each certificate issued by the next, all valid now, and the chain anchored in a trusted certificate."""
    for certificate in chain:
        if not certificate.not_valid_before_utc <= now <= certificate.not_valid_after_utc:
            raise VerificationFailure("notary signature: a certificate of the chain is not valid now")
    for child, parent in zip(chain, chain[1:]):
        try:
            child.verify_directly_issued_by(parent)
        except (ValueError, TypeError, InvalidSignature):
            raise VerificationFailure("notary signature: broken certificate chain") from None
    top = chain[-1]
    if top in trusted:
        return
    for anchor in trusted:
        try:
            top.verify_directly_issued_by(anchor)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return
    raise VerificationFailure("notary signature: certificate chain does not lead to a trusted certificate")


def verify_envelope(envelope: bytes, media_type: str, digest: str, trusted: list[x509.Certificate], now: datetime) -> dict[str, Any]:
    """The target descriptor a valid notation JWS envelope signs; VerificationFailure for anything else."""
    if media_type == COSE_MEDIA_TYPE:
        raise VerificationFailure("notary signature: COSE envelopes are not supported (sign with the default JWS format)")
    if media_type != JWS_MEDIA_TYPE:
        raise VerificationFailure(f"notary signature: unexpected envelope media type {media_type!r}")
    if len(envelope) > MAX_ENVELOPE_BYTES:
        raise VerificationFailure("notary signature: envelope larger than 1 MiB")
    try:
        jws = json.loads(envelope)
        protected_b64, payload_b64 = str(jws["protected"]), str(jws["payload"])
        chain_der = list((jws.get("header") or {}).get("x5c") or [])
    except (ValueError, KeyError, TypeError, AttributeError):
        raise VerificationFailure("notary signature: envelope is not a JWS JSON serialization") from None
    if not chain_der or len(chain_der) > MAX_CHAIN_LENGTH:
        raise VerificationFailure(f"notary signature: x5c must hold 1 to {MAX_CHAIN_LENGTH} certificates")
    try:
        chain = [x509.load_der_x509_certificate(base64.b64decode(str(item), validate=True)) for item in chain_der]
        protected = json.loads(_b64url(protected_b64, "protected header"))
        payload = json.loads(_b64url(payload_b64, "payload"))
    except (ValueError, TypeError):
        raise VerificationFailure("notary signature: undecodable certificate, header or payload") from None
    if not isinstance(protected, dict) or not isinstance(payload, dict):
        raise VerificationFailure("notary signature: header and payload must be JSON objects")
    critical = {str(name) for name in protected.get("crit") or []}
    unknown = critical - _UNDERSTOOD_CRITICAL
    if unknown:
        raise VerificationFailure(f"notary signature: unsupported critical headers {sorted(unknown)} (plugins are not supported)")
    if protected.get("io.cncf.notary.signingScheme") != "notary.x509":
        raise VerificationFailure(f"notary signature: signing scheme {protected.get('io.cncf.notary.signingScheme')!r} is not notary.x509")
    if protected.get("cty") != PAYLOAD_CONTENT_TYPE:
        raise VerificationFailure(f"notary signature: payload content type {protected.get('cty')!r}")
    _verify_jws_signature(chain[0], str(protected.get("alg") or ""), f"{protected_b64}.{payload_b64}".encode(), _b64url(jws.get("signature"), "signature"))
    _check_chain(chain, trusted, now)
    expiry = protected.get("io.cncf.notary.expiry")
    if expiry:
        try:
            expires = datetime.fromisoformat(str(expiry).replace("Z", "+00:00"))
        except ValueError:
            raise VerificationFailure(f"notary signature: expiry {expiry!r} is not a time") from None
        if expires.tzinfo is None:
            expires = expires.replace(tzinfo=timezone.utc)
        if expires < now:
            raise VerificationFailure("notary signature: signature has expired")
    target = payload.get("targetArtifact")
    if not isinstance(target, dict) or target.get("digest") != digest:
        raise VerificationFailure(f"notary signature: signs {target.get('digest') if isinstance(target, dict) else None}, not {digest}")
    return target


MAX_REFERRER_PAYLOAD_BYTES = 4 << 20


def referrer_payload(client: RegistryClient, image: ImageReference, descriptor: Mapping[str, Any]) -> Any:
    """The JSON content of a referrer artifact (its single layer), e.g. an SBOM attached to an image."""
    try:
        manifest = json.loads(client.get_manifest(image.with_digest(str(descriptor.get("digest"))))[0])
        layers = manifest.get("layers") or []
        if not layers:
            raise VerificationFailure(f"referrer {descriptor.get('digest')} has no content layer")
        if int(layers[0].get("size") or 0) > MAX_REFERRER_PAYLOAD_BYTES:
            raise VerificationFailure(f"referrer {descriptor.get('digest')} is larger than {MAX_REFERRER_PAYLOAD_BYTES} bytes")
        return json.loads(client.get_blob(image.repository(), str(layers[0].get("digest"))))
    except RegistryError as exc:
        raise VerificationUnavailable(f"failed to fetch referrer {descriptor.get('digest')}: {exc}") from None
    except (ValueError, TypeError, AttributeError):
        raise VerificationFailure(f"referrer {descriptor.get('digest')} is not a JSON artifact") from None


class NotaryVerifier:
    """Verifies notation signatures of a digest over a RegistryClient."""

    def __init__(self, client: RegistryClient, clock: Callable[[], datetime] | None = None) -> None:
        self.client = client
        self._clock = clock or (lambda: datetime.now(timezone.utc))

    def verify(self, image: ImageReference, digest: str, trusted: list[x509.Certificate]) -> None:
        """Return when some notation signature of `digest` verifies under `trusted`; VerificationFailure otherwise."""
        signatures = referrers(self.client, image, digest, NOTARY_SIGNATURE_ARTIFACT)
        if not signatures:
            raise VerificationFailure(f"no notary signatures found for {image.name()}@{digest}")
        problems: list[str] = []
        for descriptor in signatures[:MAX_SIGNATURE_ATTEMPTS]:
            try:
                manifest_bytes, _, _ = self.client.get_manifest(image.with_digest(str(descriptor.get("digest"))))
                manifest = json.loads(manifest_bytes)
                subject = (manifest.get("subject") or {}).get("digest")
                if subject != digest:
                    raise VerificationFailure(f"notary signature manifest refers to {subject}, not {digest}")
                layers = manifest.get("layers") or []
                if len(layers) != 1:
                    raise VerificationFailure("notary signature manifest must have exactly one layer")
                if int(layers[0].get("size") or 0) > MAX_ENVELOPE_BYTES:
                    raise VerificationFailure("notary signature: envelope larger than 1 MiB")
                envelope = self.client.get_blob(image.repository(), str(layers[0].get("digest")))
                verify_envelope(envelope, str(layers[0].get("mediaType") or ""), digest, trusted, self._clock())
                return
            except RegistryError as exc:
                raise VerificationUnavailable(f"failed to fetch notary signature of {image.name()}: {exc}") from None
            except VerificationFailure as exc:
                problems.append(str(exc))
            except (ValueError, TypeError, AttributeError):
                problems.append("notary signature manifest is malformed")
        raise VerificationFailure("; ".join(dict.fromkeys(problems)))


__all__ = ["NOTARY_SIGNATURE_ARTIFACT", "NotaryVerifier", "referrer_payload", "referrers", "verify_envelope"]
