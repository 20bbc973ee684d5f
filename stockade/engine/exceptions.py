"""PolicyException matching: which exceptions exempt a given policy rule for the resource at hand."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stockade.engine.match import match_reasons
from stockade.engine.preconditions import ConditionEvaluationError, evaluate_conditions
from stockade.engine.wildcard import match as wildcard_match
from stockade.policy.model import PolicyException

if TYPE_CHECKING:
    from stockade.engine.policycontext import PolicyContext


def exceptions_for_rule(exceptions: list[PolicyException], policy_key: str, rule_name: str) -> list[PolicyException]:
    selected = []
    for exception in exceptions:
        for entry in exception.exceptions:
            if entry.get("policyName") != policy_key:
                continue
            if any(wildcard_match(str(pattern), rule_name) for pattern in entry.get("ruleNames") or []):
                selected.append(exception)
                break
    return selected


def matching_exceptions(pctx: PolicyContext, rule_name: str) -> list[PolicyException]:
    """Exceptions naming this policy/rule whose match and conditions hold for the request."""
    if not pctx.exceptions:
        return []  # the usual case: the policy key is not even worked out
    matched: list[PolicyException] = []
    for exception in exceptions_for_rule(pctx.exceptions, pctx.policy.key, rule_name):
        resource = pctx.resource_for_match
        reasons = match_reasons(
            {"match": exception.match},
            resource,
            pctx.gvk,
            info=pctx.request_info,
            namespace_labels=pctx.namespace_labels,
            operation=pctx.operation,
        )
        if reasons:
            continue
        if exception.conditions is not None:
            try:
                ok, _ = evaluate_conditions(exception.conditions, pctx.json_context, is_delete=pctx.is_delete)
            except ConditionEvaluationError:
                continue
            if not ok:
                continue
        matched.append(exception)
    return matched


def exception_keys(exceptions: list[PolicyException]) -> list[str]:
    return [f"{e.namespace}/{e.name}" if e.namespace else e.name for e in exceptions]
