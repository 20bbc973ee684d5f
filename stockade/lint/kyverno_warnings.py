"""The warnings Kyverno's policy webhook returns with an accepted (or refused) ClusterPolicy/Policy, in its words.

Kyverno's e2e tests grep ``kubectl apply``'s ``Warning:`` lines for these phrases, so each text keeps Kyverno's
sentence; a field path may stand in front of it.  Pure functions over the policy as it will be stored (unknown
fields pruned); the warnings that need the cluster (unknown kinds) are made in ``stockade.controllers.policychecks``.

Conditions, from Kyverno v1.19.1 (``pkg/validation/policy/validate.go`` and ``pkg/deprecations``):

* lower-case failure actions (``enforce``/``audit``) at the four places an action is written;
* the deprecated condition operators ``In``/``NotIn`` in validate deny conditions, in validate foreach
  preconditions and deny conditions (top-level foreach entries only) and in attestation conditions;
* a rule whose validate, mutate or image-validate section mentions ``replicas`` (or ``status``) while none of its
  kinds names the scale (status) subresource; the text searched is the section's JSON with deny conditions left out;
* a JSON patch on Pods, matched through ``match.resources.kinds``;
* a rule matching Pods alone in a policy whose autogen annotation leaves out some Pod controllers;
* ``predicateType`` in attestations;
* the legacy kinds themselves (``BuildKindWarning``), which the webhook adds for the kind of the request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from stockade.engine.conditions import DEPRECATED_OPERATORS
from stockade.engine.match import parse_kind_selector

AUTOGEN_ANNOTATION = "pod-policies.kyverno.io/autogen-controllers"
ALL_POD_CONTROLLERS = ("cronjob", "daemonset", "deployment", "job", "statefulset")
DEPRECATED_FAILURE_ACTIONS = ("enforce", "audit")
MIGRATION_GUIDE_URL = "https://kyverno.io/docs/guides/migration-to-cel/"
# legacy kyverno.io kinds and the policies.kyverno.io kinds that replace them
KIND_REPLACEMENTS = {
    "ClusterPolicy": "ValidatingPolicy, MutatingPolicy, GeneratingPolicy or ImageValidatingPolicy",
    "Policy": "NamespacedValidatingPolicy and the other namespaced policy types",
    "ClusterCleanupPolicy": "DeletingPolicy",
    "CleanupPolicy": "NamespacedDeletingPolicy",
    "PolicyException": "PolicyException",
}

CLUSTER_POLICY_NAMESPACE = "A clusterpolicy should not have the namespace defined"
JSON_PATCH_ON_POD = (
    "Pods managed by workload controllers should not be directly mutated using policies. "
    "Use the autogen feature or write policies that match Pod controllers."
)
POD_AUTOGEN_EXCLUSION = (
    "Policies that match Pods apply to all Pods including those created and managed by controllers excluded from "
    "autogen. Use preconditions to exclude the Pods managed by controllers which are excluded from autogen. Refer to "
    "https://kyverno.io/docs/policy-types/cluster-policy/autogen/ for details."
)
SCALE_SUBRESOURCE = "You are matching on replicas but not including the scale subresource in the policy."
STATUS_SUBRESOURCE = "You are matching on status but not including the status subresource in the policy."


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def go_quoted(items: tuple[str, ...] | list[str]) -> str:
    """A list of strings as Go's ``%+q`` prints it: ``["AllIn" "AnyIn"]``."""
    return "[" + " ".join(json.dumps(item) for item in items) + "]"


def kind_deprecation(group: str, version: str, kind: str) -> str:
    """Kyverno's warning for a request on a legacy kyverno.io kind, or "" for any other kind."""
    replacement = KIND_REPLACEMENTS.get(kind)
    if group != "kyverno.io" or replacement is None:
        return ""
    api_version = f"{group}/{version}" if version else group
    return (
        f"{api_version} {kind} is deprecated and will be removed in a future release; migrate to {replacement} "
        f"(policies.kyverno.io), see {MIGRATION_GUIDE_URL}"
    )


def failure_action_warnings(spec: dict[str, Any]) -> list[str]:
    """Each place a lower-case ``enforce``/``audit`` is written, in Kyverno's order."""
    paths: list[str] = []
    if spec.get("validationFailureAction") in DEPRECATED_FAILURE_ACTIONS:
        paths.append("spec.validationFailureAction")
    for index, override in enumerate(_list(spec.get("validationFailureActionOverrides"))):
        if _dict(override).get("action") in DEPRECATED_FAILURE_ACTIONS:
            paths.append(f"spec.validationFailureActionOverrides[{index}].action")
    for index, rule in enumerate(_list(spec.get("rules"))):
        validate = _dict(_dict(rule).get("validate"))
        if validate.get("failureAction") in DEPRECATED_FAILURE_ACTIONS:
            paths.append(f"spec.rules[{index}].validate.failureAction")
        for position, override in enumerate(_list(validate.get("failureActionOverrides"))):
            if _dict(override).get("action") in DEPRECATED_FAILURE_ACTIONS:
                paths.append(f"spec.rules[{index}].validate.failureActionOverrides[{position}].action")
    return [f"{path}: Validation failure actions enforce/audit are deprecated, use Enforce/Audit instead." for path in paths]


def _conditions(block: Any) -> Iterator[dict[str, Any]]:
    """The conditions of a block written as a list (the legacy form) or as ``{any: [...], all: [...]}``."""
    if isinstance(block, list):
        yield from (c for c in block if isinstance(c, dict))
    elif isinstance(block, dict):
        for key in ("any", "all"):
            yield from (c for c in _list(block.get(key)) if isinstance(c, dict))


