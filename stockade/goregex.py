"""Go ``regexp`` semantics on RE2: the project's one layer for regular expressions written by users.

Go's regexp package is a port of RE2, so patterns go to the RE2 engine (``google-re2``) unchanged and every match
runs in time linear in the input: no backtracking, whatever the pattern.  What this module adds is the part where
Go's API differs from the Python binding: Go's error texts (``error parsing regexp: <code>: `<expr>```), rejecting
the syntax RE2 accepts but Go does not (``\\C``, non-ASCII group names), Go's ``$1``/``${name}`` replacement
templates, and Go's rule that an empty match right after a previous match is skipped by ``FindAll``/``ReplaceAll``.
Texts that Python can hold but UTF-8 cannot (lone surrogates, e.g. from JSON ``"\\ud800"``) are matched with
U+FFFD in their place, as Go's JSON decoder would have read them.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from typing import Any, Protocol

import re2
from stockade.errors import StockadeError

__all__ = [
    "GoRegexError",
    "GoMatch",
    "GoRegexp",
    "compile_go_regex",
    "compile_template",
    "expand_template",
    "find_all",
    "replace_all",
]

# RE2's error codes (re2/regexp.cc) next to the wording Go's regexp/syntax uses for the same condition.
_GO_ERROR_CODES = (
    ("invalid escape sequence", "invalid escape sequence"),
    ("invalid character class range", "invalid character class range"),
    ("invalid character class", "invalid character class"),
    ("missing ]", "missing closing ]"),
    ("missing )", "missing closing )"),
    ("unexpected )", "unexpected )"),
    ("trailing \\", "trailing backslash at end of expression"),
    ("no argument for repetition operator", "missing argument to repetition operator"),
    ("invalid repetition size", "invalid repeat count"),
    ("bad repetition operator", "invalid nested repetition operator"),
    ("invalid perl operator", "invalid or unsupported Perl syntax"),
    ("invalid UTF-8", "invalid UTF-8"),
    ("invalid named capture group", "invalid named capture"),
    ("pattern too large", "expression too large"),
)


class GoRegexError(StockadeError, ValueError):
    """The pattern is not valid Go regexp syntax; ``str()`` follows Go's wording."""


class GoMatch(Protocol):
    """The part of a match object callers use (the ``re2`` binding's match class satisfies it)."""

    @property
    def re(self) -> GoRegexp | _RE2Pattern: ...

    def group(self, group: int | str = 0) -> str | None: ...

    def span(self, group: int = 0) -> tuple[int, int]: ...

    def start(self, group: int = 0) -> int: ...

    def end(self, group: int = 0) -> int: ...


class _RE2Pattern(Protocol):
    groups: int
    groupindex: dict[str, int]


def _go_error(code: str, expr: str) -> GoRegexError:
    return GoRegexError(f"error parsing regexp: {code}: `{expr}`")


def _translate_error(message: str, pattern: str) -> GoRegexError:
    for re2_code, go_code in _GO_ERROR_CODES:
        if message.startswith(re2_code):
            argument = message[len(re2_code) :].removeprefix(": ")
            if go_code in ("trailing backslash at end of expression",):
                argument = ""
            elif go_code == "expression too large":
                argument = pattern
            return _go_error(go_code, argument)
    return _go_error("regexp/syntax: internal error", message)


def _reject_what_go_rejects(pattern: str) -> None:
    """``\\C`` (match one byte) is RE2-only; Go rejects it as an unknown escape.  ``\\Q…\\E`` text is literal."""
    position = 0
    length = len(pattern)
    while True:
        position = pattern.find("\\", position)
        if position < 0 or position + 1 >= length:
            return
        escaped = pattern[position + 1]
        if escaped == "Q":
            end = pattern.find("\\E", position + 2)
            if end < 0:
                return
            position = end + 2
            continue
        if escaped == "C":
            raise _go_error("invalid escape sequence", "\\C")
        position += 2


