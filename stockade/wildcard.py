"""Kyverno's wildcard matching (``wildcard.Match``, from IGLOU-EU/go-wildcard v1), in time linear in the text.

Only two metacharacters exist: ``*`` matches any run of characters (including none) and ``?`` matches exactly one
character.  There are no character classes (``[`` and ``]`` are literal) and no escapes; the match covers the whole
text.  Go's implementation backtracks; a translated regex under a backtracking engine is O(n^3) for ``*/*/*:*``.

Here the pattern is split at its stars into fixed-length segments.  The first segment must sit at the start, the last
at the end, and each middle one is taken at its leftmost place after the previous: because segments have fixed
length, the leftmost place never loses a match that a later place would find, so nothing is ever retried.  A segment
without ``?`` is located with ``str.find``; one with ``?`` with a bit-parallel scan (shift-and) whose state is one
integer of segment-length bits.  Time is O(text length x segment length / word size) at worst, O(text length) for
the usual patterns, and memory is O(pattern length) -- also when the pattern itself comes from a resource value, as
it does when conditions compare in both directions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

__all__ = ["contains_wildcard", "match"]

_CACHED_PATTERN_LENGTH = 1024  # longer patterns (never written in policies) are prepared per call, not kept


def contains_wildcard(text: str) -> bool:
    """True when ``text`` would be treated as a pattern rather than a literal."""
    return "*" in text or "?" in text


@dataclass(frozen=True)
class _Segment:
    """A star-free piece of the pattern; ``?`` positions are in ``any_mask`` (bit i = character i)."""

    text: str
    any_mask: int = 0
    dense: dict[str, int] = field(default_factory=dict)  # masks of frequent characters
    sparse: dict[str, tuple[int, ...]] = field(default_factory=dict)  # positions of the other characters

    @property
    def has_any(self) -> bool:
        return self.any_mask != 0

    def matches_at(self, text: str, position: int) -> bool:
        if position < 0 or position + len(self.text) > len(text):
            return False
        if not self.has_any:
            return text.startswith(self.text, position)
        return all(
            wanted == "?" or wanted == actual
            for wanted, actual in zip(self.text, text[position : position + len(self.text)])
        )

    def find(self, text: str, start: int, end: int) -> int:
        """Leftmost position p in [start, end - len] where the segment matches, or -1."""
        if not self.has_any:
            return text.find(self.text, start, end)
        length = len(self.text)
        last_bit = 1 << (length - 1)
        state = 0
        for index in range(start, end):
            character = text[index]
            shifted = (state << 1) | 1
            state = shifted & self.any_mask
            mask = self.dense.get(character)
            if mask is not None:
                state |= shifted & mask
            else:
                for bit_position in self.sparse.get(character, ()):
                    state |= shifted & (1 << bit_position)
            if state & last_bit:
                return index - length + 1
        return -1


def _segment(text: str) -> _Segment:
    if "?" not in text:
        return _Segment(text)
    any_mask = 0
    positions: dict[str, list[int]] = {}
    for index, character in enumerate(text):
        if character == "?":
            any_mask |= 1 << index
        else:
            positions.setdefault(character, []).append(index)
    # A character gets a full-width mask only when it is frequent (at most 64 such), so memory stays O(length)
    # and every scan step costs O(length / 64) either way.
    threshold = max(1, len(text) // 64)
    dense: dict[str, int] = {}
    sparse: dict[str, tuple[int, ...]] = {}
    for character, indexes in positions.items():
        if len(indexes) >= threshold:
            mask = 0
            for index in indexes:
                mask |= 1 << index
            dense[character] = mask
        else:
            sparse[character] = tuple(indexes)
    return _Segment(text, any_mask, dense, sparse)


def _prepare(pattern: str) -> tuple[_Segment, ...]:
    pieces = pattern.split("*")
    middle = [piece for piece in pieces[1:-1] if piece]  # runs of stars behave like one
    return tuple(_segment(piece) for piece in [pieces[0], *middle, pieces[-1]]) if len(pieces) > 1 else (
        _segment(pieces[0]),
    )


_prepare_cached = lru_cache(maxsize=2048)(_prepare)


def match(pattern: str, text: str) -> bool:
    """Whether ``text`` matches ``pattern``; the empty pattern matches only the empty text."""
    if pattern == text or pattern == "*":
        return True
    if "*" not in pattern and "?" not in pattern:
        return False
    segments = _prepare_cached(pattern) if len(pattern) <= _CACHED_PATTERN_LENGTH else _prepare(pattern)
    if len(segments) == 1:
        return len(segments[0].text) == len(text) and segments[0].matches_at(text, 0)
    first, *middle, last = segments
    end = len(text) - len(last.text)
    if end < len(first.text) or not first.matches_at(text, 0) or not last.matches_at(text, end):
        return False
    position = len(first.text)
    for segment in middle:
        found = segment.find(text, position, end)
        if found < 0:
            return False
        position = found + len(segment.text)
    return True
