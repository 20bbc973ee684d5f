"""Turns a patchStrategicMerge overlay with anchors into a plain strategic merge patch.

This follows Kyverno's preprocessing step closely, quirks included, because policies rely on
its exact outcome:
- `+(key)` is dropped when the resource already has `key`, otherwise renamed to `key`;
- `(key)` / `<(key)` on a map must hold or the whole overlay becomes `{}` (the rule then
  reports "no patches applied"); a failed `<(key)` inside a list element does the same unless
  some element satisfies it;
- a list element carrying anchors is checked against every resource element; for each match
  a copy without the anchors, tagged with the resource element's `name`, is appended so that
  the name-keyed merge lands on that element; the anchored original is removed afterwards.
The overlay is mutated in place; callers pass a private copy.
"""

from __future__ import annotations

from typing import Any, Callable

from ._common import MISSING, PatchError, deep_copy, is_condition_anchor, parse_anchor
from ._conditions import condition_failure
from stockade.errors import StockadeError


class ConditionFailed(StockadeError):
    """A conditional anchor did not hold."""

    def __str__(self) -> str:
        return f"condition failed: {self.args[0]}"


class GlobalConditionFailed(StockadeError):
    """A global anchor did not hold."""

    def __str__(self) -> str:
        return f"global condition failed: {self.args[0]}"


AnchorTest = Callable[[str, str], bool]


def _any_anchor(modifier: str, key: str) -> bool:
    return modifier in ("", "<", "+")


def _global_anchor(modifier: str, key: str) -> bool:
    return modifier == "<"


def _condition_anchor(modifier: str, key: str) -> bool:
    return modifier == ""


def _add_anchor(modifier: str, key: str) -> bool:
    return modifier == "+"


def _anchored_keys(pattern: Any, test: AnchorTest) -> list[tuple[str, str]]:
    """(original key, inner key) of the anchors in a map that pass `test`."""
    if not isinstance(pattern, dict):
        return []
    found: list[tuple[str, str]] = []
    for key in pattern:
        parsed = parse_anchor(key)
        if parsed is not None and test(*parsed):
            found.append((key, parsed[1]))
    return found


def _resource_field(resource: Any, key: str) -> Any:
    if isinstance(resource, dict):
        return resource.get(key, MISSING)
    return MISSING


def _rename_key(mapping: dict[str, Any], old: str, new: str) -> None:
    """Rename in place, keeping the key's position."""
    items = list(mapping.items())
    mapping.clear()
    for key, value in items:
        mapping[new if key == old else key] = value


def has_anchors(node: Any, test: AnchorTest) -> bool:
    """Whether any key below `node` is an anchor passing `test`.

    Like Kyverno, a scalar *value* shaped like `(x)` or `<(x)` also counts, whatever `test` is.
    """
    if isinstance(node, dict):
        for key, value in node.items():
            parsed = parse_anchor(key)
            if parsed is not None and test(*parsed):
                return True
            if not _nil_or_empty(value) and has_anchors(value, test):
                return True
        return False
    if isinstance(node, list):
        return any(has_anchors(item, test) for item in node)
    if isinstance(node, str):
        return is_condition_anchor(node)
    return False


def _nil_or_empty(value: Any) -> bool:
    return value is None or value is MISSING or value == {} or value == []


def _handle_add_if_not_present(pattern: Any, resource: Any) -> int:
    anchors = _anchored_keys(pattern, _add_anchor)
    for original, inner in anchors:
        if _resource_field(resource, inner) is not MISSING:
            del pattern[original]
        else:
            _rename_key(pattern, original, inner)
    return len(anchors)


def _validate_conditions(pattern: dict[str, Any], resource: Any) -> None:
    try:
        _check_anchors(pattern, resource, _global_anchor)
    except _Mismatch as mismatch:
        raise GlobalConditionFailed(str(mismatch)) from None
    try:
        _check_anchors(pattern, resource, _condition_anchor)
    except _Mismatch as mismatch:
        raise ConditionFailed(str(mismatch)) from None


class _Mismatch(StockadeError):
    pass


def _check_anchors(pattern: dict[str, Any], resource: Any, test: AnchorTest) -> None:
    for original, inner in _anchored_keys(pattern, test):
        actual = _resource_field(resource, inner)
        if actual is MISSING:
            raise _Mismatch(f'could not found "{inner}" key in the resource')
        expected = pattern[original]
        if _handle_add_if_not_present(expected, actual) > 0:
            continue
        failure = condition_failure(actual, expected)
        if failure is not None:
            raise _Mismatch(failure)


def _walk(pattern: Any, resource: Any) -> None:
    if isinstance(pattern, dict):
        _walk_map(pattern, resource)
    elif isinstance(pattern, list):
        if pattern and isinstance(pattern[0], dict):
            _walk_list_of_maps(pattern, resource)


