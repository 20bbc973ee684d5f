"""ImageRepository reconcile: list a repository's tags, store them, and report it in Flux's status shape.

The registry is reached only through `RegistryClient` created by a factory, so unit tests can hand in a
scripted client and the CLI a real one. Invalid configuration (image with scheme or tag, unparsable
durations) stalls — retrying cannot fix it — while registry and credential failures and a bad exclusion
regexp (compiled inside the scan, as Flux does) leave Ready=False with a retry. Whether to scan is
decided from the last scan time and the interval alone, as Flux's shouldScan does.
"""

from __future__ import annotations

from stockade.errors import StockadeError
import base64
import binascii
import copy
import datetime
import hashlib
import os
import tempfile
import json
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

from stockade.images.auth import CredentialError, CredentialStore
from stockade.images.reference import ImageReference, InvalidReferenceError, parse_reference
from stockade.images.registry import RegistryClient, RegistryError
from stockade.reflector import models
from stockade.reflector.models import (
    Event,
    ObjectKey,
    ReconcileResult,
    SpecError,
    duration_seconds,
    format_time,
    mark_not_ready,
    mark_ready,
    mark_stalled,
    notify,
    object_key,
    parse_time,
)
from stockade.goregex import GoRegexError, GoRegexp, compile_go_regex
from stockade.units.duration import format_duration
from stockade.reflector.store import TagStore

__all__ = [
    "DEFAULT_EXCLUSION_LIST",
    "InvalidExclusionError",
    "compile_exclusion",
    "ClientFactory",
    "ImageRepositoryReconciler",
    "RegistryAccess",
    "SecretLookup",
    "ServiceAccountLookup",
    "canonical_image_name",
    "default_client_factory",
    "parse_repository_image",
    "registry_access",
    "tags_revision",
]

DEFAULT_EXCLUSION_LIST = ["^.*\\.sig$"]
LATEST_TAGS_COUNT = 10
TAG_PAGE_SIZE = 1000
DEFAULT_TIMEOUT_SECONDS = 60.0
RECONCILE_REQUEST_ANNOTATION = "reconcile.fluxcd.io/requestedAt"

SecretLookup = Callable[[str, str], "Mapping[str, Any] | None"]
ServiceAccountLookup = Callable[[str, str], "Mapping[str, Any] | None"]


@dataclass(frozen=True)
class RegistryAccess:
    """How to reach one repository's registry: what a client factory needs."""

    reference: ImageReference
    credentials: CredentialStore
    insecure: bool
    timeout: float
    ca_file: str | None = None
    ca_pem: bytes | None = None  # `ca.crt` of spec.certSecretRef, added to the trusted CAs
    proxy_url: str | None = None  # from spec.proxySecretRef; used instead of the environment's proxies


class TagLister(Protocol):
    def list_tags(self, repo_ref: ImageReference, page_size: int | None = None) -> list[str]: ...

    def resolve_digest(self, ref: ImageReference) -> str: ...


ClientFactory = Callable[[RegistryAccess], TagLister]


def _ca_bundle(access: RegistryAccess) -> str | None:
    """The registry client reads CAs from a file: write certSecretRef's CA (plus `ca_file`) to one named by
    its content, so repeated scans reuse it."""
    if access.ca_pem is None:
        return access.ca_file
    bundle = access.ca_pem
    if access.ca_file:
        with open(access.ca_file, "rb") as existing:
            bundle = existing.read() + b"\n" + bundle
    directory = os.path.join(tempfile.gettempdir(), f"stockade-registry-ca-{os.getuid()}")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, hashlib.sha256(bundle).hexdigest() + ".pem")
    if not os.path.exists(path):
        with tempfile.NamedTemporaryFile("wb", dir=directory, delete=False) as handle:
            handle.write(bundle)
        os.replace(handle.name, path)
    return path


def default_client_factory(access: RegistryAccess) -> RegistryClient:
    return RegistryClient(
        credentials=access.credentials,
        insecure_registries=[access.reference.registry] if access.insecure else [],
        ca_file=_ca_bundle(access),
        timeout=access.timeout,
        retries=1,
        backoff=0.2,
        proxy=access.proxy_url,
    )


def parse_repository_image(image: object) -> ImageReference:
    """`spec.image` must name a repository: no URL scheme, no tag, no digest."""
    if not isinstance(image, str) or not image:
        raise InvalidReferenceError(str(image or ""), "spec.image is required")
    if "://" in image:
        raise InvalidReferenceError(image, "should not include URL scheme")
    if "@" in image:
        raise InvalidReferenceError(image, "should not include a digest")
    if image.rfind(":") > image.rfind("/"):
        raise InvalidReferenceError(image, "should not include a tag")
    return parse_reference(image).repository()


