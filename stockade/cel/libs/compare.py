"""``isLessThan``/``isGreaterThan``/``compareTo`` are shared by Quantity and Semver; one overload dispatches on
the tag because both are maps to the type checker."""

from __future__ import annotations

from typing import Any

from stockade.cel.functions import Library, describe, tag_of
from stockade.cel.libs.quantity import QUANTITY_TYPE, _compare
from stockade.cel.libs.semver import SEMVER_TYPE, compare_semver


def _compare_to(left: Any, right: Any) -> int:
    kind = tag_of(left)
    if kind != tag_of(right):
        raise TypeError(f"no such overload: cannot compare {describe(left)} with {describe(right)}")
    if kind == QUANTITY_TYPE:
        return _compare(left, right)
    if kind == SEMVER_TYPE:
        return compare_semver(left, right)
    raise TypeError(f"no such overload: {describe(left)} is not comparable")


def build_compare() -> Library:
    library = Library("k8s.compare")
    library.add("compareTo", ("map", "map"), "int", _compare_to, member=True)
    library.add("isLessThan", ("map", "map"), "bool", lambda a, b: _compare_to(a, b) < 0, member=True)
    library.add("isGreaterThan", ("map", "map"), "bool", lambda a, b: _compare_to(a, b) > 0, member=True)
    return library
