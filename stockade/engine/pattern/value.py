"""Matching one resource value against one leaf of a validation pattern (Kyverno's ``pattern.Validate``).

A string leaf is a small expression language: ``|`` separates alternatives, ``&`` joins requirements, each
requirement may start with ``>=``, ``<=``, ``>``, ``<`` or ``!``, and ``a-b`` / ``a!-b`` are inclusive ranges.
Operands are compared as Go durations if both sides parse as one, else as Kubernetes quantities, else as
strings with wildcards (equality and inequality only).  Parsing results are cached per text because policies
repeat the same few operands for every resource.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Any

from stockade.gofmt import go_float_e, go_parse_float
from stockade.engine.wildcard import match as wildcard_match
from stockade.units.duration import DurationError, parse_duration
from stockade.units.quantity import QuantityError, parse_quantity

__all__ = [
    "EQUAL",
    "IN_RANGE",
    "NOT_IN_RANGE",
    "match_value",
    "operator_of",
    "split_range",
]

EQUAL = ""
MORE_EQUAL = ">="
LESS_EQUAL = "<="
NOT_EQUAL = "!"
MORE = ">"
LESS = "<"
IN_RANGE = "-"
NOT_IN_RANGE = "!-"

_BOUND = r"([-|+]?[0-9]+(?:\.[0-9]+)?[A-Za-z]*)"
_IN_RANGE_RE = re.compile(rf"^{_BOUND}-{_BOUND}$")
_NOT_IN_RANGE_RE = re.compile(rf"^{_BOUND}!-{_BOUND}$")


@lru_cache(maxsize=4096)
def operator_of(pattern: str) -> str:
    """The operator a pattern string starts with (Kyverno's ``GetOperatorFromStringPattern``)."""
    if len(pattern) < 2:
        return EQUAL
    for prefix in (MORE_EQUAL, LESS_EQUAL, MORE, LESS, NOT_EQUAL):
        if pattern.startswith(prefix):
            return prefix
    if _NOT_IN_RANGE_RE.match(pattern):
        return NOT_IN_RANGE
    if _IN_RANGE_RE.match(pattern):
        return IN_RANGE
    return EQUAL


def split_range(pattern: str, negated: bool) -> tuple[str, str] | None:
    found = (_NOT_IN_RANGE_RE if negated else _IN_RANGE_RE).match(pattern)
    if found is None:
        return None
    return found.group(1), found.group(2)


@lru_cache(maxsize=8192)
def duration_or_none(text: str) -> int | None:
    """Nanoseconds of a Go duration string, None when it is not one; cached, as patterns and conditions compare the
    same policy operands on every request."""
    try:
        return parse_duration(text)
    except DurationError:
        return None


@lru_cache(maxsize=8192)
def quantity_value_or_none(text: str) -> Any:
    """The value of a Kubernetes quantity string, None when it is not one; cached like ``duration_or_none``."""
    try:
        return parse_quantity(text).value
    except QuantityError:
        return None


def _number_text(value: Any) -> str | None:
    """Kyverno's ``convertNumberToString``: nil counts as zero, floats print with six decimals."""
    if value is None:
        return "0"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        if math.isnan(value):
            return "NaN"
        return f"{value:.6f}"
    return None


def _compare(left: Any, right: Any, operator: str) -> bool:
    if operator == EQUAL:
        return bool(left == right)
    if operator == NOT_EQUAL:
        return bool(left != right)
    if operator == MORE:
        return bool(left > right)
    if operator == LESS:
        return bool(left < right)
    if operator == MORE_EQUAL:
        return bool(left >= right)
    if operator == LESS_EQUAL:
        return bool(left <= right)
    return False


def _string_form(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if value is None:
        return None
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float_e(value)
    return None


def _validate_operand(value: Any, operand: str, operator: str) -> bool:
    pattern_duration = duration_or_none(operand)
    if pattern_duration is not None:
        text = _number_text(value)
        if text is not None:
            value_duration = duration_or_none(text)
            if value_duration is not None:
                return _compare(value_duration, pattern_duration, operator)
    pattern_quantity = quantity_value_or_none(operand)
    if pattern_quantity is not None:
        text = _number_text(value)
        if text is not None:
            value_quantity = quantity_value_or_none(text)
            if value_quantity is not None:
                return _compare(value_quantity, pattern_quantity, operator)
    if operator != EQUAL and operator != NOT_EQUAL:
        return False  # ordering makes no sense for plain strings
    text = _string_form(value)
    if text is None:
        return False
    matched = wildcard_match(operand, text)
    return not matched if operator == NOT_EQUAL else matched


def _validate_condition(value: Any, condition: str) -> bool:
    operator = operator_of(condition)
    if operator == IN_RANGE:
        bounds = split_range(condition, negated=False)
        if bounds is None:
            return False
        return _validate_condition(value, ">= " + bounds[0]) and _validate_condition(value, "<= " + bounds[1])
    if operator == NOT_IN_RANGE:
        bounds = split_range(condition, negated=True)
        if bounds is None:
            return False
        return _validate_condition(value, "< " + bounds[0]) or _validate_condition(value, "> " + bounds[1])
    return _validate_operand(value, condition[len(operator):].strip(), operator)


@lru_cache(maxsize=4096)
def _alternatives(pattern: str) -> tuple[tuple[str, ...], ...]:
    """``a & b | c`` → ((a, b), (c,)); Go trims only spaces here, not other whitespace."""
    return tuple(
        tuple(part.strip(" ") for part in alternative.strip(" ").split("&")) for alternative in pattern.split("|")
    )


def _match_string_pattern(value: Any, pattern: str) -> bool:
    if value == pattern and isinstance(value, str):
        return True
    for requirements in _alternatives(pattern):
        if all(_validate_condition(value, requirement) for requirement in requirements):
            return True
    return False


def _match_float_pattern(value: Any, pattern: float) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return pattern == math.trunc(pattern) and int(pattern) == value
    if isinstance(value, float):
        return value == pattern
    if isinstance(value, str):
        parsed = go_parse_float(value)
        return parsed is not None and parsed == pattern
    return False


def _match_int_pattern(value: Any, pattern: int) -> bool:
    # Kyverno decodes policies into float64, so integral patterns follow the float rules, kept exact here.
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value == pattern
    if isinstance(value, float):
        return value == pattern
    if isinstance(value, str):
        parsed = go_parse_float(value)
        return parsed is not None and parsed == pattern
    return False


def _match_nil_pattern(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value == 0
    if isinstance(value, str):
        return value == ""
    return False


def match_value(value: Any, pattern: Any) -> bool:
    """Whether a single resource value satisfies a single pattern leaf.

    Maps only check that the value is a map (their content is walked by the tree validator); arrays are not
    valid leaves.
    """
    if isinstance(pattern, str):
        return _match_string_pattern(value, pattern)
    if pattern is None:
        return _match_nil_pattern(value)
    if isinstance(pattern, bool):
        return isinstance(value, bool) and value == pattern
    if isinstance(pattern, int):
        return _match_int_pattern(value, pattern)
    if isinstance(pattern, float):
        return _match_float_pattern(value, pattern)
    if isinstance(pattern, dict):
        return isinstance(value, dict)
    return False
