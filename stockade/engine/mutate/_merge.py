"""Strategic merge with the exact list and null behaviour of kustomize's kyaml `merge2`.

Kyverno applies patchStrategicMerge with kyaml (list direction "prepend"), so this module
reproduces its observable rules rather than the API server's strategic merge:
- maps merge recursively; `null` in the patch deletes the key; a `null` already in the
  resource is kept; `$patch: replace|delete|merge` act on maps and on list elements;
- a list is merged element by element only when the Kubernetes 1.21 schema of the resource
  kind declares a merge strategy for it (containers by `name`, ports by
  `containerPort`+`protocol`, finalizers by value, ...).  Lists of unknown kinds (custom
  resources) and lists without a strategy are replaced by the patch's list;
- in a merged list the patch's elements come first (in patch order), followed by the
  resource's other elements in their order; `null`/empty elements are dropped;
- `$retainKeys` and `$setElementOrder/...` are not directives for kyaml: they are copied into
  the result like ordinary fields.
Everything works in place on private copies: `dest` is the caller's copy of the resource and
`src` its copy of the patch.
"""

from __future__ import annotations

from typing import Any, Final

import yaml

from stockade import yamlsafe

from ._common import MISSING, PatchError, scalar_text
from ._k8s_schema import ROOTS, TYPES


class _Clear:
    def __repr__(self) -> str:
        return "CLEAR"


class _KeepNull:
    def __repr__(self) -> str:
        return "KEEP_NULL"


CLEAR: Final = _Clear()  # remove the field / element
KEEP_NULL: Final = _KeepNull()  # an explicit null already in the resource survives

Schema = tuple[Any, ...] | None

_MERGE, _REPLACE, _DELETE = "merge", "replace", "delete"
_DIRECTIVE_KEY: Final = "$patch"


def _null(value: Any) -> bool:
    return value is MISSING or value is None or value is CLEAR or value is KEEP_NULL


def _kind_name(value: Any) -> str:
    if isinstance(value, dict):
        return "MappingNode"
    if isinstance(value, list):
        return "SequenceNode"
    return "ScalarNode"


def _wrong_kind(expected: str, value: Any) -> PatchError:
    contents = yaml.safe_dump(value, default_flow_style=False, sort_keys=False)
    return PatchError(f"wrong node kind: expected {expected} but got {_kind_name(value)}: "
                      f"node contents:\n{contents}")


def _node_value(value: Any) -> str:
    """The `.Value` of a YAML node: containers have none."""
    if isinstance(value, (dict, list)):
        return ""
    return scalar_text(value)


def _key_value(element: Any, key: str) -> str:
    """A merge-key value as kyaml reads it: empty when absent, null or an empty container."""
    if not isinstance(element, dict):
        return ""
    value = element.get(key, MISSING)
    if value is MISSING or value is None or value == {} or value == []:
        return ""
    return _node_value(value)


# --- schema ---------------------------------------------------------------------------------

def schema_from_meta(*sources: Any) -> Schema:
    for source in sources:
        if isinstance(source, dict):
            api_version, kind = source.get("apiVersion"), source.get("kind")
            if isinstance(api_version, str) and isinstance(kind, str) and api_version and kind:
                root = ROOTS.get(f"{api_version} {kind}")
                if root is not None:
                    return ("obj", root)
    return None


def field_schema(schema: Schema, key: str) -> Schema:
    if schema is None:
        return None
    if schema[0] == "map":
        return ("obj", schema[1])
    if schema[0] != "obj":
        return None
    entry = TYPES.get(schema[1], {}).get(key)
    if entry is None:
        return None
    return tuple(entry)


def element_schema(schema: Schema) -> Schema:
    if schema is not None and schema[0] == "list" and schema[1] is not None:
        return ("obj", schema[1])
    return None


# --- directives -----------------------------------------------------------------------------

def _map_directive(patch: Any) -> str:
    if not isinstance(patch, dict) or _DIRECTIVE_KEY not in patch:
        return _MERGE
    value = patch[_DIRECTIVE_KEY]
    text = _node_value(value) if value is not None else ""
    if text in (_DELETE, _REPLACE, _MERGE):
        del patch[_DIRECTIVE_KEY]
        return text
    raise PatchError(f"unknown patch strategy '{text}'")


