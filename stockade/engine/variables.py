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
from stockade.identitymemo import IdentityMemo
from stockade.jmespath import JMESPathError
from stockade.jmespath.pointer import pointer_expression
from stockade.errors import StockadeError

VARIABLE_RE = re.compile(r"(^|[^\\])(\{\{(?:\{[^{}]*\}|[^{}])*\}\})")
_MAX_ROUNDS = 64
MAX_SUBSTITUTION_GROWTH = 1 << 20
"""Substitution may make a string -- and all strings of one document together -- at most 1 MiB longer than written.

Resolved values are re-scanned for variables, so a resource value holding two copies of its own variable doubles
on every round; the round limit alone would allow 2^64 copies. Legitimate substitutions add kilobytes.
"""
MAX_SUBSTITUTION_WORK = 64 << 20
"""Characters that splicing resolved values may copy for one string (64 Mi): each splice copies the string, so
many variables in a large string would be quadratic without this cap."""


class SubstitutionError(StockadeError):
    """A variable could not be resolved; ``str()`` reads like Kyverno's message."""


class SubstitutionLimitError(SubstitutionError):
    """Substitution would grow a value past ``MAX_SUBSTITUTION_GROWTH`` (or copy past ``MAX_SUBSTITUTION_WORK``)."""


class _GrowthBudget:
    """Bytes substitution may still add to one document; shared by every string of a ``substitute_all`` call."""

    __slots__ = ("remaining",)

    def __init__(self) -> None:
        self.remaining = MAX_SUBSTITUTION_GROWTH


_HAS_VARIABLES: IdentityMemo[Any, bool] = IdentityMemo(50_000)


def has_variables(value: Any) -> bool:
    """Whether any string (or key) in a document holds a ``{{ }}`` variable; cached for containers from policies."""
    if isinstance(value, (dict, list)):
        return _HAS_VARIABLES.get(value, _scan_for_variables)
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


def substitute_string(
    text: str,
    ctx: EngineContext,
    path: Sequence[str | int] = (),
    *,
    is_delete: bool = False,
    budget: _GrowthBudget | None = None,
) -> Any:
    """Substitute every variable of one string; may return a non-string when the string is a single variable."""
    if "{{" not in text:
        return text
    tokens = _tokens(text)
    if tokens and tokens[0] == text:
        return _resolve(text, ctx, path, is_delete)  # the string is one variable: its value, with its JSON type
    if budget is None:
        budget = _GrowthBudget()
    size_limit = len(text) + budget.remaining
    work = 0
    value: Any = text
    for _ in range(_MAX_ROUNDS):
        if not isinstance(value, str):
            return value
        tokens = _tokens(value)
        if not tokens:
            break
        original = value
        replacements: list[tuple[str, str]] = []
        for token in tokens:
            resolved = _resolve(token, ctx, path, is_delete)
            if original == token:
                return resolved
            replacements.append((token, go_string(resolved)))
        projected = len(value) + sum(len(rendered) - len(token) for token, rendered in replacements)
        if projected > size_limit:
            raise SubstitutionLimitError(
                f"variable substitution at path {_render_path(path)} exceeds the substitution limit: the value would "
                f"grow by more than {MAX_SUBSTITUTION_GROWTH} bytes (does a value substitute into itself?)"
            )
        for token, rendered in replacements:
            work += len(value) + len(rendered)
            if work > MAX_SUBSTITUTION_WORK:
                raise SubstitutionLimitError(
                    f"variable substitution at path {_render_path(path)} exceeds the substitution limit: splicing "
                    f"would copy more than {MAX_SUBSTITUTION_WORK} characters (does a value substitute into itself?)"
                )
            value = value.replace(token, rendered, 1)
        if value == original:
            break
    else:
        raise SubstitutionError(f"variable substitution did not converge at path {_render_path(path)}")
    budget.remaining -= max(0, len(value) - len(text))
    return value


_TOKENS: dict[str, tuple[str, ...]] = {}
_CACHED_TEXT_LIMIT = 512  # policy texts are short; longer strings (resolved values) are scanned every time


def _tokens(text: str) -> tuple[str, ...]:
    """The ``{{ }}`` tokens of a string in order; cached for short texts (policies repeat theirs on every review)."""
    cached = _TOKENS.get(text)
    if cached is not None:
        return cached
    tokens = tuple(match.group(2) for match in VARIABLE_RE.finditer(text))
    if len(text) <= _CACHED_TEXT_LIMIT:
        if len(_TOKENS) > 20_000:
            _TOKENS.clear()
        _TOKENS[text] = tokens
    return tokens


def _resolve(token: str, ctx: EngineContext, path: Sequence[str | int], is_delete: bool) -> Any:
    variable = _variable_name(token)
    if variable == "@":
        # Only a bare {{@}} names the value at the current path; an "@" inside a longer expression is JMESPath's
        # current node (e.g. ``x | to_string(@)``) and is left to the expression, as Kyverno does.
        prefix = "target" if ctx.has("target") else "request.object"
        variable = pointer_expression((*prefix.split("."), *path))
    if is_delete:
        variable = variable.replace("request.object", "request.oldObject")
    try:
        return ctx.query(variable)
    except JMESPathError as exc:
        raise SubstitutionError(str(exc)) from None
    except ContextError as exc:
        raise SubstitutionError(f"failed to resolve {variable} at path {_render_path(path)}: {exc}") from None


def _render_path(path: Sequence[str | int]) -> str:
    return "/" + "/".join(str(p) for p in path)


def substitute_all(
    document: Any,
    ctx: EngineContext,
    path: Sequence[str | int] = (),
    *,
    is_delete: bool = False,
    budget: _GrowthBudget | None = None,
) -> Any:
    """Substitute variables in every string leaf and map key of a document (a new document is returned).

    All strings of the document share one growth budget (``MAX_SUBSTITUTION_GROWTH``).
    """
    if isinstance(document, str):
        if "{{" not in document:
            return document
        return substitute_string(document, ctx, path, is_delete=is_delete, budget=budget)
    if isinstance(document, (dict, list)) and not has_variables(document):
        return document  # the usual case for policy documents: nothing to substitute, nothing copied
    if budget is None:
        budget = _GrowthBudget()
    if isinstance(document, dict):
        result: dict[str, Any] = {}
        for key, value in document.items():
            new_key = key
            if isinstance(key, str) and "{{" in key:
                new_key = go_string(substitute_string(key, ctx, (*path, key), is_delete=is_delete, budget=budget))
            result[new_key] = substitute_all(value, ctx, (*path, key), is_delete=is_delete, budget=budget)
        return result
    if isinstance(document, list):
        return [
            substitute_all(item, ctx, (*path, index), is_delete=is_delete, budget=budget)
            for index, item in enumerate(document)
        ]
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
