"""``{{ }}`` variable substitution with Kyverno's rules.

A string that is exactly one variable takes the variable's JSON type; a variable embedded in text is rendered the
way Go would print it. Results are re-scanned until no variable is left, so variables may produce variables.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from stockade.engine.context import ContextError, EngineContext
from stockade.engine.jsonutil import go_string
from stockade.jmespath import JMESPathError

VARIABLE_RE = re.compile(r"(^|[^\\])(\{\{(?:\{[^{}]*\}|[^{}])*\}\})")
_MAX_ROUNDS = 64


class SubstitutionError(Exception):
    """A variable could not be resolved; ``str()`` reads like Kyverno's message."""


_HAS_VARIABLES: dict[int, tuple[Any, bool]] = {}


def has_variables(value: Any) -> bool:
    """Whether any string (or key) in a document holds a ``{{ }}`` variable; cached for containers from policies."""
    if isinstance(value, (dict, list)):
        cached = _HAS_VARIABLES.get(id(value))
        if cached is not None and cached[0] is value:
            return cached[1]
        result = _scan_for_variables(value)
        if len(_HAS_VARIABLES) > 50_000:
            _HAS_VARIABLES.clear()
        _HAS_VARIABLES[id(value)] = (value, result)
        return result
    return _scan_for_variables(value)


def _scan_for_variables(value: Any) -> bool:
    if isinstance(value, str):
        return "{{" in value and VARIABLE_RE.search(value) is not None
    if isinstance(value, dict):
        return any(_scan_for_variables(k) or _scan_for_variables(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_scan_for_variables(v) for v in value)
    return False


def _variable_name(token: str) -> str:
    inner = token[2:-2]
    return inner.strip()


def _pointer_to_jmespath(path: Sequence[str | int], prefix: str) -> str:
    parts = [prefix]
    for element in path:
        if isinstance(element, int):
            parts[-1] += f"[{element}]"
        else:
            parts.append(element)
    return ".".join(parts)


def substitute_string(
    text: str,
    ctx: EngineContext,
    path: Sequence[str | int] = (),
    *,
    is_delete: bool = False,
) -> Any:
    """Substitute every variable of one string; may return a non-string when the string is a single variable."""
    if "{{" not in text:
        return text
    value: Any = text
    for _ in range(_MAX_ROUNDS):
        if not isinstance(value, str):
            return value
        matches = list(VARIABLE_RE.finditer(value))
        if not matches:
            return value
        original = value
        for match in matches:
            token = match.group(2)
            variable = _variable_name(token)
            if variable == "@":
                prefix = "target" if ctx.has("target") else "request.object"
                variable = _pointer_to_jmespath(path, prefix)
            elif "@" in variable and path:
                prefix = "target" if ctx.has("target") else "request.object"
                variable = variable.replace("@", _pointer_to_jmespath(path, prefix))
            if is_delete:
                variable = variable.replace("request.object", "request.oldObject")
            try:
                resolved = ctx.query(variable)
            except JMESPathError as exc:
                raise SubstitutionError(str(exc)) from None
            except ContextError as exc:
                raise SubstitutionError(f"failed to resolve {variable} at path {_render_path(path)}: {exc}") from None
            if original == token:
                return resolved
            value = value.replace(token, go_string(resolved), 1)
        if value == original:
            return value
    raise SubstitutionError(f"variable substitution did not converge at path {_render_path(path)}")


def _render_path(path: Sequence[str | int]) -> str:
    return "/" + "/".join(str(p) for p in path)


def substitute_all(
    document: Any,
    ctx: EngineContext,
    path: Sequence[str | int] = (),
    *,
    is_delete: bool = False,
) -> Any:
    """Substitute variables in every string leaf and map key of a document (a new document is returned)."""
    if isinstance(document, str):
        return substitute_string(document, ctx, path, is_delete=is_delete)
    if isinstance(document, dict):
        if not has_variables(document):
            return document
        result: dict[str, Any] = {}
        for key, value in document.items():
            new_key = key
            if isinstance(key, str) and "{{" in key:
                new_key = go_string(substitute_string(key, ctx, (*path, key), is_delete=is_delete))
            result[new_key] = substitute_all(value, ctx, (*path, key), is_delete=is_delete)
        return result
    if isinstance(document, list):
        if not has_variables(document):
            return document
        return [substitute_all(item, ctx, (*path, index), is_delete=is_delete) for index, item in enumerate(document)]
    return document


def unescape(document: Any) -> Any:
    """Turn escaped ``\\{{`` back into literal ``{{`` once substitution is over."""
    if isinstance(document, str):
        return document.replace("\\{{", "{{") if "\\{{" in document else document
    if isinstance(document, dict):
        return {k: unescape(v) for k, v in document.items()}
    if isinstance(document, list):
        return [unescape(v) for v in document]
    return document
