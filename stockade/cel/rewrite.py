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
class Token:
    kind: str
    text: str


def tokenize(expression: str) -> list[Token]:
    return [Token(match.lastgroup or "punct", match.group()) for match in _TOKEN_RE.finditer(expression)]


def _significant(tokens: list[Token], index: int, step: int) -> int:
    while 0 <= index < len(tokens) and tokens[index].kind in ("space", "comment"):
        index += step
    return index


def uses_identifier(expression: str, name: str) -> bool:
    """Whether ``name`` appears as an identifier of its own (not a field selection such as ``x.name``, not inside a
    string): how Kyverno tells that an expression reaches for a library such as ``http`` or ``globalContext``."""
    tokens = [t for t in tokenize(expression) if t.kind not in ("space", "comment")]
    for index, token in enumerate(tokens):
        if token.kind == "ident" and token.text == name and (index == 0 or tokens[index - 1].text != "."):
            return True
    return False


def rewrite_struct_literals(expression: str) -> str:
    """Replace ``Name.Path{field: v}`` struct literals by map literals; other text is left byte-for-byte."""
    if "{" not in expression:
        return expression
    tokens = tokenize(expression)
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


# -- cel-go null and orValue semantics -------------------------------------------------------------------------------
#
# Kyverno evaluates with cel-go, where an optional selection on null is simply absent (``oldObject.?spec`` on a
# CREATE, ``template.metadata.?labels`` when the YAML says ``metadata:``), and where ``list.orValue([])`` without a
# preceding ``?.`` yields the list itself.  cel-cpp fails both with "no matching overloads".  The rewrite wraps such
# sites so they evaluate the receiver once (``cel.bind``) and branch on null / on the receiver's type:
#
#   R.?f              ->  optional.ofNonZeroValue(R).?f
#   R[?k]             ->  optional.ofNonZeroValue(R)[?k]
#   O.?f (O optional) ->  optional.ofNonZeroValue(O.orValue(dyn(null))).?f
#   R.orValue(d)      ->  cel.bind(__stk_val_N, R, type(__stk_val_N) == optional_type ? __stk_val_N.orValue(d)
#                           : dyn(__stk_val_N))       (only when R is not syntactically optional)
#
# ``optional.ofNonZeroValue`` makes null (and an empty map or list, where a selection finds nothing either) absent,
# evaluates the receiver once, and needs neither a comparison with null (which the checker refuses for a receiver of
# map type, ``resource.get(...)``) nor ``cel.bind``: cel-cpp initialises a bind lazily in a slot that a sibling
# comprehension stopped early (``exists``) may leave holding its iteration value, so a bind evaluated again inside an
# enclosing ``all``/``map`` could read that stale value.

_OPTIONAL_FUNCTIONS = frozenset({"of", "none", "ofNonZeroValue", "or", "optMap", "optFlatMap"})
_LITERAL_KEYWORDS = frozenset({"true", "false", "null"})
_PREFIX = "__stk_"


def _is_primary_end(token: Token) -> bool:
    if token.kind == "ident":
        return token.text not in _KEYWORDS or token.text in _LITERAL_KEYWORDS
    return token.kind in ("string", "number") or token.text in (")", "]", "}")


def _matching_open(sig: list[Token], close: int) -> int:
    pairs = {")": "(", "]": "[", "}": "{"}
    depth = 0
    for index in range(close, -1, -1):
        text = sig[index].text
        if text in pairs:
            depth += 1
        elif text in ("(", "[", "{"):
            depth -= 1
            if depth == 0:
                return index
    return -1


def _matching_close(sig: list[Token], opening: int) -> int:
    depth = 0
    for index in range(opening, len(sig)):
        text = sig[index].text
        if text in ("(", "[", "{"):
            depth += 1
        elif text in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                return index
    return -1


def _receiver_start(sig: list[Token], last: int) -> int:
    """Index of the first token of the member-access chain ending at ``last`` (-1 if unparseable)."""
    index = last
    while index >= 0:
        token = sig[index]
        if token.text in (")", "]", "}"):
            opening = _matching_open(sig, index)
            if opening < 0:
                return -1
            if token.text == "]":
                if opening > 0 and _is_primary_end(sig[opening - 1]):
                    index = opening - 1  # an index: its receiver ends just before "["
                    continue
                return opening  # a list literal
            if opening > 0 and sig[opening - 1].kind == "ident" and sig[opening - 1].text not in _KEYWORDS:
                index = opening - 1  # a call (or struct literal): continue at the name
            else:
                return opening  # parenthesised expression or map literal
        elif not (token.kind in ("ident", "string", "number")):
            return -1
        if index >= 1 and sig[index - 1].text == ".":
            index -= 2
            continue
        if index >= 2 and sig[index - 1].text == "?" and sig[index - 2].text == ".":
            index -= 3
            continue
        return index
    return -1