def operator_warnings(rule: dict[str, Any]) -> list[str]:
    """One warning per condition using a deprecated operator where Kyverno looks for them."""
    blocks: list[Any] = []
    validate = _dict(rule.get("validate"))
    blocks.append(_dict(validate.get("deny")).get("conditions"))
    for each in _list(validate.get("foreach")):
        blocks += [_dict(each).get("preconditions"), _dict(_dict(each).get("deny")).get("conditions")]
    for entry in _list(rule.get("verifyImages")):
        for attestation in _list(_dict(entry).get("attestations")):
            blocks += _list(_dict(attestation).get("conditions"))
    warnings = []
    for block in blocks:
        for condition in _conditions(block):
            operator = condition.get("operator")
            if isinstance(operator, str) and operator in DEPRECATED_OPERATORS:
                warnings.append(f"Operator {operator} has been deprecated and will be removed soon. Use these instead: {go_quoted(DEPRECATED_OPERATORS[operator])}")
    return warnings


def rule_kinds(block: Any) -> list[str]:
    """Every kind a match/exclude block names: its own resources, then ``any``, then ``all``."""
    block = _dict(block)
    kinds = [k for k in _list(_dict(block.get("resources")).get("kinds")) if isinstance(k, str)]
    for key in ("any", "all"):
        for entry in _list(block.get(key)):
            kinds += [k for k in _list(_dict(_dict(entry).get("resources")).get("kinds")) if isinstance(k, str)]
    return kinds


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


def _without_deny_conditions(validate: dict[str, Any]) -> dict[str, Any]:
    if isinstance(validate.get("deny"), dict):
        return {**validate, "deny": {k: v for k, v in validate["deny"].items() if k != "conditions"}}
    return validate


def _subresource_warnings(section: Any, kinds: list[str]) -> list[str]:
    text = _compact(section)
    lowered = [kind.lower() for kind in kinds]
    warnings = []
    if "replicas" in text and not any("scale" in kind for kind in lowered):
        warnings.append(SCALE_SUBRESOURCE)
    if (".status" in text or '"status":' in text) and not any("status" in kind for kind in lowered):
        warnings.append(STATUS_SUBRESOURCE)
    return warnings


def subresource_warnings(rule: dict[str, Any]) -> list[str]:
    """The scale/status subresource hints for one rule."""
    kinds = rule_kinds(rule.get("match")) + rule_kinds(rule.get("exclude"))
    warnings: list[str] = []
    validate = rule.get("validate")
    if isinstance(validate, dict) and validate:
        warnings += _subresource_warnings(_without_deny_conditions(validate), kinds)
    mutate = rule.get("mutate")
    if isinstance(mutate, dict) and mutate:
        kinds = kinds + [str(_dict(t).get("kind") or "") for t in _list(mutate.get("targets"))]
        warnings += _subresource_warnings(mutate, kinds)
    entries = [_dict(e) for e in _list(rule.get("verifyImages"))]
    if any(_dict(e.get("validate")) for e in entries):
        for entry in entries:
            warnings += _subresource_warnings(_without_deny_conditions(_dict(entry.get("validate"))), kinds)
    return warnings


def _excludes_pod_controllers(metadata: dict[str, Any]) -> bool:
    value = _dict(metadata.get("annotations")).get(AUTOGEN_ANNOTATION)
    if not isinstance(value, str) or value == "none":
        return False
    return sorted(value.lower().split(",")) != list(ALL_POD_CONTROLLERS)


def rule_warnings(rule: dict[str, Any], path: str, metadata: dict[str, Any]) -> list[str]:
    """Kyverno's per-rule warnings, in its order."""
    warnings: list[str] = []
    mutate = _dict(rule.get("mutate"))
    if mutate.get("patchesJson6902") and "Pod" in rule_kinds({"resources": _dict(rule.get("match")).get("resources")}):
        warnings.append(JSON_PATCH_ON_POD)
    matched = {parse_kind_selector(kind)[2] for kind in rule_kinds(rule.get("match"))}
    if matched == {"Pod"} and _excludes_pod_controllers(metadata):
        warnings.append(POD_AUTOGEN_EXCLUSION)
    warnings += subresource_warnings(rule)
    for index, entry in enumerate(_list(rule.get("verifyImages"))):
        for position, attestation in enumerate(_list(_dict(entry).get("attestations"))):
            predicate = _dict(attestation).get("predicateType")
            if predicate:
                warnings.append(
                    f"{path}.verifyImages[{index}].attestations[{position}]: predicateType has been deprecated "
                    f"use 'type: {predicate}' instead of 'predicateType: {predicate}'"
                )
    warnings += operator_warnings(rule)
    return warnings


def policy_warnings(document: dict[str, Any]) -> list[str]:
    """Every warning Kyverno's validation gives a ClusterPolicy/Policy document (duplicates dropped, as the API
    server drops them from a response)."""
    metadata = _dict(document.get("metadata"))
    spec = _dict(document.get("spec"))
    warnings: list[str] = []
    if document.get("kind") == "ClusterPolicy" and metadata.get("namespace"):
        warnings.append(CLUSTER_POLICY_NAMESPACE)
    warnings += failure_action_warnings(spec)
    for index, rule in enumerate(_list(spec.get("rules"))):
        if isinstance(rule, dict):
            warnings += rule_warnings(rule, f"spec.rules[{index}]", metadata)
    return list(dict.fromkeys(warnings))
