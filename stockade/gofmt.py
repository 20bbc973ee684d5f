"""Go's ``fmt`` and ``strconv`` renderings of JSON-like values: the one place stockade turns values into Go's text.

Kyverno builds its messages with ``%v``/``%T`` and compares values through ``fmt.Sprint``; users see those
strings in reports and test expectations, so we reproduce them rather than Python's ``str``. Bottom layer:
the engine, JMESPath and CEL code all import it.
"""

from __future__ import annotations

import math
import re
import struct
from decimal import Decimal
from typing import Any

__all__ = [
    "go_float_e",
    "go_float_f",
    "go_float_g",
    "go_parse_float",
    "go_parse_int",
    "go_sprint",
    "go_type_name",
]


def _shortest_digits(value: float) -> tuple[str, int]:
    """Shortest round-trip digits of a positive float and its point position (``0.d1d2… × 10**point``)."""
    _, digit_tuple, exponent = Decimal(repr(value)).as_tuple()
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    trimmed = digits.rstrip("0")
    exponent = int(exponent) + len(digits) - len(trimmed)
    return trimmed, len(trimmed) + exponent


def _exponent_suffix(exponent: int, letter: str) -> str:
    sign = "-" if exponent < 0 else "+"
    magnitude = abs(exponent)
    return f"{letter}{sign}{magnitude:02d}"


def _special(value: float) -> str | None:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return None


def go_float_g(value: float) -> str:
    """``strconv.FormatFloat(v, 'g', -1, 64)``, which is also what ``%v`` prints for a float64."""
    special = _special(value)
    if special is not None:
        return special
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign = "-" if value < 0 else ""
    digits, point = _shortest_digits(abs(value))
    exponent = point - 1
    if exponent < -4 or exponent >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return sign + mantissa + _exponent_suffix(exponent, "e")
    if point <= 0:
        return sign + "0." + "0" * (-point) + digits
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return sign + digits[:point] + "." + digits[point:]


def go_float_e(value: float, letter: str = "E") -> str:
    """``strconv.FormatFloat(v, 'E', -1, 64)`` (or ``'e'``): shortest digits, always in exponent form."""
    special = _special(value)
    if special is not None:
        return special
    if value == 0:
        return ("-" if math.copysign(1.0, value) < 0 else "") + f"0{letter}+00"
    sign = "-" if value < 0 else ""
    digits, point = _shortest_digits(abs(value))
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return sign + mantissa + _exponent_suffix(point - 1, letter)


def _float32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


def _shortest_float32_text(value: float) -> str:
    """Fewest significant digits that read back as the same float32 (Go's shortest for bitSize 32)."""
    as_float32 = _float32(value)
    for digits in range(1, 10):
        candidate = f"{as_float32:.{digits}g}"
        if _float32(float(candidate)) == as_float32:
            return candidate
    return repr(as_float32)


def go_float_f(value: float, bit_size: int = 64) -> str:
    """``strconv.FormatFloat(v, 'f', -1, bitSize)``: shortest digits that round-trip, never in exponent form."""
    special = _special(value)
    if special is not None:
        return special
    text = _shortest_float32_text(value) if bit_size == 32 else repr(float(value))
    return format(Decimal(text).normalize(), "f")


def go_sprint(value: Any, numbers_are_floats: bool = False) -> str:
    """``fmt.Sprint(value)`` for decoded JSON.

    ``numbers_are_floats`` renders Python ints the way Go renders a float64 holding them, which is how numbers
    that came from a policy document or a JMESPath result look inside Kyverno.
    """
    if value is None:
        return "<nil>"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        if numbers_are_floats:
            return go_float_g(float(value))
        return str(value)
    if isinstance(value, float):
        return go_float_g(value)
    if isinstance(value, dict):
        inner = " ".join(
            f"{key}:{go_sprint(value[key], numbers_are_floats)}" for key in sorted(value, key=str)
        )
        return f"map[{inner}]"
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(go_sprint(item, numbers_are_floats) for item in value) + "]"
    return str(value)


def go_type_name(value: Any, numbers_are_floats: bool = False) -> str:
    """``%T`` of a decoded JSON value (resources decode integers as int64, policies as float64)."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "float64" if numbers_are_floats else "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "map[string]interface {}"
    if isinstance(value, list):
        return "[]interface {}"
    return type(value).__name__


_FLOAT_RE = re.compile(r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.IGNORECASE)
_INT_RE = re.compile(r"[+-]?[0-9]+")


def go_parse_float(text: str) -> float | None:
    """``strconv.ParseFloat(text, 64)`` for decimal input; None where Go reports an error."""
    if _FLOAT_RE.fullmatch(text) is None:
        return None
    result = float(text)
    if math.isinf(result) and "inf" not in text.lower():
        return None  # Go reports out-of-range values as errors
    return result


def go_parse_int(text: str) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``; None where Go reports an error."""
    if _INT_RE.fullmatch(text) is None:
        return None
    result = int(text)
    if not -(2**63) <= result < 2**63:
        return None
    return result
