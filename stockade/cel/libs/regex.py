"""Kubernetes' regex library: ``'abc 123'.find('[0-9]+')`` and ``findAll`` (RE2 syntax; Python's ``re`` accepts
the RE2 subset policies use)."""

from __future__ import annotations

import functools
import re

from stockade.cel.functions import Library


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as error:
        raise ValueError(f"error parsing regexp: {error}") from None


def _find(text: str, pattern: str) -> str:
    match = _compiled(pattern).search(text)
    return match.group(0) if match else ""


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    found = [match.group(0) for match in _compiled(pattern).finditer(text)]
    return found if limit < 0 else found[:limit]


_GO_GROUP_RE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def _replace(text: str, pattern: str, replacement: str) -> str:
    """Kyverno's ``regex.replace``: every match is replaced; ``$1``/``${name}`` (Go) and ``\\1`` expand groups."""
    python_replacement = _GO_GROUP_RE.sub(lambda m: f"\\g<{m.group(1) or m.group(2)}>", replacement)
    try:
        return _compiled(pattern).sub(python_replacement, text)
    except (re.error, IndexError) as error:
        raise ValueError(f"regex.replace: {error}") from None


def build_regex() -> Library:
    library = Library("k8s.regex")
    library.add("find", ("string", "string"), "string", _find, member=True)
    library.add("findAll", ("string", "string"), "list", _find_all, member=True)
    library.add("findAll", ("string", "string", "int"), "list", _find_all, member=True)
    library.add("regex.replace", ("string", "string", "string"), "string", _replace)
    return library
