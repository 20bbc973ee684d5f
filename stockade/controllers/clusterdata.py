"""Cluster-backed data for the engine: clone sources, ``configMap`` and ``apiCall`` context entries.

The engine never does I/O; offline the CLI answers these lookups from test files.  In a cluster the same
interfaces (``ResourceLookup``, ``ContextProviders``) are answered here from the API server through `stockade.kube`'s
authenticated connection, with a short cache so a burst of admissions does not turn into a burst of GETs.
Writes used by the generate controller go through the same raw-REST client (``request``, which is
`stockade.kube.client.KubeClient`'s), so every controller sees objects as plain dictionaries, exactly as the engine does.
"""

from __future__ import annotations

import copy
import json
import logging
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from stockade.celpolicy.providers import ProviderError
from stockade.controllers.egress import EgressBlocked, EgressPolicy, open_url
from stockade.controllers.webhookconfig import ApiResource
from stockade.engine.contextloader import ContextLoadError, ContextProviders
from stockade.kube.client import KubeClient
from stockade.kube.errors import Forbidden, KubeError, NotFound, Unauthorized, Unreachable

log = logging.getLogger("stockade.clusterdata")

DEFAULT_TTL_SECONDS = 2.0
DISCOVERY_TTL_SECONDS = 300.0
DISCOVERY_MISS_RETRY_SECONDS = 15.0
SERVICE_CALL_TIMEOUT_SECONDS = 10.0
# Kyverno's maxAPICallResponseLength default: a service answer is read up to this size, never further
MAX_SERVICE_RESPONSE_BYTES = 2 * 1000 * 1000
LIST_PAGE_SIZE = 250  # objects per request of a paged scan listing (`ClusterData.iter_resource`)


# The former name of the API failure raised here; every failure is a `stockade.kube.errors.KubeError` subclass
# (NotFound, Conflict, Forbidden, ...), mapped once in ``ClusterData.request``.
ApiError = KubeError


def split_api_version(api_version: str) -> tuple[str, str]:
    """``apps/v1`` → (``apps``, ``v1``); ``v1`` → (``""``, ``v1``); ``""`` → (``""``, ``""``)."""
    group, _, version = api_version.rpartition("/")
    return group, version


def api_version_of(resource: ApiResource) -> str:
    return f"{resource.group}/{resource.version}" if resource.group else resource.version


def collection_path(resource: ApiResource, namespace: str = "") -> str:
    """The REST path of a resource collection (all namespaces when ``namespace`` is empty)."""
    prefix = f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"
    if resource.namespaced and namespace:
        return f"{prefix}/namespaces/{urllib.parse.quote(namespace)}/{resource.resource}"
    return f"{prefix}/{resource.resource}"


def object_path(resource: ApiResource, namespace: str, name: str) -> str:
    return f"{collection_path(resource, namespace)}/{urllib.parse.quote(name)}"


def describe_object(obj: dict[str, Any]) -> str:
    """``Kind/namespace/name`` (``Kind/name`` when cluster-scoped): how the controllers name an object in logs and
    failures."""
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace") or ""
    return f"{obj.get('kind', '')}/{namespace + '/' if namespace else ''}{metadata.get('name', '')}"


def object_identity(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    """(apiVersion, kind, namespace, name): what tells two objects apart when comparing sets of them."""
    metadata = obj.get("metadata") or {}
    return str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""), str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


def subject_access_review(request: Callable[..., Any], user: str, resource_attributes: dict[str, str]) -> tuple[bool, str]:
    """Ask the API server whether ``user`` may do what ``resource_attributes`` say: (allowed, reason).  ``request`` is
    ``ClusterData.request``-like; its KubeError propagates."""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {"user": user, "resourceAttributes": resource_attributes}}
    answer = request("POST", SUBJECT_ACCESS_REVIEWS, review)
    status = ((answer if isinstance(answer, dict) else {}).get("status")) or {}
    return bool(status.get("allowed")), str(status.get("reason") or "")


