"""``matchConstraints`` (Kubernetes ``MatchResources``): resource rules, exclusions and label selectors."""

from __future__ import annotations

from typing import Any

from stockade.celpolicy.request import AdmissionInput
from stockade.engine.match import selector_matches
from stockade.policy.resources import is_cluster_scoped


def _listed(values: list[Any] | None, actual: str) -> bool:
    return any(str(v) == "*" or str(v) == actual for v in values or [])


def _resource_listed(resources: list[Any] | None, resource: str, subresource: str) -> bool:
    for entry in resources or []:
        entry = str(entry)
        name, _, sub = entry.partition("/")
        if entry == "*/*":
            return True
        if not sub:
            if not subresource and (name == "*" or name == resource):
                return True
            continue
        if (name == "*" or name == resource) and (sub == "*" or sub == subresource):
            return True
    return False


def rule_matches(rule: dict[str, Any], request: AdmissionInput, ignore_operations: bool = False) -> bool:
    """One ``NamedRuleWithOperations``; background kinds (DeletingPolicy) have no operation to match."""
    group, version = request.group_version
    if not ignore_operations and not _listed(rule.get("operations"), request.operation):
        return False
    if not _listed(rule.get("apiGroups"), group) or not _listed(rule.get("apiVersions"), version):
        return False
    if not _resource_listed(rule.get("resources"), request.resource, request.subresource):
        return False
    names = rule.get("resourceNames") or []
    if names and request.name not in [str(n) for n in names]:
        return False
    scope = str(rule.get("scope") or "*")
    if scope != "*":
        cluster = is_cluster_scoped(request.subject)
        if (scope == "Cluster") != cluster:
            return False
    return True


def _selector(selector: Any, labels: dict[str, Any]) -> bool:
    if not selector:
        return True
    return selector_matches(selector, labels)


def _rules(constraints: dict[str, Any], key: str) -> list[dict[str, Any]]:
    return [rule for rule in constraints.get(key) or [] if isinstance(rule, dict)]


def resource_rules_match(constraints: dict[str, Any], request: AdmissionInput, ignore_operations: bool = False, *, exclude_by_operation: bool = False) -> bool:
    """The resource-rule part of ``constraints``: some ``resourceRules`` entry lists the request (no entries: any
    request) and no ``excludeResourceRules`` entry does.  ``ignore_operations``: the rules match whatever operations
    they list; ``exclude_by_operation``: the exclusions still check theirs."""
    rules = _rules(constraints, "resourceRules")
    if rules and not any(rule_matches(rule, request, ignore_operations) for rule in rules):
        return False
    ignore_excluded = ignore_operations and not exclude_by_operation
    return not any(rule_matches(rule, request, ignore_excluded) for rule in _rules(constraints, "excludeResourceRules"))


def constraints_match(constraints: dict[str, Any] | None, request: AdmissionInput, ignore_operations: bool = False) -> bool:
    """Whether ``constraints`` select the request; a policy without constraints matches nothing."""
    if not constraints:
        return False
    if not resource_rules_match(constraints, request, ignore_operations):
        return False
    namespace_selector = constraints.get("namespaceSelector")
    if namespace_selector and (request.namespace or request.resource == "namespaces"):
        if not _selector(namespace_selector, request.labels_for_namespace_selector()):
            return False
    object_selector = constraints.get("objectSelector")
    if object_selector:
        candidates = [o for o in (request.object, request.old_object) if o]
        if not any(_selector(object_selector, (o.get("metadata") or {}).get("labels") or {}) for o in candidates):
            return False
    return True


def has_selector(constraints: dict[str, Any] | None) -> bool:
    constraints = constraints or {}
    return bool(constraints.get("namespaceSelector") or constraints.get("objectSelector"))
