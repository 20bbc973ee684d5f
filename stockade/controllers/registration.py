"""Talking to the Kubernetes API: discovery, webhook configuration create/update/delete, namespace labels.

Raw REST through `stockade.kube.client.KubeClient` over `stockade.kube.connection` (synchronous; callers in
the event loop go through ``asyncio.to_thread``).
Everything the server writes carries its naming's managed-by label (``webhook.stockade.io/managed-by=stockade`` by
default) so cleanup can find leftovers even after a crash.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from stockade.controllers.webhookconfig import STOCKADE_NAMING, ApiResource, Resolver, WebhookNaming
from stockade.kube.client import KubeClient
from stockade.kube.errors import KubeError, NotFound, as_kube_error

log = logging.getLogger("stockade.controllers")


def get_json(api_client: Any, path: str, timeout: float = 10) -> dict[str, Any]:
    """A GET of a discovery document; its `KubeError` propagates."""
    data = KubeClient(api_client, timeout=timeout).request("GET", path)
    return data if isinstance(data, dict) else {}


def discover_resources(api_client: Any, subresources: list[ApiResource] | None = None) -> list[ApiResource]:
    """Every served (group, version, resource) with its kind, via /api and /apis discovery; the subresources
    (``pods/status``, with their own kind) are appended to ``subresources`` when a list is given."""
    resources: list[ApiResource] = []

    def add_list(group: str, version: str, listing: dict[str, Any]) -> None:
        for entry in listing.get("resources") or []:
            name = str(entry.get("name", ""))
            if name and "/" in name and subresources is not None:
                subresources.append(ApiResource(group, version, name, str(entry.get("kind", "")), bool(entry.get("namespaced"))))
            if not name or "/" in name:
                continue
            resources.append(ApiResource(group, version, name, str(entry.get("kind", "")), bool(entry.get("namespaced"))))

    for version in get_json(api_client, "/api").get("versions") or []:
        add_list("", version, get_json(api_client, f"/api/{version}"))
    for group in get_json(api_client, "/apis").get("groups") or []:
        for version in group.get("versions") or []:
            try:
                add_list(str(group["name"]), str(version["version"]), get_json(api_client, f"/apis/{version['groupVersion']}"))
            except Exception as exc:  # an unavailable aggregated API must not stop registration
                log.warning("discovery of %s failed: %s", version.get("groupVersion"), exc)
    return resources


def discovery_resolver(api_client: Any) -> Resolver:
    """Kind selectors resolved against what the cluster serves now, subresources included (``Pod/*`` names
    pods/status, pods/exec, pods/eviction...)."""
    from stockade.controllers.webhookconfig import static_resolver

    subresources: list[ApiResource] = []
    resources = discover_resources(api_client, subresources)
    return static_resolver([*resources, *subresources])


WEBHOOKS_PATH = "/apis/admissionregistration.k8s.io/v1"
# how long a registration waits for the API server's cache to hold its write (see WebhookRegistrar._await_served)
AWAIT_SERVED_SECONDS = 3.0
MUTATING = "mutatingwebhookconfigurations"
VALIDATING = "validatingwebhookconfigurations"


class WebhookRegistrar:
    """Creates or replaces our webhook configurations and removes them again."""

    def __init__(self, api_client: Any, naming: WebhookNaming = STOCKADE_NAMING) -> None:
        self.client = KubeClient(api_client, timeout=None)
        self.naming = naming

    def apply(
        self,
        mutating: dict[str, Any],
        validating: dict[str, Any],
        policy_validation: dict[str, Any] | None = None,
        extra_mutating: Sequence[dict[str, Any]] = (),
    ) -> None:
        """Upsert both resource webhook configurations (an empty one is deleted unless the naming keeps empty ones,
        as Kyverno does), plus the policy-validation one when given
        (``webhookconfig.build_policy_validation_configuration``) and the fixed mutating ones Kyverno's naming adds
        (``build_policy_mutation_configuration``, ``build_verify_mutation_configuration``)."""
        if policy_validation is not None:
            self.apply_validating(policy_validation)
        for body in extra_mutating:
            self._upsert(MUTATING, body)
        self._upsert(MUTATING, mutating, keep_empty=self.naming.keep_empty)
        self._upsert(VALIDATING, validating, keep_empty=self.naming.keep_empty)

    def apply_validating(self, body: dict[str, Any]) -> None:
        """Upsert one ValidatingWebhookConfiguration (deleted when it has no webhooks)."""
        self._upsert(VALIDATING, body)

    def _upsert(self, plural: str, body: dict[str, Any], *, keep_empty: bool = False) -> None:
        name = body["metadata"]["name"]
        path = f"{WEBHOOKS_PATH}/{plural}/{name}"
        try:
            existing = self.client.request("GET", path)
        except NotFound:
            existing = None
        if not body["webhooks"] and not keep_empty:
            if existing is not None:
                self._delete(plural, name)
            return
        before = str(((existing or {}).get("metadata") or {}).get("resourceVersion") or "")
        if existing is None:
            stored = self.client.request("POST", f"{WEBHOOKS_PATH}/{plural}", body)
        else:
            body = {**body, "metadata": {**body["metadata"], "resourceVersion": before}}
            stored = self.client.request("PUT", path, body)
        after = str(((stored if isinstance(stored, dict) else {}).get("metadata") or {}).get("resourceVersion") or "")
        if after and after != before:
            self._await_served(path, after)
        log.info("webhook configuration %s registered", name)

    def _await_served(self, path: str, resource_version: str, timeout: float = AWAIT_SERVED_SECONDS) -> None:
        """Wait (bounded) until the API server's watch cache holds our write.  The API server calls webhooks as its
        own informer of webhook configurations knows them, and that informer is fed from the same cache: a policy
        reported Ready only after this is enforced by the request that follows, not a moment later.  A read at a
        resourceVersion is answered from the cache once it has caught up with that version (NotFound, after a
        delete, is such an answer too)."""
        try:
            self.client.request("GET", path, query={"resourceVersion": resource_version}, timeout=timeout)
        except NotFound:
            pass
        except KubeError as exc:  # an old server, a slow cache: registration stands, only the wait is cut short
            log.debug("waiting for %s at resourceVersion %s: %s", path, resource_version, exc)

    def _delete(self, plural: str, name: str) -> bool:
        """Delete one configuration and wait (bounded, as for a write) until the API server's cache no longer has
        it, so a removed policy's webhook is not called a moment after its removal; False when it was gone already.

        The server answers a delete of a webhook configuration with a Status, which carries no resourceVersion: a
        list (a consistent read, at the store's current resourceVersion, hence at or after the delete) supplies
        one, and a read at it waits for the cache."""
        path = f"{WEBHOOKS_PATH}/{plural}/{name}"
        try:
            self.client.request("DELETE", path)
        except NotFound:
            return False
        deadline = time.monotonic() + AWAIT_SERVED_SECONDS
        try:
            listing = self.client.request("GET", f"{WEBHOOKS_PATH}/{plural}", query={"fieldSelector": f"metadata.name={name}"}, timeout=AWAIT_SERVED_SECONDS)
        except KubeError as exc:
            log.debug("listing %s after deleting %s: %s", plural, name, exc)
            return True
        resource_version = str(((listing if isinstance(listing, dict) else {}).get("metadata") or {}).get("resourceVersion") or "")
        remaining = deadline - time.monotonic()
        if resource_version and remaining > 0:
            self._await_served(path, resource_version, timeout=remaining)
        return True

    def remove_all(self) -> int:
        """Delete every configuration carrying our label; returns how many were removed."""
        selector = self.naming.selector
        removed = 0
        for plural in (MUTATING, VALIDATING):
            listing = self.client.request("GET", f"{WEBHOOKS_PATH}/{plural}", query={"labelSelector": selector})
            for item in listing.get("items") or []:
                name = (item.get("metadata") or {}).get("name")
                if name and self._delete(plural, str(name)):
                    removed += 1
        return removed


class NamespaceLabelCache:
    """Namespace labels for ``namespaceSelector`` matching, cached briefly so admission stays fast."""

    def __init__(self, api_client: Any, ttl_seconds: float = 30.0) -> None:
        self.client = KubeClient(api_client, timeout=2)
        self.ttl = ttl_seconds
        self._cache: dict[str, tuple[float, dict[str, str]]] = {}
        self._lock = threading.Lock()

    def needs_fetch(self, namespace: str) -> bool:
        """True when a call would go to the API server, so async callers can make it from a thread."""
        with self._lock:
            cached = self._cache.get(namespace)
        return cached is None or time.monotonic() - cached[0] >= self.ttl

    def __call__(self, namespace: str) -> dict[str, str]:
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(namespace)
            if cached and now - cached[0] < self.ttl:
                return cached[1]
        try:
            found = self.client.request("GET", f"/api/v1/namespaces/{namespace}")
            labels = dict((found.get("metadata") or {}).get("labels") or {})
        except Exception as exc:  # unknown namespace or API hiccup: evaluate with the name label only
            if isinstance(as_kube_error(exc), NotFound):  # e.g. a namespaced object created with its namespace: routine, not an error
                log.debug("namespace %s not found; matching with its name label only", namespace)
            else:
                log.warning("could not read namespace %s: %s", namespace, _short_reason(exc))
            labels = {"kubernetes.io/metadata.name": namespace}
        with self._lock:
            self._cache[namespace] = (now, labels)
        return labels


def _short_reason(exc: BaseException) -> str:
    """One line for a failed API call: the client's exception text carries every response header and the body."""
    error = as_kube_error(exc)
    if error is not None:
        return f"{type(error).__name__}: {error.message.splitlines()[0] if error.message else ''}".rstrip(": ")
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


class ServedKinds:
    """``(group, version, plural) -> Kind`` from discovery of that one group/version, for matching subresource
    reviews by their parent's kind (``AdmissionEvaluator(kind_resolver=...)``).

    One discovery GET per group/version, cached; a plural missing from a cached listing (a CRD added since) is
    looked up again at most every ``refresh_seconds``.  Callers in an event loop check ``needs_fetch()`` first."""

    def __init__(self, api_client: Any, refresh_seconds: float = 30.0, timeout_seconds: float = 2.0) -> None:
        self.api_client = api_client
        self.refresh_seconds = refresh_seconds
        self.timeout_seconds = timeout_seconds
        self._listings: dict[tuple[str, str], tuple[float, dict[str, str]]] = {}
        self._lock = threading.Lock()

    def needs_fetch(self, group: str, version: str, plural: str) -> bool:
        with self._lock:
            cached = self._listings.get((group, version))
        if cached is None:
            return True
        fetched, kinds = cached
        return plural not in kinds and time.monotonic() - fetched >= self.refresh_seconds

    def __call__(self, group: str, version: str, plural: str) -> str | None:
        if self.needs_fetch(group, version, plural):
            kinds = self._fetch(group, version)
            with self._lock:
                self._listings[(group, version)] = (time.monotonic(), kinds)
        with self._lock:
            return self._listings[(group, version)][1].get(plural)

    def _fetch(self, group: str, version: str) -> dict[str, str]:
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            listing = get_json(self.api_client, path, timeout=self.timeout_seconds)
        except Exception as exc:  # unknown group/version or API hiccup: the review keeps its own kind
            log.debug("discovery of %s failed: %s", path, _short_reason(exc))
            return {}
        return {
            str(entry["name"]): str(entry.get("kind") or "")
            for entry in listing.get("resources") or []
            if isinstance(entry, dict) and entry.get("name") and "/" not in str(entry["name"])
        }
