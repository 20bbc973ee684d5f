"""Applying the patches CEL mutations produce: apply configurations (server-side-apply merge) and JSON patches."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from stockade.engine.mutate._k8s_schema import ROOTS, TYPES

Schema = tuple[Any, ...] | None


def _root_schema(resource: dict[str, Any]) -> Schema:
    root = ROOTS.get(f"{resource.get('apiVersion')} {resource.get('kind')}")
    return ("obj", root) if root else None


def _field(schema: Schema, key: str) -> Schema:
    if schema is None:
        return None
    if schema[0] == "map":
        return ("obj", schema[1])
    if schema[0] != "obj":
        return None
    entry = TYPES.get(schema[1], {}).get(key)
    return tuple(entry) if entry is not None else None


def _merge(dest: Any, patch: Any, schema: Schema) -> Any:
    if isinstance(patch, dict) and isinstance(dest, dict):
        merged = dict(dest)
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
                continue
            merged[key] = _merge(dest.get(key), value, _field(schema, key)) if key in dest else copy.deepcopy(value)
        return merged
    if isinstance(patch, list) and isinstance(dest, list) and schema is not None and schema[0] == "list":
        keys = schema[2]
        element = ("obj", schema[1]) if schema[1] else None
        result = list(dest)
        for item in patch:
            if not keys:
                if item not in result:
                    result.append(copy.deepcopy(item))
                continue
            if not isinstance(item, dict):
                result.append(copy.deepcopy(item))
                continue
            identity = tuple(item.get(k) for k in keys)
            for position, existing in enumerate(result):
                if isinstance(existing, dict) and tuple(existing.get(k) for k in keys) == identity:
                    result[position] = _merge(existing, item, element)
                    break
            else:
                result.append(copy.deepcopy(item))
        return result
    return copy.deepcopy(patch)


def apply_configuration(resource: dict[str, Any], configuration: Any) -> dict[str, Any]:
    """Merge an apply configuration into ``resource``: maps merge, keyed lists merge by key, other lists replace."""
    if configuration is None:
        return resource
    if not isinstance(configuration, dict):
        raise ValueError(f"apply configuration must be an object, got {type(configuration).__name__}")
    merged: dict[str, Any] = _merge(resource, configuration, _root_schema(resource))
    return merged


def apply_json_patch(resource: dict[str, Any], operations: Any) -> dict[str, Any]:
    """Apply a list of JSONPatch{op, path, value, from} values."""
    if operations is None:
        return resource
    if not isinstance(operations, list):
        raise ValueError(f"JSON patch expression must return a list, got {type(operations).__name__}")
    cleaned = []
    for operation in operations:
        if not isinstance(operation, dict):
            raise ValueError("every JSON patch operation must be an object")
        cleaned.append({k: v for k, v in operation.items() if not (k in ("value", "from") and v is None and operation.get("op") not in ("add", "replace", "test"))})
    try:
        patched: dict[str, Any] = jsonpatch.apply_patch(resource, cleaned)
        return patched
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
        raise ValueError(f"JSON patch failed: {error}") from error
