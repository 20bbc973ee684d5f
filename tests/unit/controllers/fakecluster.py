"""An in-memory stand-in for ClusterData: objects by (apiVersion, kind, namespace, name), REST paths resolved
through the same path helpers the controllers use, label selectors with ``k=v``, ``k`` and ``!k`` terms."""

from __future__ import annotations

import copy
import itertools
import threading
import uuid
from collections.abc import Iterator
from typing import Any

from stockade.controllers.clusterdata import api_version_of, collection_path, object_path
from stockade.kube.errors import AlreadyExists, from_response
from stockade.controllers.webhookconfig import ApiResource

RESOURCES = (
    ApiResource("", "v1", "namespaces", "Namespace", False),
    ApiResource("", "v1", "configmaps", "ConfigMap"),
    ApiResource("", "v1", "secrets", "Secret"),
    ApiResource("", "v1", "pods", "Pod"),
    ApiResource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"),
)


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, selector.split(",")):
        if term.startswith("!"):
            if term[1:] in labels:
                return False
        elif "=" in term:
            key, _, value = term.partition("=")
            if labels.get(key) != value:
                return False
        elif term not in labels:
            return False
    return True


class FakeCluster:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self.deletes: list[tuple[str, dict[str, str]]] = []
        self._rv = itertools.count(1)
        self.resources: list[ApiResource] = list(RESOURCES)  # tests may serve more kinds

    def invalidate(self) -> None:
        """Nothing is cached here."""

    # discovery
    def api_resources(self, refresh: bool = False) -> list[ApiResource]:
        return [r for r in self.resources if "/" not in r.resource]

    def api_subresources(self, refresh: bool = False) -> list[ApiResource]:
        """Served subresources (``pods/exec``); tests add them to ``resources``."""
        return [r for r in self.resources if "/" in r.resource]

    def resolve_kind(self, api_version: str, kind: str) -> ApiResource | None:
        return next((r for r in self.resources if r.kind == kind and (not api_version or api_version_of(r) == api_version)), None)

    def kind_namespaced(self, api_version: str, kind: str) -> bool | None:
        resource = self.resolve_kind(api_version, kind)
        return None if resource is None else resource.namespaced

    def resolve_resource(self, group: str, version: str, plural: str) -> ApiResource | None:
        return next((r for r in self.resources if (r.group, r.resource) == (group, plural) and (not version or r.version == version)), None)

    # objects
    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        metadata = obj.setdefault("metadata", {})
        metadata.setdefault("uid", uuid.uuid4().hex)
        metadata.setdefault("creationTimestamp", "2024-01-01T00:00:00Z")
        metadata["resourceVersion"] = str(next(self._rv))
        resource = self.resolve_kind(str(obj.get("apiVersion")), str(obj.get("kind")))
        assert resource is not None
        if not resource.namespaced:
            metadata.pop("namespace", None)
        self.objects[(api_version_of(resource), resource.kind, str(metadata.get("namespace") or ""), str(metadata["name"]))] = obj
        return copy.deepcopy(obj)

    def find(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return next((copy.deepcopy(o) for (a, k, ns, n), o in self.objects.items() if (k, ns, n) == (kind, namespace, name)), None)

    def get_object(self, api_version: str, kind: str, namespace: str, name: str, *, cached: bool = True) -> dict[str, Any] | None:
        resource = self.resolve_kind(api_version, kind)
        if resource is None:
            raise from_response(404, "not served", method="GET", path=kind)
        found = self.objects.get((api_version_of(resource), resource.kind, namespace if resource.namespaced else "", name))
        return copy.deepcopy(found) if found is not None else None

    def list_resource(self, resource: ApiResource, namespace: str = "", *, label_selector: str = "", cached: bool = True) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(o)
            for (a, k, ns, _), o in sorted(self.objects.items())
            if (a, k) == (api_version_of(resource), resource.kind) and (not namespace or ns == namespace)
            and selector_matches(label_selector, (o.get("metadata") or {}).get("labels") or {})
        ]

    def iter_resource(self, resource: ApiResource, namespace: str = "", *, page_size: int = 250) -> Iterator[dict[str, Any]]:
        yield from self.list_resource(resource, namespace)

    def list_objects(self, api_version: str, kind: str, namespace: str = "", *, label_selector: str = "", cached: bool = True) -> list[dict[str, Any]]:
        resource = self.resolve_kind(api_version, kind)
        if resource is None:
            raise from_response(404, "not served", method="GET", path=kind)
        return self.list_resource(resource, namespace, label_selector=label_selector)

    def _locate(self, path: str) -> tuple[ApiResource, str, str]:
        for resource in self.resources:
            for namespace in {"", *(k[2] for k in self.objects), *(k[3] for k in self.objects if k[1] == "Namespace"), "default", "ns1", "ns2"}:
                base = collection_path(resource, namespace)
                if path == base:
                    return resource, namespace, ""
                if path.startswith(base + "/") and "/" not in path[len(base) + 1:]:
                    return resource, namespace, path[len(base) + 1:]
        raise from_response(404, "no such path", method="GET", path=path)

    def get(self, path: str, *, query: dict[str, str] | None = None, cached: bool = True) -> Any:
        resource, namespace, name = self._locate(path)
        found = self.get_object(api_version_of(resource), resource.kind, namespace, name)
        if found is None:
            raise from_response(404, "not found", method="GET", path=path)
        return found

    def request(self, method: str, path: str, body: Any = None, *, query: dict[str, str] | None = None, content_type: str = "application/json") -> Any:
        resource, namespace, name = self._locate(path)
        if method == "POST":
            metadata = body.get("metadata") or {}
            if not metadata.get("name") and metadata.get("generateName"):  # the API server's generated names
                body = {**body, "metadata": {**metadata, "name": f"{metadata['generateName']}{next(self._rv)}"}}
                metadata = body["metadata"]
            if self.get_object(api_version_of(resource), resource.kind, str(metadata.get("namespace") or namespace), str(metadata.get("name"))):
                raise AlreadyExists("exists", method=method, path=path)
            return self.add(body)
        if method == "PUT":
            current = self.get_object(api_version_of(resource), resource.kind, namespace, name)
            sent = str((body.get("metadata") or {}).get("resourceVersion") or "")
            if current is not None and sent and sent != current["metadata"]["resourceVersion"]:
                raise from_response(409, "the object has been modified", method=method, path=path)
            return self.add(body)
        if method == "DELETE":
            key = (api_version_of(resource), resource.kind, namespace if resource.namespaced else "", name)
            if key not in self.objects:
                raise from_response(404, "not found", method=method, path=path)
            del self.objects[key]
            self.deletes.append((path, dict(query or {})))
            return {}
        raise from_response(405, "unsupported in the fake", method=method, path=path)

    # engine-facing helpers the cleanup controller uses
    def lookup(self, api_version: str, kind: str, namespace: str, name: str | None) -> list[dict[str, Any]]:
        if name is not None:
            found = self.get_object(api_version, kind, namespace, name)
            return [found] if found is not None else []
        return self.list_objects(api_version, kind, namespace)

    def providers(self) -> Any:
        from stockade.engine.contextloader import ContextProviders

        return ContextProviders()

    def resources_for_selector(self, selector: str) -> list[ApiResource]:
        kind = selector.rpartition("/")[2]
        return [r for r in self.resources if r.kind == kind]

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        found = self.get_object("v1", "Namespace", "", namespace)
        return dict(((found or {}).get("metadata") or {}).get("labels") or {}) or {"kubernetes.io/metadata.name": namespace}


class IdleWatch:
    """A watch stream that yields nothing until closed (at most 30 s): an informer's watch with no changes."""

    def __init__(self, closed: threading.Event) -> None:
        self.closed = closed

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self.closed.wait(30)
        return iter(())

    def close(self) -> None:
        self.closed.set()


def refuse_writes(cluster: FakeCluster) -> None:
    """Every PUT to ``cluster`` is refused with 403 Forbidden from now on (an RBAC gap on the target kind); reads and
    other verbs go through."""
    original_request = cluster.request

    def forbidden(method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        if method == "PUT":
            raise from_response(403, "forbidden", method=method, path=path)
        return original_request(method, path, body, **kwargs)

    cluster.request = forbidden  # type: ignore[method-assign]
