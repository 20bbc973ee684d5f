"""``stockade apply --cluster``: the resources come from the live cluster, and the policies' lookups go to it.

Kyverno's CLI in cluster mode lists every kind any given policy matches (a ClusterPolicy's rules, autogen rules
included, name kinds; the CEL kinds and admission policies name ``matchConstraints.resourceRules``), in one namespace
(``--namespace``) or everywhere, cluster-scoped kinds included unless a namespace is given (their listing fails
there).  ``--cluster-wide-resources`` lists the cluster-scoped kinds alone, plus the namespace's objects when one is
given.  ``-r NAME`` keeps the listed objects of that name, and it is an error when none has it.

Lookups are answered by the API server through the same `ClusterData` the webhook and the controllers use: configMap
and apiCall context entries, generate clone sources, namespace labels and Namespace objects, the CEL ``resource``,
``http`` and ``globalContext`` libraries, and the parameter objects of admission policies' ``paramRef``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stockade.controllers.clusterdata import ClusterCelHttp, ClusterCelResources, ClusterData, ClusterGlobalContext, resources_for_rules
from stockade.controllers.webhookconfig import ApiResource
from stockade.errors import StockadeError
from stockade.kube.errors import KubeError
from stockade.policy.resources import PolicySet


class ClusterResourceMissing(StockadeError, LookupError):
    """``-r NAME`` in cluster mode named a resource none of the listed objects has."""

    def __init__(self, name: str) -> None:
        super().__init__(f"{name} not found in cluster")
        self.name = name


class ClusterUnavailable(StockadeError, RuntimeError):
    """The cluster cannot be reached or its kubeconfig cannot be used."""


def connect(kubeconfig: str | None, context: str | None) -> ClusterData:
    """Uncached reads against the cluster the kubeconfig (``--kubeconfig``, ``$KUBECONFIG``, ``~/.kube/config``) and
    ``--context`` name."""
    from stockade.kube.connection import load_api_client

    try:
        client = load_api_client(kubeconfig, context)
    except Exception as exc:  # a missing or malformed kubeconfig, an unknown context
        raise ClusterUnavailable(f"cannot load the cluster configuration: {exc}") from None
    cluster = ClusterData(client, ttl_seconds=0.0)
    cluster.global_context = ClusterGlobalContext(cluster)
    try:
        cluster.api_resources()
    except KubeError as exc:
        raise ClusterUnavailable(str(exc)) from None
    return cluster


def _rule_kinds(rule: dict[str, Any]) -> list[str]:
    """Kinds a rule's match block names (top-level ``resources`` and every ``any``/``all`` filter), as Kyverno's CLI
    collects them to know what to list."""
    found = rule.get("match")
    match: dict[str, Any] = found if isinstance(found, dict) else {}
    kinds = list(((match.get("resources") or {}).get("kinds")) or [])
    for mode in ("any", "all"):
        for item in match.get(mode) or []:
            if isinstance(item, dict):
                kinds.extend(((item.get("resources") or {}).get("kinds")) or [])
    return [str(k) for k in kinds]


def kinds_to_list(policy_set: PolicySet, cluster: ClusterData) -> list[ApiResource]:
    """Served resources the policies can match, one per (group, resource)."""
    chosen: dict[tuple[str, str], ApiResource] = {}

    def add(resources: Iterable[ApiResource]) -> None:
        for resource in resources:
            chosen.setdefault((resource.group, resource.resource), resource)

    for policy in policy_set.kyverno:
        for rule in policy.rules:
            for kind in _rule_kinds(rule.raw):
                add(cluster.resources_for_selector(kind))
    served = cluster.api_resources()
    for document in [*policy_set.cel, *policy_set.admission]:
        if document.kind == "PolicyException" or document.kind.endswith("Binding"):
            continue
        constraints = (document.data.get("spec") or {}).get("matchConstraints")
        if isinstance(constraints, dict):
            add(resources_for_rules(served, [r for r in constraints.get("resourceRules") or [] if isinstance(r, dict)]))
    return sorted(chosen.values(), key=lambda r: (r.group, r.resource))


def list_resources(
    cluster: ClusterData,
    kinds: list[ApiResource],
    *,
    namespace: str = "",
    cluster_wide: bool = False,
    names: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """The objects to evaluate, sorted by kind, namespace and name.  A kind that cannot be listed (forbidden, gone)
    is left out, as Kyverno's CLI does; ``names`` keeps the objects with one of those names, each required."""
    found: dict[tuple[str, str, str, str], dict[str, Any]] = {}

    def collect(resource: ApiResource, where: str) -> None:
        try:
            items = cluster.list_resource(resource, where, cached=False)
        except KubeError:
            return
        for item in items:
            metadata = item.get("metadata") or {}
            key = (resource.group, resource.kind, str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
            found.setdefault(key, item)

    if cluster_wide:
        for resource in kinds:
            if not resource.namespaced:
                collect(resource, "")
    if not cluster_wide or namespace:
        for resource in kinds:
            if namespace and not resource.namespaced:
                continue  # a cluster-scoped kind has no objects inside a namespace
            if cluster_wide and not namespace and not resource.namespaced:
                continue
            collect(resource, namespace)
    listed = [found[key] for key in sorted(found, key=lambda k: (k[1], k[2], k[3], k[0]))]
    wanted = list(names)
    if not wanted:
        return listed
    kept: list[dict[str, Any]] = []
    for name in wanted:
        matching = [item for item in listed if (item.get("metadata") or {}).get("name") == name and all(item is not k for k in kept)]
        if not matching:
            raise ClusterResourceMissing(name)
        kept.extend(matching)
    return kept


def namespaces(cluster: ClusterData) -> dict[str, dict[str, Any]]:
    """Every Namespace object by name (one list call): their labels for namespace selectors and PolicyExceptions,
    the objects for CEL's ``namespaceObject``."""
    try:
        items = cluster.list_objects("v1", "Namespace", cached=False)
    except KubeError:
        return {}
    return {str((item.get("metadata") or {}).get("name") or ""): item for item in items}


def admission_params(policy_set: PolicySet, cluster: ClusterData) -> list[dict[str, Any]]:
    """Objects of every ``paramKind`` the admission policies (and CEL policies) name, from all namespaces: their
    bindings' ``paramRef`` selects among them."""
    params: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for document in [*policy_set.admission, *policy_set.cel]:
        param_kind = (document.data.get("spec") or {}).get("paramKind")
        if not isinstance(param_kind, dict) or not param_kind.get("kind"):
            continue
        key = (str(param_kind.get("apiVersion") or ""), str(param_kind["kind"]))
        if key in seen:
            continue
        seen.add(key)
        try:
            params.extend(cluster.list_objects(key[0], key[1], cached=False))
        except KubeError:
            continue
    return params


def cel_providers(cluster: ClusterData) -> dict[str, Any]:
    """The CEL libraries answered by the cluster, as the webhook builds them."""
    return {
        "resource": ClusterCelResources(cluster),
        "http": ClusterCelHttp(),
        "globalContext": cluster.global_context or ClusterGlobalContext(cluster),
    }
