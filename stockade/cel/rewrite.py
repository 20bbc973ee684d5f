"""Source rewriting for CEL features the backend lacks.

Kubernetes MutatingAdmissionPolicy / Kyverno MutatingPolicy expressions build patches with typed object literals
(``Object{spec: Object.spec{replicas: 3}}``, ``JSONPatch{op: "add", ...}``).  Without protobuf schemas those
types cannot exist in cel-expr-python, so every ``Type.Name{field: value}`` literal is turned into the equivalent
map literal ``dyn({"field": value})`` — which is exactly the JSON the engine applies afterwards.  ``dyn`` keeps the
literal as loosely typed as a message would be (``cond ? JSONPatch{...} : null`` must still type-check).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN_RE = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<comment>//[^\n]*)
  | (?P<string>(?:[rRbB]{1,2})?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<number>[0-9][0-9A-Za-z_.]*)
  | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)

_KEYWORDS = frozenset({"in", "true", "false", "null", "as", "break", "const", "continue", "else", "for", "function",
                       "if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while"})


@dataclass
class _Token:
    kind: str
    text: str


def _tokenize(expression: str) -> list[_Token]:
    return [_Token(match.lastgroup or "punct", match.group()) for match in _TOKEN_RE.finditer(expression)]


def _significant(tokens: list[_Token], index: int, step: int) -> int:
    while 0 <= index < len(tokens) and tokens[index].kind in ("space", "comment"):
        index += step
    return index


def rewrite_struct_literals(expression: str) -> str:
    """Replace ``Name.Path{field: v}`` struct literals by map literals; other text is left byte-for-byte."""
    if "{" not in expression:
        return expression
    tokens = _tokenize(expression)
    output: list[str] = []
    brace_is_struct: list[bool] = []
    index = 0
    expecting_field = False
    while index < len(tokens):
        token = tokens[index]
        if token.kind == "ident" and token.text not in _KEYWORDS:
            previous = _significant(tokens, index - 1, -1)
            if previous < 0 or tokens[previous].text != ".":
                # Try to read a qualified name followed by "{".
                cursor = index
                while True:
                    after = _significant(tokens, cursor + 1, 1)
                    if after < len(tokens) and tokens[after].text == ".":
                        name_index = _significant(tokens, after + 1, 1)
                        if name_index < len(tokens) and tokens[name_index].kind == "ident":
                            cursor = name_index
                            continue
                    break
                brace = _significant(tokens, cursor + 1, 1)
                if brace < len(tokens) and tokens[brace].text == "{" and not expecting_field:
                    output.append("dyn({")
                    brace_is_struct.append(True)
                    index = brace + 1
                    expecting_field = True
                    continue
        if expecting_field and token.kind not in ("space", "comment"):
            expecting_field = False
            if token.text == "?":
                output.append("?")
                index += 1
                expecting_field = True
                continue
            if token.kind == "ident":
                colon = _significant(tokens, index + 1, 1)
                if colon < len(tokens) and tokens[colon].text == ":":
                    output.append(f'"{token.text}"')
                    index += 1
                    continue
        if token.text in ("{", "(", "["):
            brace_is_struct.append(False)
        elif token.text in ("}", ")", "]") and brace_is_struct:
            if brace_is_struct.pop() and token.text == "}":
                output.append("})")
                index += 1
                continue
        elif token.text == "," and brace_is_struct and brace_is_struct[-1]:
            expecting_field = True
        output.append(token.text)
        index += 1
    return "".join(output)
