"""Checks the value under a conditional anchor of a patchStrategicMerge overlay.

Kyverno hands such values to its validate pattern matcher.  Scalars reach it as their YAML
text (a resource `replicas: 3` is compared as "3"), maps and lists as JSON.  Scalar comparison
is delegated to `stockade.engine.pattern.match_value` when that module is available; a small
fallback (equality, `|` alternatives, `!` negation, `*`/`?` wildcards) covers its absence.
"""

from __future__ import annotations

from typing import Any, Callable

from stockade.wildcard import match as match_wildcard

from ._common import MISSING, parse_anchor, scalar_text

_SKIP = object()  # a nested conditional anchor did not hold: the map is "skipped"


def _fallback_match_value(value: Any, pattern: Any) -> bool:
    """Equality and wildcards only; stands in until the shared pattern module exists."""
    if not isinstance(pattern, str):
        return scalar_text(value) == scalar_text(pattern)
    text = scalar_text(value)
    for alternative in pattern.split("|"):
        alternative = alternative.strip()
        negate = alternative.startswith("!")
        if negate:
            alternative = alternative[1:].strip()
        matched = match_wildcard(alternative, text)
        if matched != negate:
            return True
    return False


def _load_match_value() -> Callable[[Any, Any], bool]:
    try:
        from stockade.engine.pattern import match_value  # type: ignore[attr-defined]
    except ImportError:
        return _fallback_match_value
    return match_value  # type: ignore[no-any-return]


_match_value: Callable[[Any, Any], bool] | None = None


def match_scalar(value: Any, pattern: Any) -> bool:
    global _match_value
    if _match_value is None:
        _match_value = _load_match_value()
    try:
        return bool(_match_value(value, pattern))
    except Exception:  # a malformed operator in the pattern simply does not match
        return False


def _match(resource: Any, pattern: Any) -> Any:
    """True, False, or _SKIP when a nested conditional anchor did not hold."""
    if isinstance(pattern, dict):
        if not isinstance(resource, dict):
            return False
        return _match_map(resource, pattern)
    if isinstance(pattern, list):
        if not isinstance(resource, list):
            return False
        return _match_list(resource, pattern)
    if isinstance(resource, list):
        return all(match_scalar(item, pattern) for item in resource)
    if isinstance(resource, dict):
        return False
    return match_scalar(resource, pattern)


def _match_map(resource: dict[str, Any], pattern: dict[str, Any]) -> Any:
    plain: list[tuple[str, Any]] = []
    for key, expected in pattern.items():
        anchor = parse_anchor(key)
        if anchor is None:
            plain.append((key, expected))
            continue
        modifier, inner = anchor
        actual = resource.get(inner, MISSING)
        if modifier in ("", "<"):
            if actual is MISSING or _match(actual, expected) is not True:
                return _SKIP
        elif modifier == "=":
            if actual is not MISSING and _match(actual, expected) is not True:
                return False
        elif modifier == "X":
            if actual is not MISSING:
                return False
        elif modifier == "^":
            if not isinstance(actual, list) or not isinstance(expected, list):
                return False
            for element_pattern in expected:
                if not any(_match(item, element_pattern) is True for item in actual):
                    return False
        else:
            plain.append((inner, expected))
    for key, expected in plain:
        actual = resource.get(key, None)
        outcome = _match(actual, expected)
        if outcome is not True:
            return outcome
    return True


def _match_list(resource: list[Any], pattern: list[Any]) -> Any:
    if not pattern:
        return False
    first = pattern[0]
    if isinstance(first, dict):
        applied = False
        for item in resource:
            outcome = _match(item, first)
            if outcome is _SKIP:
                continue
            if outcome is not True:
                return False
            applied = True
        return True if applied or not resource else _SKIP
    if not isinstance(first, list):
        return all(_match(item, first) is True for item in resource)
    if len(resource) < len(pattern):
        return False
    return all(_match(item, expected) is True for item, expected in zip(resource, pattern))


def _load_validate_pattern() -> Callable[[Any, Any], Any] | None:
    try:
        from stockade.engine.pattern import validate_pattern  # type: ignore[attr-defined]
    except ImportError:
        return None
    return validate_pattern  # type: ignore[no-any-return]


def _as_checked(resource_value: Any, pattern_value: Any) -> tuple[Any, Any]:
    if not isinstance(resource_value, (dict, list)):
        resource_value = scalar_text(resource_value)
    if not isinstance(pattern_value, (dict, list)):
        pattern_value = scalar_text(pattern_value)
    return resource_value, pattern_value


def condition_failure(resource_value: Any, pattern_value: Any) -> str | None:
    """None when the resource value satisfies the value under a conditional anchor,
    otherwise the pattern matcher's explanation (Kyverno's MatchPattern wording)."""
    resource_value, pattern_value = _as_checked(resource_value, pattern_value)
    validate_pattern = _load_validate_pattern()
    if validate_pattern is not None:
        failure = validate_pattern(resource_value, pattern_value)
        return None if failure is None else str(failure.message)
    if _match(resource_value, pattern_value) is True:
        return None
    return f"resource value '{scalar_text(resource_value)}' does not match '{scalar_text(pattern_value)}'"


def condition_holds(resource_value: Any, pattern_value: Any) -> bool:
    return condition_failure(resource_value, pattern_value) is None
