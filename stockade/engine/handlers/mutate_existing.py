"""``mutate.targets`` (mutate existing): the trigger stays untouched; the patch goes to other, already stored objects.

The engine only computes the patched targets (each ``RuleResponse.patched_target``); writing them back is the job of
whoever owns a cluster connection.  Targets come from ``lookup``: test data offline, the API server in a cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stockade.engine.context import ContextError
from stockade.engine.contextloader import ContextLoadError
from stockade.engine.handlers.mutate import ForEachMutator, _mutate_once, success_message
from stockade.engine.match import selector_matches
from stockade.engine.policycontext import PolicyContext
from stockade.engine.preconditions import ConditionEvaluationError, evaluate_conditions
from stockade.engine.response import ERROR, PASS, SKIP, RuleResponse
from stockade.engine.variables import SubstitutionError, substitute_all
from stockade.engine.wildcard import contains_wildcard
from stockade.engine.wildcard import match as wildcard_match
from stockade.errors import StockadeError
from stockade.jmespath import JMESPathError
from stockade.policy.model import RULE_TYPE_MUTATION, Rule

ResourceLookup = Callable[[str, str, str, "str | None"], list[dict[str, Any]]]

# Per-target fields: evaluated once the target is known, so they must not be substituted with the selector.
_PER_TARGET_FIELDS = ("context", "preconditions")


def _resolve_selector(pctx: PolicyContext, index: int, spec: dict[str, Any]) -> dict[str, Any]:
    selector = {key: value for key, value in spec.items() if key not in _PER_TARGET_FIELDS}
    try:
        resolved = substitute_all(selector, pctx.json_context, is_delete=pctx.is_delete)
    except SubstitutionError as exc:
        raise ValueError(f"failed to substitute variables in target[{index}]: {exc}") from exc
    if not isinstance(resolved, dict):
        raise ValueError(f"target[{index}] must be an object")
    return resolved


class TargetNotFound(StockadeError):
    """A target named exactly (namespace and name, no wildcard) does not exist: Kyverno reads such a target with a
    GET, whose NotFound makes the rule an error (so the trigger's work is retried), not a rule without targets."""


def _find_targets(pctx: PolicyContext, selector: dict[str, Any], lookup: ResourceLookup) -> list[dict[str, Any]]:
    """The targets of one resolved selector, found as Kyverno's GetResources finds them: a namespace and a name
    without wildcards read that one object (its label selector unused); otherwise the objects of the
    apiVersion/kind whose namespace and name match the (wildcard) patterns and whose labels match the selector.
    ``uid`` selects nothing, as in Kyverno."""
    namespace_pattern = str(selector.get("namespace") or "")
    if pctx.policy.namespace:
        namespace_pattern = pctx.policy.namespace  # a namespaced Policy may only reach into its own namespace
    name_pattern = str(selector.get("name") or "")
    api_version = str(selector.get("apiVersion") or "")
    kind = str(selector.get("kind") or "").partition("/")[0]  # a subresource target (Node/status) is read as its parent
    if namespace_pattern and name_pattern and not contains_wildcard(namespace_pattern) and not contains_wildcard(name_pattern):
        found = lookup(api_version, kind, namespace_pattern, name_pattern)
        if not found:
            raise TargetNotFound(f"{api_version}/{kind} {namespace_pattern}/{name_pattern} not found")
        return found
    exact_namespace = namespace_pattern if namespace_pattern and not contains_wildcard(namespace_pattern) else ""
    matching = []
    for candidate in lookup(api_version, kind, exact_namespace, None):
        metadata = candidate.get("metadata") or {}
        if namespace_pattern and not wildcard_match(namespace_pattern, str(metadata.get("namespace") or "")):
            continue
        if name_pattern and not wildcard_match(name_pattern, str(metadata.get("name") or "")):
            continue
        if selector.get("selector") is not None and not selector_matches(selector["selector"], metadata.get("labels") or {}):
            continue
        matching.append(candidate)
    return matching


def _mutate_target(pctx: PolicyContext, rule: Rule, spec: dict[str, Any], target: dict[str, Any]) -> RuleResponse:
    ctx = pctx.json_context
    ctx.set("target", target)
    try:
        pctx.context_loader.load(spec.get("context") or [], ctx, rule.name, is_delete=pctx.is_delete)
    except (ContextLoadError, JMESPathError, ContextError, SubstitutionError) as exc:
        return RuleResponse(rule.name, RULE_TYPE_MUTATION, ERROR, f"failed to load context: {exc}")
    try:
        ok, message = evaluate_conditions(spec.get("preconditions"), ctx, is_delete=pctx.is_delete)
    except ConditionEvaluationError as exc:
        return RuleResponse(rule.name, RULE_TYPE_MUTATION, ERROR, f"failed to evaluate preconditions: {exc}", precondition_error=True)
    if not ok:
        return RuleResponse(rule.name, RULE_TYPE_MUTATION, SKIP, "; ".join(m for m in ("preconditions not met", message) if m))
    mutate = rule.mutate or {}
    if mutate.get("foreach"):
        outcome = ForEachMutator(pctx, rule, mutate["foreach"], target).mutate()
    else:
        outcome = _mutate_once(pctx, mutate, target)
    if outcome.status != PASS:
        return RuleResponse(rule.name, RULE_TYPE_MUTATION, outcome.status, outcome.message)
    return RuleResponse(rule.name, RULE_TYPE_MUTATION, PASS, success_message(outcome.resource), patched_target=outcome.resource)


def mutate_existing_rule(pctx: PolicyContext, rule: Rule, lookup: ResourceLookup | None) -> list[RuleResponse]:
    """One response per target found; a selector that cannot be resolved is an error of the rule."""
    if lookup is None:
        return [RuleResponse(rule.name, RULE_TYPE_MUTATION, ERROR, "mutate.targets needs access to existing resources, and none is configured")]
    responses: list[RuleResponse] = []
    ctx = pctx.json_context
    for index, spec in enumerate((rule.mutate or {}).get("targets") or []):
        if not isinstance(spec, dict):
            responses.append(RuleResponse(rule.name, RULE_TYPE_MUTATION, ERROR, f"mutate.targets[{index}] must be an object"))
            continue
        try:
            selector = _resolve_selector(pctx, index, spec)
        except ValueError as exc:
            responses.append(RuleResponse(rule.name, RULE_TYPE_MUTATION, ERROR, str(exc)))
            continue
        subresource = str(selector.get("kind") or "").partition("/")[2]
        try:
            targets = _find_targets(pctx, selector, lookup)
        except TargetNotFound as exc:
            responses.append(RuleResponse(rule.name, RULE_TYPE_MUTATION, ERROR, f"failed to load target[{index}]: {exc}"))
            continue
        for target in targets:
            ctx.checkpoint()
            try:
                pctx_resource = pctx.new_resource
                response = _mutate_target(pctx, rule, spec, target)
                response.target_subresource = subresource
                responses.append(response)
                pctx.new_resource = pctx_resource
            finally:
                ctx.reset()
    return responses
