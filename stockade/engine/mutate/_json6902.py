"""RFC 6902 JSON Patch with the options Kyverno enables on evanphx/json-patch v5.

Kyverno applies patchesJson6902 with SupportNegativeIndices, AllowMissingPathOnRemove and
EnsurePathExistsOnAdd, which means:
- `-1` (and other negative indices) count from the end; for `add`, `-1` appends;
- `remove` of a path that does not exist is a silent no-op;
- `add` creates missing parents: objects, or arrays when the next token is an index or `-`
  (padded with nulls up to that index).
Error texts follow the library's, since Kyverno surfaces them in rule messages.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import yaml

from stockade import yamlsafe

from ._common import PatchError, deep_copy, json_equal

_INDEX_RE = re.compile(r"^[+-]?\d+$")


@dataclass(frozen=True, slots=True)
class PatchOptions:
    """The evanphx/json-patch apply options that differ between callers (negative indices are always on)."""

    ensure_path_exists_on_add: bool
    allow_missing_path_on_remove: bool


# Kyverno's patchesJson6902 enables both; Kubernetes' MutatingAdmissionPolicy JSONPatch applies plain RFC 6902.
KYVERNO_OPTIONS = PatchOptions(ensure_path_exists_on_add=True, allow_missing_path_on_remove=True)
KUBERNETES_OPTIONS = PatchOptions(ensure_path_exists_on_add=False, allow_missing_path_on_remove=False)


def _decode_token(token: str) -> str:
    return re.sub(r"~[01]", lambda found: "/" if found.group(0) == "~1" else "~", token)


def _atoi(token: str) -> int | None:
    return int(token) if _INDEX_RE.match(token) else None


def parse_operations(operations: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Decode the patch like Kyverno: JSON when it starts with `[`, YAML otherwise."""
    if isinstance(operations, list):
        decoded: Any = operations
    else:
        text = operations
        if text and text[0] != "[":
            try:
                decoded = yamlsafe.load(text, yaml.SafeLoader)
            except yaml.YAMLError as error:
                raise PatchError(f"failed to convert patchesJSON6902 to JSON: {error}") from None
        else:
            try:
                decoded = json.loads(text)
            except ValueError:
                raise PatchError("failed to decode patches: invalid state detected") from None
    if not isinstance(decoded, list):
        kind = "object" if isinstance(decoded, dict) else type(decoded).__name__
        raise PatchError(f"failed to decode patches: json: cannot unmarshal {kind} "
                         "into Go value of type jsonpatch.Patch")
    for operation in decoded:
        if not isinstance(operation, dict):
            raise PatchError("failed to decode patches: json: cannot unmarshal "
                             "into Go value of type jsonpatch.Operation")
        problem = _operation_problem(operation)
        if problem:
            compact = json.dumps(operation, separators=(",", ":"), sort_keys=True)
            raise PatchError(f"failed to decode patches: invalid operation {compact}: {problem}")
    return decoded


def _operation_problem(operation: dict[str, Any]) -> str:
    kind = operation.get("op")
    if kind in ("add", "replace"):
        if operation.get("value") is None:
            return "failed to decode 'value': operation, missing value field: missing value"
    elif kind in ("move", "copy"):
        if not isinstance(operation.get("from"), str):
            return "failed to decode 'from': operation, missing from field: missing value"
    elif kind not in ("remove", "test"):
        return "unsupported operation"
    if not isinstance(operation.get("path"), str):
        return "failed to decode 'path': operation missing path field: missing value"
    return ""


class _Root:
    """Holds the document so that a path of "" can replace it."""

    def __init__(self, document: Any) -> None:
        self.document = document


def _child(container: Any, token: str) -> tuple[bool, Any]:
    if isinstance(container, dict):
        if token in container:
            return True, container[token]
        return False, None
    if isinstance(container, list):
        index = _atoi(token)
        if index is None:
            return False, None
        if index < 0:
            if index < -len(container):
                return False, None
            index += len(container)
        if index >= len(container):
            return False, None
        return True, container[index]
    return False, None


