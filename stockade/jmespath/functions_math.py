"""Kyverno's arithmetic (pkg/engine/jmespath/arithmetic.go) over numbers, Kubernetes quantities and Go durations.

Operands are classified the way Kyverno does it: a JSON number is a scalar; a string is a quantity if
``resource.ParseQuantity`` accepts it (so ``'1m'`` is 1 milli-unit, not a minute), otherwise a duration if
``time.ParseDuration`` accepts it. Results print like Kubernetes and Go print them.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from stockade.jmespath.errors import JMESPathError
from stockade.gofmt import go_float_g
from stockade.jmespath.golang import is_number, normalize_number
from stockade.jmespath.registry import ANY, ARRAY, NUMBER, generic_error, register, type_mismatch, zero_divisor
from stockade.units.duration import DurationError, format_duration, parse_duration
from stockade.units.quantity import Quantity, QuantityError, parse_quantity

_NANOS_PER_SECOND = 1_000_000_000
_DECIMAL_EXPONENTS = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY_PARTS = re.compile(r"^[+-]?([0-9]*)(?:\.([0-9]*))?(.*)$")


class _Scalar:
    __slots__ = ("value",)

    def __init__(self, value: int | float) -> None:
        self.value = value


class _Quantity:
    __slots__ = ("quantity", "text")

    def __init__(self, quantity: Quantity, text: str) -> None:
        self.quantity = quantity
        self.text = text


class _Duration:
    __slots__ = ("nanos",)

    def __init__(self, nanos: int) -> None:
        self.nanos = nanos


_Operand = _Scalar | _Quantity | _Duration


def _operand(function: str, value: Any) -> _Operand:
    if is_number(value):
        return _Scalar(value)
    if isinstance(value, str) and value == value.strip():
        try:
            return _Quantity(parse_quantity(value), value)
        except QuantityError:
            pass
        try:
            return _Duration(parse_duration(value))
        except DurationError:
            pass
    raise generic_error(function, "invalid operand")


def _operands(function: str, arguments: list[Any]) -> tuple[_Operand, _Operand]:
    return _operand(function, arguments[0]), _operand(function, arguments[1])


def _go_seconds(nanos: int) -> float:
    """``Duration.Seconds()``: whole and fractional parts converted separately, exactly as Go does."""
    whole = int(nanos / _NANOS_PER_SECOND) if nanos < 0 else nanos // _NANOS_PER_SECOND
    return float(whole) + float(nanos - whole * _NANOS_PER_SECOND) / 1e9


def _duration_from_seconds(seconds: float) -> str:
    """``time.Duration(seconds * float64(time.Second)).String()`` with Go's truncating conversion."""
    scaled = seconds * float(_NANOS_PER_SECOND)
    if math.isnan(scaled) or math.isinf(scaled):
        raise JMESPathError("duration out of range")
    return format_duration(int(scaled))


def _scalar_text_fraction(value: int | float) -> Fraction:
    """The exact value of ``resource.ParseQuantity(fmt.Sprintf("%v", value))``."""
    return Fraction(value) if isinstance(value, int) else Fraction(go_float_g(value))


def _decimal_scale(text: str) -> int:
    """The ``inf.Dec`` scale apimachinery keeps for a parsed quantity (digits after the point, minus the exponent)."""
    match = _QUANTITY_PARTS.match(text)
    if match is None:
        return 0
    fraction_digits = len(match.group(2) or "")
    suffix = match.group(3)
    if suffix in _DECIMAL_EXPONENTS:
        return fraction_digits - _DECIMAL_EXPONENTS[suffix]
    if suffix[:1] in ("e", "E"):
        try:
            return fraction_digits - int(suffix[1:])
        except ValueError:
            return fraction_digits
    return fraction_digits  # binary suffixes keep the decimal digits of the number


def _truncated_remainder(dividend: int, divisor: int) -> int:
    """Go's ``%``: the result takes the sign of the dividend."""
    remainder = abs(dividend) % abs(divisor)
    return -remainder if dividend < 0 else remainder


def _add(function: str, left: _Operand, right: _Operand) -> Any:
    if isinstance(left, _Quantity) and isinstance(right, _Quantity):
        return str(left.quantity + right.quantity)
    if isinstance(left, _Duration) and isinstance(right, _Duration):
        return format_duration(left.nanos + right.nanos)
    if isinstance(left, _Scalar) and isinstance(right, _Scalar):
        return normalize_number(left.value + right.value)
    raise type_mismatch(function)


@register("add", (ANY,), (ANY,), returns=(ANY,),
          note="does arithmetic addition of two specified values of numbers, quantities, and durations")
def _jp_add(arguments: list[Any]) -> Any:
    return _add("add", *_operands("add", arguments))


@register("sum", (ARRAY,), returns=(ANY,),
          note="does arithmetic addition of specified array of values of numbers, quantities, and durations")
def _jp_sum(arguments: list[Any]) -> Any:
    items = arguments[0]
    if not isinstance(items, (list, tuple)):
        raise type_mismatch("sum")
    if not items:
        raise generic_error("sum", "at least one element in the array is required")
    result = items[0]
    for item in items[1:]:
        result = _add("sum", _operand("sum", result), _operand("sum", item))
    return result


@register("subtract", (ANY,), (ANY,), returns=(ANY,),
          note="does arithmetic subtraction of two specified values of numbers, quantities, and durations")
