"""Everything one policy evaluation needs, built once per (policy, resource) and passed to each rule handler."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stockade.engine.context import EngineContext
from stockade.engine.contextloader import ContextLoader
from stockade.engine.images import extract_images
from stockade.engine.match import RequestInfo, ResourceKind
from stockade.policy.model import KyvernoPolicy, PolicyException


@dataclass
class PolicyContext:
    """The admission request as the engine sees it, plus the JSON context variables query."""

    policy: KyvernoPolicy
    new_resource: dict[str, Any]
    old_resource: dict[str, Any]
    operation: str
    json_context: EngineContext
    gvk: ResourceKind
    request_info: RequestInfo = field(default_factory=RequestInfo)
    namespace_labels: dict[str, str] = field(default_factory=dict)
    context_loader: ContextLoader = field(default_factory=ContextLoader)
    exceptions: list[PolicyException] = field(default_factory=list)
    element: dict[str, Any] | None = None

    @property
    def is_delete(self) -> bool:
        return self.operation == "DELETE"

    @property
    def resource_for_match(self) -> dict[str, Any]:
        return self.new_resource or self.old_resource

    def set_resource(self, resource: dict[str, Any]) -> None:
        """Record a mutation: later rules see the patched object."""
        self.new_resource = resource
        self.json_context.set("request", {**(self.json_context.get("request") or {}), "object": resource})


def service_account_parts(username: str) -> tuple[str, str]:
    prefix = "system:serviceaccount:"
    if not username.startswith(prefix):
        return "", ""
    parts = username[len(prefix) :].split(":")
    if len(parts) != 2:
        return "", ""
    return parts[1], parts[0]


def build_json_context(
    new_resource: dict[str, Any],
    old_resource: dict[str, Any],
    operation: str,
    info: RequestInfo,
    gvk: ResourceKind,
    *,
    default_registry: str = "docker.io",
    registry_mutation: bool = True,
    admission: dict[str, Any] | None = None,
) -> EngineContext:
    request: dict[str, Any] = {**(admission or {}), "operation": operation}
    request["object"] = new_resource if new_resource else None
    if old_resource:
        request["oldObject"] = old_resource
    resource = new_resource or old_resource or {}
    # the admission request's namespace and name are the object's; an object without a name (a subresource's
    # PodExecOptions) leaves it to the request fields the caller gives
    metadata = resource.get("metadata") or {}
    request["namespace"] = str(metadata.get("namespace") or "")
    request["name"] = str(metadata.get("name") or (admission or {}).get("name") or "")
    data: dict[str, Any] = {"request": request}
    if not info.is_empty():
        # Kyverno adds user details only when a request carries them; policies must not see an empty user.
        request["userInfo"] = info.user_info_dict()
        request["roles"] = list(info.roles)
        request["clusterRoles"] = list(info.cluster_roles)
        sa_name, sa_namespace = service_account_parts(info.username)
        data["serviceAccountName"] = sa_name
        data["serviceAccountNamespace"] = sa_namespace
    ctx = EngineContext(data)

    def load_images(target: EngineContext) -> None:
        images = extract_images(resource, default_registry, registry_mutation)
        if images:
            target.set("images", images)

    # Parsing every image costs more than most rules; do it only for policies that mention `images`.
    ctx.add_deferred("images", load_images)
    return ctx
