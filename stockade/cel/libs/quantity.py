"""Kubernetes' quantity library on top of stockade.units.quantity.

A CEL Quantity is a tagged map holding the exact value as ``"numerator/denominator"``, so that CEL map equality
gives ``quantity('1') == quantity('1000m')`` like Kubernetes' value-based equality.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from stockade.cel.functions import Library, tag_of, tagged, untag
from stockade.cel.libs._values import INT64_MAX, INT64_MIN
from stockade.units.quantity import QuantityError, parse_quantity

QUANTITY_TYPE = "kubernetes.Quantity"


def _wrap(value: Fraction) -> dict[str, Any]:
    return tagged(QUANTITY_TYPE, f"{value.numerator}/{value.denominator}")


def _value(quantity: Any) -> Fraction:
    return Fraction(untag(quantity, QUANTITY_TYPE))


def _quantity(text: str) -> dict[str, Any]:
    try:
        return _wrap(parse_quantity(text).value)
    except QuantityError as error:
        raise ValueError(f"quantities must match the regular expression: {error}") from None


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except (QuantityError, ValueError):
        return False
    return True


def _operand(other: Any) -> Fraction:
    if isinstance(other, int) and not isinstance(other, bool):
        return Fraction(other)
    return _value(other)


def _compare(left: Any, right: Any) -> int:
    a, b = _value(left), _value(right)
    return (a > b) - (a < b)


def _as_integer(quantity: Any) -> int:
    value = _value(quantity)
    if value.denominator != 1 or not INT64_MIN <= value.numerator <= INT64_MAX:
        raise ValueError("cannot convert value to integer")
    return value.numerator


def _is_integer(quantity: Any) -> bool:
    value = _value(quantity)
    return value.denominator == 1 and INT64_MIN <= value.numerator <= INT64_MAX


def is_cel_quantity(value: Any) -> bool:
    return tag_of(value) == QUANTITY_TYPE


def build_quantity() -> Library:
    library = Library("k8s.quantity")
    library.add("quantity", ("string",), "opaque", _quantity)
    library.add("isQuantity", ("string",), "bool", _is_quantity)
    library.add("sign", ("map",), "int", lambda q: (_value(q) > 0) - (_value(q) < 0), member=True)
    # Kubernetes declares sign as a global overload although its docs show the member form; accept both.
    library.add("sign", ("map",), "int", lambda q: (_value(q) > 0) - (_value(q) < 0))
    library.add("isInteger", ("map",), "bool", _is_integer, member=True)
    library.add("asInteger", ("map",), "int", _as_integer, member=True)
    library.add("asApproximateFloat", ("map",), "double", lambda q: float(_value(q)), member=True)
    library.add("add", ("map", "map"), "opaque", lambda q, other: _wrap(_value(q) + _operand(other)), member=True)
    library.add("add", ("map", "int"), "opaque", lambda q, other: _wrap(_value(q) + _operand(other)), member=True)
    library.add("sub", ("map", "map"), "opaque", lambda q, other: _wrap(_value(q) - _operand(other)), member=True)
    library.add("sub", ("map", "int"), "opaque", lambda q, other: _wrap(_value(q) - _operand(other)), member=True)
    return library