def _check_group_names(regexp: _RE2Pattern, pattern: str) -> None:
    """Go allows only ASCII letters, digits and ``_`` in group names; RE2 also takes Unicode word characters."""
    for name in regexp.groupindex:
        if not (name.isascii() and name.replace("_", "a").isalnum()):
            opener = f"(?P<{name}>" if f"(?P<{name}>" in pattern else f"(?<{name}>"
            raise _go_error("invalid named capture", opener)


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # errors are raised as GoRegexError; RE2 must not also print them to stderr
    return options


_OPTIONS = _re2_options()
_UNANCHORED, _ANCHOR_START, _ANCHOR_BOTH = re2._Anchor.UNANCHORED, re2._Anchor.ANCHOR_START, re2._Anchor.ANCHOR_BOTH


def _encodable(text: str) -> str:
    """Lone surrogates cannot be UTF-8 encoded; replacing each with U+FFFD keeps every character offset."""
    return "".join("\ufffd" if "\ud800" <= character <= "\udfff" else character for character in text)


_NO_SPAN = (-1, -1)


class _SpanMatch:
    """A match on ASCII text, where RE2's byte offsets are character offsets (the ``GoMatch`` surface).

    ``text`` may be a longer text holding the matched one at ``offset`` (see ``GoRegexp.search_each``): groups are
    cut from it directly and spans are reported relative to the matched text.
    """

    __slots__ = ("re", "_text", "_spans", "_offset")

    def __init__(self, regexp: GoRegexp, text: str, spans: list[tuple[int, int]], offset: int = 0) -> None:
        self.re = regexp
        self._text = text
        self._spans = spans
        self._offset = offset

    def _index(self, group: int | str) -> int:
        index = self.re._groupindex[group] if isinstance(group, str) else group
        if not 0 <= index <= self.re._groups:
            raise IndexError("no such group")
        return index

    def group(self, group: int | str = 0) -> str | None:
        start, end = self._spans[group if group.__class__ is int and 0 <= group <= self.re._groups else self._index(group)]
        return None if start < 0 else self._text[start:end]

    def span(self, group: int = 0) -> tuple[int, int]:
        start, end = self._spans[self._index(group)]
        return _NO_SPAN if start < 0 else (start - self._offset, end - self._offset)

    def start(self, group: int = 0) -> int:
        return self.span(group)[0]

    def end(self, group: int = 0) -> int:
        return self.span(group)[1]


# Only `^`/`$` change meaning under (?m); a pattern that names text anchors or sets the m flag itself keeps the
# one-text-at-a-time search (a deliberately broad test on the pattern text: a false alarm only costs speed).
_LINE_UNSAFE = re2.compile(r"\\[Az]|\(\?[imsU-]*m")


def _lines_options() -> re2.Options:
    options = _re2_options()
    options.never_nl = True
    return options


_LINES_OPTIONS = _lines_options()


