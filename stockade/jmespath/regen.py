"""A small generator of random strings matching a regular expression (what goregen does for ``random()``).

It walks the parse tree of Python's own regex parser; unbounded repeats (``*``, ``+``, ``{n,}``) produce at most
ten extra repetitions, as goregen's default does, and ``.`` or negated classes draw from printable ASCII.
"""

from __future__ import annotations

import random
import re
import string
from typing import Any

from re import _constants as sre_constants  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from stockade.errors import StockadeError


class RegenError(StockadeError, ValueError):
    pass


_RANDOM = random.SystemRandom()
_PRINTABLE = [chr(code) for code in range(32, 127)]
_MAX_UNBOUNDED_EXTRA = 10
MAX_OUTPUT = 1 << 20
"""``random('(a{1000}){1000}')`` asks for a million characters per nesting level; output stops at 1 MiB, and
repetitions (also of empty groups, which add nothing) stop at ``MAX_REPETITIONS``."""
MAX_REPETITIONS = 1 << 16
_CATEGORIES = {
    sre_constants.CATEGORY_DIGIT: set(string.digits),
    sre_constants.CATEGORY_NOT_DIGIT: set(_PRINTABLE) - set(string.digits),
    sre_constants.CATEGORY_WORD: set(string.ascii_letters + string.digits + "_"),
    sre_constants.CATEGORY_NOT_WORD: set(_PRINTABLE) - set(string.ascii_letters + string.digits + "_"),
    sre_constants.CATEGORY_SPACE: set(" \t\n\r\f"),
    sre_constants.CATEGORY_NOT_SPACE: set(_PRINTABLE) - set(" \t\n\r\f"),
}


def generate(pattern: str) -> str:
    try:
        tree = sre_parse.parse(pattern)
    except re.error as error:
        raise RegenError(f"error parsing regexp: {error.msg}: `{pattern}`") from None
    output: list[str] = []
    _emit(list(tree), output, [0])
    return "".join(output)


def _class_members(items: list[tuple[Any, Any]]) -> list[str]:
    negate = False
    members: set[str] = set()
    for opcode, argument in items:
        if opcode is sre_constants.NEGATE:
            negate = True
        elif opcode is sre_constants.LITERAL:
            members.add(chr(argument))
        elif opcode is sre_constants.RANGE:
            low, high = argument
            members.update(chr(code) for code in range(low, min(high, low + 0x10000) + 1))
        elif opcode is sre_constants.CATEGORY:
            members |= _CATEGORIES.get(argument, set())
    if negate:
        members = set(_PRINTABLE) - members
    if not members:
        raise RegenError("character class matches nothing")
    return sorted(members)


def _emit(nodes: list[tuple[Any, Any]], output: list[str], repetitions: list[int]) -> None:
    for opcode, argument in nodes:
        if opcode is sre_constants.LITERAL:
            output.append(chr(argument))
        elif opcode is sre_constants.NOT_LITERAL:
            output.append(_RANDOM.choice([character for character in _PRINTABLE if ord(character) != argument]))
        elif opcode is sre_constants.ANY:
            output.append(_RANDOM.choice(_PRINTABLE))
        elif opcode is sre_constants.IN:
            output.append(_RANDOM.choice(_class_members(argument)))
        elif opcode in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT):
            low, high, body = argument
            if high is sre_constants.MAXREPEAT or high > low + _MAX_UNBOUNDED_EXTRA:
                high = low + _MAX_UNBOUNDED_EXTRA
            for _ in range(_RANDOM.randint(low, high)):
                _emit(list(body), output, repetitions)
                repetitions[0] += 1
                if len(output) > MAX_OUTPUT or repetitions[0] > MAX_REPETITIONS:
                    raise RegenError(
                        f"pattern generates more than {MAX_OUTPUT} characters or {MAX_REPETITIONS} repetitions"
                    )
        elif opcode is sre_constants.SUBPATTERN:
            _emit(list(argument[-1]), output, repetitions)
        elif opcode is sre_constants.ATOMIC_GROUP:
            _emit(list(argument), output, repetitions)
        elif opcode is sre_constants.BRANCH:
            _emit(list(_RANDOM.choice(argument[1])), output, repetitions)
        elif opcode is sre_constants.AT:
            continue
        else:
            raise RegenError(f"unsupported regular expression construct: {opcode}")
