"""Kubernetes' list library plus the cel-go ``ext.Lists`` and ``ext.Sets`` functions that cel-cpp's Python wrapper
does not ship (``slice``, ``flatten``, ``distinct``, ``sort``, ``reverse``, ``lists.range``, ``sets.*``)."""

from __future__ import annotations

import datetime
from typing import Any

from stockade.cel.functions import Library
from stockade.cel.libs._values import cel_equals, check_int, comparable_key


def _is_sorted(items: list[Any]) -> bool:
    comparable_key(items)
    return all(items[index] <= items[index + 1] for index in range(len(items) - 1))


def _sum(items: list[Any]) -> Any:
    kind = comparable_key(items)
    if kind == "duration":
        return sum(items, datetime.timedelta(0))
    if kind not in ("number", "none"):
        raise ValueError("no such overload: sum() needs a list of numbers or durations")
    if any(isinstance(item, float) for item in items):
        return float(sum(items))
    return check_int(sum(items))


def _extreme(name: str, items: list[Any], pick: Any) -> Any:
    if not items:
        raise ValueError(f"{name} called on empty list")
    comparable_key(items)
    return pick(items)


def _min(items: list[Any]) -> Any:
    return _extreme("min", items, min)


def _max(items: list[Any]) -> Any:
    return _extreme("max", items, max)


def _includes(target: Any, wanted: Any) -> bool:
    """Kubernetes lists v1 ``includes``: membership for lists, equality for anything else."""
    if isinstance(target, list):
        return any(cel_equals(item, wanted) for item in target)
    return cel_equals(target, wanted)


def _index_of(items: list[Any], wanted: Any) -> int:
    for index, item in enumerate(items):
        if cel_equals(item, wanted):
            return index
    return -1


def _last_index_of(items: list[Any], wanted: Any) -> int:
    for index in range(len(items) - 1, -1, -1):
        if cel_equals(items[index], wanted):
            return index
    return -1


def _slice(items: list[Any], start: int, end: int) -> list[Any]:
    if start < 0 or end < 0:
        raise ValueError(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise ValueError(f"cannot slice({start}, {end}), start index must be less than or equal to end index")
    if end > len(items):
        raise ValueError(f"cannot slice({start}, {end}), list is length {len(items)}")
    return items[start:end]


def _flatten(items: list[Any], depth: int = 1) -> list[Any]:
    if depth < 0:
        raise ValueError("level must be non-negative")
    flattened: list[Any] = []
    for item in items:
        if isinstance(item, list) and depth > 0:
            flattened.extend(_flatten(item, depth - 1))
        else:
            flattened.append(item)
    return flattened


def _distinct(items: list[Any]) -> list[Any]:
    unique: list[Any] = []
    for item in items:
        if not any(cel_equals(item, seen) for seen in unique):
            unique.append(item)
    return unique


def _sort(items: list[Any]) -> list[Any]:
    comparable_key(items)
    return sorted(items)


def _range(count: int) -> list[int]:
    if count < 0:
        raise ValueError("lists.range() needs a non-negative size")
    return list(range(count))


def _contains_all(container: list[Any], wanted: list[Any]) -> bool:
    return all(any(cel_equals(item, candidate) for candidate in container) for item in wanted)


def _intersects(left: list[Any], right: list[Any]) -> bool:
    return any(any(cel_equals(item, candidate) for candidate in right) for item in left)


def build_lists() -> Library:
    library = Library("k8s.lists")
    library.add("isSorted", ("list",), "bool", _is_sorted, member=True)
    library.add("sum", ("list",), "dyn", _sum, member=True)
    library.add("min", ("list",), "dyn", _min, member=True)
    library.add("max", ("list",), "dyn", _max, member=True)
    library.add("indexOf", ("list", "any"), "int", _index_of, member=True)
    library.add("lastIndexOf", ("list", "any"), "int", _last_index_of, member=True)
    library.add("includes", ("any", "any"), "bool", _includes, member=True)
    library.add("slice", ("list", "int", "int"), "list", _slice, member=True)
    library.add("flatten", ("list",), "list", _flatten, member=True)
    library.add("flatten", ("list", "int"), "list", _flatten, member=True)
    library.add("distinct", ("list",), "list", _distinct, member=True)
    library.add("sort", ("list",), "list", _sort, member=True)
    library.add("reverse", ("list",), "list", lambda items: items[::-1], member=True)
    library.add("lists.range", ("int",), "list", _range)
    return library


def build_jsonpatch() -> Library:
    """Kubernetes' ``jsonpatch.escapeKey`` for building JSON Pointer paths from map keys."""
    library = Library("k8s.jsonpatch")
    library.add("jsonpatch.escapeKey", ("string",), "string", lambda key: key.replace("~", "~0").replace("/", "~1"))
    return library


def build_sets() -> Library:
    library = Library("k8s.sets")
    library.add("sets.contains", ("list", "list"), "bool", _contains_all)
    library.add("sets.equivalent", ("list", "list"), "bool",
                lambda left, right: _contains_all(left, right) and _contains_all(right, left))
    library.add("sets.intersects", ("list", "list"), "bool", _intersects)
    return library
