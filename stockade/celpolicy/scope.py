"""One evaluation: the CEL activation of a request plus the policy's variables, evaluated in declaration order."""

from __future__ import annotations

import re
from typing import Any, Mapping

from stockade.cel import CelActivation, CelCostLimitError, CelError, CelEvalError
from stockade.cel.rewrite import bind_once, replace_variable_references
from stockade.celpolicy.compiler import PolicyCompiler
from stockade.errors import StockadeError

_VARIABLE_REF = re.compile(r"\bvariables\.([A-Za-z_][A-Za-z0-9_]*)")
_REFERENCED_VARIABLES: dict[str, tuple[str, ...]] = {}


def _referenced_variables(expression: str) -> tuple[str, ...]:
    """Variable names an expression mentions; memoised because scanning every evaluation costs as much as a
    cheap evaluation itself."""
    names = _REFERENCED_VARIABLES.get(expression)
    if names is None:
        names = tuple(dict.fromkeys(_VARIABLE_REF.findall(expression)))
        if len(_REFERENCED_VARIABLES) < 50_000:
            _REFERENCED_VARIABLES[expression] = names
    return names


_INLINE_PREFIX = "__stk_var_"


def _inline_references(expression: str, inline: Mapping[str, str], depth: int = 0) -> str:
    """``expression`` with each ``variables.NAME`` of an inlined variable replaced by that variable's expression,
    bound once with :func:`stockade.cel.rewrite.bind_once` (its own inlined references resolved first)."""
    body, used = replace_variable_references(expression, {name: _INLINE_PREFIX + name for name in inline})
    if not used:
        return expression
    if depth > len(inline):
        raise CelEvalError("variables refer to each other in a cycle", expression)
    for name in reversed(used):
        body = bind_once(f"{_INLINE_PREFIX}{name}", _inline_references(inline[name], inline, depth + 1), body)
    return body


class ConditionError(StockadeError):
    """A match condition could not be evaluated and the failure policy is Fail."""


class Scope:
    """Values visible to a policy's expressions for one request.

    Kubernetes evaluates variables lazily; here they are evaluated in declaration order (each may use the earlier
    ones) and a failing variable only surfaces when an evaluation actually reaches it.
    """

    def __init__(self, compiler: PolicyCompiler, policy_key: str, values: Mapping[str, Any], providers: Mapping[str, Any]) -> None:
        self.compiler = compiler
        self.policy_key = policy_key
        self.values = dict(values)
        self.providers = dict(providers)
        self.values.setdefault("variables", {})
        self.variable_errors: dict[str, CelError] = {}
        # Variables whose value cannot go back into an activation (an optional, a type): later expressions get the
        # variable's expression in place of ``variables.NAME``, which evaluates to the same value.
        self.inline_variables: dict[str, str] = {}
        self._activation: CelActivation | None = None
        # The activation is current except, possibly, for ``variables``: binding variables one by one would
        # otherwise rebuild (and re-convert the whole object) before every variable that ignores the others.
        self._variables_stale = False

    def set(self, name: str, value: Any) -> None:
        self.values[name] = value
        if name == "variables" and self._activation is not None:
            self._variables_stale = True
        else:
            self._activation = None

    @property
    def activation(self) -> CelActivation:
        if self._activation is None:
            self._activation = CelActivation(self.values, self.providers)
            self._variables_stale = False
        return self._activation

    def evaluate(self, field_path: str, expression: str, *, reusable: bool = False) -> Any:
        """Compile (cached per policy) and evaluate; a reference to a failed variable reports that failure.

        ``reusable``: the result becomes a variable (see :meth:`stockade.cel.CelProgram.evaluate`)."""
        program = self.compiler.compile(self.policy_key, field_path, expression)
        if self.inline_variables and any(name in self.inline_variables for name in _referenced_variables(expression)):
            program = self.compiler.compile(
                self.policy_key, field_path, _inline_references(expression, self.inline_variables)
            )
        failed_references: list[str] = []
        if self.variable_errors:
            failed_references = [name for name in _referenced_variables(expression) if name in self.variable_errors]
        if self._variables_stale and "variables" in expression:
            self._activation = None
            self._variables_stale = False
        try:
            return program.evaluate(self.activation, reusable=reusable)
        except CelEvalError as error:
            # Failed variables are left out of ``variables``: like Kubernetes' lazy variables, a failure only
            # matters when the evaluation actually reaches it (``cond ? variables.a : variables.b``).
            if error.missing_key is not None and error.missing_key in failed_references:
                name = error.missing_key
                failed = self.variable_errors[name]
                raise CelEvalError(f"variable {name!r} failed: {failed.message}", expression) from error
            if not isinstance(error, CelCostLimitError):
                raise
            # A runaway expression is a policy-authoring problem: say which policy and field it is.
            raise CelEvalError(f"policy {self.policy_key}: {field_path}: {error.message}", expression) from error

    def bind_variables(self, variables: list[dict[str, Any]] | None, field_prefix: str = "spec.variables") -> None:
        bound: dict[str, Any] = {}
        self.set("variables", bound)
        for index, variable in enumerate(variables or []):
            name = str(variable.get("name", ""))
            expression = str(variable.get("expression", ""))
            field_path = f"{field_prefix}[{index}].expression"
            try:
                program = self.compiler.compile(self.policy_key, field_path, expression)
                if program.optional or program.type_valued:
                    self.evaluate(field_path, expression)  # a failure is the variable's, as for any other
                    self.inline_variables[name] = expression
                    continue
                value = self.evaluate(field_path, expression, reusable=True)
            except CelError as error:  # incl. compile errors: surfaced by the expressions that use the variable
                self.variable_errors[name] = error
                continue
            bound = dict(bound)
            bound[name] = value
            self.set("variables", bound)

    def conditions_hold(self, conditions: list[dict[str, Any]] | None, field_prefix: str, ignore_errors: bool = False) -> bool:
        """Kubernetes matchConditions: any false → no match; errors → no match (Ignore) or :class:`ConditionError`."""
        errors: list[str] = []
        for index, condition in enumerate(conditions or []):
            expression = str(condition.get("expression", ""))
            try:
                result = self.evaluate(f"{field_prefix}[{index}].expression", expression)
            except CelEvalError as error:
                errors.append(f"{condition.get('name') or index}: {error}")
                continue
            if not isinstance(result, bool):
                errors.append(f"{condition.get('name') or index}: expected a bool, got {type(result).__name__}")
                continue
            if not result:
                return False
        if errors:
            if ignore_errors:
                return False
            raise ConditionError("; ".join(errors))
        return True
