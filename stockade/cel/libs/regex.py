"""Kubernetes' regex library (``'abc 123'.find('[0-9]+')``, ``findAll``) and Kyverno's ``regex.replace``.

Patterns are Go RE2 syntax, evaluated by :mod:`stockade.goregex` (RE2, linear time), so ``\\d``, ``$`` and friends
mean what they mean in Go, and empty matches right after a match are skipped as Go's ``FindAllString`` does.
"""

from __future__ import annotations

import re

from stockade.cel.functions import Library
from stockade.goregex import GoRegexError, GoRegexp, compile_go_regex, find_all, replace_all


def _compiled(pattern: str) -> GoRegexp:
    try:
        return compile_go_regex(pattern)
    except GoRegexError as error:
        raise ValueError(str(error)) from None


def _find(text: str, pattern: str) -> str:
    match = _compiled(pattern).search(text)
    return (match.group(0) or "") if match else ""


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    return find_all(_compiled(pattern), text, limit)


_BACKSLASH_GROUP_RE = re.compile(r"\\(\d)")


def _replace(text: str, pattern: str, replacement: str) -> str:
    """Kyverno's ``regex.replace``: every match is replaced; ``$1``/``${name}`` (Go) and ``\\1`` expand groups."""
    template = _BACKSLASH_GROUP_RE.sub(lambda m: "${" + m.group(1) + "}", replacement)
    return replace_all(_compiled(pattern), text, template, literal=False)


def build_regex() -> Library:
    library = Library("k8s.regex")
    library.add("find", ("string", "string"), "string", _find, member=True)
    library.add("findAll", ("string", "string"), "list", _find_all, member=True)
    library.add("findAll", ("string", "string", "int"), "list", _find_all, member=True)
    library.add("regex.replace", ("string", "string", "string"), "string", _replace)
    return library
