"""``mutate`` rules: patchStrategicMerge, patchesJson6902 and foreach, each result feeding the next rule."""

from __future__ import annotations

from typing import Any

from stockade.engine.context import ContextError
from stockade.engine.contextloader import ContextLoadError
from stockade.engine.handlers.validate import add_element, evaluate_list
from stockade.engine.mutate import PatchError, apply_json6902, apply_strategic_merge
from stockade.engine.policycontext import PolicyContext
from stockade.engine.preconditions import ConditionEvaluationError, evaluate_conditions
from stockade.engine.response import ERROR, FAIL, PASS, SKIP, RuleResponse
from stockade.engine.variables import SubstitutionError, substitute_all
from stockade.jmespath import JMESPathError
from stockade.policy.model import RULE_TYPE_MUTATION, Rule

MUTATION = RULE_TYPE_MUTATION


class _Outcome:
    __slots__ = ("status", "resource", "message")

    def __init__(self, status: str, resource: dict[str, Any], message: str = "") -> None:
        self.status = status
        self.resource = resource
        self.message = message


def _error(message: str, error: Exception | None = None) -> _Outcome:
    return _Outcome(ERROR, {}, f"{message}: {error}" if error is not None else message)


def _apply_patches(resource: dict[str, Any], strategic: Any, json6902: Any) -> _Outcome:
    try:
        if strategic is not None:
            outcome = apply_strategic_merge(resource, strategic)
            if outcome.skipped:
                return _Outcome(SKIP, resource, outcome.message or "no patches applied")
            patched = outcome.resource
        elif json6902:
            patched = apply_json6902(resource, json6902)
        else:
            return _error("empty mutate rule")
    except PatchError as exc:
        return _error("failed to patch resource", exc)
    if patched == resource:
        return _Outcome(SKIP, resource, "no patches applied")
    return _Outcome(PASS, patched, "resource patched")


def _mutate_once(pctx: PolicyContext, mutate: dict[str, Any], resource: dict[str, Any]) -> _Outcome:
    # each patch is substituted from its own root: ``{{@}}`` names the value at the same path in the resource, as
    # Kyverno's path for it skips "mutate" and the patch's own key
    try:
        patches = {
            key: substitute_all(mutate[key], pctx.json_context, is_delete=pctx.is_delete)
            for key in ("patchStrategicMerge", "patchesJson6902")
            if mutate.get(key) is not None
        }
    except SubstitutionError as exc:
        return _error("variable substitution failed", exc)
    return _apply_patches(resource, patches.get("patchStrategicMerge"), patches.get("patchesJson6902"))


class ForEachMutator:
    def __init__(self, pctx: PolicyContext, rule: Rule, foreach: list[dict[str, Any]], resource: dict[str, Any], nesting: int = 0) -> None:
        self.pctx = pctx
        self.rule = rule
        self.foreach = foreach
        self.resource = resource
        self.nesting = nesting

    def mutate(self) -> _Outcome:
        apply_count = 0
        for foreach in self.foreach:
            try:
                elements = evaluate_list(str(foreach.get("list", "")), self.pctx)
            except (JMESPathError, ContextError) as exc:
                return _error(f"failed to evaluate list {foreach.get('list', '')}", exc)
            outcome = self._mutate_elements(foreach, elements)
            if outcome.status == ERROR:
                return _error("failed to mutate elements", Exception(outcome.message))
            if outcome.status != SKIP:
                apply_count += 1
                if outcome.status == PASS:
                    self.resource = outcome.resource
                self.pctx.set_resource(self.resource)
        message = f"{apply_count} elements processed"
        return _Outcome(PASS if apply_count else SKIP, self.resource, message)

    def _mutate_elements(self, foreach: dict[str, Any], elements: list[Any]) -> _Outcome:
        pctx = self.pctx
        ctx = pctx.json_context
        ctx.checkpoint()
        try:
            patched = self.resource
            reverse = foreach.get("patchStrategicMerge") is not None
            if foreach.get("order") is not None:
                reverse = foreach.get("order") == "Descending"
            indexed = list(enumerate(elements))
            if reverse:
                indexed.reverse()
            for index, element in indexed:
                if element is None:
                    continue
                ctx.restore()
                try:
                    add_element(pctx, element, index, self.nesting, False)
                except ValueError as exc:
                    return _error(f"failed to add element to mutate.foreach[{index}].context", exc)
                try:
                    pctx.context_loader.load(
                        foreach.get("context") or [], ctx, self.rule.name, foreach_index=index, is_delete=pctx.is_delete
                    )
                except (ContextLoadError, JMESPathError, ContextError, SubstitutionError) as exc:
                    return _error(f"failed to load to mutate.foreach[{index}].context", exc)
                try:
                    ok, _ = evaluate_conditions(foreach.get("preconditions"), ctx, is_delete=pctx.is_delete)
                except ConditionEvaluationError as exc:
                    return _error(f"failed to evaluate mutate.foreach[{index}].preconditions", exc)
                if not ok:
                    continue
                if foreach.get("foreach"):
                    outcome = ForEachMutator(pctx, self.rule, foreach["foreach"], patched, self.nesting + 1).mutate()
                else:
                    outcome = _mutate_once(pctx, foreach, patched)
                if outcome.status in (FAIL, ERROR):
                    return outcome
                if outcome.status == PASS:
                    patched = outcome.resource
            if patched != self.resource:
                return _Outcome(PASS, patched)
            return _Outcome(SKIP, patched, "no patches applied")
        finally:
            ctx.reset()
            pctx.element = None


def success_message(resource: dict[str, Any]) -> str:
    if not resource:
        return "mutated resource"
    metadata = resource.get("metadata") or {}
    kind, name, namespace = resource.get("kind", ""), metadata.get("name", ""), metadata.get("namespace", "")
    if not namespace:
        return f"mutated {kind}/{name}"
    return f"mutated {kind}/{name} in namespace {namespace}"


def mutate_resource_rule(pctx: PolicyContext, rule: Rule, resource: dict[str, Any]) -> tuple[dict[str, Any], RuleResponse | None]:
    """Apply one mutate rule; returns the (possibly) patched resource and the rule response."""
    mutate = rule.mutate or {}
    if mutate.get("foreach"):
        outcome = ForEachMutator(pctx, rule, mutate["foreach"], resource).mutate()
    else:
        outcome = _mutate_once(pctx, mutate, resource)
    message = success_message(outcome.resource) if outcome.status == PASS else outcome.message
    response = RuleResponse(rule.name, MUTATION, outcome.status, message)
    if outcome.status == PASS:
        return outcome.resource, response
    return resource, response
