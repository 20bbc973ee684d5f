"""A policy's validations and the variables they use as one CEL program, so variables never leave CEL.

Evaluated one expression at a time (:class:`stockade.celpolicy.scope.Scope`), every variable's value crosses into
Python, converted node by node, and back into the activation of the next expression; for a list of containers
that costs more than the evaluations themselves.  cel-expr-python takes none of its own values back (neither in an
activation nor as a function result), so the variables stay in CEL by being bound inside one program instead:

    [[V0, V1]].map(__stk_level_0,
      [[V2]].map(__stk_level_1,
        math.least([(E0) ? 3 : 0, (E1) ? 3 : 1, (E2) ? 3 : 2, 3])
      )[0]
    )[0]

Variables are grouped by how deep they depend on one another (a level-0 variable uses none, a level-1 variable only
level-0 ones, ...), one binding per level, which keeps the nesting within cel-cpp's recursion limit; only variables a
validation reaches (directly or through another variable) are bound.  ``variables.NAME`` becomes
``__stk_level_L[K]``, substituted where the one-expression path resolves it: an optional- or type-valued variable's
reference before the source rewrites (as that path inlines those, see ``Scope.inline_variables``), every other after.
The result is the index of the first validation that is false, or the count when all hold.

The program only says where the first failure is when nothing went wrong.  Any error (a failing variable, a
validation that errors or is not a bool, cel-cpp's iteration budget or the time limit, which now cover all
validations together) leaves the request to the one-expression path, which reports it with its usual wording, so
results never differ.  Policies the program cannot express exactly are not chained: a ``variables`` use other than
``variables.NAME`` of a declared, earlier variable (``variables[k]``, ``has(variables.x)``, a name bound in a macro),
duplicate names, a provider call (``resource.Get``, ``http``, ``generator.Apply``, image verification: evaluating
twice would repeat it), an expression that does not compile on its own, or a program over the recursion limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from stockade.cel import CelActivation, CelCompileError, CelError, CelProgram
from stockade.cel.providers import PROVIDER_IDENTIFIERS
from stockade.cel.rewrite import Token, bind_once, replace_variable_references, tokenize
from stockade.errors import StockadeError

if TYPE_CHECKING:
    from stockade.celpolicy.compiler import PolicyCompiler

_LEVEL_PREFIX = "__stk_level_"


@dataclass(frozen=True)
class ValidationChain:
    """The compiled program of one policy variant's validations (see the module docstring)."""

    program: CelProgram
    count: int

    def first_failure(self, activation: CelActivation) -> int | None:
        """The index of the first false validation, None when all hold; :class:`CelError` when the program failed
        (the caller then evaluates expression by expression)."""
        result = self.program.evaluate(activation)
        if not isinstance(result, int) or isinstance(result, bool) or result < 0:
            raise CelCompileError(f"validation chain returned {result!r}", self.program.expression)
        return None if result >= self.count else result


class _Ineligible(StockadeError):
    """The policy cannot be chained; the one-expression path evaluates it."""


def _significant(expression: str) -> list[Token]:
    return [token for token in tokenize(expression) if token.kind not in ("space", "comment")]


def _references(expression: str, declared: Sequence[str]) -> list[str]:
    """Declared variable names ``expression`` reads as ``variables.NAME``; :class:`_Ineligible` for any other use
    of ``variables`` or a provider identifier."""
    tokens = _significant(expression)
    found: list[str] = []
    for index, token in enumerate(tokens):
        if token.kind != "ident" or (index > 0 and tokens[index - 1].text == "."):
            continue
        if token.text in PROVIDER_IDENTIFIERS:
            raise _Ineligible(f"calls a provider ({token.text})")
        if token.text != "variables":
            continue
        if index + 2 >= len(tokens) or tokens[index + 1].text != "." or tokens[index + 2].kind != "ident":
            raise _Ineligible("uses variables other than variables.NAME")
        if tokens[index + 2].text not in declared:
            raise _Ineligible(f"reads an undeclared variable {tokens[index + 2].text}")
        if index >= 2 and tokens[index - 1].text == "(" and tokens[index - 2].text == "has":
            raise _Ineligible("tests a variable with has()")
        if tokens[index + 2].text not in found:
            found.append(tokens[index + 2].text)
    return found


