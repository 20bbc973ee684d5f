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
from typing import Callable, Mapping

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


def replace_variable_references(expression: str, replacements: Mapping[str, str], *, keep_comments: bool = True) -> tuple[str, list[str]]:
    """``expression`` with each ``variables.NAME`` whose NAME ``replacements`` maps replaced by its text, and the names
    replaced, in order of first use.  A member ``x.variables.NAME`` is not a reference; without ``keep_comments``
    comments are dropped (a trailing one would swallow text appended after the source)."""
    tokens = tokenize(expression)
    significant = [index for index, token in enumerate(tokens) if token.kind not in ("space", "comment")]
    replaced: dict[int, tuple[int, str]] = {}  # token index of ``variables`` -> (token index of NAME, replacement)
    used: list[str] = []
    for position, index in enumerate(significant[:-2]):
        token = tokens[index]
        if token.kind != "ident" or token.text != "variables":
            continue
        if position > 0 and tokens[significant[position - 1]].text == ".":
            continue
        dot, selected = tokens[significant[position + 1]], tokens[significant[position + 2]]
        if dot.text == "." and selected.kind == "ident" and selected.text in replacements:
            replaced[index] = (significant[position + 2], replacements[selected.text])
            if selected.text not in used:
                used.append(selected.text)
    if not used:
        return (expression if keep_comments else "".join(t.text for t in tokens if t.kind != "comment")), used
    parts: list[str] = []
    index = 0
    while index < len(tokens):
        if index in replaced:
            index, text = replaced[index]
            parts.append(text)
        elif keep_comments or tokens[index].kind != "comment":
            parts.append(tokens[index].text)
        index += 1
    return "".join(parts), used


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
# sites so they evaluate the receiver once and branch on null / on the receiver's type:
#
#   R.?f              ->  optional.ofNonZeroValue(R).?f
#   R[?k]             ->  optional.ofNonZeroValue(R)[?k]
#   O.?f (O optional) ->  optional.ofNonZeroValue(O.orValue(dyn(null))).?f
#   R.orValue(d)      ->  [R].map(__stk_val_N, type(__stk_val_N) == optional_type ? __stk_val_N.orValue(d)
#                           : dyn(__stk_val_N))[0]       (only when R is not syntactically optional)
#
# ``optional.ofNonZeroValue`` makes null (and an empty map or list, where a selection finds nothing either) absent,
# evaluates the receiver once, and needs no comparison with null (which the checker refuses for a receiver of map
# type, ``resource.get(...)``).  None of the forms uses ``cel.bind``: see :func:`rewrite_bindings`.

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
            wrapped = bind_once(name, receiver, f"type({name}) == optional_type ? {name}{access} : dyn({name})")
        elif _is_optional_receiver(sig, start, receiver_end):
            wrapped = f"optional.ofNonZeroValue({receiver}.orValue(dyn(null))){access}"
        else:
            wrapped = f"optional.ofNonZeroValue({receiver}){access}"
        counter += 1
        text = before + wrapped + after
    return text


# -- bindings without cel.bind ----------------------------------------------------------------------------------------
#
# cel-cpp plans ``cel.bind`` (and the ``optMap``/``optFlatMap`` macros, which expand to a bind) with a lazily
# initialised comprehension slot: the first read of the bound name evaluates the initialiser unless the slot already
# holds a value.  A comprehension that stops early (``exists`` that found a match, ``all`` that found a false) leaves
# its iteration value in a slot that a later sibling bind reuses, so inside an enclosing ``all``/``map`` the bound
# name can read that stale value instead of its own (``c.xs.exists(x, x > 0) && cel.bind(n, c.name, n == c.name)``
# is false).  cel-go has no such slot sharing.  A one-element list's ``map`` assigns its variable on every
# evaluation, so every binding, generated or written by the user, is expressed that way:
#
#   cel.bind(v, I, B)     ->  [I].map(v, B)[0]            (B alone when B never mentions v)
#   O.optMap(v, B)        ->  [O].map(__stk_opt_N, __stk_opt_N.hasValue()
#                               ? optional.of([__stk_opt_N.value()].map(v, B)[0]) : optional.none())[0]
#   O.optFlatMap(v, B)    ->  the same without ``optional.of``
#
# The one difference left from cel-go: cel-go initialises a bind lazily, so an initialiser that fails is harmless
# when the body never reaches the name on the path it takes; here it is evaluated once up front.


def bind_once(name: str, value: str, body: str) -> str:
    """CEL source for ``body`` with ``name`` bound to ``value``, evaluated once (never ``cel.bind``: see above)."""
    return f"[{value}].map({name}, {body})[0]"


def _split_arguments(sig: list[Token], opening: int, closing: int) -> list[tuple[int, int]]:
    """(first, last) significant-token ranges of the top-level arguments between ``opening`` and ``closing``."""
    ranges: list[tuple[int, int]] = []
    depth = 0
    first = opening + 1
    for index in range(opening + 1, closing):
        text = sig[index].text
        if text in ("(", "[", "{"):
            depth += 1
        elif text in (")", "]", "}"):
            depth -= 1
        elif text == "," and depth == 0:
            ranges.append((first, index - 1))
            first = index + 1
    if first <= closing - 1:
        ranges.append((first, closing - 1))
    return ranges


