"""The admission request as CEL policies see it (``object``, ``oldObject``, ``request``, ``namespaceObject``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_IRREGULAR_PLURALS = {
    "Endpoints": "endpoints",
    "PodSecurityPolicy": "podsecuritypolicies",
    "NetworkPolicy": "networkpolicies",
    "Ingress": "ingresses",
    "IngressClass": "ingressclasses",
    "StorageClass": "storageclasses",
    "PriorityClass": "priorityclasses",
    "RuntimeClass": "runtimeclasses",
}

# Kinds Kubernetes serves under a group other than the one a bare "v1" implies; used only to fill request.resource.
def kind_to_resource(kind: str) -> str:
    """The REST resource (plural, lower case) of a kind, as the API server's RESTMapper names it."""
    if kind in _IRREGULAR_PLURALS:
        return _IRREGULAR_PLURALS[kind]
    lower = kind.lower()
    if lower.endswith("y") and len(lower) > 1 and lower[-2] not in "aeiou":
        return lower[:-1] + "ies"
    if lower.endswith(("s", "x", "z", "ch", "sh")):
        return lower + "es"
    return lower + "s"


def split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


@dataclass
class AdmissionInput:
    """One admission request (or background evaluation) of one resource."""

    object: dict[str, Any] | None
    old_object: dict[str, Any] | None = None
    operation: str = "CREATE"
    subresource: str = ""
    user_info: dict[str, Any] = field(default_factory=dict)
    namespace_object: dict[str, Any] | None = None
    namespace_labels: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False
    # (group, version, kind, resource) of the parent when the object is a subresource (values-file ``subresources``)
    parent: tuple[str, str, str, str] | None = None
    # the request's own name, for an object that carries none (a PodExecOptions of pods/exec)
    request_name: str = ""

    @property
    def subject(self) -> dict[str, Any]:
        """The object the request is about: the new one, or the old one for DELETE."""
        return self.object or self.old_object or {}

    @property
    def api_version(self) -> str:
        return str(self.subject.get("apiVersion", ""))

    @property
    def kind(self) -> str:
        return str(self.subject.get("kind", ""))

    @property
    def group_version(self) -> tuple[str, str]:
        if self.parent is not None:
            return self.parent[0], self.parent[1]
        return split_api_version(self.api_version)

    @property
    def resource(self) -> str:
        if self.parent is not None:
            return self.parent[3]
        return kind_to_resource(self.kind)

    @property
    def name(self) -> str:
        return str((self.subject.get("metadata") or {}).get("name") or self.request_name)

    @property
    def namespace(self) -> str:
        if self.kind == "Namespace" and self.group_version == ("", "v1"):
            return ""
        return str((self.subject.get("metadata") or {}).get("namespace") or "")

    def request_map(self) -> dict[str, Any]:
        group, version = self.group_version
        kind = {"group": group, "version": version, "kind": self.parent[2] if self.parent else self.kind}
        resource = {"group": group, "version": version, "resource": self.resource}
        return {
            "uid": "",
            "kind": kind,
            "resource": resource,
            "subResource": self.subresource,
            "requestKind": dict(kind),
            "requestResource": dict(resource),
            "requestSubResource": self.subresource,
            "name": self.name,
            "namespace": self.namespace,
            "operation": self.operation,
            "userInfo": dict(self.user_info),
            "dryRun": self.dry_run,
            "options": None,
            # Kyverno's CEL request carries the admitted objects too (request.object / request.oldObject)
            "object": self.object,
            "oldObject": self.old_object,
        }

    def namespace_map(self) -> dict[str, Any] | None:
        if self.namespace_object is not None:
            return self.namespace_object
        if not self.namespace:
            return None
        metadata: dict[str, Any] = {"name": self.namespace}
        if self.namespace_labels:
            metadata["labels"] = dict(self.namespace_labels)
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}

    def labels_for_namespace_selector(self) -> dict[str, str]:
        if self.kind == "Namespace" and self.group_version == ("", "v1"):
            return dict(((self.subject.get("metadata") or {}).get("labels")) or {})
        if self.namespace_object is not None:
            return dict(((self.namespace_object.get("metadata") or {}).get("labels")) or {})
        # Without a Namespace object Kyverno assumes one carrying only the well-known name label.
        labels = {"kubernetes.io/metadata.name": self.namespace}
        labels.update(self.namespace_labels)
        return labels
