"""``any``/``all`` condition blocks (preconditions, deny, exception conditions), with Kyverno's short-circuiting."""

from __future__ import annotations

from typing import Any

from stockade.engine.conditions import ConditionError, evaluate_condition
from stockade.engine.context import EngineContext
from stockade.engine.variables import SubstitutionError, substitute_all
from stockade.errors import StockadeError


class ConditionEvaluationError(StockadeError):
    """A condition could not be evaluated (variable missing, unknown operator...)."""


def _join(messages: list[str], separator: str) -> str:
    return separator.join(message for message in messages if message)


def evaluate_condition_entry(condition: dict[str, Any], ctx: EngineContext, *, is_delete: bool = False) -> tuple[bool, str]:
    try:
        key = substitute_all(condition.get("key"), ctx, is_delete=is_delete)
    except SubstitutionError as exc:
        raise ConditionEvaluationError(f"failed to substitute variables in condition key: {exc}") from None
    try:
        value = substitute_all(condition.get("value"), ctx, is_delete=is_delete)
    except SubstitutionError as exc:
        raise ConditionEvaluationError(f"failed to substitute variables in condition value: {exc}") from None
    operator = str(condition.get("operator", ""))
    try:
        result = evaluate_condition(key, operator, value)
    except ConditionError as exc:
        raise ConditionEvaluationError(str(exc)) from None
    return result, str(condition.get("message") or "")


def _evaluate_any_all(block: dict[str, Any], ctx: EngineContext, is_delete: bool) -> tuple[bool, str]:
    any_conditions = block.get("any")
    all_conditions = block.get("all") or []
    any_result = True
    true_messages: list[str] = []
    false_messages: list[str] = []
    if any_conditions is not None:
        any_result = False
        for condition in any_conditions:
            ok, message = evaluate_condition_entry(condition, ctx, is_delete=is_delete)
            if ok:
                any_result = True
                true_messages.append(message)
                break
            false_messages.append(message)
    all_result = True
    for condition in all_conditions:
        ok, message = evaluate_condition_entry(condition, ctx, is_delete=is_delete)
        if not ok:
            all_result = False
            false_messages.append(message)
            break
        true_messages.append(message)
    if any_result and all_result:
        return True, _join(true_messages, "; ")
    return False, _join(false_messages, "; ")


def evaluate_conditions(conditions: Any, ctx: EngineContext, *, is_delete: bool = False) -> tuple[bool, str]:
    """True when conditions hold (absent conditions hold); the message explains the outcome."""
    if conditions is None:
        return True, ""
    if isinstance(conditions, list):
        true_messages: list[str] = []
        for condition in conditions:
            if isinstance(condition, dict) and ("any" in condition or "all" in condition) and "key" not in condition:
                ok, message = _evaluate_any_all(condition, ctx, is_delete)
            else:
                ok, message = evaluate_condition_entry(condition, ctx, is_delete=is_delete)
            if not ok:
                return False, message
            true_messages.append(message)
        return True, _join(true_messages, ";")
    if isinstance(conditions, dict):
        return _evaluate_any_all(conditions, ctx, is_delete)
    raise ConditionEvaluationError("invalid condition")
