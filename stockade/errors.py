"""The one base of every exception stockade defines, so callers branch on types and attributes, never on text.

``file``, ``field`` and ``reason`` say where bad input was and what was wrong with it, for the errors where that
applies; they default to None so an error that has no such place need not invent one.
"""

from __future__ import annotations


class StockadeError(Exception):
    """Base of stockade's own exceptions; ``except StockadeError`` catches every error stockade raises on purpose."""

    file: str | None = None
    field: str | None = None
    reason: str | None = None
