"""cosign's OCI layout: signatures and attestations stored as a manifest tagged `sha256-<hex>.sig` / `.att`.

Each signature is one layer: the payload blob (simple-signing JSON, or a DSSE envelope for attestations) with the
signature and optional certificate/chain in layer annotations. Writing the same layout as cosign lets either tool
verify what the other signed.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from stockade.images.keys import PrivateKey, sign_payload
from stockade.images.reference import ImageReference, parse_reference
from stockade.images.registry import (
    OCI_IMAGE_CONFIG,
    OCI_IMAGE_MANIFEST,
    RegistryClient,
    RegistryLimitError,
    RegistryNotFoundError,
    RegistryProtocolError,
)

SIMPLE_SIGNING_MEDIA_TYPE = "application/vnd.dev.cosign.simplesigning.v1+json"
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
CERTIFICATE_ANNOTATION = "dev.sigstore.cosign/certificate"
CHAIN_ANNOTATION = "dev.sigstore.cosign/chain"
BUNDLE_ANNOTATION = "dev.sigstore.cosign/bundle"
PREDICATE_TYPE_ANNOTATION = "predicateType"
SIGNATURE_TYPE = "cosign container image signature"
SIGNATURE_SUFFIX = "sig"
ATTESTATION_SUFFIX = "att"


@dataclass(frozen=True)
class SignatureLayer:
    """One signature (or attestation) found in a `.sig`/`.att` manifest, payload already digest-checked."""

    payload: bytes
    media_type: str
    signature: bytes
    certificate_pem: str = ""
    chain_pem: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)


def signature_tag(digest: str, suffix: str = SIGNATURE_SUFFIX) -> str:
    """`sha256:abc…` → `sha256-abc….sig` (cosign's tag-based discovery scheme)."""
    algorithm, _, hex_digest = digest.partition(":")
    if not hex_digest:
        raise ValueError(f"not a digest: {digest!r}")
    return f"{algorithm}-{hex_digest}.{suffix}"


def signature_repository(image: ImageReference, repository: str = "") -> ImageReference:
    """Where signatures live: the image's own repository unless a policy/`COSIGN_REPOSITORY` overrides it."""
    if repository:
        override = parse_reference(repository)
        return ImageReference(override.registry, override.path)
    return image.repository()


def simple_signing_payload(image: ImageReference, digest: str, annotations: Mapping[str, str] | None = None) -> bytes:
    """The JSON cosign signs: the identity (repository) and the manifest digest, plus optional annotations."""
    document = {
        "critical": {
            "identity": {"docker-reference": image.name()},
            "image": {"docker-manifest-digest": digest},
            "type": SIGNATURE_TYPE,
        },
        "optional": dict(annotations) if annotations else None,
    }
    return json.dumps(document, separators=(",", ":")).encode()


def fetch_layers(
    client: RegistryClient, image: ImageReference, digest: str, suffix: str, repository: str = ""
) -> list[SignatureLayer]:
    """All layers of the `.sig`/`.att` manifest for `digest`; an absent manifest means no signatures (empty list).

    Registry failures other than 404 propagate: the caller must turn them into an error, never a pass. More
    layers than `client.limits.max_signature_layers` is refused before any blob is fetched (cosign's cap).
    """
    repo = signature_repository(image, repository)
    tag_ref = repo.with_tag(signature_tag(digest, suffix))
    try:
        manifest_bytes, _, _ = client.get_manifest(tag_ref)
    except RegistryNotFoundError:
        return []
    manifest = json.loads(manifest_bytes)
    descriptors = manifest.get("layers") if isinstance(manifest, dict) else None
    if not isinstance(descriptors, list) or not all(isinstance(d, dict) for d in descriptors):
        raise RegistryProtocolError(f"signature manifest {tag_ref}: `layers` is not a list of descriptors")
    cap = client.limits.max_signature_layers
    if len(descriptors) > cap:
        raise RegistryLimitError(
            f"signature manifest {tag_ref} has {len(descriptors)} layers, more than the max_signature_layers limit of {cap}",
            limit_name="max_signature_layers", limit=cap,
        )
    layers: list[SignatureLayer] = []
    for descriptor in descriptors:
        annotations = {str(k): str(v) for k, v in (descriptor.get("annotations") or {}).items()}
        size = descriptor.get("size")
        payload = client.get_blob(repo, str(descriptor.get("digest", "")), size if isinstance(size, int) and not isinstance(size, bool) else None)
        raw_signature = annotations.get(SIGNATURE_ANNOTATION, "")
        try:
            signature = base64.b64decode(raw_signature, validate=True) if raw_signature else b""
        except ValueError:
            signature = b""
        layers.append(
            SignatureLayer(
                payload=payload,
                media_type=str(descriptor.get("mediaType", "")),
                signature=signature,
                certificate_pem=annotations.get(CERTIFICATE_ANNOTATION, ""),
                chain_pem=annotations.get(CHAIN_ANNOTATION, ""),
                annotations=annotations,
            )
        )
    return layers


def _empty_config(diff_ids: list[str]) -> bytes:
    config = {
        "architecture": "",
        "created": "0001-01-01T00:00:00Z",
        "history": [{"created": "0001-01-01T00:00:00Z"}],
        "os": "",
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "config": {},
    }
    return json.dumps(config, separators=(",", ":")).encode()


def attach_layer(
    client: RegistryClient,
    image: ImageReference,
    digest: str,
    payload: bytes,
    media_type: str,
    annotations: Mapping[str, str],
    suffix: str,
    repository: str = "",
) -> str:
    """Append one signature layer to the `.sig`/`.att` manifest of `digest` (created when absent)."""
    repo = signature_repository(image, repository)
    tag_ref = repo.with_tag(signature_tag(digest, suffix))
    layers: list[dict[str, Any]] = []
    try:
        existing, _, _ = client.get_manifest(tag_ref)
        layers = list(json.loads(existing).get("layers") or [])
    except RegistryNotFoundError:
        pass
    payload_digest = client.push_blob(repo, payload)
    layer = {"mediaType": media_type, "size": len(payload), "digest": payload_digest, "annotations": dict(annotations)}
    if layer not in layers:
        layers.append(layer)
    config = _empty_config([str(entry["digest"]) for entry in layers])
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_IMAGE_MANIFEST,
        "config": {"mediaType": OCI_IMAGE_CONFIG, "size": len(config), "digest": client.push_blob(repo, config)},
        "layers": layers,
    }
    return client.push_manifest(tag_ref, json.dumps(manifest, separators=(",", ":")).encode(), OCI_IMAGE_MANIFEST)


def sign_image(
    client: RegistryClient,
    image: ImageReference,
    key: PrivateKey,
    *,
    annotations: Mapping[str, str] | None = None,
    repository: str = "",
    certificate_pem: str = "",
    chain_pem: str = "",
    hash_name: str = "sha256",
) -> tuple[str, str]:
    """Sign the manifest `image` resolves to; returns (image digest, signature manifest digest)."""
    digest = client.resolve_digest(image)
    payload = simple_signing_payload(image, digest, annotations)
    layer_annotations = {SIGNATURE_ANNOTATION: base64.b64encode(sign_payload(key, payload, hash_name)).decode()}
    if certificate_pem:
        layer_annotations[CERTIFICATE_ANNOTATION] = certificate_pem
    if chain_pem:
        layer_annotations[CHAIN_ANNOTATION] = chain_pem
    manifest_digest = attach_layer(
        client, image, digest, payload, SIMPLE_SIGNING_MEDIA_TYPE, layer_annotations, SIGNATURE_SUFFIX, repository
    )
    return digest, manifest_digest
