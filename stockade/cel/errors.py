"""Errors raised by the CEL layer; every message names the offending expression so policy authors can find it."""

from __future__ import annotations
from stockade.errors import StockadeError


class CelError(StockadeError):
    """Base class: carries the expression text and, when the backend reports one, a 1-based line/column."""

    def __init__(self, message: str, expression: str = "", line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.expression = expression
        self.line = line
        self.column = column

    def __str__(self) -> str:
        where = ""
        if self.line is not None and self.column is not None:
            where = f" at {self.line}:{self.column}"
        if not self.expression:
            return self.message
        return f"{self.message} (expression {self.expression!r}{where})"


class CelCompileError(CelError):
    """Syntax errors, type errors and references to unknown functions or variables."""


class CelEvalError(CelError):
    """Runtime failures: missing keys, division by zero, failing library calls, cost limits.

    ``missing_key`` names the map key a lookup did not find, so callers (failed-variable reporting) need not read
    the message.
    """

    missing_key: str | None = None


class CelCostLimitError(CelEvalError):
    """An evaluation stopped by a runtime budget (cel-cpp's comprehension iteration limit, the evaluation time limit);
    the policy layer treats it like any evaluation error, so the policy's failurePolicy decides."""
