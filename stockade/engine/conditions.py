"""Evaluation of one precondition / deny condition (Kyverno's ``variables/operator`` handlers).

Key and value arrive already variable-substituted.  Kyverno decodes every number in a condition as float64,
so Python ints are treated as floats wherever that makes a visible difference (``fmt.Sprint`` renders
1000000 as ``1e+06``).  Each operator deliberately keeps Kyverno's quirks, because policies in the wild rely on
them: string comparisons try Go durations, then Kubernetes quantities, then wildcards; the set operators match
wildcards in both directions and accept JSON-array strings and ``a-b`` range strings; type mismatches yield
``False`` rather than errors.  Operator names are case-insensitive.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from stockade.gofmt import go_parse_float, go_parse_int, go_sprint
from stockade.engine.pattern.value import IN_RANGE, duration_or_none, match_value, operator_of, quantity_value_or_none
from stockade.engine.wildcard import match as wildcard_match
from stockade.errors import StockadeError

__all__ = ["CONDITION_OPERATORS", "ConditionError", "DEPRECATED_OPERATORS", "evaluate_condition"]

_SECOND = 1_000_000_000


class ConditionError(StockadeError):
    """The condition cannot be evaluated at all (e.g. an unknown operator)."""


# -- parsing helpers -----------------------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _seconds_as_duration(value: Any) -> int | None:
    """Go's ``time.Duration(n) * time.Second`` (a float is truncated toward zero first)."""
    if _is_number(value):
        return int(value) * _SECOND
    return None


def _duration_pair(key: Any, value: Any) -> tuple[int, int] | None:
    """Kyverno's ``parseDuration``: at least one side must be a duration string other than ``"0"``;
    the other side may be a number of seconds."""
    key_duration = duration_or_none(key) if isinstance(key, str) and key != "0" else None
    value_duration = duration_or_none(value) if isinstance(value, str) and value != "0" else None
    if key_duration is None and value_duration is None:
        return None
    if key_duration is None:
        key_duration = _seconds_as_duration(key)
        if key_duration is None:
            return None
    if value_duration is None:
        value_duration = _seconds_as_duration(value)
        if value_duration is None:
            return None
    return key_duration, value_duration


