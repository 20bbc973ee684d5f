"""Behaviour of Kyverno's cel-go runtime that policies in the wild rely on, which cel-cpp does not share.

``<non-optional>.orValue(default)``: policies write ``object.spec.volumes.orValue([])`` (no ``?.``) and Kyverno
evaluates it to the receiver itself; cel-cpp has only the optional overload and fails with "no matching
overloads".  An identity overload per non-optional kind gives the cel-go result.
"""

from __future__ import annotations

from typing import Any

from stockade.cel.functions import Library


def _identity(value: Any, _default: Any) -> Any:
    return value


def build_compat() -> Library:
    library = Library("compat")
    library.add("orValue", ("any", "any"), "dyn", _identity, member=True)
    return library
