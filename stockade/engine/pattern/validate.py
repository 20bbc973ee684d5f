"""Walking a resource against a validation pattern tree (Kyverno's ``validate.MatchPattern`` and anchor handlers).

The walk mirrors Kyverno closely because the *order* in which keys are visited decides which failure (and
therefore which path and message) a user sees: anchors first in sorted order, then plain keys in sorted order
with global anchors and anchor-bearing subtrees moved to the front.

Failures travel as ``(path, _Failure)`` tuples instead of exceptions: skips caused by conditional anchors are
routine (one per container that does not match a condition), and tuples keep that hot path cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from stockade.engine.pattern.anchors import (
    CONDITION,
    EQUALITY,
    EXISTENCE,
    GLOBAL,
    NEGATION,
    Anchor,
    parse_anchor,
)
from stockade.gofmt import go_sprint, go_type_name
from stockade.identitymemo import IdentityMemo
from stockade.engine.pattern.metadata import expand_metadata_wildcards, tagged_entry
from stockade.engine.pattern.value import match_value

__all__ = ["PatternFailure", "validate_pattern"]


@dataclass(frozen=True)
class PatternFailure:
    """Why a resource does not satisfy a pattern.

    ``path`` is where it failed, with a trailing slash (``/spec/containers/0/image/``).  An empty path on a
    non-skip failure means Kyverno would report a rule *error* rather than a *fail* (for example an array-length
    mismatch, or an error while some anchor key was absent from the resource).  ``skip`` is set when a
    conditional ``()`` or global ``<()`` anchor did not hold, so the rule does not apply.
    """

    path: str
    message: str
    skip: bool = False


# Kinds of failure; Kyverno distinguishes them by error type, and for wrapped errors by message text.
_PLAIN = 0
_CONDITIONAL = 1
_GLOBAL = 2
_NEGATION = 3

_CONDITIONAL_PREFIX = "conditional anchor mismatch"
_GLOBAL_PREFIX = "global anchor mismatch"
_NEGATION_PREFIX = "negation anchor matched in resource"


class _Failure:
    __slots__ = ("message", "kind", "wrapped")

    def __init__(self, message: str, kind: int = _PLAIN, wrapped: bool = False) -> None:
        self.message = message
        self.kind = kind
        self.wrapped = wrapped  # a PatternError carrying (possibly several) skip errors


_Result = Optional[tuple[str, _Failure]]
_SCALARS = (str, int, float, bool, type(None))


def _is_skip(failure: _Failure) -> bool:
    kind = failure.kind
    if kind == _CONDITIONAL or kind == _GLOBAL:
        return True
    if kind == _NEGATION:
        return False
    return _CONDITIONAL_PREFIX in failure.message or _GLOBAL_PREFIX in failure.message


def _is_negation(failure: _Failure) -> bool:
    if failure.kind == _NEGATION:
        return True
    return failure.kind == _PLAIN and _NEGATION_PREFIX in failure.message


def _combined_skip(failures: list[_Failure]) -> _Failure:
    return _Failure("; ".join(failure.message for failure in failures), _PLAIN, wrapped=True)


def _has_direct_skip(failures: list[_Failure]) -> bool:
    return any(not failure.wrapped for failure in failures)


def _has_nested_anchors(pattern: Any) -> bool:
    if isinstance(pattern, dict):
        for key, value in pattern.items():
            anchor = parse_anchor(key)
            if anchor is not None and anchor.modifier != "+":
                return True
            if isinstance(value, (dict, list)) and _has_nested_anchors(value):
                return True
        return False
    if isinstance(pattern, list):
        return any(isinstance(item, (dict, list)) and _has_nested_anchors(item) for item in pattern)
    return False


_VISITED_FIRST = (CONDITION, EXISTENCE, EQUALITY, NEGATION)
_TRACKED = (CONDITION, EXISTENCE, NEGATION)


class _MapPlan:
    """How ``_Walk.map`` visits one pattern map, worked out once per map (keys parsed as anchors, the visiting order
    Kyverno uses, the anchors whose presence is tracked) instead of on every resource it is matched against."""

    __slots__ = ("anchored", "plain", "tracked", "has_metadata")

    def __init__(self, pattern: dict[str, Any]) -> None:
        anchored: list[tuple[str, Anchor]] = []
        plain: list[tuple[str, Anchor | None]] = []
        tracked: list[tuple[str, str]] = []
        for key in pattern:
            anchor = parse_anchor(key)
            if anchor is not None and anchor.modifier in _TRACKED:
                tracked.append((key, anchor.key))
            if anchor is not None and anchor.modifier in _VISITED_FIRST:
                anchored.append((key, anchor))
            else:
                plain.append((key, anchor))
        anchored.sort(key=lambda entry: entry[0])
        if len(plain) > 1:
            front: list[tuple[str, Anchor | None]] = []
            back: list[tuple[str, Anchor | None]] = []
            for key, anchor in sorted(plain, key=lambda entry: entry[0]):
                if (anchor is not None and anchor.modifier == GLOBAL) or _has_nested_anchors(pattern[key]):
                    front.append((key, anchor))
                else:
                    back.append((key, anchor))
            front.reverse()  # Kyverno pushes each of them to the front of a list
            plain = front + back
        self.anchored = tuple(anchored)
        self.plain = tuple(plain)
        self.tracked = tuple(tracked)
        metadata = tagged_entry("metadata", pattern)[1]
        self.has_metadata = isinstance(metadata, dict)


# Plans of a policy's pattern maps, by identity: policy patterns never change once loaded.
_PLANS: IdentityMemo[dict[str, Any], _MapPlan] = IdentityMemo(20_000)


class _Walk:
    """State of one ``validate_pattern`` call: which tracked anchor keys were ever found in the resource."""

    __slots__ = ("anchor_seen", "cache_plans")

    def __init__(self, cache_plans: bool) -> None:
        self.anchor_seen: dict[str, bool] = {}
        self.cache_plans = cache_plans

    def note_anchors(self, plan: _MapPlan, resource: dict[str, Any]) -> None:
        seen = self.anchor_seen
        for key, name in plan.tracked:
            if not seen.get(key):
                seen[key] = name in resource

    def keys_are_missing(self) -> bool:
        for key, found in self.anchor_seen.items():
            if not found:
                anchor = parse_anchor(key)
                if anchor is not None and anchor.modifier != NEGATION:
                    return True
        return False

    # -- element dispatch ---------------------------------------------------------------------------------

    def element(self, resource: Any, pattern: Any, path: str) -> _Result:
        if isinstance(pattern, dict):
            if not isinstance(resource, dict):
                return path, _Failure(
                    f"pattern and resource have different structures. Path: {path}. "
                    f"Expected {go_type_name(pattern)}, found {go_type_name(resource)}"
                )
            plan = _PLANS.get(pattern, _MapPlan) if self.cache_plans else _MapPlan(pattern)
            self.note_anchors(plan, resource)
            return self.map(resource, pattern, plan, path)
        if isinstance(pattern, list):
            if not isinstance(resource, list):
                return path, _Failure(
                    f"validation rule failed at path {path}, resource does not satisfy the expected overlay pattern"
                )
            return self.array(resource, pattern, path)
        if isinstance(pattern, _SCALARS):
            if isinstance(resource, list):
                for item in resource:
                    if not match_value(item, pattern):
                        return path, self._mismatch(resource, pattern, path)
                return None
            if not match_value(resource, pattern):
                return path, self._mismatch(resource, pattern, path)
            return None
        return path, _Failure(f"failed at '{path}', pattern contains unknown type")

    @staticmethod
    def _mismatch(resource: Any, pattern: Any, path: str) -> _Failure:
        return _Failure(
            f"resource value '{go_sprint(resource)}' does not match "
            f"'{go_sprint(pattern, numbers_are_floats=True)}' at path {path}"
        )

    # -- maps ---------------------------------------------------------------------------------------------

    def map(self, resource: dict[str, Any], pattern: dict[str, Any], plan: _MapPlan, path: str) -> _Result:
        if plan.has_metadata:
            expanded = expand_metadata_wildcards(pattern, resource)
            if expanded is not pattern:
                pattern, plan = expanded, _MapPlan(expanded)  # resolved against this resource: not cached

        if plan.anchored:
            skipped: list[_Failure] = []
            applied = 0
            for key, anchor in plan.anchored:
                result = self.handle(key, anchor, pattern[key], resource, path)
                if result is not None:
                    if _is_skip(result[1]):
                        skipped.append(result[1])
                        continue
                    if not _has_direct_skip(skipped):
                        return result
                    continue  # a sibling condition already failed: this map does not apply anyway
                applied += 1
            if skipped and (applied == 0 or _has_direct_skip(skipped)):
                return path, _combined_skip(skipped)

        for key, plain_anchor in plan.plain:
            result = self.handle(key, plain_anchor, pattern[key], resource, path)
            if result is not None:
                return result
        return None

    def handle(self, key: str, anchor: Anchor | None, pattern: Any, resource: dict[str, Any], path: str) -> _Result:
        if anchor is not None:
            modifier = anchor.modifier
            name = anchor.key
            current = path + name + "/"
            if modifier == CONDITION:
                if name not in resource:
                    return current, _Failure(
                        f"{_CONDITIONAL_PREFIX}: conditional anchor key doesn't exist in the resource", _CONDITIONAL
                    )
                result = self.element(resource[name], pattern, current)
                if result is not None:
                    return result[0], _Failure(f"{_CONDITIONAL_PREFIX}: {result[1].message}", _CONDITIONAL)
                return None
            if modifier == GLOBAL:
                if name not in resource:
                    return None
                result = self.element(resource[name], pattern, current)
                if result is not None:
                    return result[0], _Failure(f"{_GLOBAL_PREFIX}: {result[1].message}", _GLOBAL)
                return None
            if modifier == EQUALITY:
                if name not in resource:
                    return None
                return self.element(resource[name], pattern, current)
            if modifier == NEGATION:
                if name in resource:
                    return current, _Failure(f"{_NEGATION_PREFIX}: {current} is not allowed", _NEGATION)
                return None
            if modifier == EXISTENCE:
                if name not in resource:
                    return None
                return self.existence(resource[name], pattern, current)
            # "+(key)" only means something to mutation; validation looks the literal key up, like Kyverno.
        current = path + key + "/"
        value = resource.get(key)
        if pattern == "*" and isinstance(pattern, str):
            if value is not None:
                return None
            return path, _Failure(f"{path}/{key} not found")
        return self.element(value, pattern, current)

    def existence(self, value: Any, pattern: Any, path: str) -> _Result:
        if not isinstance(value, list):
            return path, _Failure(
                f"invalid resource type {go_type_name(value)}: "
                "Existence ^ () anchor can be used only on list/array type resource"
            )
        if not isinstance(pattern, list):
            return path, _Failure(
                f"invalid pattern type {go_type_name(pattern, numbers_are_floats=True)}: "
                "Pattern has to be of list to compare against resource"
            )
        for pattern_item in pattern:
            if not isinstance(pattern_item, dict):
                return path, _Failure(
                    f"invalid pattern type {go_type_name(pattern)}: "
                    "Pattern has to be of type map to compare against items in resource"
                )
            for index, item in enumerate(value):
                if self.element(item, pattern_item, f"{path}{index}/") is None:
                    break
            else:
                return path, _Failure(f"existence anchor validation failed at path {path}")
        return None

    # -- arrays -------------------------------------------------------------------------------------------

    def array(self, resource: list[Any], pattern: list[Any], path: str) -> _Result:
        if not pattern:
            return path, _Failure("pattern Array empty")
        first = pattern[0]
        if isinstance(first, dict):
            return self.array_of_maps(resource, first, path)
        if isinstance(first, _SCALARS):
            return self.element(resource, first, path)
        if len(resource) < len(pattern):
            return "", _Failure(
                "validate Array failed, array length mismatch, "
                f"resource Array len is {len(resource)} and pattern Array len is {len(pattern)}"
            )
        skipped: list[_Failure] = []
        applied = 0
        for index, pattern_item in enumerate(pattern):
            result = self.element(resource[index], pattern_item, f"{path}{index}/")
            if result is not None:
                if _is_skip(result[1]):
                    skipped.append(result[1])
                    continue
                return result
            applied += 1
        if applied == 0 and skipped:
            return path, _combined_skip(skipped)
        return None

    def array_of_maps(self, resource: list[Any], pattern: dict[str, Any], path: str) -> _Result:
        skipped: list[_Failure] = []
        applied = 0
        for index, item in enumerate(resource):
            result = self.element(item, pattern, f"{path}{index}/")
            if result is not None:
                if _is_skip(result[1]):
                    skipped.append(result[1])
                    continue
                return result
            applied += 1
        if applied == 0 and skipped:
            return path, _combined_skip(skipped)
        return None


def validate_pattern(resource: Any, pattern: Any, *, policy_owned: bool = False) -> PatternFailure | None:
    """Match a whole resource against a ``validate.pattern`` (or one ``anyPattern`` entry); None means it matched.

    ``policy_owned``: the pattern is the policy's own object (no variables were substituted into it), so the plans
    of its maps are cached; a substituted copy is new on every review and may carry request data, so it is not."""
    walk = _Walk(policy_owned)
    result = walk.element(resource, pattern, "/")
    if result is None:
        return None
    path, failure = result
    if _is_skip(failure):
        return PatternFailure("", failure.message, skip=True)
    if _is_negation(failure):
        return PatternFailure(path, failure.message)
    if walk.keys_are_missing():
        return PatternFailure("", failure.message)
    return PatternFailure(path, failure.message)
