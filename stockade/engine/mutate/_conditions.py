"""Checks the value under a conditional anchor of a patchStrategicMerge overlay.

Kyverno hands such values to its validate pattern matcher.  Scalars reach it as their YAML
text (a resource `replicas: 3` is compared as "3"), maps and lists as JSON; the one pattern
matcher (`stockade.engine.pattern.validate_pattern`) decides.
"""

from __future__ import annotations

from typing import Any

from stockade.engine.pattern import validate_pattern

from ._common import scalar_text


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
    failure = validate_pattern(resource_value, pattern_value)
    return None if failure is None else str(failure.message)


def condition_holds(resource_value: Any, pattern_value: Any) -> bool:
    return condition_failure(resource_value, pattern_value) is None
