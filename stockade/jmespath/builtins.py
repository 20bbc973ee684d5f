"""The standard JMESPath functions as go-jmespath implements them (messages, null results and all)."""

from __future__ import annotations

import math
import re
from typing import Any

from stockade.jmespath.errors import JMESPathError
from stockade.gofmt import go_sprint
from stockade.jmespath.golang import deep_equal, go_type_list, is_number, json_marshal, normalize_number
from stockade.jmespath.registry import (
    ANY,
    ARRAY,
    ARRAY_NUMBER,
    ARRAY_STRING,
    EXPREF,
    NUMBER,
    OBJECT,
    STRING,
    ExpRef,
    check_result_size,
    register,
)

# Go's strconv.ParseFloat grammar (decimal and the special words); Python's float() is more lenient.
_GO_FLOAT = re.compile(r"^[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[iI][nN][fF](?:[iI][nN][iI][tT][yY])?|[nN][aA][nN])$")


@register("abs", (NUMBER,), returns=(NUMBER,))
def _abs(arguments: list[Any]) -> Any:
    return abs(arguments[0])


@register("avg", (ARRAY_NUMBER,), returns=(NUMBER,))
def _avg(arguments: list[Any]) -> Any:
    items = arguments[0]
    if not items:
        # Go divides 0 by 0 here and gets NaN, which no JSON document can carry.
        return None
    return normalize_number(sum(float(item) for item in items) / len(items))


@register("ceil", (NUMBER,), returns=(NUMBER,))
def _ceil(arguments: list[Any]) -> Any:
    return math.ceil(arguments[0])


@register("floor", (NUMBER,), returns=(NUMBER,))
def _floor(arguments: list[Any]) -> Any:
    return math.floor(arguments[0])


@register("contains", (ARRAY, STRING), (ANY,), returns=("boolean",))
def _contains(arguments: list[Any]) -> Any:
    subject, element = arguments
    if isinstance(subject, str):
        return isinstance(element, str) and element in subject
    return any(deep_equal(item, element) for item in subject)


@register("starts_with", (STRING,), (STRING,), returns=("boolean",))
def _starts_with(arguments: list[Any]) -> Any:
    return arguments[0].startswith(arguments[1])


@register("ends_with", (STRING,), (STRING,), returns=("boolean",))
def _ends_with(arguments: list[Any]) -> Any:
    return arguments[0].endswith(arguments[1])


@register("join", (STRING,), (ARRAY_STRING,), returns=(STRING,))
def _join(arguments: list[Any]) -> Any:
    separator, items = arguments[0], arguments[1]
    content = sum(map(len, items))
    check_result_size("join", content + len(separator) * max(len(items) - 1, 0), content + len(separator))
    return separator.join(items)


@register("keys", (OBJECT,), returns=(ARRAY,))
def _keys(arguments: list[Any]) -> Any:
    return list(arguments[0])


@register("values", (OBJECT,), returns=(ARRAY,))
def _values(arguments: list[Any]) -> Any:
    return list(arguments[0].values())


@register("length", (STRING, ARRAY, OBJECT), returns=(NUMBER,))
def _length(arguments: list[Any]) -> Any:
    return len(arguments[0])


@register("map", (EXPREF,), (ARRAY,), returns=(ARRAY,))
def _map(arguments: list[Any]) -> Any:
    expression: ExpRef = arguments[0]
    return [expression(item) for item in arguments[1]]


def _extreme(items: list[Any], pick_larger: bool) -> Any:
    if not items:
        return None
    best = items[0]
    for item in items[1:]:
        if (item > best) if pick_larger else (item < best):
            best = item
    return best


@register("max", (ARRAY_NUMBER, ARRAY_STRING), returns=(NUMBER, STRING))
def _max(arguments: list[Any]) -> Any:
    return _extreme(list(arguments[0]), pick_larger=True)


@register("min", (ARRAY_NUMBER, ARRAY_STRING), returns=(NUMBER, STRING))
def _min(arguments: list[Any]) -> Any:
    return _extreme(list(arguments[0]), pick_larger=False)


