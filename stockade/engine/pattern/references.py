"""``$(path)`` references inside a pattern document (Kyverno's ``substituteReferences``).

A reference names another node of the *same* document (the pattern, or the whole ``anyPattern`` list), by an
absolute path from its root or a path relative to the node holding the reference, where ``.`` is that node
itself and ``..`` its parent map.  Anchors are ignored when paths are compared, so
``$(./../../requests/memory)`` finds ``=(requests): {memory: …}`` too.  A reference may start with an
operator (``$(<=./../../limits/memory)``), in which case the target is turned into text behind that operator.
References are resolved against the document as written (before any substitution) and run before ``{{ }}``
variables.  ``\\$(…)`` is an escape and loses its backslash.
"""

from __future__ import annotations

import re
from typing import Any

from stockade.engine.pattern.anchors import clean_path, strip_anchors_from_path
from stockade.gofmt import go_sprint
from stockade.engine.pattern.value import EQUAL, operator_of
from stockade.errors import StockadeError

__all__ = ["PatternReferenceError", "resolve_references"]

_REFERENCE_RE = re.compile(r"^\$\(.[^ ]*\)|[^\\]\$\(.[^ ]*\)")
_ESCAPED_REFERENCE_RE = re.compile(r"\\\$\(.[^ )]*\)")


class PatternReferenceError(StockadeError):
    """A reference that cannot be resolved; the message follows Kyverno's wording."""


def _iter_nodes(node: Any, path: str) -> Any:
    """Yield ``(path, value)`` for every leaf and every map key (keys carry their map's path), like Kyverno."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield path, key
            yield from _iter_nodes(value, path + "/" + key.replace("/", "\\/"))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _iter_nodes(item, f"{path}/{index}")
    else:
        yield path, node


def _lookup(document: Any, wanted: str) -> Any:
    found = None
    for path, value in _iter_nodes(document, ""):
        if strip_anchors_from_path(path) == wanted:
            found = value
    return found


def _absolute(reference_path: str, node_path: str) -> str:
    if reference_path.startswith("/"):
        return reference_path
    joined = "/".join(part for part in (node_path, reference_path) if part)
    return clean_path(joined) if joined else ""


def _as_operand(value: Any, operator: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # Policy documents hold numbers as float64, which Kyverno prints with %f here.
        return f"{float(value):.6f}"
    raise ValueError(f"incorrect expression: operator {operator} does not match with value {go_sprint(value, True)}")


def _resolve_one(document: Any, reference: str, node_path: str) -> Any:
    target = reference.strip("$()")
    operator = operator_of(target)
    target = target[len(operator):]
    if not target:
        raise ValueError("expected path, found empty reference")
    value = _lookup(document, _absolute(target, node_path))
    if operator == EQUAL:
        return value
    return operator + _as_operand(value, operator)


def _substitute_text(document: Any, text: str, node_path: str) -> str:
    if "$(" not in text:
        return text
    for found in _REFERENCE_RE.findall(text):
        initial = found.startswith("$(")
        reference = found if initial else found[1:]
        try:
            resolved = _resolve_one(document, reference, node_path)
        except ValueError as error:
            raise PatternReferenceError(f"failed to resolve {reference} at path {node_path}: {error}") from None
        if resolved is None:
            raise PatternReferenceError(f"got nil resolved variable {reference} at path {node_path}: <nil>")
        if not isinstance(resolved, str):
            raise PatternReferenceError(
                f"NotResolvedReferenceErr,reference {reference} not resolved at path {node_path}"
            )
        replacement = resolved if initial else found[0] + resolved
        text = text.replace(found, replacement, 1)
    for escaped in _ESCAPED_REFERENCE_RE.findall(text):
        text = text.replace(escaped, escaped[1:])
    return text


def _substitute(document: Any, node: Any, path: str) -> Any:
    if isinstance(node, str):
        return _substitute_text(document, node, path)
    if isinstance(node, dict):
        result: dict[str, Any] | None = None
        for key, value in node.items():
            new_key = _substitute_text(document, key, path)
            new_value = _substitute(document, value, path + "/" + key.replace("/", "\\/"))
            if result is None and (new_key != key or new_value is not value):
                result = {}
                for earlier_key, earlier_value in node.items():
                    if earlier_key == key:
                        break
                    result[earlier_key] = earlier_value
            if result is not None:
                result[new_key] = new_value
        return node if result is None else result
    if isinstance(node, list):
        items: list[Any] | None = None
        for index, item in enumerate(node):
            new_item = _substitute(document, item, f"{path}/{index}")
            if items is None and new_item is not item:
                items = list(node[:index])
            if items is not None:
                items.append(new_item)
        return node if items is None else items
    return node


def _mentions_reference(node: Any) -> bool:
    if isinstance(node, str):
        return "$(" in node
    if isinstance(node, dict):
        return any("$(" in key or _mentions_reference(value) for key, value in node.items())
    if isinstance(node, list):
        return any(_mentions_reference(item) for item in node)
    return False


def resolve_references(pattern: Any) -> Any:
    """Return ``pattern`` with every ``$(…)`` reference replaced; raise PatternReferenceError when one fails.

    The input is not modified; unchanged sub-trees are shared with the result.
    """
    if not _mentions_reference(pattern):
        return pattern
    return _substitute(pattern, pattern, "")
