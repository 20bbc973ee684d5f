"""Small re-creations of Go behaviours that leak into Kyverno's JMESPath results and messages.

Kyverno evaluates JMESPath on ``interface{}`` values where every number is a float64; Python keeps ints and floats
apart, so these helpers decide truthiness, equality and text the way the Go code would.
"""

from __future__ import annotations

import json
import math
from typing import Any

from stockade.gofmt import go_float_e, go_float_f, go_float_g

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


def _json_float(value: float) -> str:
    """encoding/json float64 text: plain decimals between 1e-6 and 1e21, exponent form outside."""
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"json: unsupported value: {go_float_g(value)}")
    magnitude = abs(value)
    if magnitude == 0 or 1e-6 <= magnitude < 1e21:
        return go_float_f(value)
    text = go_float_e(value, "e")
    # encoding/json shortens a two-digit negative exponent: 1e-07 becomes 1e-7 (positive ones stay e+21)
    if len(text) >= 4 and text[-4:-1] == "e-0":
        text = text[:-2] + text[-1]
    return text


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