def _find_parent(root: _Root, path: str) -> tuple[Any, str] | None:
    parts = path.split("/")
    if len(parts) < 2:
        return None
    current = root.document
    for part in parts[1:-1]:
        found, current = _child(current, _decode_token(part))
        if not found or not isinstance(current, (dict, list)):
            return None
    return current, _decode_token(parts[-1])


def _ensure_path(root: _Root, path: str) -> None:
    parts = path.split("/")
    if len(parts) < 2:
        return
    tokens = parts[1:]
    current = root.document
    for position, raw in enumerate(tokens[:-1]):
        token = _decode_token(raw)
        found, target = _child(current, token)
        if found and target is not None:
            current = target
            continue
        index = _atoi(raw)
        if isinstance(current, list) and index is not None and index >= len(current) + 1:
            current.extend([None] * (index - len(current)))
        following = tokens[position + 1]
        next_index = _atoi(following)
        if next_index is not None or following == "-":
            next_index = next_index or 0
            if next_index < 0:
                if next_index < -1:
                    raise PatchError("Unable to ensure path for negative index other than -1: "
                                     f"{next_index}: invalid index referenced")
                next_index = 0
            created: Any = [None] * next_index
        else:
            created = {}
        if not _add_to(current, token, created):
            return
        current = created


def _add_to(container: Any, token: str, value: Any) -> bool:
    """Quietly add a created parent; mirrors the library ignoring errors there."""
    try:
        _container_add(container, token, value)
    except PatchError:
        return False
    return True


def _invalid_index(index: int) -> PatchError:
    return PatchError(f"Unable to access invalid index: {index}: invalid index referenced")


def _container_add(container: Any, token: str, value: Any) -> None:
    if isinstance(container, dict):
        container[token] = value
        return
    if not isinstance(container, list):
        raise PatchError("invalid value, expected object")
    if token == "-":
        container.append(value)
        return
    index = _atoi(token)
    if index is None:
        raise PatchError(f"value was not a proper array index: '{token}': "
                         f'strconv.Atoi: parsing "{token}": invalid syntax')
    size = len(container) + 1
    if index >= size:
        raise _invalid_index(index)
    if index < 0:
        if index < -size:
            raise _invalid_index(index)
        index += size
    container.insert(index, value)


def _container_remove(container: Any, token: str, allow_missing: bool = True) -> None:
    if isinstance(container, dict):
        if token not in container and not allow_missing:
            raise PatchError(f"unable to remove nonexistent key: {token}: missing value")
        container.pop(token, None)
        return
    index = _atoi(token)
    if index is None:
        raise PatchError(f'strconv.Atoi: parsing "{token}": invalid syntax')
    if index >= len(container) or index < -len(container):
        if allow_missing:
            return
        raise _invalid_index(index)
    if index < 0:
        index += len(container)
    del container[index]


def _container_get(container: Any, token: str) -> Any:
    if isinstance(container, dict):
        if token not in container:
            raise PatchError(f"unable to get nonexistent key: {token}: missing value")
        return container[token]
    index = _atoi(token)
    if index is None:
        raise PatchError(f'strconv.Atoi: parsing "{token}": invalid syntax')
    original = index
    if index < 0:
        if index < -len(container):
            raise _invalid_index(original)
        index += len(container)
    if index >= len(container):
        raise _invalid_index(index)
    return container[index]


def _container_set(container: Any, token: str, value: Any) -> None:
    if isinstance(container, dict):
        container[token] = value
        return
    index = _atoi(token) or 0
    if index < 0:
        index += len(container)
    container[index] = value


def _add(root: _Root, path: str, value: Any, ensure_path: bool) -> None:
    if path == "":
        root.document = value
        return
    if ensure_path:
        _ensure_path(root, path)
    located = _find_parent(root, path)
    if located is None:
        raise PatchError(f'add operation does not apply: doc is missing path: "{path}": missing value')
    try:
        _container_add(located[0], located[1], value)
    except PatchError as problem:
        raise PatchError(f"error in add for path: '{path}': {problem}") from None


