"""Terminal output: plain aligned tables when piped, colour when on a TTY (never with NO_COLOR)."""

from __future__ import annotations

import os
import sys
from typing import TextIO


def colour_enabled(stream: TextIO = sys.stdout, disabled: bool = False) -> bool:
    if disabled or os.environ.get("NO_COLOR") is not None:
        return False
    return hasattr(stream, "isatty") and stream.isatty()


_CODES = {"green": "32", "red": "31", "yellow": "33", "bold": "1", "dim": "2", "cyan": "36"}


def paint(text: str, colour: str, enabled: bool) -> str:
    if not enabled or not text:
        return text
    return f"\033[{_CODES[colour]}m{text}\033[0m"


def render_table(headers: list[str], rows: list[list[str]], *, colour: bool = False, colours: list[str | None] | None = None) -> str:
    """Left-aligned table with a header rule; ``colours`` paints the RESULT cell of each row."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], max((len(line) for line in str(cell).splitlines()), default=0))
    lines = ["  ".join(h.ljust(widths[i]) for i, h in enumerate(headers)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    result_index = headers.index("RESULT") if "RESULT" in headers else -1
    for row_index, row in enumerate(rows):
        cells = []
        for i, cell in enumerate(row):
            text = str(cell).replace("\n", " ")
            padded = text.ljust(widths[i])
            if colour and i == result_index and colours and colours[row_index]:
                padded = paint(text, colours[row_index] or "", True) + " " * (widths[i] - len(text))
            cells.append(padded)
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
