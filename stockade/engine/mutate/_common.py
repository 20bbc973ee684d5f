"""Small helpers shared by the patch implementations."""

from __future__ import annotations

import re
from typing import Any, Final
from stockade.errors import StockadeError

_ANCHOR_RE: Final = re.compile(r"^([+<=X^])?\((.+)\)$")


class PatchError(StockadeError):
    """A patch could not be decoded or applied; the text follows Kyverno's wording."""


class _Missing:
    """Marks an absent map field, which the merge treats differently from an explicit null."""

    _instance: "_Missing | None" = None

    def __new__(cls) -> "_Missing":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Final = _Missing()


def parse_anchor(key: Any) -> tuple[str, str] | None:
    """Return (modifier, inner key) for keys like `(k)`, `<(k)`, `+(k)`; None for plain keys."""
    if not isinstance(key, str):
        return None
    found = _ANCHOR_RE.match(key.strip())
    if found is None or "\n" in found.group(2):
        return None
    return found.group(1) or "", found.group(2)


def is_condition_anchor(key: Any) -> bool:
    """Conditional `(k)` or global `<(k)` — the two anchors Kyverno treats as conditions."""
    parsed = parse_anchor(key)
    return parsed is not None and parsed[0] in ("", "<")


def scalar_text(value: Any) -> str:
    """The text a YAML scalar node holds for a JSON value (what kyaml compares keys by)."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    if isinstance(value, (dict, list)):
        return ""
    return str(value)


def deep_copy(value: Any) -> Any:
    """Copy a JSON-like tree; much faster than copy.deepcopy for plain dicts and lists."""
    if isinstance(value, dict):
        return {key: deep_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [deep_copy(item) for item in value]
    return value


def json_equal(left: Any, right: Any) -> bool:
    """Structural JSON equality that keeps booleans apart from numbers."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, dict):
        if not isinstance(right, dict) or left.keys() != right.keys():
            return False
        return all(json_equal(item, right[key]) for key, item in left.items())
    if isinstance(left, list):
        if not isinstance(right, list) or len(left) != len(right):
            return False
        return all(json_equal(a, b) for a, b in zip(left, right))
    if isinstance(right, (dict, list)):
        return False
    if isinstance(left, (int, float)) and isinstance(right, (int, float)):
        return left == right
    return type(left) is type(right) and left == right