def _is_optional_receiver(sig: list[Token], start: int, last: int) -> bool:
    """Whether the member chain ``sig[start..last]`` syntactically yields an optional: walk it segment by segment;
    ``.?f``/``[?k]``/``optional.of(...)``/``.or(...)`` make it optional, ``.orValue(...)``/``.value()`` and
    other calls make it plain, and plain ``.f``/``[k]`` keep the current state (optional chaining)."""
    optional = False
    index = start
    token = sig[index]
    if token.text in ("(", "[", "{"):
        index = _matching_close(sig, index) + 1
    elif token.kind == "ident" and index + 1 <= last and sig[index + 1].text == "(":
        optional = token.text in _OPTIONAL_FUNCTIONS
        index = _matching_close(sig, index + 1) + 1
    else:
        index += 1
    while 0 < index <= last:
        token = sig[index]
        if token.text == ".":
            selective = index + 1 <= last and sig[index + 1].text == "?"
            name_index = index + 2 if selective else index + 1
            if name_index > last:
                return optional
            name = sig[name_index].text
            if name_index + 1 <= last and sig[name_index + 1].text == "(":
                if name == "bind":
                    optional = name_index + 2 <= last and sig[name_index + 2].text.startswith(_PREFIX + "opt")
                else:
                    optional = name in _OPTIONAL_FUNCTIONS
                index = _matching_close(sig, name_index + 1) + 1
            else:
                optional = optional or selective
                index = name_index + 1
        elif token.text == "[":
            optional = optional or (index + 1 <= last and sig[index + 1].text == "?")
            index = _matching_close(sig, index) + 1
        else:
            return optional
    return optional


def _is_null_guard(sig: list[Token], start: int, last: int) -> bool:
    """Whether ``sig[start..last]`` is exactly ``optional.ofNonZeroValue(...)``: a receiver already made null-safe."""
    return (
        start + 3 <= last
        and sig[start].text == "optional"
        and sig[start + 1].text == "."
        and sig[start + 2].text == "ofNonZeroValue"
        and sig[start + 3].text == "("
        and _matching_close(sig, start + 3) == last
    )


def _find_site(sig: list[Token]) -> tuple[str, int, int, int] | None:
    """The first site to rewrite: (kind, receiver start, receiver end, site end), kinds "select"/"index"/"orValue"."""
    for index, token in enumerate(sig):
        kind = ""
        if token.text == "." and index + 2 < len(sig) and sig[index + 1].text == "?" and sig[index + 2].kind == "ident":
            kind, site_end = "select", index + 2
        elif (token.text == "[" and index + 1 < len(sig) and sig[index + 1].text == "?" and index > 0
              and _is_primary_end(sig[index - 1])):
            kind, site_end = "index", _matching_close(sig, index)
        elif (token.text == "." and index + 2 < len(sig) and sig[index + 1].text == "orValue"
              and sig[index + 2].text == "("):
            kind, site_end = "orValue", _matching_close(sig, index + 2)
        if not kind or site_end < 0 or index == 0:
            continue
        start = _receiver_start(sig, index - 1)
        if start < 0:
            continue
        if sig[start].text.startswith(_PREFIX):
            continue  # the inside of a site already rewritten
        if kind == "orValue" and _is_optional_receiver(sig, start, index - 1):
            continue
        if kind != "orValue" and _is_null_guard(sig, start, index - 1):
            continue
        return kind, start, index - 1, site_end
    return None


def rewrite_null_safety(expression: str) -> str:
    """Give ``?.``/``[?]`` on null and ``orValue`` on non-optionals cel-go's results (see above)."""
    if ".?" not in expression.replace(" ", "") and "[?" not in expression.replace(" ", "") and "orValue" not in expression:
        return expression
    counter = 0
    text = expression
    for _ in range(500):
        tokens = tokenize(text)
        positions = [index for index, token in enumerate(tokens) if token.kind not in ("space", "comment")]
        sig = [tokens[index] for index in positions]
        site = _find_site(sig)
        if site is None:
            return text
        kind, start, receiver_end, site_end = site

        def joined(first: int, stop: int) -> str:
            return "".join(token.text for token in tokens[first:stop])

        before = joined(0, positions[start])
        receiver = joined(positions[start], positions[receiver_end] + 1)
        access = joined(positions[receiver_end] + 1, positions[site_end] + 1)
        after = joined(positions[site_end] + 1, len(tokens))
        if kind == "orValue":
            name = f"{_PREFIX}val_{counter}"
            wrapped = f"cel.bind({name}, {receiver}, type({name}) == optional_type ? {name}{access} : dyn({name}))"
        elif _is_optional_receiver(sig, start, receiver_end):
            wrapped = f"optional.ofNonZeroValue({receiver}.orValue(dyn(null))){access}"
        else:
            wrapped = f"optional.ofNonZeroValue({receiver}){access}"
        counter += 1
        text = before + wrapped + after
    return text
