"""Kyverno's ``*``/``?`` wildcards for engine code; the one implementation lives in :mod:`stockade.wildcard`."""

from __future__ import annotations

from stockade.wildcard import contains_wildcard, match

__all__ = ["contains_wildcard", "match"]