class GoRegexp:
    """A compiled Go regexp.  Methods take Python ``str`` and report character offsets, like ``re``."""

    __slots__ = ("_compiled", "_engine", "_groups", "_groupindex", "_lines", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        _reject_what_go_rejects(pattern)
        try:
            self._compiled = re2.compile(pattern, _OPTIONS)
        except re2.error as error:
            message = error.args[0] if error.args else ""
            text = message.decode("utf-8", "replace") if isinstance(message, bytes) else str(message)
            raise _translate_error(text, pattern) from None
        except UnicodeEncodeError:
            raise _go_error("invalid UTF-8", pattern) from None
        _check_group_names(self._compiled, pattern)
        self._groups = int(self._compiled.groups)
        self._groupindex: dict[str, int] = dict(self._compiled.groupindex)
        # The binding's compiled RE2 object. Its Python wrapper converts every offset between bytes and characters,
        # which costs more than the match itself on short texts; for ASCII text the two agree, so `_run` calls RE2
        # directly there (the wrapper keeps handling everything else).
        self._engine: Any = self._compiled._regexp
        self._lines: Any = None  # the line-by-line program for search_each, compiled on first use; False if unusable

    @property
    def groups(self) -> int:
        return self._groups

    @property
    def groupindex(self) -> dict[str, int]:
        return dict(self._groupindex)

    def _run(self, anchor: Any, text: str) -> GoMatch | None:
        spans = self._engine.Match(anchor, text.encode("ascii"), 0, len(text))
        return None if spans[0] == _NO_SPAN else _SpanMatch(self, text, spans)

    def _lines_engine(self) -> Any:
        if self._lines is None:
            self._lines = False
            if _LINE_UNSAFE.search(self.pattern) is None:
                try:
                    self._lines = re2.compile("(?m)" + self.pattern, _LINES_OPTIONS)._regexp
                except re2.error:
                    pass
        return self._lines

    def search_each(self, texts: Sequence[str]) -> Iterator[tuple[str, GoMatch]]:
        """``(text, match)`` for each of ``texts`` that ``search`` matches, in order, with the same matches.

        ASCII lists without newlines are searched as one newline-joined text, by the pattern compiled with (?m)
        (so `^`/`$` are each text's ends) and RE2's never_nl (so no match reaches across a newline into the next
        text): a match found at or after the start of a text's line is that text's leftmost match, and the search
        then resumes at the next text. RE2 is entered once per matching text instead of once per text.
        """
        joined = "\n".join(texts)
        engine = self._lines_engine()
        if engine is False or not joined.isascii() or joined.count("\n") != len(texts) - 1:
            for text in texts:
                found = self.search(text)
                if found is not None:
                    yield text, found
            return
        data = joined.encode("ascii")
        starts = [0, *itertools.accumulate(len(text) + 1 for text in texts)]
        engine_match, bisect_right, last, position, end = engine.Match, bisect.bisect_right, len(texts) - 1, 0, len(data)
        while True:
            spans = engine_match(_UNANCHORED, data, position, end)
            start = spans[0][0]
            if start < 0:
                return
            index = bisect_right(starts, start) - 1
            yield texts[index], _SpanMatch(self, joined, spans, starts[index])
            if index == last:
                return
            position = starts[index + 1]

    def search(self, text: str) -> GoMatch | None:
        """Go's ``FindStringSubmatchIndex``/``MatchString``: the leftmost match anywhere in ``text``."""
        if text.isascii():
            return self._run(_UNANCHORED, text)
        try:
            return self._compiled.search(text)  # type: ignore[no-any-return]
        except UnicodeEncodeError:
            return self._compiled.search(_encodable(text))  # type: ignore[no-any-return]

    def match(self, text: str) -> GoMatch | None:
        """A match that starts at the beginning of ``text``."""
        if text.isascii():
            return self._run(_ANCHOR_START, text)
        try:
            return self._compiled.match(text)  # type: ignore[no-any-return]
        except UnicodeEncodeError:
            return self._compiled.match(_encodable(text))  # type: ignore[no-any-return]

    def fullmatch(self, text: str) -> GoMatch | None:
        """A match covering all of ``text`` (what ``^(?:…)$`` would give in Go)."""
        if text.isascii():
            return self._run(_ANCHOR_BOTH, text)
        try:
            return self._compiled.fullmatch(text)  # type: ignore[no-any-return]
        except UnicodeEncodeError:
            return self._compiled.fullmatch(_encodable(text))  # type: ignore[no-any-return]

    def finditer(self, text: str) -> Iterator[GoMatch]:
        """Successive matches as Go's ``FindAll`` reports them: an empty match abutting the previous one is skipped."""
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = _encodable(text)
        previous_end = -1
        for found in self._compiled.finditer(text):
            start, end = found.span()
            if start == end and start == previous_end:
                continue
            previous_end = end
            yield found


@lru_cache(maxsize=512)
def compile_go_regex(pattern: str) -> GoRegexp:
    """Compile once per pattern text; raises GoRegexError with Go's wording on syntax Go rejects.

    Each RE2 object keeps its program and lazily built DFA states within RE2's ``max_mem`` (8 MiB by default; past
    it RE2 falls back to its NFA, still linear), so the cache size bounds the memory regexes can hold.
    """
    return GoRegexp(pattern)


def find_all(regexp: GoRegexp, text: str, limit: int = -1) -> list[str]:
    """Go's ``FindAllString(text, limit)``: a negative limit means all matches."""
    if limit == 0:
        return []
    found: list[str] = []
    for match in regexp.finditer(text):
        found.append(match.group(0) or "")
        if 0 < limit <= len(found):
            break
    return found


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


TemplatePiece = str | int  # literal text, or the number of the group whose text goes there


def _template_pieces(template: str, groups: int, groupindex: dict[str, int]) -> tuple[TemplatePiece, ...]:
    """Read a Go ``Expand`` template once: `$1`, `$name`, `${name}` and `$$` against the regexp's groups.

    Names are greedy (`$1x` refers to group `1x`), unknown groups expand to nothing, and a malformed `$`
    reference is kept literally.
    """
    pieces: list[TemplatePiece] = []
    literal: list[str] = []
    rest = template
    while True:
        dollar = rest.find("$")
        if dollar < 0:
            literal.append(rest)
            break
        literal.append(rest[:dollar])
        rest = rest[dollar + 1 :]
        if rest.startswith("$"):
            literal.append("$")
            rest = rest[1:]
            continue
        braced = rest.startswith("{")
        body = rest[1:] if braced else rest
        length = _name_length(body)
        if length == 0 or (braced and not body[length:].startswith("}")):
            literal.append("$")
            continue
        name = body[:length]
        rest = body[length + 1 :] if braced else body[length:]
        number = _group_number(name)
        index = (number if number <= groups else -1) if number >= 0 else groupindex.get(name, -1)
        if index >= 0:
            pieces.append("".join(literal))
            literal = []
            pieces.append(index)
    pieces.append("".join(literal))
    return tuple(piece for piece in pieces if piece != "")


def _expand(pieces: tuple[TemplatePiece, ...], match: GoMatch) -> str:
    return "".join([piece if isinstance(piece, str) else (match.group(piece) or "") for piece in pieces])


def expand_template(template: str, match: GoMatch) -> str:
    """Expand `$1`, `$name`, `${name}` and `$$` exactly like Go's Regexp.ExpandString; unset groups give ""."""
    return _expand(_template_pieces(template, match.re.groups or 0, match.re.groupindex), match)


def compile_template(template: str, regexp: GoRegexp) -> Callable[[GoMatch], str]:
    """``expand_template`` for many matches of one regexp: the template is read once."""
    pieces = _template_pieces(template, regexp.groups, regexp.groupindex)
    if len(pieces) == 1 and isinstance(pieces[0], int):  # the usual `$name`: no joining needed
        group = pieces[0]
        return lambda match: match.group(group) or ""
    return lambda match: _expand(pieces, match)


class OutputTooLargeError(GoRegexError):
    """``replace_all`` would build a string longer than the caller's ``max_length``."""


def replace_all(regexp: GoRegexp, source: str, replacement: str, literal: bool, max_length: int | None = None) -> str:
    """``ReplaceAllString``/``ReplaceAllLiteralString`` with Go's empty-match rule (see ``GoRegexp.finditer``).

    With ``max_length`` the output is measured while it is built and ``OutputTooLargeError`` stops it early.
    """
    pieces: list[str] = []
    copied_up_to = 0
    length = 0
    for match in regexp.finditer(source):
        start, end = match.span()
        expanded = replacement if literal else expand_template(replacement, match)
        pieces.append(source[copied_up_to:start])
        pieces.append(expanded)
        length += start - copied_up_to + len(expanded)
        if max_length is not None and length > max_length:
            raise OutputTooLargeError(f"replacement result exceeds {max_length} characters")
        copied_up_to = end
    pieces.append(source[copied_up_to:])
    return "".join(pieces)
