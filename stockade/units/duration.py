"""Go ``time.Duration`` parsing and printing, held as integer nanoseconds so arithmetic stays exact."""

from __future__ import annotations

import re
from fractions import Fraction
from stockade.errors import StockadeError


class DurationError(StockadeError, ValueError):
    """Raised for text that Go's ``time.ParseDuration`` would reject."""


_UNIT_NANOS: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_COMPONENT_RE = re.compile(r"([0-9]*(?:\.[0-9]*)?)([a-zµμ]+)")
_MAX_NANOS = 2**63 - 1


def parse_duration(text: str) -> int:
    """Return the duration in nanoseconds; accepts what Go accepts (``1h30m``, ``-1.5s``, ``0``)."""
    if not isinstance(text, str):
        raise DurationError(f"time: invalid duration {text!r}")
    body = text
    negative = False
    if body[:1] in "+-" and body:
        negative = body[0] == "-"
        body = body[1:]
    if body == "0":
        return 0
    if not body:
        raise DurationError(f'time: invalid duration "{text}"')
    total = Fraction(0)
    position = 0
    while position < len(body):
        match = _COMPONENT_RE.match(body, position)
        if match is None or match.group(1) in ("", "."):
            raise DurationError(f'time: invalid duration "{text}"')
        number, unit = match.groups()
        if unit not in _UNIT_NANOS:
            raise DurationError(f'time: unknown unit "{unit}" in duration "{text}"')
        total += Fraction(number) * _UNIT_NANOS[unit]
        position = match.end()
    nanos = int(total)  # Go truncates sub-nanosecond fractions
    if nanos > _MAX_NANOS:
        raise DurationError(f'time: invalid duration "{text}"')
    return -nanos if negative else nanos


def is_duration(text: object) -> bool:
    if not isinstance(text, str):
        return False
    try:
        parse_duration(text)
    except DurationError:
        return False
    return True


def _with_fraction(value: int, digits: int) -> str:
    whole, fraction = divmod(value, 10**digits)
    fraction_text = str(fraction).rjust(digits, "0").rstrip("0")
    return f"{whole}.{fraction_text}" if fraction_text else str(whole)


def format_duration(nanos: int) -> str:
    """Print like Go's ``Duration.String``: ``1h30m0s``, ``1.5s``, ``500ms``, ``0s``."""
    nanos = int(nanos)
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    magnitude = abs(nanos)
    if magnitude < 1_000_000_000:
        if magnitude < 1_000:
            return f"{sign}{magnitude}ns"
        if magnitude < 1_000_000:
            return f"{sign}{_with_fraction(magnitude, 3)}µs"
        return f"{sign}{_with_fraction(magnitude, 6)}ms"
    total_minutes, second_nanos = divmod(magnitude, 60 * 1_000_000_000)
    text = f"{_with_fraction(second_nanos, 9)}s"
    if total_minutes:
        hours, minutes = divmod(total_minutes, 60)
        text = f"{minutes}m{text}"
        if hours:
            text = f"{hours}h{text}"
    return sign + text
