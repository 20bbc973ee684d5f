"""In-toto attestations in DSSE envelopes, as `cosign attest` stores them in `.att` manifests.

The signature covers DSSE's pre-authentication encoding (PAE) of payload type and payload, never the raw JSON, so
a verifier must rebuild the PAE; the statement's subject digest then binds the attestation to one image.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Mapping

from stockade.images.cosign import (
    ATTESTATION_SUFFIX,
    DSSE_MEDIA_TYPE,
    PREDICATE_TYPE_ANNOTATION,
    SIGNATURE_ANNOTATION,
    attach_layer,
)
from stockade.images.keys import PrivateKey, PublicKey, sign_payload, verify_signature
from stockade.images.reference import ImageReference
from stockade.images.registry import RegistryClient
from stockade.images.verifier_api import VerificationFailure

IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPES = ("https://in-toto.io/Statement/v0.1", "https://in-toto.io/Statement/v1")

# `cosign attest --type <short>` names and the predicate URIs they stand for.
PREDICATE_TYPE_ALIASES = {
    "custom": "https://cosign.sigstore.dev/attestation/v1",
    "slsaprovenance": "https://slsa.dev/provenance/v0.2",
    "slsaprovenance02": "https://slsa.dev/provenance/v0.2",
    "slsaprovenance1": "https://slsa.dev/provenance/v1",
    "spdx": "https://spdx.dev/Document",
    "spdxjson": "https://spdx.dev/Document",
    "cyclonedx": "https://cyclonedx.org/bom",
    "link": "https://in-toto.io/Link/v1",
    "vuln": "https://cosign.sigstore.dev/attestation/vuln/v1",
    "openvex": "https://openvex.dev/ns",
}


def predicate_type_uri(name: str) -> str:
    return PREDICATE_TYPE_ALIASES.get(name, name)


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding."""
    encoded_type = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(encoded_type), encoded_type, len(payload), payload)


def make_statement(image: ImageReference, digest: str, predicate_type: str, predicate: Any) -> dict[str, Any]:
    algorithm, _, hex_digest = digest.partition(":")
    return {
        "_type": STATEMENT_TYPES[0],
        "predicateType": predicate_type_uri(predicate_type),
        "subject": [{"name": image.name(), "digest": {algorithm: hex_digest}}],
        "predicate": predicate,
    }


def sign_envelope(key: PrivateKey, statement: Mapping[str, Any], hash_name: str = "sha256") -> bytes:
    payload = json.dumps(statement, separators=(",", ":")).encode()
    signature = sign_payload(key, pae(IN_TOTO_PAYLOAD_TYPE, payload), hash_name)
    envelope = {
        "payloadType": IN_TOTO_PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [{"keyid": "", "sig": base64.b64encode(signature).decode()}],
    }
    return json.dumps(envelope, separators=(",", ":")).encode()


def parse_envelope(data: bytes) -> tuple[dict[str, Any], bytes]:
    """(envelope, decoded payload); raises VerificationFailure for anything that is not a DSSE envelope."""
    try:
        envelope = json.loads(data)
        payload = base64.b64decode(envelope["payload"])
    except (ValueError, KeyError, TypeError) as exc:
        raise VerificationFailure(f"invalid DSSE envelope: {exc}") from None
    if not isinstance(envelope, dict):
        raise VerificationFailure("invalid DSSE envelope: not a JSON object")
    return envelope, payload


def verify_envelope(data: bytes, keys: list[PublicKey], hash_name: str = "sha256") -> dict[str, Any]:
    """The statement of an envelope that at least one of `keys` signed (no keys: signature not checked)."""
    envelope, payload = parse_envelope(data)
    if keys:
        message = pae(str(envelope.get("payloadType", "")), payload)
        for entry in envelope.get("signatures") or []:
            try:
                signature = base64.b64decode(str(entry.get("sig", "")))
            except ValueError:
                continue
            for key in keys:
                try:
                    verify_signature(key, signature, message, hash_name)
                except VerificationFailure:
                    continue
                return _statement(envelope, payload)
        raise VerificationFailure("no matching signatures: invalid DSSE envelope signature")
    return _statement(envelope, payload)


def _statement(envelope: Mapping[str, Any], payload: bytes) -> dict[str, Any]:
    if envelope.get("payloadType") != IN_TOTO_PAYLOAD_TYPE:
        raise VerificationFailure(f"unexpected DSSE payload type {envelope.get('payloadType')!r}")
    try:
        statement = json.loads(payload)
    except ValueError as exc:
        raise VerificationFailure(f"attestation payload is not JSON: {exc}") from None
    if not isinstance(statement, dict):
        raise VerificationFailure("attestation payload is not a JSON object")
    return statement


def statement_covers(statement: Mapping[str, Any], digest: str) -> bool:
    """True when one of the statement's subjects names `digest` (binds the attestation to this image)."""
    algorithm, _, hex_digest = digest.partition(":")
    for subject in statement.get("subject") or []:
        if isinstance(subject, dict) and (subject.get("digest") or {}).get(algorithm) == hex_digest:
            return True
    return False


def attest_image(
    client: RegistryClient,
    image: ImageReference,
    key: PrivateKey,
    predicate_type: str,
    predicate: Any,
    *,
    repository: str = "",
) -> tuple[str, str]:
    """Attach a signed in-toto statement; returns (image digest, attestation manifest digest)."""
    digest = client.resolve_digest(image)
    statement = make_statement(image, digest, predicate_type, predicate)
    envelope = sign_envelope(key, statement)
    annotations = {SIGNATURE_ANNOTATION: "", PREDICATE_TYPE_ANNOTATION: statement["predicateType"]}
    manifest_digest = attach_layer(client, image, digest, envelope, DSSE_MEDIA_TYPE, annotations, ATTESTATION_SUFFIX, repository)
    return digest, manifest_digest