def _walk_map(pattern: dict[str, Any], resource: Any) -> None:
    _handle_add_if_not_present(pattern, resource)
    _validate_conditions(pattern, resource)
    for key in list(pattern):
        parsed = parse_anchor(key)
        if parsed is not None and _any_anchor(*parsed):
            continue
        _walk(pattern[key], _resource_field(resource, key))


def _walk_list_of_maps(pattern: list[Any], resource: Any) -> None:
    if resource is MISSING or resource is None:
        resource_elements: list[Any] = []
    elif isinstance(resource, list):
        resource_elements = resource
    else:
        raise PatchError("wrong node kind: expected SequenceNode but got MappingNode"
                         if isinstance(resource, dict) else
                         "wrong node kind: expected SequenceNode but got ScalarNode")
    for element in list(pattern):
        if not has_anchors(element, _any_anchor):
            continue
        gated_globally = has_anchors(element, _global_anchor)
        any_global_passed = False
        last_global_failure: GlobalConditionFailed | None = None
        # One working copy serves every resource element, as in Kyverno: `+()` anchors
        # resolved against one element stay resolved for the next.
        working = deep_copy(element)
        for resource_element in resource_elements:
            try:
                _walk(working, resource_element)
            except ConditionFailed:
                continue
            except GlobalConditionFailed as failure:
                last_global_failure = failure
                continue
            if gated_globally:
                any_global_passed = True
            else:
                _append_named_copy(pattern, working, resource_element)
        if resource is MISSING:
            try:
                _walk(working, None)
            except ConditionFailed:
                continue
            if gated_globally:
                any_global_passed = True
        if not any_global_passed and last_global_failure is not None:
            raise last_global_failure


def _append_named_copy(pattern: list[Any], element: Any, resource_element: Any) -> None:
    name = resource_element.get("name", MISSING) if isinstance(resource_element, dict) else MISSING
    if _nil_or_empty(name):
        return
    copy = deep_copy(element)
    if delete_anchors(copy, delete_scalar=True, traverse_maps=False):
        return
    if isinstance(copy, dict):
        copy["name"] = deep_copy(name)
    pattern.append(copy)


def delete_anchors(node: Any, delete_scalar: bool, traverse_maps: bool) -> bool:
    """Strip condition anchors below `node`; True when nothing but anchors was left."""
    if isinstance(node, dict):
        return _delete_anchors_in_map(node, traverse_maps)
    if isinstance(node, list):
        return _delete_anchors_in_list(node, traverse_maps)
    return delete_scalar


def _delete_anchors_in_map(node: dict[str, Any], traverse_maps: bool) -> bool:
    anchors_left = False
    for original, _inner in _anchored_keys(node, lambda modifier, key: modifier in ("", "<")):
        if delete_anchors(node[original], True, traverse_maps):
            del node[original]
        else:
            anchors_left = True
    if anchors_left:
        for original, inner in _anchored_keys(node, lambda modifier, key: modifier in ("", "<")):
            _rename_key(node, original, inner)
    need_to_delete = True
    for key in list(node):
        if delete_anchors(node[key], False, traverse_maps):
            del node[key]
        else:
            need_to_delete = False
    return need_to_delete


def _delete_anchors_in_list(node: list[Any], traverse_maps: bool) -> bool:
    was_empty = not node
    # Kyverno decides on a snapshot of the elements but deletes by index from the shrinking
    # list, so after a first deletion the index points one element further.  Policies with
    # several anchored elements in one list see that effect; reproduce it.
    for index, element in enumerate(list(node)):
        if has_anchors(element, _any_anchor):
            remove = True
            if traverse_maps and isinstance(element, dict):
                remove = delete_anchors(element, True, traverse_maps)
        else:
            remove = delete_anchors(element, False, traverse_maps)
        if remove:
            if index >= len(node):
                raise PatchError("failed to delete anchors: list index out of range")
            del node[index]
    return not node and not was_empty


def _delete_condition_elements(pattern: dict[str, Any]) -> None:
    for key in list(pattern):
        if delete_anchors(pattern[key], is_condition_anchor(key), False):
            del pattern[key]


def preprocess_overlay(overlay: Any, resource: Any) -> Any:
    """Resolve anchors in `overlay` (mutated in place) against `resource`.

    Raises ConditionFailed / GlobalConditionFailed when the overlay does not apply.
    """
    _walk(overlay, resource)
    if not isinstance(overlay, dict):
        raise PatchError("wrong node kind: expected MappingNode but got "
                         + ("SequenceNode" if isinstance(overlay, list) else "ScalarNode"))
    _delete_condition_elements(overlay)
    return overlay
