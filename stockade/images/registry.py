"""A small synchronous client for the OCI distribution (Docker registry v2) HTTP API.

Built on the standard library's `http.client` on purpose: the engine then needs no HTTP dependency, and we keep
full control over the details registries are picky about — appending `digest=` to an upload `Location` without
disturbing its query, never forwarding `Authorization` across hosts on redirects, keep-alive connection reuse, and
explicit (never silent) plain-HTTP use.

Authentication follows the registry token spec: an unauthenticated request that gets 401 reads `WWW-Authenticate`;
`Basic` means "send the stored user/password", `Bearer` means "fetch a token from the realm for this scope". The
challenge and tokens are cached per registry (and per scope), so later requests authenticate up front.

Every response body is read in chunks against a cap (`RegistryLimits`) and a wall-clock deadline, so a hostile or
broken registry (huge manifests, endless bodies, a byte every few seconds) costs bounded memory and time. The
environment's `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` are honoured (HTTPS through a CONNECT tunnel).
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import ipaddress
import json
import re
import socket
import ssl
import threading
import time
import urllib.request
import weakref
from dataclasses import dataclass, field
from email.message import Message
from typing import Any, Iterable, Mapping
from urllib.parse import unquote, urlencode, urljoin, urlsplit

from stockade.images.auth import Credential, CredentialError, CredentialStore
from stockade.images.reference import ImageReference
from stockade.images.verifier_api import HttpCall, report_http_call
from stockade.errors import StockadeError

__all__ = [
    "DOCKER_MANIFEST_LIST",
    "DOCKER_MANIFEST_V2",
    "DigestMismatchError",
    "MANIFEST_ACCEPT",
    "OCI_IMAGE_CONFIG",
    "OCI_IMAGE_INDEX",
    "OCI_IMAGE_LAYER",
    "OCI_IMAGE_MANIFEST",
    "RegistryAuthError",
    "RegistryClient",
    "RegistryContentError",
    "RegistryError",
    "RegistryLimitError",
    "RegistryLimits",
    "RegistryNotFoundError",
    "RegistryProtocolError",
    "compute_digest",
    "bypasses_proxy",
    "parse_link_next",
    "parse_www_authenticate",
]

OCI_IMAGE_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_IMAGE_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_IMAGE_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_IMAGE_LAYER = "application/vnd.oci.image.layer.v1.tar"
DOCKER_MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_ACCEPT = (OCI_IMAGE_MANIFEST, OCI_IMAGE_INDEX, DOCKER_MANIFEST_V2, DOCKER_MANIFEST_LIST)

_REDIRECT_STATUSES = {301, 302, 303, 307, 308}
_MAX_REDIRECTS = 5
_MAX_TAG_PAGES = 10_000
_MAX_RETRY_AFTER_SECONDS = 30.0
_DEFAULT_TOKEN_LIFETIME_SECONDS = 60.0
_TOKEN_EXPIRY_MARGIN_SECONDS = 5.0
_HASHES = {"sha256": hashlib.sha256, "sha384": hashlib.sha384, "sha512": hashlib.sha512}
_MIB = 1024 * 1024
_READ_CHUNK_BYTES = 64 * 1024
_MAX_ERROR_BODY_BYTES = 64 * 1024  # error bodies are only read for their message: truncated, never an error
_MAX_TOKEN_BODY_BYTES = 1 * _MIB
_HTML_TYPES = ("text/html", "application/xhtml+xml")


@dataclass(frozen=True)
class RegistryLimits:
    """Caps on what one registry answer may cost; exceeding one is a `RegistryLimitError`, never a partial read.

    Defaults: manifests 4 MiB (the size the OCI distribution spec tells registries to accept at least; real image
    manifests and indexes are a few KiB); blobs 32 MiB (signature payloads are under 1 KiB, SBOM attestations a few
    MiB; cosign allows 128 MiB but runs once, not per admission request); 100 signature/attestation layers per
    `.sig`/`.att` manifest (cosign's own cap since CVE-2023-46737); 30 s to read one response, however slowly the
    server drips it (each socket read also has the client `timeout`).
    """

    max_manifest_bytes: int = 4 * _MIB
    max_blob_bytes: int = 32 * _MIB
    max_signature_layers: int = 100
    response_seconds: float = 30.0


@dataclass(frozen=True)
class _BodyLimit:
    """The cap for one response body and what to call it in an error."""

    max_bytes: int
    name: str  # the RegistryLimits field, so errors say which setting to raise
    what: str  # "manifest ghcr.io/acme/app:1.0"


# ---------------------------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------------------------
class RegistryError(StockadeError):
    """A registry call failed (network, HTTP status, authentication, or content that does not match its digest)."""

    def __init__(
        self,
        message: str,
        *,
        registry: str = "",
        repository: str = "",
        status: int | None = None,
        codes: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.registry = registry
        self.repository = repository
        self.status = status
        self.codes = codes


class RegistryAuthError(RegistryError):
    """Credentials missing, rejected, or insufficient (HTTP 401/403 or a failing token endpoint)."""


class RegistryNotFoundError(RegistryError):
    """The manifest, blob or repository does not exist (HTTP 404)."""


class RegistryContentError(RegistryError):
    """The registry answered, but with content that must not be used (too large, not what was asked, tampered)."""


class DigestMismatchError(RegistryContentError):
    """Content whose digest differs from the one it was requested or announced by."""


class RegistryLimitError(RegistryContentError):
    """A response (or a signature manifest's layer count) exceeds one of the `RegistryLimits`."""

    def __init__(self, message: str, *, limit_name: str, limit: int, registry: str = "", repository: str = "") -> None:
        super().__init__(message, registry=registry, repository=repository)
        self.limit_name = limit_name
        self.limit = limit


class RegistryProtocolError(RegistryContentError):
    """A successful status with a body that is not what the API promises (HTML, truncated or non-object JSON)."""


# ---------------------------------------------------------------------------------------------------------------
# Header helpers (pure)
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Challenge:
    scheme: str  # lower-case: "basic" or "bearer"
    params: Mapping[str, str] = field(default_factory=dict)


_CHALLENGE_PARAM_RE = re.compile(r'\s*([A-Za-z0-9_.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?')


def parse_www_authenticate(values: Iterable[str]) -> list[Challenge]:
    """Parse `WWW-Authenticate` header values into challenges (several may share one header, comma-separated)."""
    challenges: list[Challenge] = []
    for value in values:
        text = value.strip()
        while text:
            scheme_match = re.match(r"([A-Za-z][A-Za-z0-9_-]*)(?:\s+|$)", text)
            if not scheme_match:
                break
            scheme = scheme_match.group(1).lower()
            text = text[scheme_match.end() :]
            params: dict[str, str] = {}
            while text:
                param_match = _CHALLENGE_PARAM_RE.match(text)
                if not param_match:
                    break
                quoted, bare = param_match.group(2), param_match.group(3)
                raw = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare or ""
                params[param_match.group(1).lower()] = raw
                text = text[param_match.end() :].lstrip()
            challenges.append(Challenge(scheme, params))
            text = text.lstrip(", ")
    return challenges


_LINK_RE = re.compile(r"<([^>]*)>((?:\s*;\s*[^;,]+)*)")


def parse_link_next(values: Iterable[str]) -> str | None:
    """The target of the `rel="next"` link in RFC 8288 `Link` header values, if any."""
    for value in values:
        for match in _LINK_RE.finditer(value):
            for parameter in match.group(2).split(";"):
                key, _, raw = parameter.strip().partition("=")
                if key.strip().lower() == "rel" and "next" in raw.strip().strip('"').lower().split():
                    return match.group(1)
    return None


def compute_digest(data: bytes, algorithm: str = "sha256") -> str:
    """`<algorithm>:<hex>` of `data`."""
    hash_factory = _HASHES.get(algorithm)
    if hash_factory is None:
        raise ValueError(f"unsupported digest algorithm {algorithm!r}")
    return f"{algorithm}:{hash_factory(data).hexdigest()}"


def _digest_algorithm(digest: str) -> str:
    return digest.split(":", 1)[0]


def bypasses_proxy(netloc: str, no_proxy: str) -> bool:
    """`NO_PROXY` semantics as curl and Go use them: `*`; a host or domain suffix (`example.com` and
    `.example.com` both cover `a.example.com`), optionally with `:port`; an IP address or CIDR block."""
    target = urlsplit(f"//{netloc}")
    hostname = (target.hostname or "").lower()
    for raw_entry in no_proxy.split(","):
        entry = raw_entry.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        entry_host, entry_port = entry, ""
        if entry.count(":") == 1 and not entry.startswith("["):
            entry_host, entry_port = entry.split(":")
        if entry_port and str(target.port or "") != entry_port:
            continue
        try:
            address = ipaddress.ip_address(hostname)
        except ValueError:
            address = None
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry_host.strip("[]"), strict=False):
                    return True
            except ValueError:
                pass
            continue
        domain = entry_host.lstrip(".")
        if hostname == domain or hostname.endswith("." + domain):
            return True
    return False


def _is_loopback(host: str) -> bool:
    hostname = urlsplit(f"//{host}").hostname or ""
    if hostname == "localhost" or hostname.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


def _canonical_json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


# ---------------------------------------------------------------------------------------------------------------
# Client
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class _Response:
    status: int
    headers: Message
    body: bytes
    url: str

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    def error_detail(self) -> tuple[str, tuple[str, ...]]:
        """Registry error codes/messages from the JSON error body, for humane error messages."""
        try:
            errors = json.loads(self.body).get("errors") or []
        except (ValueError, AttributeError):
            errors = []
        codes = tuple(str(error.get("code", "")) for error in errors if isinstance(error, dict))
        texts = [
            f"{error.get('code', '')} ({error.get('message', '')})".strip()
            for error in errors
            if isinstance(error, dict)
        ]
        return ", ".join(texts), codes


@dataclass
class _Target:
    """One registry repository a request is about: used for auth scope and error messages."""

    host: str
    repository: str
    display: str


@dataclass(frozen=True)
class _Proxy:
    scheme: str
    host: str
    port: int
    authorization: str  # "Basic …" from credentials in the proxy URL, or ""


def _close_idle(idle: dict[tuple[str, str], list[http.client.HTTPConnection]], lock: threading.Lock) -> None:
    """Close and forget every pooled keep-alive connection (close() and the client's finalizer)."""
    with lock:
        pools = list(idle.values())
        idle.clear()
    for pool in pools:
        for connection in pool:
            connection.close()


class RegistryClient:
    """Synchronous OCI distribution client; thread-safe, connections are reused per host."""

    def __init__(
        self,
        *,
        credentials: CredentialStore | None = None,
        insecure_registries: Iterable[str] = (),
        ca_file: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.5,
        allow_http_localhost: bool = False,
        user_agent: str = "stockade",
        limits: RegistryLimits | None = None,
        proxies: Mapping[str, str] | None = None,
        proxy: str | None = None,
    ) -> None:
        """`insecure_registries` may use plain HTTP (or TLS without verification, probed first, as Docker does);
        `allow_http_localhost` extends that to loopback registries. Everything else is HTTPS, verified against the
        system CA store plus `ca_file`. `proxies` maps `http`/`https`/`no` like `urllib.request.getproxies()`;
        by default they come from `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` in the environment. `proxy`, one
        http://[user:password@]host:port URL for every registry (Flux's proxySecretRef), takes precedence over both."""
        self.limits = limits or RegistryLimits()
        self._proxies = {k.lower(): v for k, v in (urllib.request.getproxies_environment() if proxies is None else proxies).items()}
        self._proxy_origin = "{scheme}_PROXY"
        if proxy is not None:
            self._proxies, self._proxy_origin = {"http": proxy, "https": proxy}, "the client's proxy setting"
        self._credentials = credentials or CredentialStore()
        self._insecure = {host.strip().lower() for host in insecure_registries if host.strip()}
        self._allow_http_localhost = allow_http_localhost
        self._timeout = timeout
        self._retries = max(0, retries)
        self._backoff = max(0.0, backoff)
        self._user_agent = user_agent
        self._verified_context = ssl.create_default_context()
        if ca_file:
            self._verified_context.load_verify_locations(cafile=ca_file)
        self._unverified_context = ssl.create_default_context()
        self._unverified_context.check_hostname = False
        self._unverified_context.verify_mode = ssl.CERT_NONE
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, str], list[http.client.HTTPConnection]] = {}
        # The pool owns its keep-alive sockets: a client dropped without close() (an exception path, a caller that
        # forgot) closes them when it is collected instead of leaving them to the sockets' own finalizers.
        self._finalizer = weakref.finalize(self, _close_idle, self._idle, self._lock)
        self._schemes: dict[str, str] = {}
        self._challenges: dict[str, Challenge] = {}
        self._tokens: dict[tuple[str, str], tuple[str, float]] = {}

    # -- public API -----------------------------------------------------------------------------------------------
    def resolve_digest(self, ref: ImageReference) -> str:
        """The manifest digest `ref` points at: `ref.digest` if pinned, else HEAD (GET when HEAD has no digest)."""
        if ref.digest is not None:
            return ref.digest
        target = self._target(ref)
        path = f"/v2/{target.repository}/manifests/{ref.identifier()}"
        response = self._request(target, "HEAD", path, headers={"Accept": ", ".join(MANIFEST_ACCEPT)})
        if response.status == 200 and response.header("Docker-Content-Digest"):
            return str(response.header("Docker-Content-Digest")).strip()
        if response.status in (401, 403, 404):
            self._raise_for_status(response, target, "resolve digest of")
        _, _, digest = self.get_manifest(ref)
        return digest

    def get_manifest(self, ref: ImageReference) -> tuple[bytes, str, str]:
        """Raw manifest (image or index) bytes, its media type and digest; a pinned digest is verified."""
        target = self._target(ref)
        path = f"/v2/{target.repository}/manifests/{ref.identifier()}"
        limit = _BodyLimit(self.limits.max_manifest_bytes, "max_manifest_bytes", f"manifest {target.display}")
        response = self._request(target, "GET", path, headers={"Accept": ", ".join(MANIFEST_ACCEPT)}, limit=limit)
        if response.status != 200:
            self._raise_for_status(response, target, "get manifest")
        body = response.body
        if ref.digest is not None:
            actual = compute_digest(body, _digest_algorithm(ref.digest))
            if actual != ref.digest:
                raise DigestMismatchError(
                    f"manifest {target.display} has digest {actual}, expected {ref.digest}",
                    registry=target.host,
                    repository=target.repository,
                )
            digest = ref.digest
        else:
            announced = (response.header("Docker-Content-Digest") or "").strip()
            algorithm = _digest_algorithm(announced) if announced and announced.split(":")[0] in _HASHES else "sha256"
            digest = compute_digest(body, algorithm)
            if announced and announced != digest:
                raise DigestMismatchError(
                    f"manifest {target.display}: registry announced {announced} but the content hashes to {digest}",
                    registry=target.host,
                    repository=target.repository,
                )
        self._check_manifest_document(response, target)
        return body, self._manifest_media_type(response, body), digest

    def get_blob(self, repo_ref: ImageReference, digest: str, size: int | None = None) -> bytes:
        """Blob content, verified against `digest` and, when given, the descriptor's `size` (redirects to storage
        backends are followed). Larger than `limits.max_blob_bytes` is an error before anything is downloaded
        when the size is known, and while reading otherwise."""
        target = self._target(repo_ref, repository_level=True)
        limit = _BodyLimit(self.limits.max_blob_bytes, "max_blob_bytes", f"blob {digest} of {target.display}")
        if size is not None and size > limit.max_bytes:
            raise RegistryLimitError(
                f"{limit.what}: descriptor size {size} bytes exceeds the {limit.name} limit of {limit.max_bytes} bytes",
                limit_name=limit.name, limit=limit.max_bytes, registry=target.host, repository=target.repository,
            )
        response = self._request(target, "GET", f"/v2/{target.repository}/blobs/{digest}", limit=limit)
        if response.status != 200:
            self._raise_for_status(response, target, f"get blob {digest} of")
        algorithm = _digest_algorithm(digest)
        if algorithm not in _HASHES:
            raise DigestMismatchError(
                f"blob {digest} of {target.display}: unsupported digest algorithm {algorithm!r}",
                registry=target.host,
                repository=target.repository,
            )
        actual = compute_digest(response.body, algorithm)
        if actual != digest:
            raise DigestMismatchError(
                f"blob of {target.display} has digest {actual}, expected {digest}",
                registry=target.host,
                repository=target.repository,
            )
        if size is not None and len(response.body) != size:
            raise DigestMismatchError(
                f"blob {digest} of {target.display} is {len(response.body)} bytes, its descriptor says {size}",
                registry=target.host,
                repository=target.repository,
            )
        return response.body

    def list_tags(self, repo_ref: ImageReference, page_size: int | None = None) -> list[str]:
        """All tags of the repository, in registry order, following `Link: <…>; rel="next"` pages."""
        target = self._target(repo_ref, repository_level=True)
        path = f"/v2/{target.repository}/tags/list"
        if page_size is not None:
            path += f"?n={int(page_size)}"
        tags: list[str] = []
        seen_pages: set[str] = set()
        for _ in range(_MAX_TAG_PAGES):
            seen_pages.add(path)
            limit = _BodyLimit(self.limits.max_manifest_bytes, "max_manifest_bytes", f"tag list of {target.display}")
            response = self._request(target, "GET", path, limit=limit)
            if response.status != 200:
                self._raise_for_status(response, target, "list tags of")
            try:
                page = json.loads(response.body)
            except ValueError as exc:
                raise RegistryError(
                    f"list tags of {target.display}: registry {target.host} returned invalid JSON",
                    registry=target.host,
                    repository=target.repository,
                    status=response.status,
                ) from exc
            tags.extend(str(tag) for tag in (page.get("tags") or []))
            link = parse_link_next(response.headers.get_all("Link") or [])
            if not link:
                return tags
            # Only the path and query of the link are trusted: some registries drop the port from absolute links,
            # and credentials must never follow a link to another host.
            next_url = urlsplit(urljoin(path, link))
            path = next_url.path + (f"?{next_url.query}" if next_url.query else "")
            if path in seen_pages:
                raise RegistryError(
                    f"list tags of {target.display}: pagination loops back to {path}",
                    registry=target.host,
                    repository=target.repository,
                )
        raise RegistryError(
            f"list tags of {target.display}: more than {_MAX_TAG_PAGES} pages",
            registry=target.host,
            repository=target.repository,
        )

    def push_blob(self, repo_ref: ImageReference, data: bytes) -> str:
        """Upload `data` in one piece (skipped when the registry already has it); returns its sha256 digest."""
        target = self._target(repo_ref, repository_level=True)
        digest = compute_digest(data)
        existing = self._request(target, "HEAD", f"/v2/{target.repository}/blobs/{digest}", push=True)
        if existing.status == 200:
            return digest
        started = self._request(
            target, "POST", f"/v2/{target.repository}/blobs/uploads/", body=b"", push=True
        )
        if started.status != 202 or not started.header("Location"):
            self._raise_for_status(started, target, "start blob upload to")
        location = self._same_host_path(started, target, str(started.header("Location")))
        separator = "&" if "?" in location else "?"
        finished = self._request(
            target,
            "PUT",
            f"{location}{separator}{urlencode({'digest': digest})}",
            headers={"Content-Type": "application/octet-stream"},
            body=data,
            push=True,
        )
        if finished.status != 201:
            self._raise_for_status(finished, target, f"upload blob {digest} to")
        return digest

    def push_manifest(self, ref: ImageReference, manifest: bytes, media_type: str) -> str:
        """PUT a manifest at `ref`'s tag (or digest); returns the manifest digest."""
        target = self._target(ref)
        digest = compute_digest(manifest, _digest_algorithm(ref.digest) if ref.digest else "sha256")
        if ref.digest is not None and ref.digest != digest:
            raise DigestMismatchError(
                f"push manifest to {target.display}: content hashes to {digest}, not {ref.digest}",
                registry=target.host,
                repository=target.repository,
            )
        identifier = ref.tag if ref.tag is not None else ref.digest
        if identifier is None:
            raise RegistryError(f"push manifest to {target.display}: reference has neither tag nor digest")
        response = self._request(
            target,
            "PUT",
            f"/v2/{target.repository}/manifests/{identifier}",
            headers={"Content-Type": media_type},
            body=manifest,
            push=True,
        )
        if response.status not in (200, 201):
            self._raise_for_status(response, target, "push manifest to")
        return digest

    def push_image(self, ref: ImageReference, layers: list[bytes], config: dict[str, Any] | None = None) -> str:
        """Push an OCI image made of uncompressed tar `layers` (any bytes do for tests); returns its digest."""
        layer_descriptors = [
            {"mediaType": OCI_IMAGE_LAYER, "digest": self.push_blob(ref, layer), "size": len(layer)}
            for layer in layers
        ]
        if config is None:
            config = {
                "architecture": "amd64",
                "os": "linux",
                "config": {},
                "rootfs": {"type": "layers", "diff_ids": [d["digest"] for d in layer_descriptors]},
            }
        config_bytes = _canonical_json(config)
        config_descriptor = {
            "mediaType": OCI_IMAGE_CONFIG,
            "digest": self.push_blob(ref, config_bytes),
            "size": len(config_bytes),
        }
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_IMAGE_MANIFEST,
            "config": config_descriptor,
            "layers": layer_descriptors,
        }
        return self.push_manifest(ref, _canonical_json(manifest), OCI_IMAGE_MANIFEST)

    def close(self) -> None:
        """Close pooled connections."""
        _close_idle(self._idle, self._lock)

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- request plumbing ---------------------------------------------------------------------------------------
    def _target(self, ref: ImageReference, *, repository_level: bool = False) -> _Target:
        return _Target(ref.api_registry(), ref.api_repository(), ref.name() if repository_level else str(ref))

    def _credential(self, target: _Target) -> Credential | None:
        """A failing credential helper is an authentication failure of this call, reported like any other."""
        try:
            return self._credentials.lookup(target.host, target.repository)
        except CredentialError as exc:
            raise RegistryAuthError(f"credentials for {target.display}: {exc}", registry=target.host, repository=target.repository) from None

    def _request(
        self,
        target: _Target,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        push: bool = False,
        limit: _BodyLimit | None = None,
    ) -> _Response:
        """One registry API call with authentication, redirects and retries; returns any final HTTP status."""
        scope = f"repository:{target.repository}:{'pull,push' if push else 'pull'}"
        request_headers = dict(headers or {})
        authorization = self._authorization(target, scope, fresh=False)
        if authorization:
            request_headers["Authorization"] = authorization
        scheme = self._scheme(target.host)
        try:
            response = self._send_following_redirects(scheme, target.host, method, path, request_headers, body, limit)
        except RegistryError as exc:
            exc.registry = exc.registry or target.host
            exc.repository = exc.repository or target.repository
            raise
        if response.status != 401:
            return response
        challenges = parse_www_authenticate(response.headers.get_all("WWW-Authenticate") or [])
        challenge = next((c for c in challenges if c.scheme == "bearer"), None) or next(
            (c for c in challenges if c.scheme == "basic"), None
        )
        if challenge is None:
            raise RegistryAuthError(
                f"{method} {target.display}: registry {target.host} answered 401 without a usable "
                f"WWW-Authenticate challenge (repository {target.repository})",
                registry=target.host,
                repository=target.repository,
                status=401,
            )
        with self._lock:
            self._challenges[target.host] = challenge
        requested_scope = challenge.params.get("scope") if challenge.scheme == "bearer" else None
        authorization = self._authorization(target, scope, fresh=True, challenge_scope=requested_scope)
        if authorization is None:
            raise RegistryAuthError(
                f"{method} {target.display}: registry {target.host} requires authentication for repository "
                f"{target.repository} (HTTP 401) and no credentials are configured for it",
                registry=target.host,
                repository=target.repository,
                status=401,
            )
        request_headers["Authorization"] = authorization
        try:
            return self._send_following_redirects(scheme, target.host, method, path, request_headers, body, limit)
        except RegistryError as exc:
            exc.registry = exc.registry or target.host
            exc.repository = exc.repository or target.repository
            raise

    def _authorization(
        self, target: _Target, scope: str, *, fresh: bool, challenge_scope: str | None = None
    ) -> str | None:
        with self._lock:
            challenge = self._challenges.get(target.host)
        if challenge is None:
            return None
        credential = self._credential(target)
        if challenge.scheme == "basic":
            if credential is None or not credential.has_basic():
                return None
            pair = f"{credential.username}:{credential.password}".encode()
            return "Basic " + base64.b64encode(pair).decode()
        if challenge.scheme != "bearer":
            return None
        key = (target.host, scope)
        if not fresh:
            cached = self._cached_token(target.host, scope)
            if cached:
                return f"Bearer {cached}"
        # Ask for what this operation needs, plus whatever else the registry's challenge names.
        scopes = [scope] + ([challenge_scope] if challenge_scope and challenge_scope != scope else [])
        token, lifetime = self._fetch_token(target, challenge, scopes, credential)
        with self._lock:
            self._tokens[key] = (token, time.monotonic() + max(0.0, lifetime - _TOKEN_EXPIRY_MARGIN_SECONDS))
        return f"Bearer {token}"

    def _cached_token(self, host: str, scope: str) -> str | None:
        """A live token for `scope`; a push token for the same repository serves pulls too."""
        candidates = [scope]
        if scope.endswith(":pull"):
            candidates.append(scope + ",push")
        now = time.monotonic()
        with self._lock:
            for candidate in candidates:
                cached = self._tokens.get((host, candidate))
                if cached and cached[1] > now:
                    return cached[0]
        return None

    def _fetch_token(
        self, target: _Target, challenge: Challenge, scopes: list[str], credential: Credential | None
    ) -> tuple[str, float]:
        """Exchange credentials (or nothing, for anonymous pulls) for a bearer token at the challenge realm."""
        if credential is not None and credential.registry_token:
            return credential.registry_token, _DEFAULT_TOKEN_LIFETIME_SECONDS
        realm = challenge.params.get("realm", "")
        realm_url = urlsplit(realm)
        if realm_url.scheme not in ("http", "https") or not realm_url.netloc:
            raise RegistryAuthError(
                f"registry {target.host} sent a bearer challenge with an unusable realm {realm!r}",
                registry=target.host,
                repository=target.repository,
                status=401,
            )
        if realm_url.scheme == "http" and not self._http_allowed(realm_url.netloc) and not self._http_allowed(
            target.host
        ):
            raise RegistryAuthError(
                f"registry {target.host}: refusing to use plain-HTTP token realm {realm} "
                "(list the registry as insecure to allow it)",
                registry=target.host,
                repository=target.repository,
            )
        scope = " ".join(scopes)
        query: list[tuple[str, str]] = []
        if challenge.params.get("service"):
            query.append(("service", challenge.params["service"]))
        headers: dict[str, str] = {}
        body: bytes | None = None
        method = "GET"
        realm_path = realm_url.path or "/"
        if credential is not None and credential.identity_token:
            method = "POST"
            form = [
                ("grant_type", "refresh_token"),
                ("refresh_token", credential.identity_token),
                ("client_id", self._user_agent),
                *query,
                ("scope", scope),  # OAuth2: one space-separated parameter
            ]
            body = urlencode(form).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            path = realm_path + (f"?{realm_url.query}" if realm_url.query else "")
        else:
            if credential is not None and credential.has_basic():
                pair = f"{credential.username}:{credential.password}".encode()
                headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
            query.extend(("scope", each) for each in scopes)  # token spec: one parameter per scope
            joined_query = "&".join(part for part in (realm_url.query, urlencode(query)) if part)
            path = f"{realm_path}?{joined_query}"
        token_limit = _BodyLimit(_MAX_TOKEN_BODY_BYTES, "token response", f"token endpoint {realm}")
        response = self._send_following_redirects(realm_url.scheme, realm_url.netloc, method, path, headers, body, token_limit)
        if response.status != 200:
            who = f"user {credential.username!r}" if credential and credential.username else "anonymous access"
            raise RegistryAuthError(
                f"token endpoint {realm} for registry {target.host} rejected {who} for scope {scope} "
                f"(HTTP {response.status})",
                registry=target.host,
                repository=target.repository,
                status=response.status,
            )
        try:
            payload = json.loads(response.body)
            token = str(payload.get("token") or payload.get("access_token") or "")
            lifetime = float(payload.get("expires_in") or _DEFAULT_TOKEN_LIFETIME_SECONDS)
        except (ValueError, AttributeError, TypeError) as exc:
            raise RegistryAuthError(
                f"token endpoint {realm} for registry {target.host} returned invalid JSON",
                registry=target.host,
                repository=target.repository,
                status=response.status,
            ) from exc
        if not token:
            raise RegistryAuthError(
                f"token endpoint {realm} for registry {target.host} returned no token",
                registry=target.host,
                repository=target.repository,
                status=response.status,
            )
        return token, lifetime

    def _http_allowed(self, host: str) -> bool:
        host = host.lower()
        return host in self._insecure or (self._allow_http_localhost and _is_loopback(host))

    def _scheme(self, host: str) -> str:
        """HTTPS unless the registry is explicitly allowed plain HTTP.

        An allowed registry may still speak TLS (typically with a self-signed certificate), so it is probed once
        with an unauthenticated plain-HTTP `GET /v2/`: TLS servers answer that with 400 or drop the connection.
        Probing plain HTTP first (rather than a TLS handshake) cannot hang on servers that never answer a
        ClientHello.
        """
        if not self._http_allowed(host):
            return "https"
        with self._lock:
            known = self._schemes.get(host)
        if known:
            return known
        try:
            probe = self._send_once("http", host, "GET", "/v2/", {}, None)
        except (ConnectionRefusedError, socket.gaierror):
            return "http"  # nothing listening: let the real request report it, and probe again next time
        except (OSError, http.client.HTTPException):
            scheme = "https"
        else:
            scheme = "https" if probe.status == 400 else "http"
        with self._lock:
            self._schemes[host] = scheme
        return scheme

    def _same_host_path(self, response: _Response, target: _Target, location: str) -> str:
        """Resolve an upload `Location` to a path on the registry; a Location on another host is refused."""
        resolved = urlsplit(urljoin(response.url, location))
        if resolved.netloc and resolved.netloc.lower() != target.host.lower():
            raise RegistryError(
                f"upload to {target.display}: registry {target.host} sent an upload location on another host "
                f"({resolved.netloc}), which this client does not follow",
                registry=target.host,
                repository=target.repository,
            )
        return resolved.path + (f"?{resolved.query}" if resolved.query else "")

    def _send_following_redirects(
        self,
        scheme: str,
        netloc: str,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes | None,
        limit: _BodyLimit | None = None,
    ) -> _Response:
        current_scheme, current_netloc, current_path = scheme, netloc, path
        current_headers = dict(headers)
        for _ in range(_MAX_REDIRECTS + 1):
            response = self._send_with_retries(current_scheme, current_netloc, method, current_path, current_headers, body, limit)
            if response.status not in _REDIRECT_STATUSES or method not in ("GET", "HEAD"):
                return response
            location = response.header("Location")
            if not location:
                return response
            next_url = urlsplit(urljoin(response.url, location))
            if next_url.scheme == "http" and current_scheme == "https":
                raise RegistryError(f"{method} {response.url}: refusing redirect from HTTPS to plain HTTP {location}")
            if next_url.netloc.lower() != current_netloc.lower():
                current_headers.pop("Authorization", None)  # storage backends get pre-signed URLs, not our creds
            current_scheme, current_netloc = next_url.scheme, next_url.netloc
            current_path = next_url.path + (f"?{next_url.query}" if next_url.query else "")
        raise RegistryError(f"{method} {scheme}://{netloc}{path}: more than {_MAX_REDIRECTS} redirects")

    def _send_with_retries(
        self,
        scheme: str,
        netloc: str,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes | None,
        limit: _BodyLimit | None = None,
    ) -> _Response:
        """Retry connection failures, 5xx and 429 with exponential backoff; other statuses go to the caller.

        Limit violations are not retried: the same server would send the same oversized answer."""
        url = f"{scheme}://{netloc}{path}"
        last_error: Exception | None = None
        previous_response: _Response | None = None
        for attempt in range(self._retries + 1):
            if attempt:
                time.sleep(self._retry_delay(attempt, previous_response))
            previous_response = None
            try:
                response = self._send_once(scheme, netloc, method, path, headers, body, limit)
            except ssl.SSLCertVerificationError as exc:  # retrying cannot fix trust; say how to fix it instead
                raise RegistryError(
                    f"{method} {url}: TLS certificate of {netloc} is not trusted ({exc.verify_message}); "
                    "pass ca_file with its CA, or list the registry as insecure",
                    registry=netloc,
                ) from exc
            except (OSError, http.client.HTTPException) as exc:
                last_error = exc
                continue
            if (response.status == 429 or response.status >= 500) and attempt < self._retries:
                previous_response = response
                continue
            return response
        raise RegistryError(
            f"{method} {url}: cannot reach registry {netloc} after {self._retries + 1} attempt(s): {last_error}",
            registry=netloc,
        )

    def _retry_delay(self, attempt: int, response: _Response | None) -> float:
        delay = self._backoff * 2.0 ** (attempt - 1)
        retry_after = response.header("Retry-After") if response is not None else None
        if retry_after:
            try:
                delay = max(delay, min(float(retry_after), _MAX_RETRY_AFTER_SECONDS))
            except ValueError:
                pass
        return delay

    def _send_once(
        self,
        scheme: str,
        netloc: str,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes | None,
        limit: _BodyLimit | None = None,
    ) -> _Response:
        request_headers = {"User-Agent": self._user_agent, **headers}
        if body is not None:
            request_headers["Content-Length"] = str(len(body))
        limit = limit or _BodyLimit(self.limits.max_manifest_bytes, "max_manifest_bytes", f"{method} {scheme}://{netloc}{path}")
        proxy = self._proxy_for(scheme, netloc)
        request_target = path
        if proxy is not None and scheme == "http":
            request_target = f"http://{netloc}{path}"  # a forwarding proxy takes the absolute form
            if proxy.authorization:
                request_headers["Proxy-Authorization"] = proxy.authorization
        for fresh in (False, True):
            connection, reused = self._checkout(scheme, netloc, force_new=fresh)
            started, clock_started = time.time_ns(), time.perf_counter_ns()
            try:
                connection.request(method, request_target, body=body, headers=request_headers)
                raw = connection.getresponse()
                data, complete = self._read_body(raw, method, limit)
                report_http_call(HttpCall(method, f"{scheme}://{netloc}{path.split('?', 1)[0]}", raw.status, started, time.perf_counter_ns() - clock_started))
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                connection.close()
                if reused and not fresh:
                    continue  # a keep-alive connection the server had already closed: retry on a new one
                raise
            except BaseException:
                connection.close()
                raise
            if raw.will_close or not complete:
                connection.close()
            else:
                self._checkin(scheme, netloc, connection)
            return _Response(raw.status, raw.headers, data, f"{scheme}://{netloc}{path}")
        raise AssertionError("unreachable")

    def _read_body(self, raw: http.client.HTTPResponse, method: str, limit: _BodyLimit) -> tuple[bytes, bool]:
        """The body, read in chunks: (bytes, read completely).

        A successful answer larger than `limit` raises RegistryLimitError as soon as the cap is crossed (or up
        front, from Content-Length); other answers are only read for their error message and are truncated.
        The whole read must finish within `limits.response_seconds` (a TimeoutError, retried like any timeout).
        """
        if method == "HEAD":
            return raw.read(), True  # no body, but the response must be finished before the connection is reused
        successful = 200 <= raw.status < 300
        cap = limit.max_bytes if successful else min(limit.max_bytes, _MAX_ERROR_BODY_BYTES)
        declared = (raw.getheader("Content-Length") or "").strip()
        if successful and declared.isdigit() and int(declared) > cap:
            raise RegistryLimitError(
                f"{limit.what}: the registry announced {int(declared)} bytes, more than the {limit.name} limit of {cap} bytes",
                limit_name=limit.name, limit=cap,
            )
        deadline = time.monotonic() + self.limits.response_seconds
        chunks: list[bytes] = []
        total = 0
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{limit.what}: response not read within {self.limits.response_seconds:g} s")
            chunk = raw.read1(min(_READ_CHUNK_BYTES, cap + 1 - total))  # one socket read: the deadline is checked often
            if not chunk:
                raw.read()  # marks the response finished, so the connection can serve the next request
                return b"".join(chunks), True
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:
                if successful:
                    raise RegistryLimitError(
                        f"{limit.what}: response exceeds the {limit.name} limit of {cap} bytes",
                        limit_name=limit.name, limit=cap,
                    )
                return b"".join(chunks)[:cap], False

    def _proxy_for(self, scheme: str, netloc: str) -> _Proxy | None:
        """The proxy for `scheme://netloc`, honouring `no_proxy` (host, domain suffix, `*`)."""
        url = self._proxies.get(scheme)
        if not url:
            return None
        if bypasses_proxy(netloc, self._proxies.get("no", "")):
            return None
        parsed = urlsplit(url if "://" in url else f"http://{url}")
        if parsed.scheme != "http" or not parsed.hostname:
            raise RegistryError(
                f"{scheme} proxy {url!r} (from {self._proxy_origin.format(scheme=scheme.upper())}): only http://host:port proxies are supported",
                registry=netloc,
            )
        authorization = ""
        if parsed.username is not None:
            pair = f"{unquote(parsed.username)}:{unquote(parsed.password or '')}".encode()
            authorization = "Basic " + base64.b64encode(pair).decode()
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        return _Proxy(parsed.scheme, parsed.hostname, port, authorization)

    def _checkout(self, scheme: str, netloc: str, *, force_new: bool) -> tuple[http.client.HTTPConnection, bool]:
        if not force_new:
            with self._lock:
                pool = self._idle.get((scheme, netloc))
                if pool:
                    return pool.pop(), True
        if scheme not in ("http", "https"):
            raise RegistryError(f"unsupported URL scheme {scheme!r} for {netloc}")
        proxy = self._proxy_for(scheme, netloc)
        if scheme == "https":
            context = self._unverified_context if self._http_allowed(netloc) else self._verified_context
            if proxy is None:
                return http.client.HTTPSConnection(netloc, timeout=self._timeout, context=context), False
            # TLS to the registry inside a CONNECT tunnel: the proxy sees only the host name, never the traffic
            tunnelled = http.client.HTTPSConnection(proxy.host, proxy.port, timeout=self._timeout, context=context)
            target = urlsplit(f"//{netloc}")
            tunnel_headers = {"Proxy-Authorization": proxy.authorization} if proxy.authorization else None
            tunnelled.set_tunnel(target.hostname or netloc, target.port or 443, headers=tunnel_headers)
            return tunnelled, False
        if proxy is not None:
            return http.client.HTTPConnection(proxy.host, proxy.port, timeout=self._timeout), False
        return http.client.HTTPConnection(netloc, timeout=self._timeout), False

    def _checkin(self, scheme: str, netloc: str, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            self._idle.setdefault((scheme, netloc), []).append(connection)

    # -- response interpretation --------------------------------------------------------------------------------
    @staticmethod
    def _check_manifest_document(response: _Response, target: _Target) -> None:
        """A 200 answer to a manifest GET must be a JSON object: an HTML page (a captive portal, a login page, a
        misconfigured proxy) or truncated JSON is an error naming what came back, never something to hash."""
        content_type = (response.header("Content-Type") or "").split(";")[0].strip().lower()
        problem = ""
        if content_type in _HTML_TYPES:
            problem = f"an HTML page (Content-Type {content_type})"
        else:
            try:
                document = json.loads(response.body)
            except ValueError:
                problem = f"{len(response.body)} bytes that are not JSON (Content-Type {content_type or 'missing'}; truncated?)"
            else:
                if not isinstance(document, dict):
                    problem = f"JSON that is not an object (Content-Type {content_type or 'missing'})"
        if problem:
            raise RegistryProtocolError(
                f"get manifest {target.display}: registry {target.host} answered HTTP {response.status} with {problem}",
                registry=target.host,
                repository=target.repository,
                status=response.status,
            )

    @staticmethod
    def _manifest_media_type(response: _Response, body: bytes) -> str:
        content_type = (response.header("Content-Type") or "").split(";")[0].strip()
        if content_type and content_type not in ("application/json", "text/plain", "application/octet-stream"):
            return content_type
        try:
            document = json.loads(body)
        except ValueError:
            return content_type or OCI_IMAGE_MANIFEST
        if isinstance(document, dict) and document.get("mediaType"):
            return str(document["mediaType"])
        if isinstance(document, dict) and "manifests" in document:
            return OCI_IMAGE_INDEX
        return OCI_IMAGE_MANIFEST

    @staticmethod
    def _raise_for_status(response: _Response, target: _Target, action: str) -> None:
        detail, codes = response.error_detail()
        suffix = f": {detail}" if detail else ""
        message = (
            f"{action} {target.display}: registry {target.host} returned HTTP {response.status} "
            f"for repository {target.repository}{suffix}"
        )
        error_class: type[RegistryError] = RegistryError
        if response.status == 404:
            error_class = RegistryNotFoundError
        elif response.status in (401, 403):
            error_class = RegistryAuthError
        raise error_class(
            message, registry=target.host, repository=target.repository, status=response.status, codes=codes
        )
