"""Small re-creations of Go behaviours that leak into Kyverno's JMESPath results and messages.

Kyverno evaluates JMESPath on ``interface{}`` values where every number is a float64; Python keeps ints and floats
apart, so these helpers decide truthiness, equality and text the way the Go code would.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

_HTML_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def is_number(value: Any) -> bool:
    """JSON numbers only: Python's bool is an int subclass but is a JSON boolean."""
    kind = type(value)
    return kind is int or kind is float or (kind is not bool and isinstance(value, (int, float)))


def is_false(value: Any) -> bool:
    """go-jmespath's falsiness: null, false and empty string/array/object; numbers (even 0) are true."""
    if value is None or value is False:
        return True
    if value is True:
        return False
    if isinstance(value, (str, list, dict, tuple)):
        return len(value) == 0
    return False


def deep_equal(left: Any, right: Any) -> bool:
    """``reflect.DeepEqual`` over JSON values, where 1 and 1.0 are the same float64 but true is not 1."""
    if left is right:
        return True
    left_is_bool = isinstance(left, bool)
    if left_is_bool or isinstance(right, bool):
        return left_is_bool and isinstance(right, bool) and left == right
    if is_number(left):
        return is_number(right) and left == right
    if isinstance(left, str):
        return isinstance(right, str) and left == right
    if isinstance(left, (list, tuple)):
        if not isinstance(right, (list, tuple)) or len(left) != len(right):
            return False
        return all(deep_equal(a, b) for a, b in zip(left, right))
    if isinstance(left, dict):
        if not isinstance(right, dict) or len(left) != len(right):
            return False
        for key, value in left.items():
            if key not in right or not deep_equal(value, right[key]):
                return False
        return True
    return bool(left == right)


def normalize_number(value: float | int) -> float | int:
    """Return an int when Go would print the float64 without a fraction (``2.0`` prints as ``2``)."""
    if type(value) is float and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def format_float(value: float, precision_bits: int = 64) -> str:
    """``strconv.FormatFloat(v, 'f', -1, bits)``: shortest text that round-trips, never in exponent form."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if precision_bits == 32:
        as_float32 = struct.unpack("f", struct.pack("f", value))[0]
        for digits in range(1, 10):
            candidate = float(f"{as_float32:.{digits}g}")
            if struct.unpack("f", struct.pack("f", candidate))[0] == as_float32:
                return _plain_decimal(f"{as_float32:.{digits}g}")
        return _plain_decimal(repr(as_float32))
    return _plain_decimal(repr(float(value)))


def _plain_decimal(text: str) -> str:
    """Rewrite ``1.5e-07`` as ``0.00000015`` and drop a ``.0`` tail, as Go's 'f' format does."""
    if "e" not in text and "E" not in text:
        return text[:-2] if text.endswith(".0") else text
    mantissa, exponent_text = text.lower().split("e")
    exponent = int(exponent_text)
    sign = ""
    if mantissa.startswith("-"):
        sign, mantissa = "-", mantissa[1:]
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + exponent
    if point <= 0:
        result = "0." + "0" * (-point) + digits
    elif point >= len(digits):
        result = digits + "0" * (point - len(digits))
    else:
        result = digits[:point] + "." + digits[point:]
    if "." in result:
        result = result.rstrip("0").rstrip(".")
    return sign + result


def format_float_g(value: float) -> str:
    """Go's ``%v``/``%g`` for a float64: shortest repr, exponent form for very large or small magnitudes."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    text = repr(float(value))
    mantissa, _, exponent_text = text.partition("e")
    if mantissa.endswith(".0"):
        mantissa = mantissa[:-2]
    digits = mantissa.lstrip("-").replace(".", "").lstrip("0") or "0"
    exponent = int(exponent_text) if exponent_text else _decimal_exponent(float(value))
    if exponent < -4 or exponent >= max(len(digits), 21):
        sign = "-" if value < 0 else ""
        body = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{body}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    return _plain_decimal(text)


def _decimal_exponent(value: float) -> int:
    return int(math.floor(math.log10(abs(value))))


def format_value(value: Any) -> str:
    """Go's ``fmt.Sprintf("%v", v)`` for JSON-decoded values, used inside Go-compatible error messages."""
    if value is None:
        return "<nil>"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_float_g(value)
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(format_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{key}:{format_value(value[key])}" for key in sorted(value)) + "]"
    return str(value)


def _json_float(value: float) -> str:
    """encoding/json float64 text: plain decimals between 1e-6 and 1e21, exponent form outside."""
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"json: unsupported value: {format_float_g(value)}")
    if value == 0:
        return "0" if math.copysign(1.0, value) > 0 else "-0"
    magnitude = abs(value)
    if magnitude < 1e-6 or magnitude >= 1e21:
        text = repr(float(value))
        mantissa, _, exponent_text = text.partition("e")
        if not exponent_text:
            return _plain_decimal(text)
        if mantissa.endswith(".0"):
            mantissa = mantissa[:-2]
        exponent = int(exponent_text)
        return f"{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    return _plain_decimal(repr(float(value)))


def json_marshal(value: Any) -> str:
    """``json.Marshal``: sorted keys, no spaces, HTML-safe escapes, floats without a needless ``.0``."""
    parts: list[str] = []
    _marshal_into(value, parts)
    return "".join(parts)


def _marshal_into(value: Any, parts: list[str]) -> None:
    if value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, str):
        parts.append(_json_string(value))
    elif isinstance(value, int):
        parts.append(str(value))
    elif isinstance(value, float):
        parts.append(_json_float(value))
    elif isinstance(value, (list, tuple)):
        parts.append("[")
        for index, item in enumerate(value):
            if index:
                parts.append(",")
            _marshal_into(item, parts)
        parts.append("]")
    elif isinstance(value, dict):
        parts.append("{")
        for index, key in enumerate(sorted(value, key=str)):
            if index:
                parts.append(",")
            parts.append(_json_string(str(key)))
            parts.append(":")
            _marshal_into(value[key], parts)
        parts.append("}")
    else:
        parts.append(_json_string(str(value)))


def _json_string(text: str) -> str:
    encoded = json.dumps(text, ensure_ascii=False)
    if any(character in text for character in _HTML_ESCAPES):
        for character, escape in _HTML_ESCAPES.items():
            encoded = encoded.replace(character, escape)
    return encoded


def go_type_list(types: tuple[str, ...]) -> str:
    """``%#v`` of a ``[]jmespath.JpType`` slice, as the fork prints it in type errors."""
    return "[]jmespath.JpType{" + ", ".join(f'"{name}"' for name in types) + "}"
