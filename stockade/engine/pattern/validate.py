"""Walking a resource against a validation pattern tree (Kyverno's ``validate.MatchPattern`` and anchor handlers).

The walk mirrors Kyverno closely because the *order* in which keys are visited decides which failure (and
therefore which path and message) a user sees: anchors first in sorted order, then plain keys in sorted order
with global anchors and anchor-bearing subtrees moved to the front.

Failures travel as ``(path, _Failure)`` tuples instead of exceptions: skips caused by conditional anchors are
routine (one per container that does not match a condition), and tuples keep that hot path cheap.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from stockade.engine.pattern.anchors import (
    ADD_IF_NOT_PRESENT,
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


def _compile(pattern: Any) -> _Node:
    """The pattern as a tree of nodes that walk resources; each pattern map, list and leaf compiled once."""
    if isinstance(pattern, dict):
        return _MapNode(pattern)
    if isinstance(pattern, list):
        return _ListNode(pattern)
    if isinstance(pattern, _SCALARS):
        return _LeafNode(pattern)
    return _UnknownNode(pattern)


class _Node:
    """One pattern value, ready to be matched against a resource value (Kyverno's ``validateResourceElement``)."""

    __slots__ = ("pattern",)

    def __init__(self, pattern: Any) -> None:
        self.pattern = pattern

    def walk(self, state: _Walk, resource: Any, path: str) -> _Result:
        raise NotImplementedError


class _UnknownNode(_Node):
    __slots__ = ()

    def walk(self, state: _Walk, resource: Any, path: str) -> _Result:
        return path, _Failure(f"failed at '{path}', pattern contains unknown type")


# Leaf verdicts kept per leaf: at most this many values, strings up to this length (resource values repeat across
# reviews -- false, 0, "RuntimeDefault" -- and a verdict is a pure function of the value's type and content)
_MAX_LEAF_VERDICTS = 64
_MAX_CACHED_TEXT = 64


class _LeafNode(_Node):
    """A scalar pattern: the value must match it (each item of a list value must)."""

    __slots__ = ("verdicts",)

    def __init__(self, pattern: Any) -> None:
        super().__init__(pattern)
        self.verdicts: dict[tuple[type, Any], bool] = {}

    def matches(self, value: Any) -> bool:
        kind = value.__class__
        if kind is bool or kind is int or value is None or (kind is str and len(value) <= _MAX_CACHED_TEXT):
            key = (kind, value)  # the type is part of the key: True == 1 in Python, not in patterns
            verdict = self.verdicts.get(key)
            if verdict is None:
                verdict = match_value(value, self.pattern)
                if len(self.verdicts) < _MAX_LEAF_VERDICTS:
                    self.verdicts[key] = verdict
            return verdict
        return match_value(value, self.pattern)

    def walk(self, state: _Walk, resource: Any, path: str) -> _Result:
        if isinstance(resource, list):
            for item in resource:
                if not self.matches(item):
                    return path, _mismatch(resource, self.pattern, path)
            return None
        if not self.matches(resource):
            return path, _mismatch(resource, self.pattern, path)
        return None


def _mismatch(resource: Any, pattern: Any, path: str) -> _Failure:
    return _Failure(
        f"resource value '{go_sprint(resource)}' does not match "
        f"'{go_sprint(pattern, numbers_are_floats=True)}' at path {path}"
    )


# An entry of a map node: (pattern key, its anchor when validation treats it as one, else None, the path segment it
# adds ("name/"), the compiled value, whether the value is the "*" string).  "+(key)" only means something to
# mutation: validation looks the literal key up, like Kyverno.
_Entry = tuple[str, Optional[Anchor], str, "_Node", bool]


class _MapNode(_Node):
    """A pattern map with what walking it needs worked out once: keys parsed as anchors, the visiting order Kyverno
    uses (anchors first in sorted order, then plain keys in sorted order with global anchors and anchor-bearing
    subtrees moved to the front), the anchors whose presence is tracked, and every value compiled."""

    __slots__ = ("anchored", "plain", "tracked", "has_metadata")

    def __init__(self, pattern: dict[str, Any]) -> None:
        super().__init__(pattern)
        anchored: list[_Entry] = []
        plain: list[_Entry] = []
        tracked: list[tuple[str, str]] = []
        for key, value in pattern.items():
            anchor = parse_anchor(key)
            walked_as = anchor if anchor is not None and anchor.modifier != ADD_IF_NOT_PRESENT else None
            segment = (walked_as.key if walked_as is not None else key) + "/"
            entry: _Entry = (key, walked_as, segment, _compile(value), isinstance(value, str) and value == "*")
            if anchor is not None and anchor.modifier in _TRACKED:
                tracked.append((key, anchor.key))
            if anchor is not None and anchor.modifier in _VISITED_FIRST:
                anchored.append(entry)
            else:
                plain.append(entry)
        anchored.sort(key=lambda entry: entry[0])
        if len(plain) > 1:
            front: list[_Entry] = []
            back: list[_Entry] = []
            for entry in sorted(plain, key=lambda entry: entry[0]):
                anchor = entry[1]
                if (anchor is not None and anchor.modifier == GLOBAL) or _has_nested_anchors(pattern[entry[0]]):
                    front.append(entry)
                else:
                    back.append(entry)
            front.reverse()  # Kyverno pushes each of them to the front of a list
            plain = front + back
        self.anchored = tuple(anchored)
        self.plain = tuple(plain)
        self.tracked = tuple(tracked)
        metadata = tagged_entry("metadata", pattern)[1]
        self.has_metadata = isinstance(metadata, dict)

    def walk(self, state: _Walk, resource: Any, path: str) -> _Result:
        if not isinstance(resource, dict):
            return path, _Failure(
                f"pattern and resource have different structures. Path: {path}. "
                f"Expected {go_type_name(self.pattern)}, found {go_type_name(resource)}"
            )
        if self.tracked:
            seen = state.anchor_seen
            for key, name in self.tracked:
                if not seen.get(key):
                    seen[key] = name in resource
        node = self
        if self.has_metadata:
            expanded = expand_metadata_wildcards(self.pattern, resource)
            if expanded is not self.pattern:
                node = _MapNode(expanded)  # resolved against this resource: not kept

        if node.anchored:
            skipped: list[_Failure] = []
            applied = 0
            for key, anchor, segment, child, star in node.anchored:
                if anchor is not None and anchor.modifier == EQUALITY:  # inlined: the commonest anchor
                    name = anchor.key
                    result = child.walk(state, resource[name], path + segment) if name in resource else None
                else:
                    result = state.handle(key, anchor, segment, child, star, resource, path)
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

        for key, anchor, segment, child, star in node.plain:
            if anchor is None:  # inlined: most keys are plain
                value = resource.get(key)
                if star:
                    if value is not None:
                        continue
                    return path, _Failure(f"{path}/{key} not found")
                result = child.walk(state, value, path + segment)
            else:
                result = state.handle(key, anchor, segment, child, star, resource, path)
            if result is not None:
                return result
        return None


class _ListNode(_Node):
    """A pattern list: the first entry, when a map or scalar, applies to every item; otherwise entries pair with
    the resource's items by position."""

    __slots__ = ("items", "first_kind")

    def __init__(self, pattern: list[Any]) -> None:
        super().__init__(pattern)
        self.items = tuple(_compile(item) for item in pattern)
        first = pattern[0] if pattern else None
        self.first_kind = "" if not pattern else "map" if isinstance(first, dict) else "scalar" if isinstance(first, _SCALARS) else "items"

    def walk(self, state: _Walk, resource: Any, path: str) -> _Result:
        if not isinstance(resource, list):
            return path, _Failure(
                f"validation rule failed at path {path}, resource does not satisfy the expected overlay pattern"
            )
        kind = self.first_kind
        if kind == "map":
            return _each_item(state, resource, self.items[0], path)
        if kind == "scalar":
            return self.items[0].walk(state, resource, path)
        if not kind:
            return path, _Failure("pattern Array empty")
        if len(resource) < len(self.items):
            return "", _Failure(
                "validate Array failed, array length mismatch, "
                f"resource Array len is {len(resource)} and pattern Array len is {len(self.items)}"
            )
        return _walk_items(state, zip(self.items, resource), path)


def _each_item(state: _Walk, resource: list[Any], node: _Node, path: str) -> _Result:
    """A map pattern against every item of a list."""
    return _walk_items(state, zip(itertools.repeat(node), resource), path)


def _walk_items(state: _Walk, pairs: Iterable[tuple[_Node, Any]], path: str) -> _Result:
    """Pattern nodes against list items in order: the first failure, else a combined skip when a conditional anchor
    skipped every item (skipped items do not count as applied), else None."""
    skipped: list[_Failure] = []
    applied = 0
    for index, (node, item) in enumerate(pairs):
        result = node.walk(state, item, f"{path}{index}/")
        if result is not None:
            if _is_skip(result[1]):
                skipped.append(result[1])
                continue
            return result
        applied += 1
    if applied == 0 and skipped:
        return path, _combined_skip(skipped)
    return None


# Compiled trees of a policy's patterns, by identity of the pattern: policy patterns never change once loaded.
_TREES: IdentityMemo[Any, _Node] = IdentityMemo(20_000)


class _Walk:
    """State of one ``validate_pattern`` call: which tracked anchor keys were ever found in the resource."""

    __slots__ = ("anchor_seen",)

    def __init__(self) -> None:
        self.anchor_seen: dict[str, bool] = {}

    def keys_are_missing(self) -> bool:
        for key, found in self.anchor_seen.items():
            if not found:
                anchor = parse_anchor(key)
                if anchor is not None and anchor.modifier != NEGATION:
                    return True
        return False

    def handle(self, key: str, anchor: Anchor | None, segment: str, node: _Node, star: bool, resource: dict[str, Any], path: str) -> _Result:
        if anchor is not None:
            modifier = anchor.modifier
            name = anchor.key
            current = path + segment
            if modifier == CONDITION:
                if name not in resource:
                    return current, _Failure(
                        f"{_CONDITIONAL_PREFIX}: conditional anchor key doesn't exist in the resource", _CONDITIONAL
                    )
                result = node.walk(self, resource[name], current)
                if result is not None:
                    return result[0], _Failure(f"{_CONDITIONAL_PREFIX}: {result[1].message}", _CONDITIONAL)
                return None
            if modifier == GLOBAL:
                if name not in resource:
                    return None
                result = node.walk(self, resource[name], current)
                if result is not None:
                    return result[0], _Failure(f"{_GLOBAL_PREFIX}: {result[1].message}", _GLOBAL)
                return None
            if modifier == EQUALITY:
                if name not in resource:
                    return None
                return node.walk(self, resource[name], current)
            if modifier == NEGATION:
                if name in resource:
                    return current, _Failure(f"{_NEGATION_PREFIX}: {current} is not allowed", _NEGATION)
                return None
            if modifier == EXISTENCE:
                if name not in resource:
                    return None
                return self.existence(resource[name], node, current)
        value = resource.get(key)
        if star:
            if value is not None:
                return None
            return path, _Failure(f"{path}/{key} not found")
        return node.walk(self, value, path + segment)

    def existence(self, value: Any, node: _Node, path: str) -> _Result:
        pattern = node.pattern
        if not isinstance(value, list):
            return path, _Failure(
                f"invalid resource type {go_type_name(value)}: "
                "Existence ^ () anchor can be used only on list/array type resource"
            )
        if not isinstance(node, _ListNode):
            return path, _Failure(
                f"invalid pattern type {go_type_name(pattern, numbers_are_floats=True)}: "
                "Pattern has to be of list to compare against resource"
            )
        for item_node in node.items:
            if not isinstance(item_node, _MapNode):
                return path, _Failure(
                    f"invalid pattern type {go_type_name(pattern)}: "
                    "Pattern has to be of type map to compare against items in resource"
                )
            for index, item in enumerate(value):
                if item_node.walk(self, item, f"{path}{index}/") is None:
                    break
            else:
                return path, _Failure(f"existence anchor validation failed at path {path}")
        return None


def validate_pattern(resource: Any, pattern: Any, *, policy_owned: bool = False) -> PatternFailure | None:
    """Match a whole resource against a ``validate.pattern`` (or one ``anyPattern`` entry); None means it matched.

    ``policy_owned``: the pattern is the policy's own object (no variables were substituted into it), so its
    compiled tree is kept; a substituted copy is new on every review and may carry request data, so it is not."""
    tree = _TREES.get(pattern, _compile) if policy_owned and isinstance(pattern, (dict, list)) else _compile(pattern)
    walk = _Walk()
    result = tree.walk(walk, resource, "/")
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