def _jp_subtract(arguments: list[Any]) -> Any:
    left, right = _operands("subtract", arguments)
    if isinstance(left, _Quantity) and isinstance(right, _Quantity):
        return str(left.quantity - right.quantity)
    if isinstance(left, _Duration) and isinstance(right, _Duration):
        return format_duration(left.nanos - right.nanos)
    if isinstance(left, _Scalar) and isinstance(right, _Scalar):
        return normalize_number(left.value - right.value)
    raise type_mismatch("subtract")


def _quantity_times(quantity: _Quantity, scalar: _Scalar) -> str:
    product = quantity.quantity.value * _scalar_text_fraction(scalar.value)
    return str(Quantity(product, quantity.quantity.format))


def _duration_times(duration: _Duration, scalar: _Scalar) -> str:
    return _duration_from_seconds(_go_seconds(duration.nanos) * float(scalar.value))


@register("multiply", (ANY,), (ANY,), returns=(ANY,),
          note="does arithmetic multiplication of two specified values of numbers, quantities, and durations")
def _jp_multiply(arguments: list[Any]) -> Any:
    left, right = _operands("multiply", arguments)
    if isinstance(left, _Scalar):
        if isinstance(right, _Scalar):
            return normalize_number(left.value * right.value)
        left, right = right, left
    if isinstance(right, _Scalar):
        if isinstance(left, _Quantity):
            return _quantity_times(left, right)
        if isinstance(left, _Duration):
            return _duration_times(left, right)
    raise type_mismatch("multiply")


@register("divide", (ANY,), (ANY,), returns=(ANY,), note="divisor must be non zero")
def _jp_divide(arguments: list[Any]) -> Any:
    left, right = _operands("divide", arguments)
    if isinstance(left, _Quantity):
        if isinstance(right, _Quantity):
            divisor = right.quantity.as_float()
            if divisor == 0:
                raise zero_divisor("divide")
            return normalize_number(left.quantity.as_float() / divisor)
        if isinstance(right, _Scalar):
            if right.value == 0:
                raise zero_divisor("divide")
            divisor_text = str(right.value) if isinstance(right.value, int) else go_float_g(right.value)
            scale = max(_decimal_scale(left.text), _decimal_scale(divisor_text))
            quotient = left.quantity.value / _scalar_text_fraction(right.value)
            step = Fraction(1, 10**scale) if scale >= 0 else Fraction(10 ** (-scale))
            truncated = math.trunc(quotient / step) * step
            return str(Quantity(Fraction(truncated), left.quantity.format))
    elif isinstance(left, _Duration):
        if isinstance(right, _Duration):
            divisor_seconds = _go_seconds(right.nanos)
            if divisor_seconds == 0:
                raise zero_divisor("divide")
            return normalize_number(_go_seconds(left.nanos) / divisor_seconds)
        if isinstance(right, _Scalar):
            if right.value == 0:
                raise zero_divisor("divide")
            return _duration_from_seconds(_go_seconds(left.nanos) / float(right.value))
    elif isinstance(right, _Scalar):
        if right.value == 0:
            raise zero_divisor("divide")
        return normalize_number(left.value / right.value)
    raise type_mismatch("divide")


def _require_integer(value: float) -> int:
    if math.isinf(value) or math.isnan(value) or value != int(value):
        raise generic_error("modulo", "Non-integer argument(s) passed for modulo")
    return int(value)


@register("modulo", (ANY,), (ANY,), returns=(ANY,), note="divisor must be non-zero, arguments must be integers")
def _jp_modulo(arguments: list[Any]) -> Any:
    left, right = _operands("modulo", arguments)
    if isinstance(left, _Quantity) and isinstance(right, _Quantity):
        dividend = _require_integer(left.quantity.as_float())
        divisor = _require_integer(right.quantity.as_float())
        if divisor == 0:
            raise zero_divisor("modulo")
        return str(Quantity(Fraction(_truncated_remainder(dividend, divisor)), left.quantity.format))
    if isinstance(left, _Duration) and isinstance(right, _Duration):
        if right.nanos == 0:
            raise zero_divisor("modulo")
        return format_duration(_truncated_remainder(left.nanos, right.nanos))
    if isinstance(left, _Scalar) and isinstance(right, _Scalar):
        dividend = _require_integer(float(left.value)) if isinstance(left.value, float) else left.value
        divisor = _require_integer(float(right.value)) if isinstance(right.value, float) else right.value
        if divisor == 0:
            raise zero_divisor("modulo")
        return _truncated_remainder(dividend, divisor)
    raise type_mismatch("modulo")


def _go_round(value: float) -> float:
    """``math.Round``: half away from zero (Python's round() is half to even)."""
    truncated = float(math.trunc(value))
    if abs(value - truncated) >= 0.5:
        truncated += math.copysign(1, value)
    return float(truncated)


@register("round", (NUMBER,), (NUMBER,), returns=(NUMBER,), note="does roundoff to upto the given decimal places")
def _jp_round(arguments: list[Any]) -> Any:
    number, digits = arguments
    if isinstance(digits, float):
        if math.isinf(digits) or math.isnan(digits) or digits != math.trunc(digits):
            raise generic_error("round", "Non-integer argument(s) passed for round off")
        digits = int(digits)
    if digits < 0:
        # Kyverno formats this message without its arguments; Go prints the placeholders.
        raise generic_error("round", "%!d(MISSING) argument is out of bounds (%!d(MISSING))")
    shift = math.pow(10, digits)
    return normalize_number(_go_round(float(number) * shift) / shift)
