"""Go RE2 regular expressions on top of Python's ``re``: one translator for JMESPath functions and Flux tag filters.

Policies are written for Go's ``regexp`` package. The syntax mostly overlaps; the differences that change results
are handled here: ASCII-only ``\\d \\w \\s \\b``, ``$`` meaning end of text, ``\\z``, ``\\Q…\\E``, POSIX classes,
``(?<name>…)``, Go's ``$1``/``${name}`` replacement templates and Go's rule for empty matches in ``ReplaceAll``.
Perl features RE2 rejects (look-around, back-references) are rejected with Go's message.
"""

from __future__ import annotations

import re
from functools import lru_cache

_POSIX_CLASSES = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}

_CLASS_ESCAPES_IN_SET = {"d": "0-9", "w": "0-9A-Za-z_", "s": "\\t\\n\\f\\r "}
_CLASS_ESCAPES = {
    "d": "[0-9]",
    "D": "[^0-9]",
    "w": "[0-9A-Za-z_]",
    "W": "[^0-9A-Za-z_]",
    "s": "[\\t\\n\\f\\r ]",
    "S": "[^\\t\\n\\f\\r ]",
}
_ASCII_WORD = "[0-9A-Za-z_]"


class GoRegexError(ValueError):
    """The pattern is not valid Go regexp syntax; ``str()`` follows Go's wording."""


def _unsupported(construct: str) -> GoRegexError:
    return GoRegexError(f"error parsing regexp: invalid or unsupported Perl syntax: `{construct}`")


def _translate(pattern: str) -> str:
    multiline = bool(re.match(r"^\(\?[a-zA-Z]*m", pattern))
    output: list[str] = []
    position = 0
    length = len(pattern)
    in_set = False
    while position < length:
        character = pattern[position]
        if character == "\\":
            if position + 1 >= length:
                raise GoRegexError("error parsing regexp: trailing backslash at end of expression: ``")
            escaped = pattern[position + 1]
            if escaped == "Q":
                end = pattern.find("\\E", position + 2)
                literal = pattern[position + 2 :] if end < 0 else pattern[position + 2 : end]
                output.append(re.escape(literal))
                position = length if end < 0 else end + 2
                continue
            if escaped.isdigit() and escaped != "0":
                raise GoRegexError(f"error parsing regexp: invalid escape sequence: `\\{escaped}`")
            if in_set and escaped in _CLASS_ESCAPES_IN_SET:
                output.append(_CLASS_ESCAPES_IN_SET[escaped])
            elif not in_set and escaped in _CLASS_ESCAPES:
                output.append(_CLASS_ESCAPES[escaped])
            elif not in_set and escaped == "b":
                output.append(f"(?:(?<={_ASCII_WORD})(?!{_ASCII_WORD})|(?<!{_ASCII_WORD})(?={_ASCII_WORD}))")
            elif not in_set and escaped == "B":
                output.append(f"(?:(?<={_ASCII_WORD})(?={_ASCII_WORD})|(?<!{_ASCII_WORD})(?!{_ASCII_WORD}))")
            elif escaped == "z":
                output.append("\\Z")
            elif escaped == "Z":
                raise GoRegexError("error parsing regexp: invalid escape sequence: `\\Z`")
            elif escaped in "pP":
                raise GoRegexError(f"error parsing regexp: invalid character class range: `\\{escaped}`")
            else:
                output.append(pattern[position : position + 2])
            position += 2
            continue
        if in_set:
            if character == "[" and pattern.startswith("[:", position):
                end = pattern.find(":]", position + 2)
                if end > 0:
                    name = pattern[position + 2 : end]
                    negated = name.startswith("^")
                    ranges = _POSIX_CLASSES.get(name.lstrip("^"))
                    if ranges is None:
                        raise GoRegexError(f"error parsing regexp: invalid character class range: `[:{name}:]`")
                    if negated:
                        raise _unsupported(f"[:{name}:]")
                    output.append(ranges)
                    position = end + 2
                    continue
            if character == "[":
                output.append("\\[")
                position += 1
                continue
            if character == "]":
                in_set = False
            output.append(character)
            position += 1
            continue
        if character == "[":
            in_set = True
            output.append(character)
            position += 1
            if position < length and pattern[position] == "^":
                output.append("^")
                position += 1
            if position < length and pattern[position] == "]":
                output.append("\\]")
                position += 1
            continue
        if character == "(" and pattern.startswith("(?", position):
            for construct in ("(?=", "(?!", "(?<=", "(?<!", "(?P=", "(?#", "(?("):
                if pattern.startswith(construct, position):
                    raise _unsupported(construct)
            if pattern.startswith("(?<", position):
                output.append("(?P<")
                position += 3
                continue
        if character == "$" and not multiline:
            output.append("\\Z")
            position += 1
            continue
        output.append(character)
        position += 1
    if in_set:
        raise GoRegexError(f"error parsing regexp: missing closing ]: `{pattern}`")
    return "".join(output)


