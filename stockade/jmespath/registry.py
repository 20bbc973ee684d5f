"""The function table: one process-wide dict, filled at import time, checked the way go-jmespath checks arguments."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stockade.jmespath.errors import JMESPathError
from stockade.gofmt import go_sprint
from stockade.jmespath.golang import go_type_list, is_number

Handler = Callable[[list[Any]], Any]

NUMBER = "number"
STRING = "string"
ARRAY = "array"
OBJECT = "object"
ARRAY_NUMBER = "array[number]"
ARRAY_STRING = "array[string]"
EXPREF = "expref"
ANY = "any"


class ExpRef:
    """An ``&expression`` argument: calling it evaluates the expression against one value."""

    __slots__ = ("evaluate",)

    def __init__(self, evaluate: Callable[[Any], Any]) -> None:
        self.evaluate = evaluate

    def __call__(self, value: Any) -> Any:
        return self.evaluate(value)


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    name: str
    arguments: tuple[tuple[str, ...], ...]
    handler: Handler
    variadic: bool = False
    returns: tuple[str, ...] = (ANY,)
    note: str = ""

    def signature(self) -> str:
        """``name(type, type|type) return (note)``, as ``kyverno jp function`` lists it."""
        arguments = ", ".join("|".join(types) for types in self.arguments)
        if self.variadic:
            arguments += ", ..."
        text = f"{self.name}({arguments}) {','.join(self.returns)}"
        return f"{text} ({self.note})" if self.note else text


FUNCTIONS: dict[str, FunctionSpec] = {}

MAX_RESULT_GROWTH = 1 << 20
"""A string-building function (join, replace, regex_replace_all, random...) may return at most 1 MiB more than the
combined size of its arguments: nesting such calls could otherwise turn a small resource into gigabytes."""


class ResultTooLargeError(JMESPathError):
    """A function would build a string past ``MAX_RESULT_GROWTH``."""


def check_result_size(function: str, size: int, input_size: int) -> None:
    """Raise before (or instead of) building a string of ``size`` characters from ``input_size`` characters."""
    if size > input_size + MAX_RESULT_GROWTH:
        raise ResultTooLargeError(
            f"JMESPath function '{function}': result of {size} characters exceeds the limit of {MAX_RESULT_GROWTH} "
            "characters beyond its arguments"
        )


def register(
    name: str,
    *arguments: tuple[str, ...],
    variadic: bool = False,
    returns: tuple[str, ...] = (ANY,),
    note: str = "",
) -> Callable[[Handler], Handler]:
    """Add a handler to the table; a later registration replaces an earlier one (Kyverno overrides ``sum``)."""

    def decorate(handler: Handler) -> Handler:
        FUNCTIONS[name] = FunctionSpec(name, tuple(arguments), handler, variadic, returns, note)
        return handler

    return decorate


def _matches(types: tuple[str, ...], value: Any) -> bool:
    for expected in types:
        if expected == ANY:
            return True
        if expected == STRING:
            if isinstance(value, str):
                return True
        elif expected == NUMBER:
            if is_number(value):
                return True
        elif expected == ARRAY:
            if isinstance(value, (list, tuple)):
                return True
        elif expected == OBJECT:
            if isinstance(value, dict):
                return True
        elif expected == ARRAY_NUMBER:
            if isinstance(value, (list, tuple)) and all(is_number(item) for item in value):
                return True
        elif expected == ARRAY_STRING:
            if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
                return True
        elif expected == EXPREF:
            if isinstance(value, ExpRef):
                return True
    return False


def call_function(name: str, arguments: list[Any]) -> Any:
    spec = FUNCTIONS.get(name)
    if spec is None:
        raise JMESPathError(f"unknown function: {name}")
    expected = spec.arguments
    if expected:
        if spec.variadic:
            if len(arguments) < len(expected):
                raise JMESPathError("Invalid arity.")
        else:
            if len(arguments) != len(expected):
                raise JMESPathError("incorrect number of args")
            for types, value in zip(expected, arguments):
                if not _matches(types, value):
                    raise JMESPathError(
                        f"Invalid type for: {go_sprint(value)}, expected: {go_type_list(types)}"
                    )
    elif arguments:
        # Kyverno's zero-argument functions (time_now) ignore extra arguments, as the fork does.
        pass
    return spec.handler(arguments)


def function_names() -> list[str]:
    return sorted(FUNCTIONS)


# ----------------------------------------------------------------------------------------------------------------
# Kyverno's error texts (pkg/engine/jmespath/error.go), shared by the custom function modules.


def argument_type_error(function: str, position: int, type_name: str) -> JMESPathError:
    return JMESPathError(f"JMESPath function '{function}': argument #{position} is not of type {type_name}")


def generic_error(function: str, message: str) -> JMESPathError:
    return JMESPathError(f"JMESPath function '{function}': {message}")


def type_mismatch(function: str) -> JMESPathError:
    return generic_error(function, "Types mismatch")


def zero_divisor(function: str) -> JMESPathError:
    return generic_error(function, "Zero divisor passed")


def string_argument(function: str, arguments: list[Any], index: int) -> str:
    """Kyverno's ``validateArg(..., reflect.String)``: positions in messages are 1-based."""
    if index >= len(arguments):
        raise generic_error(function, f"{index + 1} argument is out of bounds ({len(arguments)})")
    value = arguments[index]
    if not isinstance(value, str):
        raise argument_type_error(function, index + 1, "string")
    return value


def number_argument(function: str, arguments: list[Any], index: int) -> int | float:
    if index >= len(arguments):
        raise generic_error(function, f"{index + 1} argument is out of bounds ({len(arguments)})")
    value = arguments[index]
    if not is_number(value):
        raise argument_type_error(function, index + 1, "float64")
    number: int | float = value
    return number
