"""Backend-independent declarations of library functions.

Libraries describe their overloads with plain type names so that a second backend (e.g. pure-Python ``celpy``)
could register the same implementations.  Type names: ``string int uint double bool bytes null list map dyn
timestamp duration``, ``opaque`` and ``any``.  ``opaque`` is the result of a function giving a value of an opaque CEL
type (Quantity, IP, URL, Semver, ...), which this package carries as a tagged map (see ``TYPE_KEY``); cel-go's checker
treats opaque types as nullable (``quantity(q) == null`` compiles), which a map type is not, so backends declare it
as ``dyn``.  ``any`` stands for "every concrete kind"; backends that cannot guard against
optional values reaching Python (cel-expr-python crashes on that) expand it into one overload per kind instead of
declaring ``dyn``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

ANY_KINDS: tuple[str, ...] = ("bool", "int", "uint", "double", "string", "bytes", "list", "map")

# Marker key of the maps that stand in for Kubernetes' opaque CEL types (Quantity, IP, URL, ...), because
# cel-expr-python cannot declare opaque types from Python.
TYPE_KEY = "__stockade_cel_type__"


@dataclass(frozen=True)
class Overload:
    """One signature of a function. ``params`` includes the receiver for member overloads."""

    overload_id: str
    params: tuple[str, ...]
    result: str
    impl: Callable[..., Any] | None = None
    member: bool = False


@dataclass
class Function:
    """A named function with its overloads; ``impl is None`` means the caller supplies it per activation."""

    name: str
    overloads: list[Overload] = field(default_factory=list)


@dataclass
class Library:
    """A named group of functions that a :class:`~stockade.cel.CelEnvironment` can include."""

    name: str
    functions: list[Function] = field(default_factory=list)

    def add(
        self,
        name: str,
        params: Sequence[str],
        result: str,
        impl: Callable[..., Any] | None,
        *,
        member: bool = False,
        overload_id: str | None = None,
    ) -> None:
        """Append an overload to ``name``, creating the function on first use."""
        suffix = "_".join(params) or "void"
        identifier = overload_id or f"{self.name}:{name}:{'member' if member else 'global'}:{suffix}"
        for function in self.functions:
            if function.name == name:
                function.overloads.append(Overload(identifier, tuple(params), result, impl, member))
                return
        self.functions.append(Function(name, [Overload(identifier, tuple(params), result, impl, member)]))


def tagged(type_name: str, value: Any) -> dict[str, Any]:
    """Build the map that represents an opaque value such as a Quantity inside CEL."""
    return {TYPE_KEY: type_name, "value": value}


def tag_of(candidate: Any) -> str | None:
    """Return the opaque type name of a tagged map, or None for ordinary values."""
    if isinstance(candidate, dict):
        name = candidate.get(TYPE_KEY)
        if isinstance(name, str):
            return name
    return None


def untag(candidate: Any, type_name: str) -> Any:
    """Return the payload of a tagged map of the expected type; raise the CEL-style overload error otherwise."""
    if tag_of(candidate) != type_name:
        raise TypeError(f"no such overload: expected {type_name}, got {describe(candidate)}")
    return candidate["value"]


def describe(value: Any) -> str:
    """Name the CEL type of a Python value for error messages."""
    tag = tag_of(value)
    if tag:
        return tag
    if value is None:
        return "null_type"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__
