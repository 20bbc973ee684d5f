"""Applying the patches CEL mutations produce: apply configurations (server-side-apply merge) and JSON patches."""

from __future__ import annotations

import copy
from typing import Any

from stockade.cel import to_json
from stockade.engine.mutate import (
    KUBERNETES_OPTIONS,
    PatchError,
    Schema,
    apply_json6902,
    element_schema,
    field_schema,
    schema_from_meta,
)


def _merge(dest: Any, patch: Any, schema: Schema) -> Any:
    if isinstance(patch, dict) and isinstance(dest, dict):
        merged = dict(dest)
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
                continue
            merged[key] = _merge(dest.get(key), value, field_schema(schema, key)) if key in dest else copy.deepcopy(value)
        return merged
    if isinstance(patch, list) and isinstance(dest, list) and schema is not None and schema[0] == "list":
        keys = schema[2]
        element = element_schema(schema)
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
    configuration = to_json(configuration)
    merged: dict[str, Any] = _merge(resource, configuration, schema_from_meta(resource))
    return merged


def apply_json_patch(resource: dict[str, Any], operations: Any) -> dict[str, Any]:
    """Apply a list of JSONPatch{op, path, value, from} values."""
    if operations is None:
        return resource
    if not isinstance(operations, list):
        raise ValueError(f"JSON patch expression must return a list, got {type(operations).__name__}")
    operations = to_json(operations)
    cleaned = []
    for operation in operations:
        if not isinstance(operation, dict):
            raise ValueError("every JSON patch operation must be an object")
        cleaned.append({k: v for k, v in operation.items() if not (k in ("value", "from") and v is None and operation.get("op") not in ("add", "replace", "test"))})
    try:
        return apply_json6902(resource, cleaned, KUBERNETES_OPTIONS)
    except PatchError as error:
        raise ValueError(f"JSON patch failed: {error}") from error
