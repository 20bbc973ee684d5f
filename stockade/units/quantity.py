"""Kubernetes resource quantities (``500m``, ``1Gi``, ``1e3``) with apimachinery's parsing and canonical printing.

Values are exact fractions so comparisons and arithmetic never drift; like apimachinery, anything finer than a
nano-unit is rounded up when parsed, and printing keeps the notation family the quantity was written in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import total_ordering
from typing import Literal
from stockade.errors import StockadeError

Format = Literal["BinarySI", "DecimalSI", "DecimalExponent"]


class QuantityError(StockadeError, ValueError):
    """Raised for text that is not a Kubernetes quantity."""


_QUANTITY_RE = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)$")
_EXPONENT_RE = re.compile(r"^[eE]([+-]?[0-9]+)$")

_BINARY_SUFFIXES: dict[str, int] = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIXES: dict[str, int] = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_BY_EXPONENT = {exponent: suffix for suffix, exponent in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_EXPONENT = {exponent: suffix for suffix, exponent in _BINARY_SUFFIXES.items()}
_NANO = Fraction(1, 10**9)


def _round_up_to_nano(value: Fraction) -> Fraction:
    scaled = value / _NANO
    if scaled.denominator == 1:
        return value
    # apimachinery rounds away from zero when precision is lost.
    magnitude = -(-abs(scaled.numerator) // scaled.denominator)
    return Fraction(magnitude if value > 0 else -magnitude) * _NANO


@total_ordering
@dataclass(frozen=True)
class Quantity:
    """An exact quantity plus the notation it prints in."""

    value: Fraction
    format: Format = "DecimalSI"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self.value == other.value
        if isinstance(other, (int, float, Fraction)):
            return self.value == other
        return NotImplemented

    def __lt__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self.value < other.value
        if isinstance(other, (int, float, Fraction)):
            return self.value < other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.value)

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.value + other.value, self._result_format(other))

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self.value - other.value, self._result_format(other))

    def __neg__(self) -> Quantity:
        return Quantity(-self.value, self.format)

    def scaled(self, factor: Fraction | int | float) -> Quantity:
        """Multiply by a plain number, keeping the notation."""
        return Quantity(_round_up_to_nano(self.value * Fraction(factor)), self.format)

    def _result_format(self, other: Quantity) -> Format:
        # apimachinery keeps the receiver's format unless the receiver is a zero value.
        return other.format if self.value == 0 else self.format

    def as_float(self) -> float:
        return float(self.value)

    def is_integer(self) -> bool:
        return self.value.denominator == 1

    def __str__(self) -> str:
        value = _round_up_to_nano(self.value)
        if value == 0:
            return "0"
        fmt = self.format
        if fmt == "BinarySI" and (-1024 < value < 1024 or value.denominator != 1):
            fmt = "DecimalSI"
        sign = "-" if value < 0 else ""
        magnitude = abs(value)
        if fmt == "BinarySI":
            number = magnitude.numerator
            exponent = 0
            while number % 1024 == 0 and exponent < 60:
                number //= 1024
                exponent += 10
            return f"{sign}{number}{_BINARY_BY_EXPONENT.get(exponent, '')}"
        mantissa, exponent = _decimal_canonical(magnitude)
        if fmt == "DecimalSI" and exponent in _DECIMAL_BY_EXPONENT:
            return f"{sign}{mantissa}{_DECIMAL_BY_EXPONENT[exponent]}"
        if exponent == 0:
            return f"{sign}{mantissa}"
        return f"{sign}{mantissa}e{exponent}"


def _decimal_canonical(magnitude: Fraction) -> tuple[int, int]:
    """Integer mantissa and the largest exponent (a multiple of 3, at least -9) that keeps it exact."""
    nanos = int(magnitude / _NANO)
    exponent = -9
    while nanos % 1000 == 0 and nanos != 0:
        nanos //= 1000
        exponent += 3
    return nanos, exponent


def parse_quantity(text: str) -> Quantity:
    """Parse a quantity as ``resource.ParseQuantity`` does; raise QuantityError otherwise."""
    if not isinstance(text, str):
        raise QuantityError(f"quantity must be a string, got {type(text).__name__}")
    stripped = text.strip()
    match = _QUANTITY_RE.match(stripped)
    if not stripped or match is None:
        raise QuantityError(f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}")
    number_text, suffix = match.groups()
    number = Fraction(number_text)
    if suffix in _BINARY_SUFFIXES:
        value = number * (2 ** _BINARY_SUFFIXES[suffix])
        fmt: Format = "BinarySI"
    elif suffix in _DECIMAL_SUFFIXES:
        value = number * Fraction(10) ** _DECIMAL_SUFFIXES[suffix]
        fmt = "DecimalSI"
    else:
        exponent_match = _EXPONENT_RE.match(suffix)
        if exponent_match is None:
            raise QuantityError(f"unable to parse quantity's suffix: {text!r}")
        value = number * Fraction(10) ** int(exponent_match.group(1))
        fmt = "DecimalExponent"
    return Quantity(_round_up_to_nano(value), fmt)


def is_quantity(text: object) -> bool:
    if not isinstance(text, str):
        return False
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True
