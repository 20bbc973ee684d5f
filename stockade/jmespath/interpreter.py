"""Kyverno's JMESPath dialect: the reference grammar evaluated with the missing-key rules of kyverno/go-jmespath.

The reference ``jmespath`` package parses; evaluation is ours. Each AST is compiled once into nested Python
closures (no per-node dispatch at search time), and compiled expressions are cached by their text because policies
reuse the same few hundred expressions on every admission request.

Missing keys, as the fork's tree interpreter handles them:

* a field lookup on a map that lacks the key raises ``UnknownKeyError``; on null or any non-map it yields null;
* sub-expressions (``a.b``) and index expressions (``a[0]``) propagate the error;
* ``||`` (both sides), comparators (both sides), ``!``, the left side of ``&&``, function arguments, multi-select
  entries, pipe stages, projection bodies, filter conditions and expression references turn it into null;
* the right side of ``&&`` propagates it;
* the left side of flatten, filter projections and ``*`` value projections swallows *any* error into null, while the
  left side of a ``[*]`` projection swallows only the missing key.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from jmespath import exceptions as jp_exceptions
from jmespath.parser import Parser

from stockade.jmespath.errors import JMESPathError, UnknownKeyError
from stockade.jmespath.registry import ExpRef, call_function
from stockade.jmespath.golang import deep_equal, is_false, is_number

Evaluator = Callable[[Any], Any]

_CACHE_LIMIT = 20_000


class CompiledExpression:
    """A parsed and compiled expression, safe to share between threads."""

    __slots__ = ("expression", "_evaluate")

    def __init__(self, expression: str, evaluate: Evaluator) -> None:
        self.expression = expression
        self._evaluate = evaluate

    def search(self, data: Any) -> Any:
        try:
            return self._evaluate(data)
        except JMESPathError:
            raise
        except RecursionError as error:
            raise JMESPathError(f"expression too deeply nested: {self.expression}") from error

    def __repr__(self) -> str:
        return f"CompiledExpression({self.expression!r})"


_cache: dict[str, CompiledExpression] = {}
_cache_lock = threading.Lock()


def compile_expression(expression: str) -> CompiledExpression:
    """Parse and compile once per distinct text; later calls return the cached object."""
    compiled = _cache.get(expression)
    if compiled is not None:
        return compiled
    if not isinstance(expression, str):
        raise JMESPathError(f"expression must be a string, got {type(expression).__name__}")
    try:
        tree = Parser().parse(expression).parsed
    except jp_exceptions.JMESPathError as error:
        raise JMESPathError(_syntax_message(error)) from None
    compiled = CompiledExpression(expression, _compile(tree))
    with _cache_lock:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()
        _cache[expression] = compiled
    return compiled


def search(expression: str, data: Any) -> Any:
    return compile_expression(expression).search(data)


def _syntax_message(error: Exception) -> str:
    message = getattr(error, "msg", None) or str(error)
    return f"SyntaxError: {message}"


# --------------------------------------------------------------------------------------------------------------
# Compilation: one builder per node type, each returning a closure over its compiled children.


def _compile(node: dict[str, Any]) -> Evaluator:
    builder = _BUILDERS.get(node["type"])
    if builder is None:
        raise JMESPathError(f"Unknown AST node: {node['type']}")
    return builder(node)


def _null_on_missing(evaluate: Evaluator) -> Evaluator:
    """Wrap a child whose missing-key error the fork turns into null."""

    def guarded(value: Any) -> Any:
        try:
            return evaluate(value)
        except UnknownKeyError:
            return None

    return guarded


def _null_on_error(evaluate: Evaluator) -> Evaluator:
    """Wrap a child whose every error the fork turns into null (left side of flatten and filters)."""

    def guarded(value: Any) -> Any:
        try:
            return evaluate(value)
        except JMESPathError:
            return None

    return guarded


def _build_field(node: dict[str, Any]) -> Evaluator:
    key = node["value"]

    def field(value: Any) -> Any:
        if isinstance(value, dict):
            try:
                return value[key]
            except KeyError:
                raise UnknownKeyError(key) from None
        return None

    return field


def _build_chain(node: dict[str, Any]) -> Evaluator:
    children = node["children"]
    if all(child["type"] == "field" for child in children):
        return _field_chain(tuple(child["value"] for child in children))
    steps = tuple(_compile(child) for child in children)
    if len(steps) == 2:
        first, second = steps

        def pair(value: Any) -> Any:
            return second(first(value))

        return pair

    def chain(value: Any) -> Any:
        for step in steps:
            value = step(value)
        return value

    return chain


def _field_chain(keys: tuple[str, ...]) -> Evaluator:
    """Fast path for ``a.b.c``: once a non-map is reached every later lookup is null."""

    def lookup(value: Any) -> Any:
        for key in keys:
            if not isinstance(value, dict):
                return None
            try:
                value = value[key]
            except KeyError:
                raise UnknownKeyError(key) from None
        return value

    return lookup


def _build_index(node: dict[str, Any]) -> Evaluator:
    position = node["value"]

    def index(value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            try:
                return value[position]
            except IndexError:
                return None
        return None

    return index


def _build_slice(node: dict[str, Any]) -> Evaluator:
    start, stop, step = node["children"]
    if step == 0:
        raise JMESPathError("Invalid slice, step cannot be 0")
    bounds = slice(start, stop, step)

    def slicer(value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return list(value[bounds])
        return None

    return slicer


def _build_projection(node: dict[str, Any]) -> Evaluator:
    left = _null_on_missing(_compile(node["children"][0]))
    right_node = node["children"][1]
    if right_node["type"] == "identity":

        def identity_projection(value: Any) -> Any:
            base = left(value)
            if not isinstance(base, (list, tuple)):
                return None
            return [element for element in base if element is not None]

        return identity_projection
    right = _compile(right_node)

    def projection(value: Any) -> Any:
        base = left(value)
        if not isinstance(base, (list, tuple)):
            return None
        collected = []
        for element in base:
            try:
                current = right(element)
            except UnknownKeyError:
                continue
            if current is not None:
                collected.append(current)
        return collected

    return projection


def _build_value_projection(node: dict[str, Any]) -> Evaluator:
    left = _null_on_error(_compile(node["children"][0]))
    right = _compile(node["children"][1])

    def value_projection(value: Any) -> Any:
        base = left(value)
        if not isinstance(base, dict):
            return None
        collected = []
        for element in base.values():
            try:
                current = right(element)
            except UnknownKeyError:
                continue
            if current is not None:
                collected.append(current)
        return collected

    return value_projection


def _build_filter_projection(node: dict[str, Any]) -> Evaluator:
    left_node, right_node, condition_node = node["children"]
    left = _null_on_error(_compile(left_node))
    right = _compile(right_node)
    condition = _compile(condition_node)
    right_is_identity = right_node["type"] == "identity"

    def filter_projection(value: Any) -> Any:
        base = left(value)
        if not isinstance(base, (list, tuple)):
            return None
        collected = []
        for element in base:
            try:
                keep = condition(element)
            except UnknownKeyError:
                continue
            if is_false(keep):
                continue
            if right_is_identity:
                current = element
            else:
                try:
                    current = right(element)
                except UnknownKeyError:
                    continue
            if current is not None:
                collected.append(current)
        return collected

    return filter_projection


def _build_flatten(node: dict[str, Any]) -> Evaluator:
    left = _null_on_error(_compile(node["children"][0]))

    def flatten(value: Any) -> Any:
        base = left(value)
        if not isinstance(base, (list, tuple)):
            return None
        flattened: list[Any] = []
        for element in base:
            if isinstance(element, (list, tuple)):
                flattened.extend(element)
            else:
                flattened.append(element)
        return flattened

    return flatten


def _build_identity(node: dict[str, Any]) -> Evaluator:
    def identity(value: Any) -> Any:
        return value

    return identity


def _build_literal(node: dict[str, Any]) -> Evaluator:
    constant = node["value"]

    def literal(value: Any) -> Any:
        return constant

    return literal


_ORDERING: dict[str, Callable[[Any, Any], bool]] = {
    "lt": lambda left, right: left < right,
    "lte": lambda left, right: left <= right,
    "gt": lambda left, right: left > right,
    "gte": lambda left, right: left >= right,
}


def _build_comparator(node: dict[str, Any]) -> Evaluator:
    left = _null_on_missing(_compile(node["children"][0]))
    right = _null_on_missing(_compile(node["children"][1]))
    operator = node["value"]
    if operator == "eq":

        def equal(value: Any) -> Any:
            return deep_equal(left(value), right(value))

        return equal
    if operator == "ne":

        def not_equal(value: Any) -> Any:
            return not deep_equal(left(value), right(value))

        return not_equal
    compare = _ORDERING[operator]

    def ordering(value: Any) -> Any:
        left_value = left(value)
        right_value = right(value)
        if not is_number(left_value) or not is_number(right_value):
            return None
        return compare(left_value, right_value)

    return ordering


def _build_or(node: dict[str, Any]) -> Evaluator:
    left = _null_on_missing(_compile(node["children"][0]))
    right = _null_on_missing(_compile(node["children"][1]))

    def or_expression(value: Any) -> Any:
        matched = left(value)
        if is_false(matched):
            return right(value)
        return matched

    return or_expression


def _build_and(node: dict[str, Any]) -> Evaluator:
    left = _null_on_missing(_compile(node["children"][0]))
    right = _compile(node["children"][1])

    def and_expression(value: Any) -> Any:
        matched = left(value)
        if is_false(matched):
            return matched
        return right(value)

    return and_expression


def _build_not(node: dict[str, Any]) -> Evaluator:
    operand = _null_on_missing(_compile(node["children"][0]))

    def not_expression(value: Any) -> Any:
        return is_false(operand(value))

    return not_expression


def _build_pipe(node: dict[str, Any]) -> Evaluator:
    stages = tuple(_null_on_missing(_compile(child)) for child in node["children"])

    def pipe(value: Any) -> Any:
        for stage in stages:
            value = stage(value)
        return value

    return pipe


def _build_multi_select_list(node: dict[str, Any]) -> Evaluator:
    items = tuple(_null_on_missing(_compile(child)) for child in node["children"])

    def multi_select_list(value: Any) -> Any:
        if value is None:
            return None
        return [item(value) for item in items]

    return multi_select_list


def _build_multi_select_dict(node: dict[str, Any]) -> Evaluator:
    entries = tuple(
        (child["value"], _null_on_missing(_compile(child["children"][0]))) for child in node["children"]
    )

    def multi_select_dict(value: Any) -> Any:
        if value is None:
            return None
        return {key: entry(value) for key, entry in entries}

    return multi_select_dict


def _build_expref(node: dict[str, Any]) -> Evaluator:
    reference = ExpRef(_null_on_missing(_compile(node["children"][0])))

    def expref(value: Any) -> Any:
        return reference

    return expref


def _build_function(node: dict[str, Any]) -> Evaluator:
    name = node["value"]
    arguments = tuple(_null_on_missing(_compile(child)) for child in node["children"])

    def function(value: Any) -> Any:
        return call_function(name, [argument(value) for argument in arguments])

    return function


_BUILDERS: dict[str, Callable[[dict[str, Any]], Evaluator]] = {
    "field": _build_field,
    "subexpression": _build_chain,
    "index_expression": _build_chain,
    "index": _build_index,
    "slice": _build_slice,
    "projection": _build_projection,
    "value_projection": _build_value_projection,
    "filter_projection": _build_filter_projection,
    "flatten": _build_flatten,
    "identity": _build_identity,
    "current": _build_identity,
    "literal": _build_literal,
    "comparator": _build_comparator,
    "or_expression": _build_or,
    "and_expression": _build_and,
    "not_expression": _build_not,
    "pipe": _build_pipe,
    "multi_select_list": _build_multi_select_list,
    "multi_select_dict": _build_multi_select_dict,
    "expref": _build_expref,
    "function_expression": _build_function,
}