def canonical_image_name(ref: ImageReference) -> str:
    """Fully qualified repository name as the registry API sees it (`index.docker.io/library/nginx`)."""
    return f"{ref.api_registry()}/{ref.api_repository()}"


def tags_revision(tags_descending: list[str]) -> str:
    """Decimal Adler-32 of the JSON tag list, as Flux's default storage reports it; order-independent
    because the list is always stored sorted."""
    payload = json.dumps(tags_descending, separators=(",", ":"), ensure_ascii=False).encode()
    return str(zlib.adler32(payload))


def _interval_and_timeout(spec: Mapping[str, Any]) -> tuple[float | None, float]:
    interval = duration_seconds(spec.get("interval"), "spec.interval")
    timeout = duration_seconds(spec.get("timeout"), "spec.timeout")
    if timeout is None:
        timeout = interval if interval else DEFAULT_TIMEOUT_SECONDS
    return interval, max(1.0, timeout)


def secret_bytes(secret: Mapping[str, Any], key: str) -> bytes | None:
    data = (secret.get("data") or {}).get(key)
    if data is not None:
        try:
            return base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError):
            raise CredentialError(f"secret data {key!r} is not valid base64") from None
    text = (secret.get("stringData") or {}).get(key)
    return str(text).encode() if text is not None else None


def registry_access(
    repository: Mapping[str, Any],
    secrets: SecretLookup | None,
    ca_file: str | None = None,
    service_accounts: ServiceAccountLookup | None = None,
) -> RegistryAccess:
    """Build the access settings of an ImageRepository from Flux's credential fields: secretRef
    (dockerconfigjson), serviceAccountName (its imagePullSecrets), certSecretRef (`ca.crt`) and insecure.
    Raises InvalidReferenceError, SpecError or CredentialError."""
    spec = repository.get("spec") or {}
    reference = parse_repository_image(spec.get("image"))
    _interval, timeout = _interval_and_timeout(spec)
    key = object_key(repository)
    credentials = CredentialStore()

    def secret_named(name: str, field_name: str) -> Mapping[str, Any]:
        secret = secrets(key.namespace, name) if secrets is not None else None
        if secret is None:
            raise CredentialError(f"{field_name}: secret '{key.namespace}/{name}' not found")
        return secret

    secret_ref = spec.get("secretRef")
    if secret_ref:
        name = str((secret_ref or {}).get("name") or "")
        secret = secrets(key.namespace, name) if secrets is not None else None
        if secret is None:
            raise CredentialError(f"secret '{key.namespace}/{name}' not found")
        credentials.add_pull_secret(secret)
    account_name = spec.get("serviceAccountName")
    if account_name:
        account = service_accounts(key.namespace, str(account_name)) if service_accounts is not None else None
        if account is None:
            raise CredentialError(f"serviceAccountName: service account '{key.namespace}/{account_name}' not found")
        for entry in account.get("imagePullSecrets") or []:
            pull_name = str((entry or {}).get("name") or "")
            if pull_name:
                credentials.add_pull_secret(secret_named(pull_name, "serviceAccountName imagePullSecrets"))
    ca_pem: bytes | None = None
    cert_ref = spec.get("certSecretRef")
    if cert_ref:
        cert_secret = secret_named(str((cert_ref or {}).get("name") or ""), "certSecretRef")
        ca_pem = secret_bytes(cert_secret, "ca.crt")
        if secret_bytes(cert_secret, "tls.crt") is not None:
            raise CredentialError("certSecretRef: client certificates (tls.crt/tls.key) are not supported, only ca.crt")
    proxy_url: str | None = None
    proxy_ref = spec.get("proxySecretRef")
    if proxy_ref:
        proxy_name = str((proxy_ref or {}).get("name") or "")
        proxy_secret = secrets(key.namespace, proxy_name) if secrets is not None else None
        if proxy_secret is None:
            raise CredentialError(f"secret '{key.namespace}/{proxy_name}' not found")
        proxy_url = proxy_url_from_secret(proxy_secret, f"{key.namespace}/{proxy_name}")
    return RegistryAccess(reference, credentials, bool(spec.get("insecure")), timeout, ca_file, ca_pem, proxy_url)