class ClusterData:
    """Raw, cached reads (and uncached writes) against the API server as plain dictionaries."""

    def __init__(
        self,
        api_client: Any,
        *,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        discovery_ttl_seconds: float = DISCOVERY_TTL_SECONDS,
        request_timeout: float = 10.0,
        resources: Iterable[ApiResource] | None = None,
        impersonate: str = "",
    ) -> None:
        self.api_client = api_client
        # every call goes through it; ``impersonate`` is a user every request is made as (Impersonate-User): how a
        # component that Kyverno runs under its own service account (cleanup controller, the admission controller's
        # global context) gets that account's RBAC
        self.client = KubeClient(api_client, timeout=request_timeout, impersonate=impersonate)
        self.request_timeout = request_timeout  # also the page reads of iter_resource
        self.ttl = ttl_seconds
        self.discovery_ttl = discovery_ttl_seconds
        self._cache: dict[str, tuple[float, Any]] = {}
        self._lock = threading.Lock()
        self._resources: list[ApiResource] | None = list(resources) if resources is not None else None
        self._subresources: list[ApiResource] = []  # from the same discovery as _resources
        self._discovered_at = time.monotonic() if resources is not None else 0.0
        self._pinned_resources = resources is not None
        self.global_context: ClusterGlobalContext | None = None  # globalReference entries; set to share one

    @property
    def impersonate(self) -> str:
        return self.client.impersonate

    @impersonate.setter
    def impersonate(self, user: str) -> None:
        self.client.impersonate = user

    # -- raw REST ----------------------------------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """One REST call; returns the decoded JSON body, raises the `KubeError` subclass of a non-2xx answer
        (`Unreachable` when there was no answer).  See `stockade.kube.client.KubeClient.request`."""
        return self.client.request(method, path, body, query=query, content_type=content_type)

    def get(self, path: str, *, query: dict[str, str] | None = None, cached: bool = True) -> Any:
        """A GET, answered from the cache when it is younger than the TTL."""
        key = path + ("?" + urllib.parse.urlencode(sorted(query.items())) if query else "")
        now = time.monotonic()
        if cached and self.ttl > 0:
            with self._lock:
                hit = self._cache.get(key)
            if hit is not None and now - hit[0] < self.ttl:
                return hit[1]
        data = self.request("GET", path, query=query)
        if self.ttl > 0:
            with self._lock:
                self._cache[key] = (now, data)
                if len(self._cache) > 4096:
                    self._cache.clear()
        return data

    def invalidate(self) -> None:
        with self._lock:
            self._cache.clear()

    # -- discovery -------------------------------------------------------------------------------------------------
    def api_resources(self, refresh: bool = False) -> list[ApiResource]:
        """Served resources from discovery, refreshed every ``discovery_ttl`` seconds."""
        from stockade.controllers.registration import discover_resources

        now = time.monotonic()
        stale = self._resources is None or now - self._discovered_at >= self.discovery_ttl
        if not self._pinned_resources and (stale or refresh):
            try:
                subresources: list[ApiResource] = []
                self._resources = discover_resources(self.api_client, subresources)
                self._subresources = subresources
                self._discovered_at = now
            except Exception as exc:
                if self._resources is None:
                    raise Unreachable(f"discovery failed: {exc}", method="GET", path="/apis") from None
                log.warning("discovery refresh failed, keeping the previous list: %s", exc)
        return list(self._resources or [])

    def api_subresources(self, refresh: bool = False) -> list[ApiResource]:
        """Served subresources (``resource`` is ``parent/subresource``) from the same discovery as ``api_resources``."""
        self.api_resources(refresh=refresh)
        return list(self._subresources)

    def resolve_kind(self, api_version: str, kind: str) -> ApiResource | None:
        """The served resource for a kind (the preferred version when ``api_version`` is empty or ``*``, as a
        mutate target's ``apiVersion: '*'`` means)."""
        if api_version in ("*", "*/*"):
            api_version = ""
        group, version = split_api_version(api_version)

        def find(resources: list[ApiResource]) -> ApiResource | None:
            for resource in resources:
                if resource.kind != kind:
                    continue
                if api_version and (resource.group != group or resource.version != version):
                    continue
                return resource
            return None

        found = find(self.api_resources())
        if found is None and not self._pinned_resources and time.monotonic() - self._discovered_at >= DISCOVERY_MISS_RETRY_SECONDS:
            found = find(self.api_resources(refresh=True))  # a CRD installed since the last discovery
        return found

    def resources_for_selector(self, selector: str) -> list[ApiResource]:
        """Listable resources a policy ``kinds`` entry names (``Pod``, ``apps/v1/Deployment``, ``*/Secret``):
        one per (group, kind), the first served version winning; subresource selectors name nothing listable."""
        from stockade.engine.match import parse_kind_selector
        from stockade.engine.wildcard import match

        group, version, kind, subresource = parse_kind_selector(selector)
        if subresource or not kind:
            return []
        chosen: dict[tuple[str, str], ApiResource] = {}
        for resource in self.api_resources():
            if match(group, resource.group) and match(version, resource.version) and match(kind, resource.kind):
                chosen.setdefault((resource.group, resource.kind), resource)
        return list(chosen.values())

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        """Labels of a namespace for ``namespaceSelector`` matching (just the name label when it cannot be read)."""
        if not namespace:
            return {}
        try:
            found = self.get_object("v1", "Namespace", "", namespace)
        except KubeError as exc:
            log.warning("could not read namespace %s: %s", namespace, exc)
            found = None
        labels = ((found or {}).get("metadata") or {}).get("labels") or {}
        return dict(labels) or {"kubernetes.io/metadata.name": namespace}

    def resolve_resource(self, group: str, version: str, plural: str) -> ApiResource | None:
        for resource in self.api_resources():
            if resource.group == group and (not version or resource.version == version) and resource.resource == plural:
                return resource
        return None

    # -- object access ---------------------------------------------------------------------------------------------
    def list_objects(
        self, api_version: str, kind: str, namespace: str = "", *, label_selector: str = "", cached: bool = True
    ) -> list[dict[str, Any]]:
        """Objects of a kind (in one namespace, or everywhere), each carrying its apiVersion and kind."""
        resource = self.resolve_kind(api_version, kind)
        if resource is None:
            raise NotFound(f"the server does not serve kind {kind!r} ({api_version or 'any version'})", method="GET", path=f"{api_version}/{kind}")
        return self.list_resource(resource, namespace, label_selector=label_selector, cached=cached)

    def list_resource(self, resource: ApiResource, namespace: str = "", *, label_selector: str = "", cached: bool = True) -> list[dict[str, Any]]:
        query = {"labelSelector": label_selector} if label_selector else None
        listing = self.get(collection_path(resource, namespace), query=query, cached=cached)
        items = listing.get("items") or [] if isinstance(listing, dict) else []
        api_version = api_version_of(resource)
        return [{**item, "apiVersion": api_version, "kind": resource.kind} for item in items if isinstance(item, dict)]

    def iter_resource(self, resource: ApiResource, namespace: str = "", *, page_size: int = LIST_PAGE_SIZE) -> Iterator[dict[str, Any]]:
        """The objects of a resource (in one namespace, or everywhere), fresh from the API server a page at a time
        while the caller consumes them, each carrying its apiVersion and kind: a scan over every Pod of a large
        cluster holds one page of them, not the whole listing."""
        if self.impersonate:  # the paged lister sends no Impersonate-User header
            yield from self.list_resource(resource, namespace, cached=False)
            return
        from stockade.kube.informer import RawListWatch

        api_version = api_version_of(resource)
        lister = RawListWatch(self.api_client, collection_path(resource, namespace), page_size=page_size, request_timeout=self.request_timeout)
        for item in lister.objects():
            item["apiVersion"], item["kind"] = api_version, resource.kind
            yield item

    def get_object(self, api_version: str, kind: str, namespace: str, name: str, *, cached: bool = True) -> dict[str, Any] | None:
        resource = self.resolve_kind(api_version, kind)
        if resource is None:
            raise NotFound(f"the server does not serve kind {kind!r} ({api_version or 'any version'})", method="GET", path=f"{api_version}/{kind}")
        try:
            obj = self.get(object_path(resource, namespace, name), cached=cached)
        except NotFound:
            return None
        return obj if isinstance(obj, dict) else None

    # -- engine interfaces -----------------------------------------------------------------------------------------
    def lookup(self, api_version: str, kind: str, namespace: str, name: str | None) -> list[dict[str, Any]]:
        """``ResourceLookup`` for generate clone/cloneList sources and CEL resource lookups."""
        try:
            if name is not None:
                found = self.get_object(api_version, kind, namespace, name)
                return [found] if found is not None else []
            return self.list_objects(api_version, kind, namespace)
        except NotFound:
            return []

    def configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        """``configMap`` context entries: the ConfigMap as an object (its ``data`` is what policies read)."""
        try:
            return self.get_object("v1", "ConfigMap", namespace, name)
        except KubeError as exc:
            raise ContextLoadError(f"failed to read ConfigMap {namespace}/{name}: {exc}") from None

    def api_call(self, call: dict[str, Any], _ctx: Any = None) -> Any:
        """``apiCall`` context entries: ``urlPath`` goes to the API server, ``service`` to an in-cluster URL.

        The entry's ``jmesPath`` and ``default`` are applied by the engine's context loader.  Like Kyverno, every
        evaluation reads the API server afresh (no TTL cache: a listing must include what was created a moment ago)."""
        method = str(call.get("method") or "GET").upper()
        if call.get("service"):
            return self._service_call(call, method)
        url_path = str(call.get("urlPath") or "")
        if not url_path:
            raise ContextLoadError("apiCall needs urlPath or service")
        path, _, raw_query = url_path.partition("?")
        query = dict(urllib.parse.parse_qsl(raw_query)) if raw_query else None
        try:
            if method == "GET":
                return self.get(path, query=query, cached=False)
            if method == "POST":
                return self.request("POST", path, _call_body(call), query=query)
        except KubeError as exc:
            # Kyverno names an RBAC refusal (401/403) "permission denied" so it shows in the admission answer
            denied = "permission denied: " if isinstance(exc, (Unauthorized, Forbidden)) else ""
            raise ContextLoadError(f"failed to {method} resource with raw url: {url_path}: {denied}{exc}") from None
        raise ContextLoadError(f"apiCall method {method} is not supported (GET or POST)")

    def global_reference(self, name: str) -> Any:
        """``globalReference`` context entries of ClusterPolicy/Policy rules: ``entry`` or ``entry.projection`` (Kyverno
        splits the name at its first dot), read from the GlobalContextEntry as the CEL ``globalContext`` library
        reads it.  A missing entry is Kyverno's "failed to fetch entry key=NAME"; a projection the entry does not
        define has no data."""
        entry, _, projection = name.partition(".")
        if self.global_context is None:
            self.global_context = ClusterGlobalContext(self, reuse_seconds=0.0)
        try:
            return self.global_context.lookup(entry, projection)
        except GlobalContextEntryMissing:
            raise ContextLoadError(f"failed to fetch entry key={entry}") from None
        except GlobalContextProjectionMissing:
            raise ContextLoadError(f"global context entry {entry}: no data available for projection {projection}") from None
        except ProviderError as exc:
            raise ContextLoadError(str(exc)) from None

    def _service_call(self, call: dict[str, Any], method: str) -> Any:
        service = call.get("service") or {}
        url = str(service.get("url") or "")
        if not url:
            raise ContextLoadError("apiCall service needs a url")
        if method not in ("GET", "POST"):
            raise ContextLoadError(f"apiCall method {method} is not supported (GET or POST)")
        context: ssl.SSLContext | None = None
        if url.startswith("https://"):
            try:
                context = ssl.create_default_context(cadata=str(service["caBundle"])) if service.get("caBundle") else ssl.create_default_context()
            except (ssl.SSLError, ValueError) as exc:
                raise ContextLoadError(f"apiCall service {url}: invalid caBundle: {exc}") from None
        headers = {"Accept": "application/json"}
        for header in service.get("headers") or call.get("headers") or []:
            if isinstance(header, dict) and header.get("key"):
                headers[str(header["key"])] = str(header.get("value", ""))
        data = None
        if method == "POST":
            headers["Content-Type"] = "application/json"
            data = json.dumps(_call_body(call)).encode()
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:  # under the process's egress policy (Kyverno's --httpBlocklist), see stockade.controllers.egress
            with open_url(request, SERVICE_CALL_TIMEOUT_SECONDS, context) as response:
                raw = response.read(MAX_SERVICE_RESPONSE_BYTES + 1)
        except Exception as exc:
            raise ContextLoadError(f"failed to call service {url}: {exc}") from None
        if len(raw) > MAX_SERVICE_RESPONSE_BYTES:
            raise ContextLoadError(f"response length must be less than max allowed response length of {MAX_SERVICE_RESPONSE_BYTES}")
        try:
            return json.loads(raw) if raw else None
        except ValueError as exc:
            raise ContextLoadError(f"service {url} answered with invalid JSON: {exc}") from None

    def namespace_object(self, name: str) -> dict[str, Any] | None:
        """The Namespace a validate.cel rule sees as ``namespaceObject`` (Kyverno reads it from the cluster)."""
        try:
            return self.get_object("v1", "Namespace", "", name)
        except KubeError as exc:
            raise ContextLoadError(f"failed to read Namespace {name}: {exc}") from None

    def kind_namespaced(self, api_version: str, kind: str) -> bool | None:
        """Whether discovery serves a kind namespaced (a CRD's scope included); None for unknown kinds."""
        try:
            resource = self.resolve_kind(api_version, kind)
        except KubeError as exc:
            log.warning("could not resolve the scope of %s %s: %s", api_version, kind, exc)
            return None
        return None if resource is None else resource.namespaced

    def authorize(self, user: dict[str, Any], attributes: dict[str, Any]) -> tuple[str, str]:
        """A CEL ``authorizer`` check as a SubjectAccessReview: ("allow" | "deny" | "noOpinion", reason)."""
        verb = str(attributes.get("verb") or "")
        spec: dict[str, Any] = {key: user[key] for key in ("uid", "groups", "extra") if user.get(key)}
        spec["user"] = str(user.get("username") or "")
        if "path" in attributes:
            spec["nonResourceAttributes"] = {"path": str(attributes.get("path") or ""), "verb": verb}
        else:
            fields = ("group", "resource", "subresource", "namespace", "name")
            spec["resourceAttributes"] = {key: str(attributes[key]) for key in fields if attributes.get(key)} | {"verb": verb}
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        try:
            answer = self.request("POST", SUBJECT_ACCESS_REVIEWS, review)
        except KubeError as exc:
            raise ContextLoadError(f"authorization check failed: {exc}") from None
        status = answer.get("status") or {} if isinstance(answer, dict) else {}
        reason = str(status.get("reason") or "")
        if status.get("allowed"):
            return "allow", reason
        return ("deny", reason) if status.get("denied") else ("noOpinion", reason)

    def providers(self) -> ContextProviders:
        return ContextProviders(
            configmaps=self.configmap,
            api_calls=self.api_call,
            global_context=self.global_reference,
            namespaces=self.namespace_object,
            kind_namespaced=self.kind_namespaced,
            authorizer=self.authorize,
        )


def _call_body(call: dict[str, Any]) -> dict[str, Any]:
    """apiCall ``data`` is a list of ``key``/``value`` pairs forming the JSON request body."""
    body: dict[str, Any] = {}
    for item in call.get("data") or []:
        if isinstance(item, dict) and "key" in item:
            body[str(item["key"])] = item.get("value")
    return body


def resources_for_rules(served: list[ApiResource], rules: list[dict[str, Any]]) -> list[ApiResource]:
    """Served resources a ``matchConstraints.resourceRules`` list names (wildcards allowed), one per group/resource."""
    from stockade.engine.wildcard import match

    chosen: dict[tuple[str, str], ApiResource] = {}
    for rule in rules or []:
        groups = [str(g) for g in rule.get("apiGroups") or ["*"]]
        versions = [str(v) for v in rule.get("apiVersions") or ["*"]]
        names = [str(r) for r in rule.get("resources") or []]
        for resource in served:
            if (resource.group, resource.resource) in chosen:
                continue
            if any(match(g, resource.group) for g in groups) and any(match(v, resource.version) for v in versions) and any(match(r, resource.resource) for r in names):
                chosen[(resource.group, resource.resource)] = resource
    return list(chosen.values())


class ClusterCelResources:
    """The CEL ``resource`` library (Get/List/Post) answered by the cluster, for policies evaluated by controllers."""

    def __init__(self, cluster: ClusterData) -> None:
        self.cluster = cluster

    def _resource(self, api_version: str, plural: str) -> ApiResource:
        from stockade.celpolicy.providers import ProviderError

        group, version = split_api_version(api_version)
        resource = self.cluster.resolve_resource(group, version, plural)
        if resource is None:
            raise ProviderError(f"the server does not serve {plural} in {api_version}")
        return resource

    def get(self, api_version: str, resource: str, namespace: str | None, name: str) -> dict[str, Any]:
        from stockade.celpolicy.providers import ProviderError

        served = self._resource(api_version, resource)
        try:
            found = self.cluster.get(object_path(served, namespace or "", name), cached=False)
        except KubeError as exc:
            raise ProviderError(f'{resource} "{name}": {exc}') from None
        if not isinstance(found, dict):
            raise ProviderError(f'{resource} "{name}": unexpected answer')
        return {**found, "apiVersion": api_version_of(served), "kind": served.kind}

    def list(self, api_version: str, resource: str, namespace: str | None, label_selector: dict[str, str] | None) -> dict[str, Any]:
        from stockade.celpolicy.providers import ProviderError

        served = self._resource(api_version, resource)
        selector = ",".join(f"{k}={v}" for k, v in sorted((label_selector or {}).items()))
        try:
            items = self.cluster.list_resource(served, namespace or "", label_selector=selector, cached=False)
        except KubeError as exc:
            raise ProviderError(f"listing {resource}: {exc}") from None
        return {"apiVersion": api_version, "kind": served.kind + "List", "metadata": {}, "items": items}

    def to_gvr(self, api_version: str, kind: str) -> str:
        from stockade.celpolicy.providers import ProviderError

        served = self.cluster.resolve_kind(api_version, kind)
        if served is None:
            raise ProviderError(f"failed to map kind to resource: no matches for kind {kind!r} in version {api_version!r}")
        return served.resource

    def post(self, api_version: str, resource: str, namespace: str | None, payload: dict[str, Any]) -> Any:
        from stockade.celpolicy.providers import ProviderError

        served = self._resource(api_version, resource)
        try:
            return self.cluster.request("POST", collection_path(served, namespace or ""), payload)
        except KubeError as exc:
            raise ProviderError(f"creating {resource}: {exc}") from None


CEL_HTTP_MAX_BYTES = 2 * 1024 * 1024  # a larger answer is refused, not read into memory


class ClusterCelHttp:
    """The CEL ``http`` library (Get/Post) for policies evaluated by controllers, as Kyverno's: the JSON body with
    ``statusCode`` added when it is an object, else ``{"body": ..., "statusCode": ...}`` (a body that is not JSON is
    null); a non-2xx status is an answer, not an error.  Each call is bounded by a timeout and a size limit."""

    def __init__(
        self,
        timeout_seconds: float = SERVICE_CALL_TIMEOUT_SECONDS,
        max_bytes: int = CEL_HTTP_MAX_BYTES,
        ca_bundle: str = "",
        egress: EgressPolicy | None = None,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.max_bytes = max_bytes
        self.ca_bundle = ca_bundle  # PEM certificates to trust instead of the system's (``http.Client(caBundle)``)
        self.egress = egress  # the destinations refused (Kyverno's --httpBlocklist); None: the process's policy

    def with_ca_bundle(self, ca_bundle: str) -> "ClusterCelHttp":
        return ClusterCelHttp(self.timeout_seconds, self.max_bytes, ca_bundle, self.egress)

    def get(self, url: str, headers: dict[str, str]) -> dict[str, Any]:
        return self._send("GET", url, None, headers)

    def post(self, url: str, body: Any, headers: dict[str, str]) -> dict[str, Any]:
        return self._send("POST", url, json.dumps(body).encode(), {"Content-Type": "application/json", **headers})

    def _send(self, method: str, url: str, data: bytes | None, headers: dict[str, str]) -> dict[str, Any]:
        import urllib.error

        from stockade.celpolicy.providers import ProviderError

        if not url.startswith(("http://", "https://")):
            raise ProviderError(f"http.{method.lower()}: {url!r} is not an http(s) URL")
        request = urllib.request.Request(url, data=data, method=method, headers={str(k): str(v) for k, v in headers.items()})
        try:
            tls = ssl.create_default_context(cadata=self.ca_bundle) if self.ca_bundle else None
            with open_url(request, self.timeout_seconds, tls, self.egress) as response:
                status, raw = int(response.status), response.read(self.max_bytes + 1)
        except urllib.error.HTTPError as exc:
            status, raw = int(exc.code), exc.read(self.max_bytes + 1)
        except EgressBlocked as exc:  # Kyverno's words: the URL, the host name or range that refused it
            raise ProviderError(str(exc)) from None
        except Exception as exc:  # refused, DNS, TLS, timeout
            raise ProviderError(f"request failed: {exc}") from None
        if len(raw) > self.max_bytes:
            raise ProviderError(f"{method} {url}: the answer exceeds {self.max_bytes} bytes")
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        if isinstance(body, dict):
            return {**body, "statusCode": status}
        return {"body": body, "statusCode": status}


class GlobalContextEntryMissing(ProviderError):
    """No GlobalContextEntry of that name exists."""


class GlobalContextProjectionMissing(ProviderError):
    """The GlobalContextEntry defines no projection of that name."""


class ClusterGlobalContext:
    """The CEL ``globalContext`` library for policies evaluated by controllers: reads the GlobalContextEntry, loads
    its ``apiCall`` (API server path or service) or ``kubernetesResource`` data, and applies a named projection's
    ``jmesPath``.  An entry's data is reused for ``reuse_seconds`` (None: for the life of this object, one scheduled
    run; 0: read anew for every call, as the admission webhook needs).  ``reader`` loads the entries' data (default
    ``cluster``): Kyverno loads it with the account of the controller that holds the entry, so its RBAC applies."""

    def __init__(self, cluster: ClusterData, reuse_seconds: float | None = None, reader: ClusterData | None = None) -> None:
        self.cluster = cluster
        self.reader = reader or cluster
        self.reuse_seconds = reuse_seconds
        self._data: dict[str, Any] = {}
        self._loaded_at: dict[str, float] = {}

    def _entry(self, name: str) -> dict[str, Any]:
        from stockade.celpolicy.providers import ProviderError

        for version in ("v2beta1", "v2alpha1"):
            resource = self.cluster.resolve_resource("kyverno.io", version, "globalcontextentries")
            if resource is None:
                continue
            try:
                found = self.cluster.get(object_path(resource, "", name), cached=False)
            except NotFound:
                break
            except KubeError as exc:
                raise ProviderError(f"global context entry {name!r}: {exc}") from None
            if isinstance(found, dict):
                return found
        raise GlobalContextEntryMissing(f"global context entry {name!r} not found")

    def _load(self, name: str) -> Any:
        from stockade.celpolicy.providers import ProviderError

        if name in self._data and (self.reuse_seconds is None or time.monotonic() - self._loaded_at[name] < self.reuse_seconds):
            return self._data[name]
        spec = self._entry(name).get("spec") or {}
        if spec.get("apiCall"):
            try:
                data = self.reader.api_call(spec["apiCall"])
            except ContextLoadError as exc:
                raise ProviderError(f"global context entry {name!r}: {exc}") from None
        elif spec.get("kubernetesResource"):
            target = spec["kubernetesResource"]
            resource = self.cluster.resolve_resource(str(target.get("group") or ""), str(target.get("version") or ""), str(target.get("resource") or ""))
            if resource is None:
                raise ProviderError(f"global context entry {name!r}: the server does not serve {target.get('resource')}")
            try:
                data = self.reader.list_resource(resource, str(target.get("namespace") or ""), cached=False)
            except KubeError as exc:
                raise ProviderError(f"global context entry {name!r}: {exc}") from None
        else:
            raise ProviderError(f"global context entry {name!r} has neither apiCall nor kubernetesResource")
        self._data[name] = {"data": data, "projections": spec.get("projections") or []}
        self._loaded_at[name] = time.monotonic()
        return self._data[name]

    def get(self, name: str, projection: str) -> Any:
        """``globalContext.Get``: Kyverno's CEL library answers null for an entry that does not exist, so a policy can
        test for it; a failed load or an unknown projection is an error."""
        try:
            return self.lookup(name, projection)
        except GlobalContextEntryMissing:
            return None

    def lookup(self, name: str, projection: str) -> Any:
        """An entry's data (projected when ``projection`` is not empty); GlobalContextEntryMissing when there is no
        such entry."""
        from stockade.jmespath import search as jmespath_search

        loaded = self._load(name)
        if not projection:
            return copy.deepcopy(loaded["data"])
        for item in loaded["projections"]:
            if isinstance(item, dict) and item.get("name") == projection:
                return jmespath_search(str(item.get("jmesPath") or "@"), copy.deepcopy(loaded["data"]))
        raise GlobalContextProjectionMissing(f"projection {projection!r} not found in global context entry {name!r}")