def _remove(root: _Root, path: str, allow_missing: bool) -> None:
    located = _find_parent(root, path)
    if located is None:
        if allow_missing:
            return
        raise PatchError(f'remove operation does not apply: doc is missing path: "{path}": missing value')
    try:
        _container_remove(located[0], located[1], allow_missing)
    except PatchError as problem:
        raise PatchError(f"error in remove for path: '{path}': {problem}") from None


def _replace(root: _Root, path: str, value: Any) -> None:
    if path == "":
        if not isinstance(value, (dict, list)):
            raise PatchError("replace operation value must be object or array")
        root.document = value
        return
    located = _find_parent(root, path)
    if located is None:
        raise PatchError(f"replace operation does not apply: doc is missing path: {path}: missing value")
    try:
        _container_get(*located)
    except PatchError:
        raise PatchError(f"replace operation does not apply: doc is missing key: {path}: "
                         "missing value") from None
    _container_set(located[0], located[1], value)


def _move(root: _Root, source: str, path: str) -> None:
    if source == "":
        raise PatchError("unable to move entire document to another path: invalid state detected")
    located = _find_parent(root, source)
    if located is None:
        raise PatchError(f"move operation does not apply: doc is missing from path: {source}: missing value")
    try:
        value = _container_get(*located)
        _container_remove(*located)
    except PatchError as problem:
        raise PatchError(f"error in move for path: '{located[1]}': {problem}") from None
    target = _find_parent(root, path)
    if target is None:
        raise PatchError(f"move operation does not apply: doc is missing destination path: {path}: missing value")
    try:
        _container_add(target[0], target[1], value)
    except PatchError as problem:
        raise PatchError(f"error in move for path: '{path}': {problem}") from None


def _copy(root: _Root, source: str, path: str) -> None:
    located = _find_parent(root, source) if source else None
    if source == "":
        value = root.document
    elif located is None:
        raise PatchError(f'copy operation does not apply: doc is missing from path: "{source}": missing value')
    else:
        try:
            value = _container_get(*located)
        except PatchError as problem:
            raise PatchError(f"error in copy for from: '{source}': {problem}") from None
    target = _find_parent(root, path)
    if target is None:
        raise PatchError(f"copy operation does not apply: doc is missing destination path: {path}: missing value")
    try:
        _container_add(target[0], target[1], deep_copy(value))
    except PatchError as problem:
        raise PatchError(f"error while adding value during copy: {problem}") from None


def _test(root: _Root, path: str, expected: Any) -> None:
    if path == "":
        if json_equal(root.document, expected):
            return
        raise PatchError(f"testing value {path} failed: test failed")
    located = _find_parent(root, path)
    if located is None:
        raise PatchError(f"test operation does not apply: is missing path: {path}: missing value")
    found, actual = _child(*located)
    if not found or actual is None:
        if expected is None:
            return
        raise PatchError(f"testing value {path} failed: test failed")
    if expected is None or not json_equal(actual, expected):
        raise PatchError(f"testing value {path} failed: test failed")


def apply_operations(document: Any, operations: list[dict[str, Any]], options: PatchOptions = KYVERNO_OPTIONS) -> Any:
    """Apply decoded operations to `document`, which is modified in place where possible."""
    root = _Root(document)
    for operation in operations:
        kind = operation.get("op")
        path = operation.get("path", "")
        if kind == "add":
            _add(root, path, deep_copy(operation["value"]), options.ensure_path_exists_on_add)
        elif kind == "remove":
            _remove(root, path, options.allow_missing_path_on_remove)
        elif kind == "replace":
            _replace(root, path, deep_copy(operation["value"]))
        elif kind == "move":
            _move(root, operation["from"], path)
        elif kind == "copy":
            _copy(root, operation["from"], path)
        elif kind == "test":
            _test(root, path, operation.get("value"))
        else:
            raise PatchError(f"Unexpected kind: {kind}")
    return root.document
