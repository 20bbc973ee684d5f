"""``image_normalize``: Kyverno's image-reference normalisation (pkg/utils/image) with the default settings.

A bare name gets the default registry (``docker.io``) but no ``library/`` path, and ``latest`` when it has
neither tag nor digest; a digest wins over a tag when printing. Syntax follows distribution/reference.
"""

from __future__ import annotations

import re
from stockade.errors import StockadeError

DEFAULT_REGISTRY = "docker.io"

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[(?:[a-fA-F0-9:]+)\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"^((?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*)(?::({_TAG}))?(?:@({_DIGEST}))?$")
_DOMAIN_PREFIX = re.compile(rf"^({_DOMAIN})/(.+)$")
_DIGEST_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}


class ImageReferenceError(StockadeError, ValueError):
    pass


def _add_default_registry(image: str, registry: str) -> str:
    slash = image.find("/")
    if slash == -1:
        return f"{registry}/{image}"
    first = image[:slash]
    if not any(character in first for character in ".:") and first != "localhost" and first.lower() == first:
        return f"{registry}/{image}"
    return image


def normalize_image(image: str, default_registry: str = DEFAULT_REGISTRY) -> str:
    full_name = _add_default_registry(image, default_registry)
    match = _REFERENCE.match(full_name)
    if match is None:
        reason = "invalid reference format"
        if _REFERENCE.match(full_name.lower()) is not None:
            reason = "invalid reference format: repository name (library/) must be lowercase"
        raise ImageReferenceError(
            f"bad image: {full_name}, defaultRegistry: {default_registry}, enableDefaultRegistryMutation: true: "
            f"{reason}"
        )
    name, tag, digest = match.groups()
    if len(name) > 255:
        raise ImageReferenceError(
            f"bad image: {full_name}, defaultRegistry: {default_registry}, enableDefaultRegistryMutation: true: "
            "repository name must not be more than 255 characters"
        )
    if digest:
        algorithm, _, hex_part = digest.partition(":")
        expected = _DIGEST_LENGTHS.get(algorithm)
        if expected is None or len(hex_part) != expected:
            reason = "unsupported digest algorithm" if expected is None else "invalid checksum digest length"
            raise ImageReferenceError(
                f"bad image: {full_name}, defaultRegistry: {default_registry}, enableDefaultRegistryMutation: true: "
                f"{reason}"
            )
    domain_match = _DOMAIN_PREFIX.match(name)
    registry, path = (domain_match.group(1), domain_match.group(2)) if domain_match else ("", name)
    if digest:
        return f"{registry}/{path}@{digest}" if registry else f"{path}@{digest}"
    tag = tag or "latest"
    return f"{registry}/{path}:{tag}" if registry else f"{path}:{tag}"
