"""In-memory answers for CEL provider functions, for ``kyverno test``/``apply`` style runs without a cluster."""

from __future__ import annotations

import copy
import json
from typing import Any, Mapping

from stockade.celpolicy.request import kind_to_resource
from stockade.engine.match import selector_matches
from stockade.jmespath import search as jmespath_search
from stockade.errors import StockadeError


class ProviderError(StockadeError):
    """A provider could not answer (missing object, unmocked URL, ...)."""


def _api_version_matches(obj: Mapping[str, Any], api_version: str) -> bool:
    return str(obj.get("apiVersion", "")) == api_version


class StaticResources:
    """Answers ``resource.Get/List/Post`` from a fixed list of objects."""

    def __init__(self, objects: list[dict[str, Any]], default_namespace: str = "") -> None:
        self.objects = objects
        self.default_namespace = default_namespace

    def add(self, obj: dict[str, Any]) -> None:
        self.objects.append(obj)

    def _select(self, api_version: str, resource: str, namespace: str | None) -> list[dict[str, Any]]:
        found = []
        for obj in self.objects:
            if not _api_version_matches(obj, api_version) or kind_to_resource(str(obj.get("kind", ""))) != resource:
                continue
            if namespace and str((obj.get("metadata") or {}).get("namespace") or "") != namespace:
                continue
            found.append(obj)
        return found

    def get(self, api_version: str, resource: str, namespace: str | None, name: str) -> Mapping[str, Any]:
        namespace = namespace if namespace is not None else self.default_namespace
        for obj in self._select(api_version, resource, namespace):
            if (obj.get("metadata") or {}).get("name") == name:
                return copy.deepcopy(obj)
        raise ProviderError(f'{resource} "{name}" not found')

    def list(self, api_version: str, resource: str, namespace: str | None, label_selector: Mapping[str, str] | None) -> Mapping[str, Any]:
        namespace = namespace if namespace is not None else self.default_namespace
        items = self._select(api_version, resource, namespace)
        if label_selector:
            items = [o for o in items if selector_matches({"matchLabels": dict(label_selector)}, (o.get("metadata") or {}).get("labels") or {})]
        kind = (str(items[0].get("kind")) + "List") if items else "List"
        return {"apiVersion": api_version, "kind": kind, "metadata": {}, "items": copy.deepcopy(items)}

    def to_gvr(self, api_version: str, kind: str) -> str:
        """Offline there is no discovery: the plural a RESTMapper derives from the kind."""
        return kind_to_resource(kind)

    def post(self, api_version: str, resource: str, namespace: str | None, payload: Mapping[str, Any]) -> Any:
        # SubjectAccessReview and friends: echo the payload with an empty status, as a fake API server would.
        answer = copy.deepcopy(dict(payload))
        answer.setdefault("status", {})
        return answer


class MockHttp:
    """Answers ``http.Get/Post`` from ``apiCallResponses`` entries keyed by method and URL."""

    def __init__(self, mocks: list[dict[str, Any]]) -> None:
        self.index: dict[tuple[str, str], dict[str, Any]] = {}
        for mock in mocks:
            method = str(mock.get("method") or "GET").upper()
            url = str(mock.get("url") or mock.get("urlPath") or "")
            self.index[(method, url)] = mock.get("response") or {}

    def _answer(self, method: str, url: str) -> Any:
        response = self.index.get((method, url))
        if response is None:
            raise ProviderError(f"no mocked response for {method} {url}")
        body = response.get("body")
        if isinstance(body, str):
            try:
                body = json.loads(body)
            except ValueError:
                pass
        # Kyverno's CLI wraps mocked bodies the way its HTTP library reports real responses.
        return {"body": copy.deepcopy(body), "statusCode": int(response.get("statusCode") or 200)}

    def get(self, url: str, headers: Mapping[str, str]) -> Any:
        return self._answer("GET", url)

    def post(self, url: str, body: Any, headers: Mapping[str, str]) -> Any:
        return self._answer("POST", url)


def resolve_global_context_entry(entry: Mapping[str, Any]) -> Any:
    """A test's ``globalContextEntries`` item as Kyverno stores it: ``fieldPath`` applied, then projections
    (when present) turn the value into a map of projection name to projected value."""
    root = entry.get("resources") if entry.get("resources") is not None else entry.get("data")
    if root is None:
        return None
    root = copy.deepcopy(root)
    if entry.get("fieldPath"):
        root = jmespath_search(str(entry["fieldPath"]), root)
    projections = entry.get("projections") or []
    if not projections:
        return root
    return {str(p.get("name", "")): jmespath_search(str(p.get("path") or p.get("jmesPath") or "@"), root) for p in projections}


class StaticGlobalContext:
    """Answers ``globalContext.Get(name, projection)`` from test-supplied entries."""

    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self.data: dict[str, Any] = {str(e.get("name", "")): resolve_global_context_entry(e) for e in entries}

    def get(self, name: str, projection: str) -> Any:
        if name not in self.data:
            return None
        value = copy.deepcopy(self.data[name])
        if projection:
            if not isinstance(value, dict):
                raise ProviderError(f"projection {projection!r} not found in global context entry {name!r}: stored value is not an object")
            if projection not in value:
                raise ProviderError(f"projection {projection!r} not found in global context entry {name!r}")
            return value[projection]
        return value


class StaticImageData:
    """Answers ``image.GetMetadata(ref)`` from a Context file's ``spec.images``."""

    def __init__(self, images: list[dict[str, Any]]) -> None:
        self.images = {str(i.get("image", "")): i for i in images}

    def get_metadata(self, image: str) -> Mapping[str, Any]:
        entry = self.images.get(image)
        if entry is None:
            if not self.images:
                raise ProviderError("failed to get image data: image data not found in the context")
            raise ProviderError(f"failed to get image data: image data for {image} not found in the context")
        data = copy.deepcopy(entry)
        data.setdefault("image", image)
        data.setdefault("resolvedImage", image)
        return data
