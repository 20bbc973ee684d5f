"""A JSON pointer written as a JMESPath expression, the way Kyverno names "the value at this path" for ``{{@}}``.

Components that read as unsigned integers become indexes (Kyverno does this for map keys too); identifiers stay bare;
anything else is a quoted identifier with JSON escapes.  Kyverno also lets "(" start and ")" continue a bare
identifier, for anchors such as ``(name)``; the expression then fails to parse, as it does in Kyverno.
"""

from __future__ import annotations

from collections.abc import Iterable

_FIRST = frozenset("(ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz")
_REST = frozenset(")0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _quoted(component: str) -> str:
    out = ['"']
    for char in component:
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif code >= 0x20:
            out.append(char)
        else:
            out.append(f"\\u{code:04x}")
    out.append('"')
    return "".join(out)


def pointer_expression(components: Iterable[str | int]) -> str:
    """``("spec", "containers", 0, "image")`` -> ``spec.containers[0].image``; ``("labels", "a.b/c")`` ->
    ``labels."a.b\\/c"``."""
    parts: list[str] = []
    for component in components:
        text = str(component)
        if text.isascii() and text.isdigit():
            parts.append(f"[{text}]")
            continue
        if parts:
            parts.append(".")
        if text and text[0] in _FIRST and all(char in _REST for char in text[1:]):
            parts.append(text)
        else:
            parts.append(_quoted(text))
    return "".join(parts)
