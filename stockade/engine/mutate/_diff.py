"""RFC 6902 difference between two JSON documents, as sent in admission responses."""

from __future__ import annotations

from typing import Any

from ._common import json_equal


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _diff(original: Any, patched: Any, path: str, operations: list[dict[str, Any]]) -> None:
    if json_equal(original, patched):
        return
    if isinstance(original, dict) and isinstance(patched, dict):
        for key in original:
            if key not in patched:
                operations.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
        for key, value in patched.items():
            child = f"{path}/{_escape(key)}"
            if key not in original:
                operations.append({"op": "add", "path": child, "value": value})
            else:
                _diff(original[key], value, child, operations)
        return
    if isinstance(original, list) and isinstance(patched, list):
        common = min(len(original), len(patched))
        for index in range(common):
            _diff(original[index], patched[index], f"{path}/{index}", operations)
        # Remove surplus elements from the end so earlier indices stay valid.
        for index in range(len(original) - 1, common - 1, -1):
            operations.append({"op": "remove", "path": f"{path}/{index}"})
        for index in range(common, len(patched)):
            operations.append({"op": "add", "path": f"{path}/{index}", "value": patched[index]})
        return
    operations.append({"op": "replace", "path": path, "value": patched})


def diff_operations(original: Any, patched: Any) -> list[dict[str, Any]]:
    operations: list[dict[str, Any]] = []
    _diff(original, patched, "", operations)
    return operations
