"""Kubernetes' authorizer library, answered by an :class:`~stockade.cel.providers.AuthorizerProvider`.

Builders (``authorizer.group('apps').resource('deployments').namespace('ns')``) accumulate attributes in tagged
maps; ``check(verb)`` hands them to the provider bound to the activation.  For ``authorizer.requestResource`` the
engine declares the ``authorizer`` variable and binds it to ``{"requestResource": request_resource_check(...)}``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from stockade.cel.functions import Library, tag_of, tagged, untag

AUTHORIZER_TYPE = "kubernetes.authorization.Authorizer"
PATH_CHECK_TYPE = "kubernetes.authorization.PathCheck"
GROUP_CHECK_TYPE = "kubernetes.authorization.GroupCheck"
RESOURCE_CHECK_TYPE = "kubernetes.authorization.ResourceCheck"
DECISION_TYPE = "kubernetes.authorization.Decision"


def request_resource_check(group: str, resource: str, subresource: str = "", namespace: str = "",
                           name: str = "") -> dict[str, Any]:
    """Value of the ``authorizer.requestResource`` variable for the resource under admission."""
    return tagged(RESOURCE_CHECK_TYPE, {"group": group, "resource": resource, "subresource": subresource,
                                        "namespace": namespace, "name": name})


def _with(value: Any, expected: str, **changes: Any) -> dict[str, Any]:
    attributes = dict(untag(value, expected))
    attributes.update(changes)
    return tagged(expected, attributes)


def _group(receiver: Any, group: str) -> dict[str, Any]:
    user = untag(receiver, AUTHORIZER_TYPE).get("user") if receiver is not None else None
    return tagged(GROUP_CHECK_TYPE, {"user": user, "group": group})


def _resource(group_check: Any, resource: str) -> dict[str, Any]:
    attributes = dict(untag(group_check, GROUP_CHECK_TYPE))
    attributes.update(resource=resource, subresource="", namespace="", name="")
    return tagged(RESOURCE_CHECK_TYPE, attributes)


def _path(receiver: Any, path: str) -> dict[str, Any]:
    user = untag(receiver, AUTHORIZER_TYPE).get("user") if receiver is not None else None
    return tagged(PATH_CHECK_TYPE, {"user": user, "path": path})


def authorizer_check_impl(provider: Any) -> Callable[[Any, str], dict[str, Any]]:
    """Member ``check(verb)`` bound to the activation's authorizer provider."""

    def check(target: Mapping[str, Any], verb: str) -> dict[str, Any]:
        kind = tag_of(target)
        if kind not in (PATH_CHECK_TYPE, RESOURCE_CHECK_TYPE):
            raise TypeError("no such overload: check() needs a path or resource check")
        attributes = dict(target["value"])
        attributes["verb"] = verb
        try:
            decision, reason = provider.check(attributes)
            error = ""
        except Exception as failure:  # noqa: BLE001 - authorizer failures surface as errored decisions
            decision, reason, error = "noOpinion", "", str(failure)
        return tagged(DECISION_TYPE, {"decision": decision, "reason": reason, "error": error})

    return check


def _decision(value: Any) -> Mapping[str, Any]:
    decision: Mapping[str, Any] = untag(value, DECISION_TYPE)
    return decision


def build_authz() -> Library:
    library = Library("k8s.authz")
    library.add("authorizer.group", ("string",), "opaque", lambda group: _group(None, group))
    library.add("authorizer.path", ("string",), "opaque", lambda path: _path(None, path))
    library.add("authorizer.serviceAccount", ("string", "string"), "opaque",
                lambda ns, name: tagged(AUTHORIZER_TYPE, {"user": f"system:serviceaccount:{ns}:{name}"}))
    library.add("group", ("map", "string"), "opaque", _group, member=True)
    library.add("path", ("map", "string"), "opaque", _path, member=True)
    library.add("resource", ("map", "string"), "opaque", _resource, member=True)
    for field in ("subresource", "namespace", "name", "fieldSelector", "labelSelector"):
        library.add(field, ("map", "string"), "opaque",
                    lambda check, value, field=field: _with(check, RESOURCE_CHECK_TYPE, **{field: value}),
                    member=True)
    library.add("check", ("map", "string"), "opaque", None, member=True, overload_id="k8s.authz:check")
    library.add("allowed", ("map",), "bool", lambda d: _decision(d)["decision"] == "allow", member=True)
    library.add("reason", ("map",), "string", lambda d: _decision(d)["reason"], member=True)
    library.add("errored", ("map",), "bool", lambda d: bool(_decision(d)["error"]), member=True)
    library.add("error", ("map",), "string", lambda d: _decision(d)["error"], member=True)
    return library