def _list_directive(patch: Any) -> str:
    if not isinstance(patch, list):
        return _MERGE
    holder = next((item for item in patch if isinstance(item, dict) and _DIRECTIVE_KEY in item), None)
    if holder is None or len(holder) > 1:
        return _MERGE
    value = holder[_DIRECTIVE_KEY]
    text = _node_value(value) if value is not None else ""
    if text not in (_DELETE, _REPLACE, _MERGE):
        raise PatchError(f"unknown patch strategy '{text}'")
    _element_setter(patch, None, [_DIRECTIVE_KEY], [text])
    return text


# --- the walk -------------------------------------------------------------------------------

def merge_into(dest: Any, src: Any) -> Any:
    """Merge patch `src` into resource `dest` (both private copies); returns the result."""
    result = _walk(dest, src, None)
    if _null(result):
        raise PatchError("filter cannot create or delete objects")
    return result


def _walk(dest: Any, src: Any, schema: Schema) -> Any:
    if schema is None:
        schema = schema_from_meta(dest, src)
    first = next((value for value in (dest, src) if not _null(value)), MISSING)
    if first is MISSING:
        return _walk_map(dest, src, schema)
    expected = _kind_name(first)
    for value in (dest, src):
        if not _null(value) and _kind_name(value) != expected:
            raise _wrong_kind(expected, value)
    if isinstance(first, dict):
        return _walk_map(dest, src, schema)
    if isinstance(first, list):
        if schema is not None and schema[0] == "list":
            return _walk_associative(dest, src, schema)
        return src if src is not MISSING else dest
    return src if src is not MISSING else dest


def _visit_map(dest: Any, src: Any) -> Any:
    if dest is MISSING or dest is None:
        try:
            directive = _map_directive(src)
        except PatchError:
            directive = _MERGE
        if directive == _DELETE:
            return CLEAR
        if src is MISSING and dest is None:
            return KEEP_NULL
        return src
    if src is None:
        return CLEAR
    directive = _map_directive(src)
    if directive == _DELETE:
        return CLEAR
    if directive == _REPLACE:
        return src
    return dest


def _set_field(mapping: dict[str, Any], key: str, value: Any) -> None:
    if value is CLEAR or value is MISSING or value is None:
        mapping.pop(key, None)
    elif value is KEEP_NULL:
        mapping[key] = None
    else:
        mapping[key] = value


def _walk_map(dest: Any, src: Any, schema: Schema) -> Any:
    result = _visit_map(dest, src)
    if not isinstance(result, dict):
        return result
    src_map = src if isinstance(src, dict) else {}
    keys = set(result)
    keys.update(src_map)
    for key in sorted(keys):
        value = _walk(result.get(key, MISSING), src_map.get(key, MISSING), field_schema(schema, key))
        _set_field(result, key, value)
    return result


# --- associative lists ----------------------------------------------------------------------

def _walk_associative(dest: Any, src: Any, schema: Schema) -> Any:
    assert schema is not None
    if dest is MISSING or dest is None:
        result = src
    elif src is None:
        return CLEAR
    else:
        directive = _list_directive(src)
        if directive == _DELETE:
            return CLEAR
        result = src if directive == _REPLACE else dest
    if not isinstance(result, list):
        return CLEAR
    keys: list[str] = list(schema[2])
    ordered_sources = [source for source in (src, result) if isinstance(source, list)]
    if keys:
        values = _element_values(ordered_sources, keys)
    else:
        keys = [""]
        values = _primitive_values(ordered_sources)
    return _set_elements(values, keys, result, (result, src), element_schema(schema))


def _element_values(sources: list[list[Any]], keys: list[str]) -> list[list[str]]:
    seen: set[tuple[str, ...]] = set()
    values: list[list[str]] = []
    for source in sources:
        for element in source:
            entry = tuple(_key_value(element, key) for key in keys)
            if entry not in seen:
                seen.add(entry)
                values.append(list(entry))
    return values


def _primitive_values(sources: list[list[Any]]) -> list[list[str]]:
    seen: set[str] = set()
    values: list[list[str]] = []
    for source in sources:
        for item in source:
            text = _node_value(item)
            if text not in seen:
                seen.add(text)
                values.append([text])
    return values


def _match_values(first: list[str], second: list[str]) -> tuple[bool, list[str]]:
    if len(first) != len(second):
        return False, []
    common = False
    merged: list[str] = []
    for left, right in zip(first, second):
        if left == right:
            common = True
            merged.append(left)
        elif left and right:
            return False, []
        else:
            merged.append(left or right)
    return common, merged


