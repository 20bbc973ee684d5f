"""The ConfigMap reads and writes of the controller-runtime tests, as raw REST over `KubeClient` with plain dicts."""

from __future__ import annotations

from typing import Any

from stockade.kube.client import MERGE_PATCH, KubeClient

CUSTOM_RESOURCE_DEFINITIONS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class ConfigMaps:
    """The ConfigMaps of one namespace; a failed call raises the `KubeError` subclass of the server's answer."""

    def __init__(self, client: KubeClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace

    def path(self, name: str = "") -> str:
        collection = f"/api/v1/namespaces/{self.namespace}/configmaps"
        return f"{collection}/{name}" if name else collection

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = self.client.request("POST", self.path(), body)
        return created

    def read(self, name: str) -> dict[str, Any]:
        current: dict[str, Any] = self.client.request("GET", self.path(name))
        return current

    def patch(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch (for ``data`` the same as the strategic merge ``kubectl patch`` sends)."""
        patched: dict[str, Any] = self.client.request("PATCH", self.path(name), body, content_type=MERGE_PATCH)
        return patched

    def replace(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """A PUT: refused with `Conflict` when ``body`` carries a stale ``metadata.resourceVersion``."""
        replaced: dict[str, Any] = self.client.request("PUT", self.path(name), body)
        return replaced

    def delete(self, name: str) -> None:
        self.client.request("DELETE", self.path(name))

    def names(self) -> set[str]:
        return {str(item["metadata"]["name"]) for item in self.client.request("GET", self.path()).get("items") or []}
