"""CEL value semantics needed by Python-implemented functions (equality and ordering differ from Python's)."""

from __future__ import annotations

import datetime
from typing import Any

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def cel_equals(left: Any, right: Any) -> bool:
    """CEL heterogeneous equality: numbers compare across int/uint/double, bools never equal numbers."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, (int, float)) and isinstance(right, (int, float)):
        return left == right
    if isinstance(left, (bytes, bytearray)) and isinstance(right, (bytes, bytearray)):
        return bytes(left) == bytes(right)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(cel_equals(a, b) for a, b in zip(left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        if len(left) != len(right):
            return False
        for key, value in left.items():
            matches = [other for other_key, other in right.items() if cel_equals(key, other_key)]
            if not matches or not cel_equals(value, matches[0]):
                return False
        return True
    if type(left) is not type(right):
        return False
    return bool(left == right)


def _order_class(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    if isinstance(value, datetime.datetime):
        return "timestamp"
    if isinstance(value, datetime.timedelta):
        return "duration"
    raise ValueError(f"no such overload: values of type {type(value).__name__} are not comparable")


def comparable_key(values: list[Any]) -> str:
    """Check that all values share one comparable CEL kind and return it."""
    kinds = {_order_class(value) for value in values}
    if len(kinds) > 1:
        raise ValueError("no such overload: list elements must be of a single comparable type")
    return kinds.pop() if kinds else "none"


def check_int(value: int) -> int:
    """Fail like CEL on 64-bit signed overflow."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError("integer overflow")
    return value