def _merge_values(values_list: list[list[str]]) -> list[list[str]]:
    """Treat key tuples differing only by empty parts as one (port 80 vs port 80/TCP)."""
    for i in range(len(values_list)):
        first = values_list[i]
        for j in range(len(values_list)):
            matched, merged = _match_values(first, values_list[j])
            if matched:
                values_list[i] = merged
                values_list[j] = merged
    return values_list


def _validate_keys(values_list: list[list[str]], values: list[str],
                   keys: list[str]) -> tuple[list[str], list[str]]:
    valid = {keys[i] for entry in values_list for i, value in enumerate(entry) if value != ""}
    if not valid:
        return keys, values
    valid_keys = [key for key in keys if key in valid]
    valid_values = [value for i, value in enumerate(values) if value != "" or keys[i] in valid]
    return valid_keys, valid_values


def _find_element(source: Any, keys: list[str], values: list[str]) -> Any:
    if not isinstance(source, list):
        return MISSING
    if not keys or keys[0] == "":
        wanted = values[0] if values else ""
        for item in source:
            if not isinstance(item, (dict, list)) and _node_value(item) == wanted:
                return item
        return MISSING
    for item in source:
        if not isinstance(item, dict):
            continue
        if all(key in item and _node_value(item[key]) == value for key, value in zip(keys, values)):
            return item
    return MISSING


def _set_elements(values_list: list[list[str]], keys: list[str], dest: list[Any],
                  sources: tuple[Any, Any], element_schema: Schema) -> Any:
    to_add: list[Any] = []
    if len(keys) > 1:
        values_list = _merge_values(values_list)
    valid_keys: list[str] = keys
    for values in values_list:
        if not values:
            continue
        valid_keys, valid_values = _validate_keys(values_list, values, keys)
        lookup_keys, lookup_values = _validate_keys([valid_values], valid_values, valid_keys)
        dest_element = _find_element(sources[0], lookup_keys, lookup_values)
        src_element = _find_element(sources[1], lookup_keys, lookup_values)
        merged = _walk(dest_element, src_element, element_schema)
        if _null(merged) or merged == {}:
            _element_setter(dest, None, valid_keys, valid_values)
            continue
        if isinstance(merged, dict):
            for index, key in enumerate(valid_keys):
                if key not in merged and valid_values[index] != "":
                    merged[key] = yamlsafe.load(valid_values[index], yaml.SafeLoader)
        _element_setter(to_add, merged, valid_keys, valid_values)
    if values_list:
        return _append_list(to_add, dest, valid_keys)
    return dest


def _field_matches(element: Any, name: str, wanted: str) -> bool:
    if element is None:
        return False
    if name == "":
        if isinstance(element, (dict, list)):
            raise _wrong_kind("ScalarNode", element)
        return _node_value(element) == wanted
    if not isinstance(element, dict):
        raise _wrong_kind("MappingNode", element)
    if name not in element:
        return False
    return wanted == "" or _node_value(element[name]) == wanted


def _element_setter(target: list[Any], element: Any, keys: list[str], values: list[str]) -> None:
    """kyaml's ElementSetter: replace/remove the elements matching keys=values, else append.

    It also drops null and empty-map elements, and with no values it keeps nothing.
    """
    if not keys:
        keys = [""]
    mapping_setter = keys[0] != "" and bool(values) and values[0] != ""
    kept: list[Any] = []
    found_any = False
    for item in target:
        if item is None or item == {}:
            continue
        if not isinstance(item, dict) and mapping_setter:
            kept.append(item)
            continue
        found = True
        matched_once = False
        for index, key in enumerate(keys):
            if index < len(values):
                matched_once = _field_matches(item, key, values[index])
            if not matched_once:
                found = False
                break
        if not found:
            if values:
                kept.append(item)
            continue
        found_any = True
        if element is not None:
            kept.append(element)
    target[:] = kept
    if element is None:
        return
    if not found_any:
        target.append(element)


def _append_list(target: list[Any], source: list[Any], keys: list[str]) -> list[Any]:
    for element in list(source):
        if keys[0] == "":
            _element_setter(target, element, [""], [_node_value(element)])
            continue
        values: list[str] = []
        for key in keys:
            if element is None:
                target.append(element)
                continue
            if not isinstance(element, dict):
                raise _wrong_kind("MappingNode", element)
            if key not in element:
                target.append(element)
                continue
            values.append(_node_value(element[key]))
        if len(keys) > 1:
            _element_setter(target, None, keys, values)
        _element_setter(target, element, keys, values)
    return target
