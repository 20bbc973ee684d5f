"""Error types shared by the interpreter and the function library."""

from __future__ import annotations
from stockade.errors import StockadeError


class JMESPathError(StockadeError):
    """Any parse, evaluation or function error; ``str()`` is the message a policy author sees."""


class UnknownKeyError(JMESPathError):
    """A field lookup hit a map without that key (Kyverno's go-jmespath fork treats this as an error).

    The interpreter raises and catches this on its hot path, so construction stays cheap: the message is only
    built when somebody asks for it.
    """

    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key

    def __str__(self) -> str:
        return f'Unknown key "{self.key}" in path'

    def __repr__(self) -> str:
        return f"UnknownKeyError({self.key!r})"