def _find_binding(sig: list[Token], bindings: bool, optionals: bool) -> tuple[str, int, int, list[tuple[int, int]]] | None:
    """The first ``cel.bind(...)`` / ``R.optMap(...)`` / ``R.optFlatMap(...)`` with a simple variable:
    (kind, site start, site end, argument ranges)."""
    for index, token in enumerate(sig):
        if (bindings and token.text == "cel" and token.kind == "ident" and index + 3 < len(sig)
                and sig[index + 1].text == "." and sig[index + 2].text == "bind" and sig[index + 3].text == "("
                and not (index > 0 and sig[index - 1].text == ".")):
            kind, opening, start = "bind", index + 3, index
        elif (optionals and token.text == "." and index + 2 < len(sig) and sig[index + 1].text in ("optMap", "optFlatMap")
              and sig[index + 2].text == "(" and index > 0):
            kind, opening = sig[index + 1].text, index + 2
            start = _receiver_start(sig, index - 1)
            if start < 0:
                continue
        else:
            continue
        closing = _matching_close(sig, opening)
        if closing < 0:
            continue
        arguments = _split_arguments(sig, opening, closing)
        expected = 3 if kind == "bind" else 2
        if len(arguments) != expected or arguments[0][0] != arguments[0][1] or sig[arguments[0][0]].kind != "ident":
            continue  # not the macro's shape: left for the checker to report
        return kind, start, closing, arguments
    return None


def _is_bind_call(sig: list[Token], first: int, last: int) -> bool:
    return (last - first >= 4 and sig[first].text == "cel" and sig[first + 1].text == "." and sig[first + 2].text == "bind"
            and sig[first + 3].text == "(" and _matching_close(sig, first + 3) == last)


def _hoisted_binding(sig: list[Token], arguments: list[tuple[int, int]], joined: Callable[[int, int], str]) -> str | None:
    """``cel.bind(s, cel.bind(t, J, C), B)`` as ``cel.bind(t, J, cel.bind(s, C, B))`` when ``t`` cannot capture a
    name of ``B`` (``t`` is ``s`` or ``B`` never mentions it), else None.  Same values; the one-element-list form of a
    binding nests its initialiser three parser levels deep, so chains of bindings in initialisers (each doubling a
    string, the classic cost-limit test) would otherwise hit the parser's recursion limit before the cost check."""
    (variable_at, _), (init_first, init_last), (body_first, body_last) = arguments
    if not _is_bind_call(sig, init_first, init_last):
        return None
    inner = _split_arguments(sig, init_first + 3, init_last)
    if len(inner) != 3 or inner[0][0] != inner[0][1] or sig[inner[0][0]].kind != "ident":
        return None
    outer_name, inner_name = sig[variable_at].text, sig[inner[0][0]].text
    if inner_name != outer_name and any(
        token.kind == "ident" and token.text == inner_name for token in sig[body_first:body_last + 1]
    ):
        return None
    return (f"cel.bind({inner_name}, {joined(*inner[1])}, "
            f"cel.bind({outer_name}, {joined(*inner[2])}, {joined(body_first, body_last)}))")


def rewrite_bindings(expression: str, *, bindings: bool = True, optionals: bool = True) -> str:
    """Express ``cel.bind`` (``bindings``) and ``optMap``/``optFlatMap`` (``optionals``) without cel-cpp's lazily
    initialised bind slot (see above)."""
    if not ((bindings and "bind" in expression) or (optionals and "optMap" in expression)
            or (optionals and "optFlatMap" in expression)):
        return expression
    text = expression
    for counter in range(2000):
        tokens = tokenize(text)
        positions = [index for index, token in enumerate(tokens) if token.kind not in ("space", "comment")]
        sig = [tokens[index] for index in positions]
        site = _find_binding(sig, bindings, optionals)
        if site is None:
            return text
        kind, start, end, arguments = site

        def joined(first: int, last: int) -> str:
            return "".join(token.text for token in tokens[positions[first]:positions[last] + 1])

        before = "".join(token.text for token in tokens[: positions[start]])
        after = "".join(token.text for token in tokens[positions[end] + 1:])
        variable = sig[arguments[0][0]].text
        body = joined(*arguments[-1])
        if kind == "bind":
            hoisted = _hoisted_binding(sig, arguments, joined)
            if hoisted is not None:
                text = before + hoisted + after
                continue
            value = joined(*arguments[1])
            mentioned = any(token.kind == "ident" and token.text == variable for token in sig[arguments[2][0]:arguments[2][1] + 1])
            wrapped = bind_once(variable, value, body) if mentioned else f"({body})"
        else:
            receiver = joined(start, arguments[0][0] - 4)  # up to the "." before optMap
            holder = f"{_PREFIX}opt_{counter}"
            mapped = bind_once(variable, f"{holder}.value()", body)
            present = f"optional.of({mapped})" if kind == "optMap" else mapped
            wrapped = bind_once(holder, receiver, f"{holder}.hasValue() ? {present} : optional.none()")
        text = before + wrapped + after
    return text
