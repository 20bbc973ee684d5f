"""Kyverno's image-reference library (``image('nginx:1.2').registry()`` → ``index.docker.io``), following
go-containerregistry's ``name.ParseReference`` defaults: Docker Hub registry, ``library/`` prefix, tag ``latest``."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from stockade.cel.functions import Library, tagged, untag

IMAGE_TYPE = "kyverno.image"
DEFAULT_REGISTRY = "index.docker.io"
_TAG_RE = re.compile(r"^[\w][\w.-]{0,127}$")
_REPOSITORY_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class ImageReference:
    registry: str
    repository: str
    tag: str
    digest: str

    @property
    def identifier(self) -> str:
        """The digest wins over the tag; a reference naming both (``app:1.2@sha256:…``) keeps both, as Kyverno does."""
        if self.digest and self.tag:
            return f"{self.tag}@{self.digest}"
        return self.digest or self.tag

    @property
    def identifier_with_separator(self) -> str:
        """``@digest`` when there is a digest (even alongside a tag), else ``:tag`` (``:latest`` by default)."""
        return f"@{self.digest}" if self.digest else f":{self.tag}"


def _repository(base: str) -> tuple[str, str]:
    first, slash, rest = base.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, repository = first, rest
    else:
        registry, repository = DEFAULT_REGISTRY, base
    if registry == "docker.io":
        registry = DEFAULT_REGISTRY
    if registry == DEFAULT_REGISTRY and "/" not in repository:
        repository = f"library/{repository}"
    if not repository or not _REPOSITORY_RE.match(repository):
        raise ValueError(f"repository can only contain the characters `abcdefghijklmnopqrstuvwxyz0123456789_-./`: "
                         f"{repository}")
    return registry, repository


def _parse_tagged(text: str) -> ImageReference:
    base, tag = text, "latest"
    head, colon, candidate = text.rpartition(":")
    if colon and "/" not in candidate:
        if not _TAG_RE.match(candidate):
            raise ValueError(f"tag can only contain the characters `abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                             f"0123456789_-.`: {candidate}")
        base, tag = head, candidate
    registry, repository = _repository(base)
    return ImageReference(registry, repository, tag, "")


@functools.lru_cache(maxsize=1024)
def parse_image_reference(text: str) -> ImageReference:
    """Parse an image reference; raise ValueError when it is not one."""
    if "@" not in text:
        return _parse_tagged(text)
    base, _, digest = text.partition("@")
    if not _DIGEST_RE.match(digest):
        raise ValueError(f"a digest must contain exactly one '@' followed by sha256:<64 hex>: {text}")
    named = _parse_tagged(base)
    # a tag written before the digest is kept (the digest still decides what is pulled): only a ':' after the last
    # '/' is a tag separator, so a registry port is not mistaken for one
    written_tag = named.tag if ":" in base.rpartition("/")[2] else ""
    return ImageReference(named.registry, named.repository, written_tag, digest)


def _image(text: str) -> dict[str, Any]:
    try:
        parse_image_reference(text)
    except ValueError:
        # go-containerregistry's wording when neither a tag nor a digest reference parses, which Kyverno reports
        raise ValueError(f"could not parse reference: {text}") from None
    return tagged(IMAGE_TYPE, text)


def _is_image(text: str) -> bool:
    try:
        parse_image_reference(text)
    except ValueError:
        return False
    return True


def _reference(value: Any) -> ImageReference:
    return parse_image_reference(untag(value, IMAGE_TYPE))


def build_image() -> Library:
    library = Library("kyverno.image")
    library.add("image", ("string",), "opaque", _image)
    library.add("parseImageReference", ("string",), "opaque", _image)
    library.add("isImage", ("string",), "bool", _is_image)
    library.add("containsDigest", ("map",), "bool", lambda v: bool(_reference(v).digest), member=True)
    library.add("registry", ("map",), "string", lambda v: _reference(v).registry, member=True)
    library.add("repository", ("map",), "string", lambda v: _reference(v).repository, member=True)
    library.add("identifier", ("map",), "string", lambda v: _reference(v).identifier, member=True)
    library.add("identifierWithSeparator", ("map",), "string", lambda v: _reference(v).identifier_with_separator, member=True)
    library.add("tag", ("map",), "string", lambda v: _reference(v).tag, member=True)
    library.add("digest", ("map",), "string", lambda v: _reference(v).digest, member=True)
    return library
