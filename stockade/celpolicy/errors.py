"""Errors that name the policy, the expression's place in it, and the position inside the expression."""

from __future__ import annotations

from stockade.cel import CelError


class PolicyCompileError(Exception):
    """An expression of a policy failed to compile (syntax, types, unknown function or variable)."""

    def __init__(self, policy: str, field_path: str, error: CelError) -> None:
        self.policy = policy
        self.field_path = field_path
        self.error = error
        where = ""
        if error.line is not None and error.column is not None:
            where = f" at line {error.line}, column {error.column}"
        super().__init__(f"policy {policy}: {field_path}: {error.message}{where} (expression {error.expression!r})")
