"""Glob matching with the exact rules Kyverno inherits from IGLOU-EU/go-wildcard v1.

Only two metacharacters exist: ``*`` matches any run of characters (including none) and ``?`` matches exactly
one character.  There are no character classes and no escapes, and the match always covers the whole text.
Patterns are translated once into an anchored regular expression and cached, because the same handful of
policy patterns is matched against thousands of resource values.
"""

from __future__ import annotations

import re
from typing import Callable

__all__ = ["contains_wildcard", "match"]

_Matcher = Callable[[str], object]
_compiled: dict[str, _Matcher] = {}
_CACHE_LIMIT = 4096


def contains_wildcard(text: str) -> bool:
    """True when ``text`` would be treated as a pattern rather than a literal."""
    return "*" in text or "?" in text


def _compile(pattern: str) -> _Matcher:
    parts: list[str] = []
    for char in pattern:
        if char == "*":
            if not parts or parts[-1] != ".*":  # consecutive stars behave like one
                parts.append(".*")
        elif char == "?":
            parts.append(".")
        else:
            parts.append(re.escape(char))
    return re.compile("".join(parts), re.DOTALL).fullmatch


def match(pattern: str, text: str) -> bool:
    """Whether ``text`` matches ``pattern``; the empty pattern matches only the empty text."""
    if pattern == text or pattern == "*":
        return True
    if "*" not in pattern and "?" not in pattern:
        return False
    matcher = _compiled.get(pattern)
    if matcher is None:
        if len(_compiled) >= _CACHE_LIMIT:
            _compiled.clear()
        matcher = _compiled[pattern] = _compile(pattern)
    return matcher(text) is not None