def _substitute(source: str, replacements: dict[str, str]) -> str:
    """``source`` without comments and with each ``variables.NAME`` named in ``replacements`` replaced."""
    return replace_variable_references(source, replacements, keep_comments=False)[0]


def build_chain(
    compiler: PolicyCompiler,
    policy_key: str,
    variables: Sequence[Any],
    validations: Sequence[Any],
    variables_prefix: str = "spec.variables",
) -> ValidationChain | None:
    """The chained program for these variables and validations, or None when the policy cannot be chained."""
    try:
        return _build(compiler, policy_key, variables, validations, variables_prefix)
    except (_Ineligible, CelError):
        return None


def _build(compiler: PolicyCompiler, policy_key: str, variables: Sequence[Any], validations: Sequence[Any],
           variables_prefix: str) -> ValidationChain | None:
    if not validations or not all(isinstance(item, dict) for item in (*variables, *validations)):
        return None
    names = [str(variable.get("name", "")) for variable in variables]
    expressions = [str(variable.get("expression", "")) for variable in variables]
    if len(set(names)) != len(names):
        raise _Ineligible("duplicate variable names")
    checks = [str(validation.get("expression", "")) for validation in validations]
    environment = compiler.environment
    if "ext.math" not in environment.libraries:
        return None
    check_programs = [compiler.compile(policy_key, f"spec.validations[{index}].expression", expression)
                      for index, expression in enumerate(checks)]
    if any(program.optional or program.type_valued for program in check_programs):
        return None

    # Which variables the validations reach, and how deep each depends on the others.
    references: dict[str, list[str]] = {}
    inline: set[str] = set()
    levels: dict[str, int] = {}

    def visit(name: str) -> int:
        if name in levels:
            return levels[name]
        index = names.index(name)
        program = compiler.compile(policy_key, f"{variables_prefix}[{index}].expression", expressions[index])
        if program.optional or program.type_valued:
            inline.add(name)
        used = _references(expressions[index], names)
        if any(names.index(other) >= index for other in used):
            raise _Ineligible(f"variable {name} reads itself or a later variable")
        references[name] = used
        levels[name] = 1 + max((visit(other) for other in used), default=-1)
        return levels[name]

    check_references = [_references(expression, names) for expression in checks]
    for used in check_references:
        for name in used:
            visit(name)

    by_level: dict[int, list[str]] = {}
    for name in names:
        if name in levels:
            by_level.setdefault(levels[name], []).append(name)
    slot = {name: f"{_LEVEL_PREFIX}{level}[{position}]" for level, members in by_level.items()
            for position, name in enumerate(members)}

    def source_of(expression: str, used: list[str]) -> str:
        early = {name: slot[name] for name in used if name in inline}
        late = {name: slot[name] for name in used if name not in inline}
        return _substitute(environment.prepare(_substitute(expression, early)), late)

    count = len(checks)
    elements = [f"({source_of(expression, used)}) ? {count} : {index}"
                for index, (expression, used) in enumerate(zip(checks, check_references))]
    body = f"math.least([{', '.join(elements)}, {count}])"
    for level in sorted(by_level, reverse=True):
        # ``dyn`` as ``variables`` is in the one-by-one path: expressions type-check the same against the value
        # (an inlined optional or type value keeps its static type there, and here).
        values = ", ".join(
            source_of(expressions[names.index(name)], references[name]) if name in inline
            else f"dyn({source_of(expressions[names.index(name)], references[name])})"
            for name in by_level[level]
        )
        body = bind_once(f"{_LEVEL_PREFIX}{level}", f"[{values}]", body)
    label = f"<validations of {policy_key}>"
    try:
        program = environment.compile_prepared(body, label)
    except CelCompileError:
        return None  # e.g. over cel-cpp's expression recursion limit
    return ValidationChain(program, count)