@lru_cache(maxsize=2048)
def compile_go_regex(pattern: str) -> re.Pattern[str]:
    """Compile once per pattern text; raises GoRegexError with Go-like wording on bad syntax."""
    try:
        return re.compile(_translate(pattern))
    except re.error as error:
        raise GoRegexError(f"error parsing regexp: {error.msg}: `{pattern}`") from None


def _name_length(template: str) -> int:
    length = 0
    while length < len(template) and (template[length].isalnum() or template[length] == "_"):
        length += 1
    return length


def _group_number(name: str) -> int:
    """Go only treats a name as a group number when it is all digits without a leading 0."""
    if not name.isascii() or not name.isdigit() or (name[0] == "0" and len(name) > 1):
        return -1
    return int(name) if len(name) <= 8 else -1


def expand_template(template: str, match: re.Match[str]) -> str:
    """Expand `$1`, `$name`, `${name}` and `$$` exactly like Go's Regexp.ExpandString.

    Names are greedy (`$1x` refers to group `1x`), unknown or non-participating
    groups expand to "", and a malformed `$` reference is kept literally.
    """
    out: list[str] = []
    rest = template
    while True:
        dollar = rest.find("$")
        if dollar < 0:
            out.append(rest)
            break
        out.append(rest[:dollar])
        rest = rest[dollar + 1 :]
        if rest.startswith("$"):
            out.append("$")
            rest = rest[1:]
            continue
        braced = rest.startswith("{")
        body = rest[1:] if braced else rest
        length = _name_length(body)
        if length == 0 or (braced and not body[length:].startswith("}")):
            out.append("$")
            continue
        name = body[:length]
        rest = body[length + 1 :] if braced else body[length:]
        number = _group_number(name)
        if number >= 0:
            if number <= (match.re.groups or 0) and match.group(number) is not None:
                out.append(match.group(number))
        elif name in match.re.groupindex and match.group(name) is not None:
            out.append(match.group(name))
    return "".join(out)


class OutputTooLargeError(GoRegexError):
    """``replace_all`` would build a string longer than the caller's ``max_length``."""


def replace_all(
    pattern: re.Pattern[str], source: str, replacement: str, literal: bool, max_length: int | None = None
) -> str:
    """``ReplaceAll``/``ReplaceAllLiteral``: an empty match right after the previous match is skipped, as in Go.

    With ``max_length`` the output is measured while it is built and ``OutputTooLargeError`` stops it early.
    """
    pieces: list[str] = []
    copied_up_to = 0
    previous_end = -1
    length = 0
    for match in pattern.finditer(source):
        start, end = match.span()
        if start == end and start == previous_end:
            continue
        pieces.append(source[copied_up_to:start])
        expanded = replacement if literal else expand_template(replacement, match)
        pieces.append(expanded)
        length += start - copied_up_to + len(expanded)
        if max_length is not None and length > max_length:
            raise OutputTooLargeError(f"replacement result exceeds {max_length} characters")
        copied_up_to = end
        previous_end = end
    pieces.append(source[copied_up_to:])
    return "".join(pieces)
