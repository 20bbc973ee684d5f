"""A bounded subset of Go's text/template, enough for Flux commit message templates.

Flux renders `spec.git.commit.messageTemplate` with Go's text/template. The templates its documentation shows
use field paths (`.Changed.Changes`, `$change.NewValue`), `range` over lists and maps (with `$k, $v :=`),
`if`/`else`, `len`, `index` and `{{-`/`-}}` whitespace trimming; this module evaluates exactly that. Anything
else fails with `TemplateError` naming the construct, never with a silently different message. Output and
loop iterations are capped, so a template cannot grow without bound.
"""

from __future__ import annotations

from stockade.errors import StockadeError
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TemplateError", "render"]

MAX_OUTPUT = 64 * 1024
MAX_STEPS = 100_000

_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.DOTALL)


class TemplateError(StockadeError, ValueError):
    """A template this subset cannot parse or evaluate."""


@dataclass
class _Node:
    kind: str  # text | expr | range | if
    text: str = ""
    body: list[_Node] = field(default_factory=list)
    alternative: list[_Node] = field(default_factory=list)
    variables: tuple[str, ...] = ()


def _tokens(template: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    for match in _ACTION.finditer(template):
        text = template[position:match.start()]
        if match.group(1):
            text = text.rstrip(" \t\r\n")
        if tokens and tokens[-1][0] == "trim-next":
            tokens.pop()
            text = text.lstrip(" \t\r\n")
        tokens.append(("text", text))
        action = match.group(2)
        if not action.startswith("/*"):
            tokens.append(("action", action))
        if match.group(3):
            tokens.append(("trim-next", ""))
        position = match.end()
    text = template[position:]
    if tokens and tokens[-1][0] == "trim-next":
        tokens.pop()
        text = text.lstrip(" \t\r\n")
    tokens.append(("text", text))
    if "{{" in "".join(t for k, t in tokens if k == "text"):
        raise TemplateError("unclosed action")
    return tokens


def _parse(tokens: list[tuple[str, str]], start: int, closers: tuple[str, ...]) -> tuple[list[_Node], int, str]:
    nodes: list[_Node] = []
    index = start
    while index < len(tokens):
        kind, value = tokens[index]
        index += 1
        if kind == "text":
            if value:
                nodes.append(_Node("text", value))
            continue
        word = value.split(None, 1)[0] if value else ""
        if word in closers:
            return nodes, index, value
        if word == "range":
            header = value[len("range"):].strip()
            variables: tuple[str, ...] = ()
            if ":=" in header:
                names, header = header.split(":=", 1)
                variables = tuple(name.strip() for name in names.split(","))
                if not all(re.fullmatch(r"\$\w*", name) for name in variables) or len(variables) > 2:
                    raise TemplateError(f"unsupported range declaration: {value!r}")
            body, index, closer = _parse(tokens, index, ("end", "else"))
            alternative: list[_Node] = []
            if closer == "else":
                alternative, index, _ = _parse(tokens, index, ("end",))
            nodes.append(_Node("range", header.strip(), body, alternative, variables))
        elif word == "if":
            body, index, closer = _parse(tokens, index, ("end", "else"))
            alternative = []
            if closer == "else":
                alternative, index, _ = _parse(tokens, index, ("end",))
            nodes.append(_Node("if", value[2:].strip(), body, alternative))
        elif word in ("end", "else"):
            raise TemplateError(f"unexpected {{{{{word}}}}}")
        elif word in ("define", "template", "block", "with", "break", "continue"):
            raise TemplateError(f"{{{{{word}}}}} is not supported in commit message templates here")
        else:
            nodes.append(_Node("expr", value))
    if closers:
        raise TemplateError(f"missing {{{{end}}}} (expected one of {', '.join(closers)})")
    return nodes, index, ""


class _Evaluator:
    def __init__(self, data: Any) -> None:
        self.data = data
        self.steps = 0
        self.out: list[str] = []
        self.size = 0

    def tick(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise TemplateError("template evaluation exceeded its step budget")

    def emit(self, text: str) -> None:
        self.size += len(text)
        if self.size > MAX_OUTPUT:
            raise TemplateError(f"template output exceeds {MAX_OUTPUT} characters")
        self.out.append(text)

    def field_of(self, value: Any, name: str) -> Any:
        if isinstance(value, Mapping):
            # Go yields the zero value for a missing key; the maps templates see here map to strings
            return value.get(name, "")
        if hasattr(value, name) and not name.startswith("_"):
            return getattr(value, name)
        raise TemplateError(f"can't evaluate field {name} in {type(value).__name__}")

    def operand(self, text: str, dot: Any, scope: Mapping[str, Any]) -> Any:
        if text.startswith('"') and text.endswith('"') and len(text) >= 2:
            return text[1:-1]
        if re.fullmatch(r"-?\d+", text):
            return int(text)
        if text == ".":
            return dot
        if text.startswith("$"):
            name, _, rest = text.partition(".")
            if name == "$":
                value = self.data
            elif name in scope:
                value = scope[name]
            else:
                raise TemplateError(f"undefined variable {name}")
        elif text.startswith("."):
            value, rest = dot, text[1:]
        else:
            raise TemplateError(f"unsupported operand {text!r}")
        for part in rest.split(".") if rest else []:
            value = self.field_of(value, part)
        return value

    def expression(self, text: str, dot: Any, scope: Mapping[str, Any]) -> Any:
        words = text.split()
        if not words:
            raise TemplateError("empty action")
        if words[0] == "len" and len(words) == 2:
            target = self.operand(words[1], dot, scope)
            try:
                return len(target)
            except TypeError:
                raise TemplateError(f"len of {type(target).__name__}") from None
        if words[0] == "index" and len(words) >= 3:
            value = self.operand(words[1], dot, scope)
            for key_text in words[2:]:
                key = self.operand(key_text, dot, scope)
                try:
                    value = value[key]
                except (KeyError, IndexError, TypeError):
                    raise TemplateError(f"index {key!r} not found") from None
            return value
        if len(words) != 1:
            raise TemplateError(f"unsupported expression {text!r} (functions other than len and index are not supported)")
        return self.operand(words[0], dot, scope)

    @staticmethod
    def truthy(value: Any) -> bool:
        return bool(value)

    @staticmethod
    def items(value: Any) -> list[tuple[Any, Any]]:
        if isinstance(value, Mapping):
            return sorted(value.items(), key=lambda item: _sort_key(item[0]))
        if isinstance(value, Sequence) and not isinstance(value, str):
            return list(enumerate(value))
        if value is None or value == "":  # the zero value a missing map key yields
            return []
        raise TemplateError(f"range can't iterate over {type(value).__name__}")

    def run(self, nodes: list[_Node], dot: Any, scope: dict[str, Any]) -> None:
        for node in nodes:
            self.tick()
            if node.kind == "text":
                self.emit(node.text)
            elif node.kind == "expr":
                self.emit(_format(self.expression(node.text, dot, scope)))
            elif node.kind == "if":
                branch = node.body if self.truthy(self.expression(node.text, dot, scope)) else node.alternative
                self.run(branch, dot, scope)
            else:
                entries = self.items(self.expression(node.text, dot, scope))
                if not entries:
                    self.run(node.alternative, dot, scope)
                for key, value in entries:
                    inner = dict(scope)
                    if len(node.variables) == 1:
                        inner[node.variables[0]] = value
                    elif len(node.variables) == 2:
                        inner[node.variables[0]], inner[node.variables[1]] = key, value
                    self.run(node.body, value, inner)


def _sort_key(key: Any) -> tuple[Any, ...]:
    """Go ranges over maps in key order; struct keys compare field by field."""
    fields = getattr(key, "sort_fields", None)
    return tuple(fields()) if callable(fields) else (str(key),)


def _format(value: Any) -> str:
    if value is None:
        return "<no value>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render(template: str, data: Any) -> str:
    """Render `template` against `data` (mappings or objects with attributes)."""
    nodes, _, _ = _parse(_tokens(template), 0, ())
    evaluator = _Evaluator(data)
    evaluator.run(nodes, data, {"$": data})
    return "".join(evaluator.out)