def _extreme_by(items: list[Any], expression: ExpRef, pick_larger: bool) -> Any:
    if not items:
        return None
    if len(items) == 1:
        return items[0]
    best_key = expression(items[0])
    if is_number(best_key):
        wanted, message = is_number, "invalid type, must be number"
    elif isinstance(best_key, str):
        wanted, message = (lambda value: isinstance(value, str)), "invalid type, must be string"
    else:
        raise JMESPathError("invalid type, must be number of string")
    best_item = items[0]
    for item in items[1:]:
        key = expression(item)
        if not wanted(key):
            raise JMESPathError(message)
        if (key > best_key) if pick_larger else (key < best_key):
            best_key, best_item = key, item
    return best_item


@register("max_by", (ARRAY,), (EXPREF,), returns=(ANY,))
def _max_by(arguments: list[Any]) -> Any:
    return _extreme_by(list(arguments[0]), arguments[1], pick_larger=True)


@register("min_by", (ARRAY,), (EXPREF,), returns=(ANY,))
def _min_by(arguments: list[Any]) -> Any:
    return _extreme_by(list(arguments[0]), arguments[1], pick_larger=False)


@register("merge", (OBJECT,), variadic=True, returns=(OBJECT,))
def _merge(arguments: list[Any]) -> Any:
    merged: dict[str, Any] = {}
    for argument in arguments:
        if not isinstance(argument, dict):
            raise JMESPathError(f"Invalid type for: {go_sprint(argument)}, expected: {go_type_list((OBJECT,))}")
        merged.update(argument)
    return merged


@register("not_null", (ANY,), variadic=True, returns=(ANY,))
def _not_null(arguments: list[Any]) -> Any:
    for argument in arguments:
        if argument is not None:
            return argument
    return None


@register("reverse", (ARRAY, STRING), returns=(ARRAY, STRING))
def _reverse(arguments: list[Any]) -> Any:
    subject = arguments[0]
    if isinstance(subject, str):
        return subject[::-1]
    return list(reversed(subject))


@register("sort", (ARRAY_STRING, ARRAY_NUMBER), returns=(ARRAY,))
def _sort(arguments: list[Any]) -> Any:
    return sorted(arguments[0])


@register("sort_by", (ARRAY,), (EXPREF,), returns=(ARRAY,))
def _sort_by(arguments: list[Any]) -> Any:
    items = list(arguments[0])
    expression: ExpRef = arguments[1]
    if len(items) < 2:
        return items
    keys = [expression(item) for item in items]
    if is_number(keys[0]):
        valid = all(is_number(key) for key in keys)
    elif isinstance(keys[0], str):
        valid = all(isinstance(key, str) for key in keys)
    else:
        raise JMESPathError("invalid type, must be number of string")
    if not valid:
        raise JMESPathError("error in sort_by comparison")
    order = sorted(range(len(items)), key=keys.__getitem__)
    return [items[position] for position in order]


@register("to_array", (ANY,), returns=(ARRAY,))
def _to_array(arguments: list[Any]) -> Any:
    value = arguments[0]
    if isinstance(value, list):
        return value
    return [value]


@register("to_string", (ANY,), returns=(STRING,))
def _to_string(arguments: list[Any]) -> Any:
    value = arguments[0]
    if isinstance(value, str):
        return value
    try:
        return json_marshal(value)
    except ValueError as error:
        raise JMESPathError(str(error)) from None


@register("to_number", (ANY,), returns=(NUMBER,))
def _to_number(arguments: list[Any]) -> Any:
    value = arguments[0]
    if is_number(value):
        return value
    if isinstance(value, str):
        if not _GO_FLOAT.match(value):
            return None
        number = float(value)
        if math.isinf(number) and "inf" not in value.lower():
            return None  # out of range: ParseFloat reports an error
        return normalize_number(number)
    return None


@register("type", (ANY,), returns=(STRING,))
def _type(arguments: list[Any]) -> Any:
    value = arguments[0]
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if is_number(value):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    raise JMESPathError("unknown type")