def proxy_url_from_secret(secret: Mapping[str, Any], name: str, schemes: tuple[str, ...] = ("http",)) -> str:
    """The proxy URL of a Flux proxy Secret: `address` (required) with optional `username`/`password` folded
    into it as user info, as Flux does. Messages name the secret and never echo the credentials. ``schemes``:
    the proxy schemes the caller's client can speak (git's curl also speaks https:// to its proxy)."""
    address_bytes = secret_bytes(secret, "address")
    if address_bytes is None:
        raise CredentialError(f"secret '{name}': key 'address' not found")
    address = address_bytes.decode("utf-8", "replace").strip()
    if not address:
        raise CredentialError(f"secret '{name}': proxy address is empty")
    try:
        parsed = urlsplit(address)
        port = parsed.port
    except ValueError:
        raise CredentialError(f"secret '{name}': failed to parse proxy address") from None
    if not parsed.scheme or not parsed.hostname:
        raise CredentialError(f"secret '{name}': failed to parse proxy address")
    if parsed.scheme not in schemes:
        # Flux also dials https:// proxies; the registry client speaks plain HTTP to its proxy only.
        allowed = ", ".join(f"{scheme}://" for scheme in schemes)
        raise CredentialError(f"secret '{name}': proxy scheme {parsed.scheme!r} is not supported, only {allowed}")
    username = secret_bytes(secret, "username")
    password = secret_bytes(secret, "password")
    userinfo = ""
    if username is not None:
        userinfo = quote(username.decode("utf-8", "replace"), safe="")
        if password is not None:
            userinfo += ":" + quote(password.decode("utf-8", "replace"), safe="")
        userinfo += "@"
    host = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
    default_port = 443 if parsed.scheme == "https" else 80
    return f"{parsed.scheme}://{userinfo}{host}:{port or default_port}"


class InvalidExclusionError(StockadeError, ValueError):
    """An `exclusionList` entry that is not a Go regexp; the scan fails (and is retried) as in Flux."""


def compile_exclusion(pattern: str) -> GoRegexp:
    try:
        return compile_go_regex(pattern)
    except GoRegexError as exc:
        raise InvalidExclusionError(f"failed to compile regex {pattern}: {exc}") from None


def _go_duration(seconds: float | None) -> str:
    """Go's time.Duration text (`5m0s`), as Flux prints next-scan times."""
    if seconds is None or seconds == float("inf"):
        return "never"
    return format_duration(int(round(seconds * 1e9)))


def _with_trace_message(event: Event, message: str) -> Event:
    """Flux's notify: an unchanged Ready state is only traced, with the next-scan message."""
    if event.type == models.EVENT_TRACE:
        return Event(models.EVENT_TRACE, models.SUCCEEDED, message)
    return event


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


