"""Errors that name the policy, the expression's place in it, and the position inside the expression."""

from __future__ import annotations

from stockade.cel import CelCompileError, CelError


class PolicyCompileError(CelCompileError):
    """An expression of a policy failed to compile (syntax, types, unknown function or variable).

    It is a :class:`CelCompileError`, so evaluators that report CEL failures as rule errors report this one too,
    with a message that already names the policy, the field path and the line/column.
    """

    def __init__(self, policy: str, field_path: str, error: CelError) -> None:
        self.policy = policy
        self.field_path = field_path
        self.error = error
        where = ""
        if error.line is not None and error.column is not None:
            where = f" at line {error.line}, column {error.column}"
        text = f"policy {policy}: {field_path}: {error.message}{where} (expression {error.expression!r})"
        super().__init__(text, error.expression, error.line, error.column)

    def __str__(self) -> str:
        return self.message
