"""Signed Kubernetes manifests (sigstore's k8s-manifest-sigstore annotation format), checked offline.

A signer stores, on the object itself, ``<domain>/message``: base64 of gzip of the signed blob (the blob is either
the YAML itself or a tar.gz holding it) and one or more ``<domain>/signature[_N]`` annotations: base64 signatures
over that blob.  An object is verified by a key when one signature checks out and every field of the signed
manifest still has the same value on the object: fields added later (defaults, mutations) are tolerated, changed
ones are not, except those named by ``ignoreFields``.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import tarfile
import zlib
from dataclasses import dataclass
from typing import Any

import yaml

from stockade import yamlsafe
from stockade.engine.wildcard import match as wildcard_match
from stockade.errors import StockadeError
from stockade.images.pem import KeyFormatError, split_pem
from stockade.images.verifier_api import VerificationFailure

DEFAULT_DOMAIN = "cosign.sigstore.dev"
# Never part of what a signer vouches for: the signature itself and what the apiserver writes.
ALWAYS_IGNORED = (
    "metadata.annotations.{domain}/*",
    "metadata.managedFields",
    "metadata.resourceVersion",
    "metadata.uid",
    "metadata.generation",
    "metadata.creationTimestamp",
    "metadata.selfLink",
    "status",
)


class ManifestSignatureMissing(StockadeError):
    """The object carries no message or no signature annotation: a failed check, not an error."""


@dataclass(frozen=True)
class SignedContent:
    blob: bytes  # what the signatures cover
    manifests: list[dict[str, Any]]
    signatures: list[bytes]


def read_signed_content(resource: dict[str, Any], domain: str = DEFAULT_DOMAIN) -> SignedContent:
    annotations = (resource.get("metadata") or {}).get("annotations") or {}
    message = annotations.get(f"{domain}/message")
    if not message:
        raise ManifestSignatureMissing(f"annotation {domain}/message is not found on the resource")
    signature_keys = sorted(k for k in annotations if k == f"{domain}/signature" or k.startswith(f"{domain}/signature_"))
    if not signature_keys:
        raise ManifestSignatureMissing(f"annotation {domain}/signature is not found on the resource")
    try:
        blob = gzip.decompress(base64.b64decode(message))
        signatures = [base64.b64decode(annotations[k]) for k in signature_keys]
    except (binascii.Error, OSError, EOFError, zlib.error) as exc:
        raise ValueError(f"annotation {domain}/message or signature is not valid base64/gzip: {exc}") from None
    return SignedContent(blob, _manifests_in(blob), signatures)


def _manifests_in(blob: bytes) -> list[dict[str, Any]]:
    texts: list[bytes] = []
    if blob[:2] == b"\x1f\x8b":  # a tar.gz bundle of YAML files
        try:
            with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as bundle:
                for member in bundle.getmembers():
                    extracted = bundle.extractfile(member) if member.isfile() else None
                    if extracted is not None:
                        texts.append(extracted.read())
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise ValueError(f"signed message is not a valid tar.gz bundle: {exc}") from None
    else:
        texts.append(blob)
    manifests: list[dict[str, Any]] = []
    for text in texts:
        try:
            manifests.extend(d for d in yamlsafe.load_all(text, yaml.SafeLoader) if isinstance(d, dict))
        except yaml.YAMLError as exc:
            raise ValueError(f"signed message is not valid YAML: {exc}") from None
    return manifests


def _same_object(manifest: dict[str, Any], resource: dict[str, Any]) -> bool:
    mine, theirs = manifest.get("metadata") or {}, resource.get("metadata") or {}
    if manifest.get("kind") != resource.get("kind") or mine.get("name") != theirs.get("name"):
        return False
    return not mine.get("namespace") or mine.get("namespace") == theirs.get("namespace")


def _ignored(path: str, patterns: list[str]) -> bool:
    return any(wildcard_match(p, path) or path.startswith(p + ".") for p in patterns)


def changed_fields(manifest: Any, resource: Any, ignored: list[str], path: str = "") -> list[str]:
    """Paths whose signed value differs on the object (dotted, list indexes as numbers)."""
    if path and _ignored(path, ignored):
        return []
    if isinstance(manifest, dict):
        if not isinstance(resource, dict):
            return [path or "."]
        found: list[str] = []
        for key, value in manifest.items():
            child = f"{path}.{key}" if path else str(key)
            if key not in resource:
                if not _ignored(child, ignored):
                    found.append(child)
                continue
            found += changed_fields(value, resource[key], ignored, child)
        return found
    if isinstance(manifest, list):
        if not isinstance(resource, list) or len(resource) != len(manifest):
            return [path]
        found = []
        for index, (signed, current) in enumerate(zip(manifest, resource)):
            found += changed_fields(signed, current, ignored, f"{path}.{index}")
        return found
    return [] if manifest == resource else [path]


def ignore_patterns(resource: dict[str, Any], ignore_fields: list[dict[str, Any]], domain: str) -> list[str]:
    patterns = [p.format(domain=domain) for p in ALWAYS_IGNORED]
    metadata = resource.get("metadata") or {}
    for binding in ignore_fields or []:
        objects = binding.get("objects") or [{}]
        for selector in objects:
            if selector.get("kind") and not wildcard_match(str(selector["kind"]), str(resource.get("kind") or "")):
                continue
            if selector.get("name") and not wildcard_match(str(selector["name"]), str(metadata.get("name") or "")):
                continue
            if selector.get("namespace") and not wildcard_match(str(selector["namespace"]), str(metadata.get("namespace") or "")):
                continue
            patterns.extend(str(f) for f in binding.get("fields") or [])
            break
    return patterns


def verify_with_key(resource: dict[str, Any], content: SignedContent, public_keys: str, algorithm: str, ignored: list[str]) -> tuple[bool, str]:
    """(verified, reason) for one attestor entry's key(s)."""
    # the cryptography backend only where a manifest is verified by key, not in every process that evaluates policies
    from stockade.images.keys import load_public_key, verify_signature

    try:
        keys = [load_public_key(pem) for pem in split_pem(public_keys)]
    except KeyFormatError as exc:
        raise ValueError(str(exc)) from None
    if not keys:
        raise ValueError("no public key found in publicKeys")
    signed_by_key = False
    for key in keys:
        for signature in content.signatures:
            try:
                verify_signature(key, signature, content.blob, algorithm or "sha256")
            except VerificationFailure:
                continue
            except KeyFormatError as exc:
                raise ValueError(str(exc)) from None
            signed_by_key = True
            break
    if not signed_by_key:
        return False, "failed to verify signature: no signature matches the given key"
    manifest = next((m for m in content.manifests if _same_object(m, resource)), None)
    if manifest is None:
        return False, "failed to verify signature: the signed message holds no manifest for this resource"
    diff = changed_fields(manifest, resource, ignored)
    if diff:
        return False, f"failed to verify signature. diff found; fields changed since signing: {', '.join(diff)}"
    return True, "signed by a valid signer"