def _deep_equal(left: Any, right: Any) -> bool:
    """``reflect.DeepEqual`` over JSON values decoded as float64 (so 1 equals 1.0 but not true)."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if _is_number(left) or _is_number(right):
        return _is_number(left) and _is_number(right) and left == right
    if isinstance(left, dict):
        if not isinstance(right, dict) or len(left) != len(right):
            return False
        return all(key in right and _deep_equal(item, right[key]) for key, item in left.items())
    if isinstance(left, list):
        if not isinstance(right, list) or len(left) != len(right):
            return False
        return all(_deep_equal(a, b) for a, b in zip(left, right))
    return type(left) is type(right) and left == right


def _sprint(value: Any) -> str:
    return go_sprint(value, numbers_are_floats=True)


class _Invalid(StockadeError):
    """The value has a type the set operators cannot use; the condition is then simply false."""


def _json_string_list(text: str) -> list[str]:
    """``json.Unmarshal`` into ``[]string``: raise _Invalid on anything else (``null`` gives an empty list)."""
    try:
        decoded = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, _Invalid):
        raise _Invalid from None
    if decoded is None:
        return []
    if not isinstance(decoded, list) or not all(isinstance(item, str) for item in decoded):
        raise _Invalid
    return decoded


def _reject_constant(_: str) -> Any:
    raise _Invalid  # NaN / Infinity are not JSON for Go


def _is_valid_json(text: str) -> bool:
    try:
        json.loads(text, parse_constant=_reject_constant)
    except (ValueError, _Invalid):
        return False
    return True


def _values_or_single(text: str) -> list[str]:
    """The newer set operators read a JSON-array string when the text is JSON, else the text itself."""
    if _is_valid_json(text):
        return _json_string_list(text)
    return [text]


def _either_way(left: str, right: str) -> bool:
    return wildcard_match(left, right) or wildcard_match(right, left)


def _key_as_text(key: Any) -> str | None:
    if isinstance(key, str):
        return key
    if isinstance(key, (int, float)):  # includes bool, which Go prints as true/false
        return _sprint(key)
    return None


# -- Equals / NotEquals --------------------------------------------------------------------------------------


def _equals(key: Any, value: Any) -> bool:
    if isinstance(key, bool):
        return isinstance(value, bool) and key == value
    if _is_number(key):
        if isinstance(value, bool):
            return False
        if _is_number(value):
            return bool(key == value)
        if isinstance(value, str):
            parsed = go_parse_float(value)
            return parsed is not None and parsed == key
        return False
    if isinstance(key, str):
        durations = _duration_pair(key, value)
        if durations is not None:
            return durations[0] == durations[1]
        key_quantity = quantity_value_or_none(key)
        if key_quantity is not None and isinstance(value, str):
            value_quantity = quantity_value_or_none(value)
            return value_quantity is not None and key_quantity == value_quantity
        if isinstance(value, str):
            return wildcard_match(value, key)
        return False
    if isinstance(key, (dict, list)):
        return type(value) is type(key) and _deep_equal(key, value)
    return False


def _not_equals(key: Any, value: Any) -> bool:
    if isinstance(key, bool):
        return not isinstance(value, bool) or key != value
    if _is_number(key):
        if isinstance(value, bool):
            return True
        if _is_number(value):
            return bool(key != value)
        if isinstance(value, str):
            parsed = go_parse_float(value)
            return parsed is None or parsed != key
        return True
    if isinstance(key, str):
        durations = _duration_pair(key, value)
        if durations is not None:
            return durations[0] != durations[1]
        key_quantity = quantity_value_or_none(key)
        if key_quantity is not None and isinstance(value, str):
            if value == "":
                return not wildcard_match(value, key)
            value_quantity = quantity_value_or_none(value)
            return value_quantity is None or key_quantity != value_quantity
        if isinstance(value, str):
            return not wildcard_match(value, key)
        return True
    if isinstance(key, (dict, list)):
        return type(value) is not type(key) or not _deep_equal(key, value)
    return False  # Kyverno has no handler for other key types in either direction


# -- numeric and duration ordering ---------------------------------------------------------------------------

_Compare = Callable[[Any, Any], bool]
_ORDERINGS: dict[str, _Compare] = {
    "greaterthanorequals": lambda a, b: a >= b,
    "greaterthan": lambda a, b: a > b,
    "lessthanorequals": lambda a, b: a <= b,
    "lessthan": lambda a, b: a < b,
}


def _numeric_with_number_key(key: float, value: Any, compare: _Compare) -> bool:
    if isinstance(value, bool):
        return False
    if _is_number(value):
        return compare(key, value)
    if isinstance(value, str):
        durations = _duration_pair(key, value)
        if durations is not None:
            return compare(*durations)
        parsed = go_parse_float(value)
        if parsed is not None:
            return compare(key, parsed)
        return False
    return False


_SEMVER_RE = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)


def _semver_key(text: str) -> tuple[Any, ...] | None:
    """A sortable key for a strict semantic version (blang/semver ``Parse``), None if not one."""
    found = _SEMVER_RE.fullmatch(text)
    if found is None:
        return None
    major, minor, patch, prerelease, _ = found.groups()
    if prerelease is None:
        return (int(major), int(minor), int(patch), 1, ())
    identifiers: list[tuple[int, Any]] = []
    for identifier in prerelease.split("."):
        if identifier.isdigit():
            if len(identifier) > 1 and identifier[0] == "0":
                return None
            identifiers.append((0, int(identifier)))
        else:
            identifiers.append((1, identifier))
    return (int(major), int(minor), int(patch), 0, tuple(identifiers))


def _numeric_with_string_key(key: str, value: Any, compare: _Compare) -> bool:
    durations = _duration_pair(key, value)
    if durations is not None:
        return compare(*durations)
    if isinstance(value, str):
        key_quantity = quantity_value_or_none(key)
        if key_quantity is not None:
            value_quantity = quantity_value_or_none(value)
            if value_quantity is not None:
                return compare(key_quantity, value_quantity)
    number = go_parse_float(key)
    if number is None:
        integer = go_parse_int(key)
        number = float(integer) if integer is not None else None
    if number is not None:
        return _numeric_with_number_key(number, value, compare)
    version = _semver_key(key)
    if version is not None:
        if not isinstance(value, str):
            return False
        other = _semver_key(value)
        return other is not None and compare(version, other)
    return False


def _numeric(key: Any, value: Any, compare: _Compare) -> bool:
    if isinstance(key, bool):
        return False
    if _is_number(key):
        return _numeric_with_number_key(key, value, compare)
    if isinstance(key, str):
        return _numeric_with_string_key(key, value, compare)
    return False


def _as_duration(side: Any) -> int | None:
    if isinstance(side, bool):
        return None
    if _is_number(side):
        return int(side) * _SECOND
    if isinstance(side, str):
        return duration_or_none(side)
    return None


def _duration_ordering(key: Any, value: Any, compare: _Compare) -> bool:
    """The deprecated ``Duration*`` operators: strings are Go durations, numbers are seconds."""
    key_duration = _as_duration(key)
    if key_duration is None:
        return False
    value_duration = _as_duration(value)
    if value_duration is None:
        return False
    return compare(key_duration, value_duration)


# -- deprecated In / NotIn -----------------------------------------------------------------------------------


def _legacy_key_in(key: str, value: Any) -> bool:
    if isinstance(value, list):
        return any(_either_way(_sprint(item), key) for item in value)
    if isinstance(value, str):
        if wildcard_match(value, key):
            return True
        return key in _json_string_list(value)
    raise _Invalid


def _legacy_set_in(keys: list[str], value: Any, negate: bool) -> bool:
    if isinstance(value, list):
        if not all(isinstance(item, str) for item in value):
            raise _Invalid
        available = set(value)
    elif isinstance(value, str):
        if len(keys) == 1 and keys[0] == value:
            return True  # Kyverno answers true here for NotIn as well
        available = set(_json_string_list(value))
    else:
        raise _Invalid
    if negate:
        return any(key not in available for key in keys)
    return all(key in available for key in keys)


def _legacy_in(key: Any, value: Any, negate: bool) -> bool:
    try:
        if isinstance(key, list):
            if not all(isinstance(item, str) for item in key):
                raise ConditionError("the key of an In/NotIn condition must be a string or a list of strings")
            return _legacy_set_in(key, value, negate)
        text = _key_as_text(key)
        if text is None:
            return False
        found = _legacy_key_in(text, value)
    except _Invalid:
        return False
    return not found if negate else found


# -- AnyIn / AllIn / AnyNotIn / AllNotIn ---------------------------------------------------------------------


def _single_key_in(key: str, value: Any) -> bool:
    """Shared by the Any* and All* operators for a scalar key."""
    if isinstance(value, list):
        return any(_either_way(_sprint(item), key) for item in value)
    if isinstance(value, str):
        if wildcard_match(value, key):
            return True
        if operator_of(value) == IN_RANGE:
            return match_value(key, value)
        return key in _values_or_single(value)
    raise _Invalid


def _candidates(value: Any, allow_scalar: bool) -> list[str] | None:
    """The value as a list of strings, or None when it is a range/JSON string handled by the caller."""
    if isinstance(value, list):
        return [_sprint(item) for item in value]
    if allow_scalar and isinstance(value, (int, float)):
        return [_sprint(value)]
    if isinstance(value, str):
        return None
    raise _Invalid


def _any_set(keys: list[str], value: Any, negate: bool) -> bool:
    if not keys:
        return False  # no key can be (or miss being) in any value, whatever the value holds
    available = _candidates(value, allow_scalar=True)
    if available is None:
        text: str = value
        if len(keys) == 1 and keys[0] == text:
            return not negate
        if operator_of(text) == IN_RANGE:
            if negate:
                outside = text.replace("-", "!-", 1)
                return any(match_value(key, outside) for key in keys)
            return any(match_value(key, text) for key in keys)
        available = _values_or_single(text)
    if negate:
        return any(not any(_either_way(key, item) for item in available) for key in keys)
    return any(_either_way(key, item) for key in keys for item in available)


def _all_set(keys: list[str], value: Any, negate: bool) -> bool:
    available = _candidates(value, allow_scalar=False)
    if available is None:
        text: str = value
        if len(keys) == 1 and keys[0] == text:
            return not negate
        if operator_of(text) == IN_RANGE:
            if negate:
                return not any(match_value(key, text) for key in keys)
            return all(match_value(key, text) for key in keys)
        available = _values_or_single(text)
    if negate:
        return not any(_either_way(key, item) for key in keys for item in available)
    return all(any(_either_way(key, item) for item in available) for key in keys)


def _set_operator(key: Any, value: Any, any_mode: bool, negate: bool) -> bool:
    try:
        if isinstance(key, list):
            keys = [_sprint(item) for item in key]
            return _any_set(keys, value, negate) if any_mode else _all_set(keys, value, negate)
        text = _key_as_text(key)
        if text is None:
            return False
        found = _single_key_in(text, value)
    except _Invalid:
        return False
    return not found if negate else found


# -- dispatch ------------------------------------------------------------------------------------------------

_Evaluator = Callable[[Any, Any], bool]


def _ordering(name: str) -> _Evaluator:
    compare = _ORDERINGS[name]
    return lambda key, value: _numeric(key, value, compare)


def _duration_op(name: str) -> _Evaluator:
    compare = _ORDERINGS[name]
    return lambda key, value: _duration_ordering(key, value, compare)


_EVALUATORS: dict[str, _Evaluator] = {
    "equal": _equals,
    "equals": _equals,
    "notequal": _not_equals,
    "notequals": _not_equals,
    "in": lambda key, value: _legacy_in(key, value, negate=False),
    "notin": lambda key, value: _legacy_in(key, value, negate=True),
    "anyin": lambda key, value: _set_operator(key, value, any_mode=True, negate=False),
    "anynotin": lambda key, value: _set_operator(key, value, any_mode=True, negate=True),
    "allin": lambda key, value: _set_operator(key, value, any_mode=False, negate=False),
    "allnotin": lambda key, value: _set_operator(key, value, any_mode=False, negate=True),
    **{name: _ordering(name) for name in _ORDERINGS},
    **{"duration" + name: _duration_op(name) for name in _ORDERINGS},
}

CONDITION_OPERATORS: tuple[str, ...] = (
    "Equal",
    "Equals",
    "NotEqual",
    "NotEquals",
    "In",
    "AnyIn",
    "AllIn",
    "NotIn",
    "AnyNotIn",
    "AllNotIn",
    "GreaterThanOrEquals",
    "GreaterThan",
    "LessThanOrEquals",
    "LessThan",
    "DurationGreaterThanOrEquals",
    "DurationGreaterThan",
    "DurationLessThanOrEquals",
    "DurationLessThan",
)
"""Operator names as the policy schema spells them (matching is case-insensitive)."""

DEPRECATED_OPERATORS: dict[str, tuple[str, ...]] = {"In": ("AllIn", "AnyIn"), "NotIn": ("AllNotIn", "AnyNotIn")}
"""Deprecated operators and the replacements Kyverno suggests for them."""


def evaluate_condition(key: Any, operator: str, value: Any) -> bool:
    """Evaluate ``key <operator> value``; raise ConditionError for an operator Kyverno does not know."""
    evaluator = _EVALUATORS.get(operator.lower()) if isinstance(operator, str) else None
    if evaluator is None:
        # Kyverno formats a nil wrapped error here, which renders as "%!w(<nil>)".
        raise ConditionError("failed to create handler for condition operator: %!w(<nil>)")
    return evaluator(key, value)