class ImageRepositoryReconciler:
    """Scan ImageRepositories into a `TagStore`; one call per object, state lives in the object's status."""

    def __init__(
        self,
        store: TagStore,
        *,
        secrets: SecretLookup | None = None,
        client_factory: ClientFactory = default_client_factory,
        ca_file: str | None = None,
        clock: Callable[[], datetime.datetime] = _utcnow,
        page_size: int | None = TAG_PAGE_SIZE,
        service_accounts: ServiceAccountLookup | None = None,
    ) -> None:
        self.store = store
        self.secrets = secrets
        self.service_accounts = service_accounts
        self.client_factory = client_factory
        self.ca_file = ca_file
        self.clock = clock
        self.page_size = page_size

    def reconcile(self, repository: Mapping[str, Any], *, force: bool = False) -> ReconcileResult:
        """Scan when due (or `force`), else keep the status; never raises for registry or spec problems."""
        obj: dict[str, Any] = copy.deepcopy(dict(repository))
        before = copy.deepcopy(obj)
        spec = obj.get("spec") or {}
        result = ReconcileResult(obj)
        if spec.get("suspend"):
            result.events.append(Event(models.EVENT_TRACE, "Suspended", "reconciliation is suspended"))
            return result
        now = self.clock()
        key = object_key(obj)
        try:
            interval, _timeout = _interval_and_timeout(spec)
        except SpecError as exc:
            return self._finish(result, before, stalled=(models.INVALID_SPEC, str(exc)), now=now)
        try:
            reference = parse_repository_image(spec.get("image"))
        except InvalidReferenceError as exc:
            return self._finish(result, before, stalled=(models.IMAGE_URL_INVALID, str(exc)), now=now)
        exclusion_list = self._exclusion_list(spec)
        canonical = canonical_image_name(reference)
        scan, reason, next_in = self._should_scan(obj, canonical, exclusion_list, key, interval, now)
        self._record_reconcile_request(obj)
        if not (scan or force):
            return self._keep_last_scan(result, before, next_in, now)
        try:
            access = registry_access(obj, self.secrets, self.ca_file, self.service_accounts)
            client = self.client_factory(access)
        except CredentialError as exc:
            result.requeue_after = min(interval or 60.0, 60.0)
            return self._finish(result, before, failed=(models.AUTHENTICATION_FAILED, str(exc)), now=now)
        try:
            listed = client.list_tags(reference, page_size=self.page_size)
            # Flux compiles the exclusion list inside the scan, so a bad pattern is a failed scan that is
            # retried (the pattern may be fixed at any time), not a stall.
            exclusions = [compile_exclusion(pattern) for pattern in exclusion_list]
        except (RegistryError, OSError, InvalidExclusionError) as exc:
            result.requeue_after = min(interval or 60.0, 60.0)
            return self._finish(result, before, failed=(models.READ_OPERATION_FAILED, f"scan failed: {exc}"), now=now)
        finally:
            close = getattr(client, "close", None)
            if callable(close):
                close()
        kept = sorted({tag for tag in listed if not any(rx.search(tag) for rx in exclusions)}, reverse=True)
        previous_revision = ((before.get("status") or {}).get("lastScanResult") or {}).get("revision")
        self.store.set_tags(key, canonical, kept)
        revision = tags_revision(kept)
        status = obj.setdefault("status", {})
        status["canonicalImageName"] = canonical
        status["observedExclusionList"] = list(exclusion_list)
        status["lastScanResult"] = {
            "tagCount": len(kept),
            "scanTime": format_time(now),
            "latestTags": kept[:LATEST_TAGS_COUNT],
            "revision": revision,
        }
        mark_ready(obj, f"successful scan: found {len(kept)} tags with checksum {revision}", now)
        result.requeue_after = interval
        next_scan = f"next scan in {_go_duration(interval)}"
        unchanged = previous_revision is not None and previous_revision == revision
        result.events.append(
            _with_trace_message(notify(before, obj), ("tags did not change, " if unchanged else "successful scan, ") + next_scan)
        )
        result.detail = reason if scan else "forced"
        return result

    @staticmethod
    def _record_reconcile_request(obj: dict[str, Any]) -> None:
        """Flux marks `reconcile.fluxcd.io/requestedAt` handled on every reconcile, whatever its outcome."""
        annotation = ((obj.get("metadata") or {}).get("annotations") or {}).get(RECONCILE_REQUEST_ANNOTATION)
        if annotation:
            obj.setdefault("status", {})["lastHandledReconcileAt"] = annotation

    def _keep_last_scan(
        self, result: ReconcileResult, before: Mapping[str, Any], next_in: float, now: datetime.datetime
    ) -> ReconcileResult:
        """Not due: like Flux, report the last scan as the Ready state (this also clears a failed retry's
        Ready=False) and come back when the interval has elapsed."""
        obj = result.object
        last = (obj.get("status") or {}).get("lastScanResult") or {}
        mark_ready(obj, f"successful scan: found {last.get('tagCount', 0)} tags with checksum {last.get('revision', '')}", now)
        result.requeue_after = next_in
        message = f"no change in repository configuration since last scan, next scan in {_go_duration(next_in)}"
        result.events.append(_with_trace_message(notify(before, obj), message))
        result.detail = "not due"
        return result

    @staticmethod
    def _exclusion_list(spec: Mapping[str, Any]) -> list[str]:
        raw = spec.get("exclusionList")
        if raw is None:
            return list(DEFAULT_EXCLUSION_LIST)
        return [str(pattern) for pattern in raw]

    def _should_scan(
        self,
        obj: Mapping[str, Any],
        canonical: str,
        exclusion_list: list[str],
        key: ObjectKey,
        interval: float | None,
        now: datetime.datetime,
    ) -> tuple[bool, str, float]:
        """(scan now?, why, seconds until the next scan is due) — Flux's shouldScan: a failed last scan is no reason
        by itself; it is retried when the interval since the last successful scan has elapsed."""
        status = obj.get("status") or {}
        last = status.get("lastScanResult") or {}
        scan_time = parse_time(last.get("scanTime"))
        if scan_time is None:
            return True, "first scan", 0.0
        annotation = ((obj.get("metadata") or {}).get("annotations") or {}).get(RECONCILE_REQUEST_ANNOTATION)
        if annotation and annotation != status.get("lastHandledReconcileAt"):
            return True, "reconcile requested", 0.0
        if status.get("canonicalImageName") != canonical:
            return True, "new image name", 0.0
        if set(status.get("observedExclusionList") or []) != set(exclusion_list):
            return True, "updated exclusion list", 0.0
        if not self.store.tags(key):
            return True, "no tags in database", 0.0
        if interval is None:
            return False, "", float("inf")
        remaining = interval - (now - scan_time).total_seconds()
        if remaining < 1.0:
            return True, "triggered by interval", 0.0
        return False, "", remaining

    @staticmethod
    def _finish(
        result: ReconcileResult,
        before: Mapping[str, Any],
        *,
        now: datetime.datetime,
        stalled: tuple[str, str] | None = None,
        failed: tuple[str, str] | None = None,
    ) -> ReconcileResult:
        ImageRepositoryReconciler._record_reconcile_request(result.object)
        if stalled is not None:
            mark_stalled(result.object, stalled[0], stalled[1], now)
            result.error = stalled[1]
            result.requeue_after = None
        elif failed is not None:
            mark_not_ready(result.object, failed[0], failed[1], now)
            result.error = failed[1]
        result.events.append(notify(before, result.object))
        return result
