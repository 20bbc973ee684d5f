"""Container image references, parsed and normalised the way Kyverno does.

Two Go parsers shape Kyverno's behaviour: `distribution/reference` (used for the `images.*` context variables) and
go-containerregistry's `name.ParseReference` (used when Kyverno talks to a registry, e.g. for verifyImages).
`parse_reference` accepts a reference only when both would, so anything we hand to the registry client is something
Kyverno could have fetched too; `image_info` follows the distribution grammar alone, like Kyverno's context builder.

Normalisation follows Kyverno rather than Docker: `nginx` stays registry `docker.io`, path `nginx` (no `library/`
prefix), tag `latest`. The `library/` namespace and the `index.docker.io` host only matter on the wire, so they live
in `api_repository()` / `api_registry()`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from stockade.errors import StockadeError

__all__ = [
    "DOCKER_HUB_ALIASES",
    "DOCKER_HUB_API_HOST",
    "DOCKER_HUB_REGISTRY",
    "ImageReference",
    "InvalidReferenceError",
    "image_info",
    "is_docker_hub",
    "parse_reference",
]

DOCKER_HUB_REGISTRY = "docker.io"
# go-containerregistry rewrites docker.io to this host for API calls; it serves the same v2 API as registry-1.
DOCKER_HUB_API_HOST = "index.docker.io"
DOCKER_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
DEFAULT_TAG = "latest"

# distribution/reference grammar, rewritten as Python regular expressions.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_PATH_RE = re.compile(rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*")
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_RE = re.compile(rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?")
_TAG_RE = re.compile(r"[\w][\w.-]{0,127}", re.ASCII)
_DIGEST_SHAPE_RE = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}")
_SUPPORTED_DIGESTS = {"sha256": 64}  # go-containerregistry only accepts sha256 with 64 lower-case hex digits
_MAX_NAME_LENGTH = 255
_GGCR_MAX_TAG_LENGTH = 127


class InvalidReferenceError(StockadeError, ValueError):
    """An image reference that Kyverno (and therefore we) cannot parse."""

    def __init__(self, reference: str, problem: str) -> None:
        super().__init__(f"invalid image reference {reference!r}: {problem}")
        self.reference = reference
        self.problem = problem


def is_docker_hub(registry: str) -> bool:
    """True for every host name that means Docker Hub."""
    return registry.lower() in DOCKER_HUB_ALIASES


@dataclass(frozen=True)
class ImageReference:
    """A parsed image reference; `tag` and `digest` may both be set (`repo:tag@sha256:…`)."""

    registry: str
    path: str
    tag: str | None = None
    digest: str | None = None

    def name(self) -> str:
        """The repository name without tag or digest, e.g. `docker.io/nginx`."""
        return f"{self.registry}/{self.path}"

    def __str__(self) -> str:
        text = self.name()
        if self.tag is not None:
            text += f":{self.tag}"
        if self.digest is not None:
            text += f"@{self.digest}"
        return text

    def api_registry(self) -> str:
        """The host to send HTTP requests to (Docker Hub's aliases all map to its API host)."""
        if self.registry.lower() in ("docker.io", "index.docker.io"):
            return DOCKER_HUB_API_HOST
        return self.registry

    def api_repository(self) -> str:
        """The repository as the registry API knows it: single-segment Docker Hub names live under `library/`."""
        if is_docker_hub(self.registry) and "/" not in self.path:
            return f"library/{self.path}"
        return self.path

    def identifier(self) -> str:
        """What to put after `/manifests/`: the digest when pinned (it is authoritative), else the tag."""
        if self.digest is not None:
            return self.digest
        return self.tag if self.tag is not None else DEFAULT_TAG

    def with_tag(self, tag: str) -> ImageReference:
        """Same repository, another tag (and no digest)."""
        return ImageReference(self.registry, self.path, tag, None)

    def with_digest(self, digest: str) -> ImageReference:
        """Same repository and tag, pinned to `digest`."""
        return ImageReference(self.registry, self.path, self.tag, digest)

    def repository(self) -> ImageReference:
        """Same repository without tag or digest (for repository-level calls such as tag listing)."""
        return ImageReference(self.registry, self.path, None, None)


@dataclass(frozen=True)
class _Parts:
    registry: str
    path: str
    tag: str | None
    digest: str | None
    registry_was_implicit: bool


def _split_domain(text: str, default_registry: str) -> tuple[str, str, bool]:
    """Kyverno/distribution rule: the first segment is a registry only if it looks like a host name."""
    slash = text.find("/")
    if slash == -1:
        return default_registry, text, True
    first = text[:slash]
    looks_like_host = any(ch in first for ch in ".:") or first == "localhost" or first.lower() != first
    if not looks_like_host:
        return default_registry, text, True
    return first, text[slash + 1 :], False


def _check_digest(original: str, digest: str) -> None:
    if not _DIGEST_SHAPE_RE.fullmatch(digest):
        raise InvalidReferenceError(original, f"digest {digest!r} is not of the form <algorithm>:<hex>")
    algorithm, _, encoded = digest.partition(":")
    expected_length = _SUPPORTED_DIGESTS.get(algorithm)
    if expected_length is None:
        raise InvalidReferenceError(original, f"unsupported digest algorithm {algorithm!r} (only sha256)")
    if len(encoded) != expected_length or not re.fullmatch(r"[0-9a-f]+", encoded):
        raise InvalidReferenceError(
            original, f"digest {digest!r} must have {expected_length} lower-case hex characters after '{algorithm}:'"
        )


def _parse_parts(text: str, default_registry: str, *, ggcr_rules: bool) -> _Parts:
    original = text
    if not isinstance(text, str) or text == "":
        raise InvalidReferenceError(str(text), "reference is empty")
    if text.startswith(("http://", "https://")):
        raise InvalidReferenceError(original, "a reference must not contain a URL scheme")
    if text != text.strip() or any(ch.isspace() for ch in text):
        raise InvalidReferenceError(original, "reference contains whitespace")

    digest: str | None = None
    if "@" in text:
        text, _, digest = text.partition("@")
        if "@" in digest:
            raise InvalidReferenceError(original, "more than one '@' separator")
        _check_digest(original, digest)

    tag: str | None = None
    colon = text.rfind(":")
    if colon != -1 and "/" not in text[colon + 1 :]:
        text, tag = text[:colon], text[colon + 1 :]
        if not _TAG_RE.fullmatch(tag):
            raise InvalidReferenceError(
                original, f"tag {tag!r} must match [A-Za-z0-9_][A-Za-z0-9_.-]* and be at most 128 characters"
            )
        if ggcr_rules and len(tag) > _GGCR_MAX_TAG_LENGTH:
            raise InvalidReferenceError(original, f"tag is longer than {_GGCR_MAX_TAG_LENGTH} characters")

    registry, path, implicit = _split_domain(text, default_registry)
    if not implicit and not _DOMAIN_RE.fullmatch(registry):
        raise InvalidReferenceError(original, f"registry {registry!r} is not a valid host[:port]")
    if ggcr_rules and not implicit and registry != "localhost" and not any(ch in registry for ch in ".:"):
        # distribution takes an upper-case first segment for a host; go-containerregistry sees a repository
        # name with upper-case letters. Only a reference both accept is usable against a registry.
        raise InvalidReferenceError(original, f"repository name {registry + '/' + path!r} must be lowercase")
    if path == "":
        raise InvalidReferenceError(original, "repository name is empty")
    if path.lower() != path and _PATH_RE.fullmatch(path.lower()):
        raise InvalidReferenceError(original, f"repository name {path!r} must be lowercase")
    if not _PATH_RE.fullmatch(path):
        raise InvalidReferenceError(
            original,
            f"repository name {path!r} must be lowercase alphanumeric components separated by '/', "
            "with single '.', '_', '__' or dashes inside a component",
        )
    full_name = path if implicit and not registry else f"{registry}/{path}"
    if len(full_name) > _MAX_NAME_LENGTH:
        raise InvalidReferenceError(original, f"repository name is longer than {_MAX_NAME_LENGTH} characters")
    return _Parts(registry, path, tag, digest, implicit)


def parse_reference(text: str, default_registry: str = DOCKER_HUB_REGISTRY) -> ImageReference:
    """Parse an image reference; a reference without tag or digest gets the tag `latest`."""
    parts = _parse_parts(text, default_registry, ggcr_rules=True)
    tag = parts.tag
    if tag is None and parts.digest is None:
        tag = DEFAULT_TAG
    return ImageReference(parts.registry, parts.path, tag, parts.digest)


def image_info(text: str, json_pointer: str = "", default_registry: str = DOCKER_HUB_REGISTRY, registry_mutation: bool = True) -> dict[str, Any]:
    """The entry Kyverno puts under `images.<kind>.<container>` (and `image` inside verifyImages).

    `tag` and `digest` are omitted when empty, matching Kyverno's JSON tags; `referenceWithTag` of a digest-only
    image therefore ends in a bare `:` — Kyverno does exactly that.
    """
    parts = _parse_parts(text, default_registry, ggcr_rules=False)
    if parts.registry_was_implicit and not registry_mutation:
        # Kyverno's enableDefaultRegistryMutation=false: the default registry only helps parsing, it is not reported
        parts = _Parts("", parts.path, parts.tag, parts.digest, True)
    tag = parts.tag or ""
    digest = parts.digest or ""
    if not tag and not digest:
        tag = DEFAULT_TAG
    repository = f"{parts.registry}/{parts.path}" if parts.registry else parts.path
    reference = f"{repository}@{digest}" if digest else f"{repository}:{tag}"
    info: dict[str, Any] = {
        "registry": parts.registry,
        "name": parts.path.rsplit("/", 1)[-1],
        "path": parts.path,
    }
    if tag:
        info["tag"] = tag
    if digest:
        info["digest"] = digest
    info["reference"] = reference
    info["referenceWithTag"] = f"{repository}:{tag}"
    info["jsonPointer"] = json_pointer
    return info
