"""Kyverno's admission checks of generate rules that need more than the document itself.

Pure functions; the caller supplies what the cluster knows:

* ``scope_problems`` needs the cluster-scoped kinds from discovery (``cluster_scoped_keys``): a target of a
  namespaced kind needs ``generate.namespace``, a cluster-wide one must not have it, a ``cloneList`` may not mix
  scopes, and a namespaced Policy may generate (and clone) only namespaced resources of its own namespace.
* ``update_problem`` compares a policy with the version it replaces: the parts of a generate rule that decide which
  downstream objects exist are immutable (Kyverno hashes each rule with its mutable fields reset and requires the new
  set of hashes to contain the old one); a changed generate pattern only warns that old targets go stale.
* ``permission_checks`` lists the SubjectAccessReviews Kyverno runs for the identity that writes downstream objects
  (get/create, plus update/delete when synchronized) and, for synchronized rules, list/get for the admission identity.

Problems are ``(path, message)`` pairs; ``stockade.lint.policies`` turns them into its ``PolicyProblem``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# Kyverno's warning text (kubectl prints it as "Warning: ..."), and its error for an immutable change
STALE_TARGETS_WARNING = "no synchronization will be performed to the old target resource upon policy updates: changes in the generate rule pattern could result in stale targets"
IMMUTABLE_CHANGE = "changes of immutable fields of a rule spec in a generate rule is disallowed"
DEPRECATED_GENERATE_EXISTING = "remove the deprecated field and use spec.generate[*].generateExisting instead"
SAME_KIND = "generation kind and match resource kind should not be the same"

Problem = tuple[str, str]


def cluster_scoped_keys(cluster_scoped: Iterable[tuple[str, str]]) -> frozenset[str]:
    """``{"group/version/Kind", "Kind"}`` for served cluster-scoped (apiVersion, kind) pairs, as Kyverno keys them."""
    keys: set[str] = set()
    for api_version, kind in cluster_scoped:
        keys.add(f"{api_version}/{kind}")
        keys.add(kind)
    return frozenset(keys)


def _rules(document: dict[str, Any]) -> list[dict[str, Any]]:
    spec = document.get("spec")
    rules = spec.get("rules") if isinstance(spec, dict) else None
    return [rule for rule in rules if isinstance(rule, dict)] if isinstance(rules, list) else []


def _generate(rule: dict[str, Any]) -> dict[str, Any] | None:
    generate = rule.get("generate")
    return generate if isinstance(generate, dict) else None


def _patterns(generate: dict[str, Any], path: str) -> list[tuple[dict[str, Any], str]]:
    """The generate pattern(s) of a rule: each ``foreach`` entry, or the rule's own."""
    foreach = generate.get("foreach")
    if isinstance(foreach, list):
        return [(entry, f"{path}.foreach[{index}]") for index, entry in enumerate(foreach) if isinstance(entry, dict)]
    return [(generate, path)]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def static_problems(document: dict[str, Any]) -> list[Problem]:
    """What Kyverno rejects in a policy's generate rules without asking the cluster."""
    problems: list[Problem] = []
    spec = document.get("spec") if isinstance(document.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    if spec.get("generateExistingOnPolicyUpdate") is not None:
        problems.append(("spec.generateExistingOnPolicyUpdate", DEPRECATED_GENERATE_EXISTING))
    for index, rule in enumerate(_rules(document)):
        generate = _generate(rule)
        if generate is None:
            continue
        path = f"spec.rules[{index}].generate"
        clone = generate.get("clone")
        clone_list = generate.get("cloneList")
        present = [
            generate.get("data") is not None,
            isinstance(clone, dict) and any(clone.values()),
            isinstance(clone_list, dict) and clone_list.get("kinds") is not None,
            generate.get("foreach") is not None,
        ]
        if sum(present) > 1:
            problems.append((path, "only one of generate patterns(data, clone, cloneList and foreach) can be specified"))
        match = rule.get("match")
        legacy_kinds = ((match.get("resources") or {}).get("kinds") if isinstance(match, dict) else None) or []
        if isinstance(legacy_kinds, list) and generate.get("kind") and generate.get("kind") in legacy_kinds:
            problems.append((path, SAME_KIND))
    return problems


def scope_problems(document: dict[str, Any], cluster_scoped: frozenset[str]) -> list[Problem]:
    """Kyverno's target-scope checks of generate rules against the served cluster-scoped kinds."""
    metadata = document.get("metadata") if isinstance(document.get("metadata"), dict) else {}
    assert isinstance(metadata, dict)
    policy_namespace = _text(metadata.get("namespace"))
    namespaced = document.get("kind") == "Policy"
    problems: list[Problem] = []
    for index, rule in enumerate(_rules(document)):
        generate = _generate(rule)
        if generate is None:
            continue
        for pattern, path in _patterns(generate, f"spec.rules[{index}].generate"):
            problems.extend(_pattern_scope(pattern, path, namespaced, policy_namespace, cluster_scoped))
    return problems


def _pattern_scope(pattern: dict[str, Any], path: str, namespaced: bool, policy_namespace: str, cluster_scoped: frozenset[str]) -> list[Problem]:
    problems: list[Problem] = []
    kind, api_version, namespace = _text(pattern.get("kind")), _text(pattern.get("apiVersion")), _text(pattern.get("namespace"))
    target_key = f"{api_version}/{kind}"
    clone = pattern.get("clone") if isinstance(pattern.get("clone"), dict) else {}
    assert isinstance(clone, dict)
    if namespaced:
        reason = ""
        if target_key in cluster_scoped:
            reason = f"the target must be a namespaced resource: {target_key}"
        elif namespace != policy_namespace:
            reason = f"a namespaced policy cannot generate resources in other namespaces, expected: {policy_namespace}, received: {namespace}"
        elif _text(clone.get("name")) and _text(clone.get("namespace")) != policy_namespace:
            reason = f"a namespaced policy cannot clone resources from other namespaces, expected: {policy_namespace}, received: {_text(clone.get('namespace'))}"
        if reason:
            problems.append((f"{path}.namespace", f"target resource scope mismatched: {reason} "))
    if kind:
        if target_key not in cluster_scoped and not namespace:
            problems.append((f"{path}.namespace", "target namespace must be set for a namespaced resource"))
        elif target_key in cluster_scoped and namespace:
            problems.append((f"{path}.namespace", "target namespace must not be set for a cluster-wide resource"))
    clone_list = pattern.get("cloneList") if isinstance(pattern.get("cloneList"), dict) else {}
    assert isinstance(clone_list, dict)
    kinds = [str(k) for k in clone_list.get("kinds") or []]
    if not kinds:
        return problems
    list_namespace = _text(clone_list.get("namespace"))
    if namespaced:
        for source in kinds:
            if source in cluster_scoped:
                problems.append((f"{path}.cloneList.kinds", f"the source in cloneList must be a namespaced resource: {source}"))
            if list_namespace != policy_namespace:
                problems.append((f"{path}.cloneList.namespace", f"a namespaced policy cannot clone resources from other namespace, expected: {policy_namespace}, received: {list_namespace}"))
    cluster_scope = kinds[0] in cluster_scoped
    for source in kinds[1:]:
        if cluster_scope != (source in cluster_scoped):
            problems.append((f"{path}.cloneList.kinds", "mixed scope of target resources is forbidden"))
            break
    if not cluster_scope and not list_namespace:
        problems.append((f"{path}.cloneList.namespace", "namespace is required for namespaced target resources"))
    elif cluster_scope and not namespaced and list_namespace:
        problems.append((f"{path}.cloneList.namespace", "namespace is forbidden for cluster-wide target resources"))
    return problems


# -- updates --------------------------------------------------------------------------------------------------------
def _pruned(value: Any) -> Any:
    """Empty and null fields dropped (as Go's omitempty serialisation does), so equal rules compare equal."""
    if isinstance(value, dict):
        out = {key: _pruned(item) for key, item in value.items()}
        return {key: item for key, item in out.items() if item not in (None, {}, [])}
    if isinstance(value, list):
        return [_pruned(item) for item in value]
    return value


def _rule_fingerprints(rule: dict[str, Any], keep_match: bool) -> tuple[str, str]:
    """(rule without its generate block, generate block) with the fields a policy update may change reset."""
    rest = copy.deepcopy(rule)
    generation = rest.pop("generate", None)
    generation = dict(generation) if isinstance(generation, dict) else {}
    if not keep_match:  # without synchronization, matching may change: no downstream object can go stale
        rest.pop("match", None)
    generation["synchronize"] = True
    generation["orphanDownstreamOnPolicyDelete"] = True
    for mutable in ("data", "foreach", "generateExisting"):
        generation.pop(mutable, None)
    return json.dumps(_pruned(rest), sort_keys=True), json.dumps(_pruned(generation), sort_keys=True)


def update_problem(new: dict[str, Any], old: dict[str, Any]) -> tuple[str, str]:
    """``(warning, error)`` of replacing ``old`` with ``new`` (empty strings when the change is fine)."""
    old_rules = [rule for rule in _rules(old) if _generate(rule) is not None]
    new_rules = [rule for rule in _rules(new) if _generate(rule) is not None]
    keep_match = any(bool((_generate(rule) or {}).get("synchronize")) for rule in old_rules)
    old_prints = [_rule_fingerprints(rule, keep_match) for rule in old_rules]
    new_prints = [_rule_fingerprints(rule, keep_match) for rule in new_rules]
    if not {g for _, g in new_prints} >= {g for _, g in old_prints}:
        return STALE_TARGETS_WARNING, ""
    if not {r for r, _ in new_prints} >= {r for r, _ in old_prints}:
        return "", IMMUTABLE_CHANGE
    return "", ""


# -- permissions ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PermissionCheck:
    """Verbs ``user`` (``background`` or ``admission``) needs on a kind (``group/version/Kind``) in a namespace."""

    path: str
    user: str
    verbs: tuple[str, ...]
    api_version: str
    kind: str
    namespace: str
    subresource: str


def _split_subresource(kind: str) -> tuple[str, str]:
    kind, _, subresource = kind.partition("/")
    return kind, subresource


def _has_variable(text: str) -> bool:
    return "{{" in text


def permission_checks(document: dict[str, Any]) -> list[PermissionCheck]:
    """The access checks Kyverno makes before it admits a policy with generate rules, in its order."""
    checks: list[PermissionCheck] = []
    for index, rule in enumerate(_rules(document)):
        generate = _generate(rule)
        if generate is None:
            continue
        path = f"spec.rules[{index}].generate"
        synchronized = bool(generate.get("synchronize"))
        users: list[tuple[str, tuple[str, ...]]] = [("admission", ("list", "get"))] if synchronized else []
        users.append(("background", ("get", "create", "update", "delete") if synchronized else ("get", "create")))
        for user, verbs in users:
            for pattern, where in _patterns(generate, path):
                target = _pattern_target(pattern)
                if target is None:
                    continue
                api_version, kind, subresource = target
                if _has_variable(f"{api_version}/{kind}"):
                    continue  # Kyverno skips kinds it cannot resolve before a trigger arrives
                checks.append(PermissionCheck(where, user, verbs, api_version, kind, _text(pattern.get("namespace")), subresource))
    return checks


def _pattern_target(pattern: dict[str, Any]) -> tuple[str, str, str] | None:
    """(apiVersion, kind, subresource) a pattern writes: its kind, or the first cloneList kind (Kyverno checks only
    that one)."""
    clone_list = pattern.get("cloneList") if isinstance(pattern.get("cloneList"), dict) else {}
    assert isinstance(clone_list, dict)
    kinds = [str(k) for k in clone_list.get("kinds") or []]
    if kinds:
        api_version, _, kind = kinds[0].rpartition("/")
        kind, subresource = _split_subresource(kind)
        return api_version, kind, subresource
    kind, subresource = _split_subresource(_text(pattern.get("kind")))
    if not kind:
        return None
    return _text(pattern.get("apiVersion")), kind, subresource


def permission_message(user: str, check: PermissionCheck, missing: list[str]) -> str:
    """Kyverno's wording for missing permissions."""
    resource = f"{check.api_version}/{check.kind}" if check.api_version else check.kind
    if check.subresource:
        resource += f"/{check.subresource}"
    message = f"{user} requires permissions {','.join(missing)} for resource {resource}"
    if check.namespace:
        message += f" in namespace {check.namespace}"
    return f"path: {check.path}..: {message}"
