"""Parsing of anchored map keys such as ``(name)``, ``<(kind)``, ``X(hostPath)``, ``=(labels)``, ``^(ports)``."""

from __future__ import annotations

from stockade import gopath

import re
from typing import NamedTuple

__all__ = [
    "ADD_IF_NOT_PRESENT",
    "CONDITION",
    "EQUALITY",
    "EXISTENCE",
    "GLOBAL",
    "NEGATION",
    "Anchor",
    "parse_anchor",
    "strip_anchors_from_path",
]

CONDITION = ""
GLOBAL = "<"
NEGATION = "X"
ADD_IF_NOT_PRESENT = "+"
EQUALITY = "="
EXISTENCE = "^"

_ANCHOR_RE = re.compile(r"^([+<=X^])?\((.+)\)$", re.DOTALL)


class Anchor(NamedTuple):
    modifier: str
    key: str

    def __str__(self) -> str:
        return f"{self.modifier}({self.key})"


_parsed: dict[str, Anchor | None] = {}


def parse_anchor(text: str) -> Anchor | None:
    """The anchor a map key denotes, or None for a plain key (results cached: keys repeat constantly)."""
    try:
        return _parsed[text]
    except KeyError:
        pass
    found = _ANCHOR_RE.match(text.strip())
    result = Anchor(found.group(1) or "", found.group(2)) if found else None
    if len(_parsed) > 16384:
        _parsed.clear()
    _parsed[text] = result
    return result


def strip_anchors_from_path(path: str) -> str:
    """``/spec/(containers)/0`` → ``/spec/containers/0``, joined and cleaned like Go's ``path.Join``."""
    parts = path.split("/")
    if parts[0] == "":
        parts = parts[1:]
    keys = []
    for part in parts:
        anchor = parse_anchor(part) if part else None
        key = anchor.key if anchor is not None else part
        if key:
            keys.append(key)
    joined = clean_path("/".join(keys)) if keys else ""
    return "/" + joined if path.startswith("/") else joined


def clean_path(path: str) -> str:
    """Go's ``path.Clean``."""
    return gopath.clean(path)
