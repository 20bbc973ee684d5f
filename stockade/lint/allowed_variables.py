"""Kyverno's check that every ``{{ }}`` variable of a ClusterPolicy/Policy rule names something that exists.

Kyverno substitutes each rule against a stand-in context that knows no values, only *names*: a variable passes when
it matches the built-in names (``request``, ``element``, ``images``, ``@``, a function call, ...; fewer in background
mode, where there is no requester) or a name the rule's context entries declare.  Anything else - a typo such as
``{{ reqest.object.x }}``, a context entry used outside the rule that declares it, ``target.`` outside mutate
targets - refuses the policy.  Values resolve to null, so nested variables are checked after their inner variable,
as in a real substitution.

Rules with mutate targets are checked twice: first the rule's own context, preconditions and the targets' resource
names, where ``target.`` is not yet defined; then the whole rule, where it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from stockade.engine.variables import VARIABLE_RE
from stockade.errors import StockadeError
from stockade.wildcard import match as wildcard_match

# Kyverno's names that always exist, by mode: (background, in a rule with mutate targets) -> pattern (searched, not
# anchored, after double quotes are removed from the variable).
_FUNCTION_CALL = r"([a-z_0-9]+\()[^{}]"
ALLOWED_NAMES = {
    (False, False): re.compile(r"request|serviceAccountName|serviceAccountNamespace|element|elementIndex|@|images|image|" + _FUNCTION_CALL),
    (True, False): re.compile(r"request\.|element|elementIndex|@|images|images\.|image\.|" + _FUNCTION_CALL),
    (False, True): re.compile(r"request\.|serviceAccountName|serviceAccountNamespace|element|elementIndex|@|images|images\.|image\.|target\.|" + _FUNCTION_CALL),
    (True, True): re.compile(r"request\.|element|elementIndex|@|images|images\.|image\.|target\.|" + _FUNCTION_CALL),
}
_VARIABLE_SOURCES = ("apiCall", "globalReference", "imageRegistry", "variable")
_MAX_ROUNDS = 32  # nested variables resolve innermost first; a string cannot nest deeper than its length allows


class InvalidVariable(StockadeError):
    """A variable the rule cannot resolve (internal to this module; callers get messages)."""

    def __init__(self, variable: str, allowed: re.Pattern[str], declared: list[str]) -> None:
        super().__init__(variable)
        self.variable = variable
        self.allowed = allowed
        self.declared = declared

    def __str__(self) -> str:
        return f'variable {self.variable} must match regex "{self.allowed.pattern}" or patterns [{" ".join(self.declared)}]'


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _declare(entries: Any, names: list[str]) -> None:
    for entry in _list(entries):
        entry = _dict(entry)
        name = str(entry.get("name") or "")
        if any(entry.get(source) is not None for source in _VARIABLE_SOURCES):
            names.append(name + "*")
        if entry.get("configMap") is not None:
            names += [f"{name}.data", f"{name}.metadata", f"{name}.data.*", f"{name}.metadata.*"]


def declared_names(rule: dict[str, Any]) -> list[str]:
    """The wildcard patterns a rule's context entries make available: the rule's own, the first level of
    validate/mutate/generate foreach, mutate targets', and attestation names of image verification."""
    names: list[str] = []
    _declare(rule.get("context"), names)
    for verification in _list(rule.get("verifyImages")):
        for attestation in _list(_dict(verification).get("attestations")):
            if _dict(attestation).get("name") is not None:
                names.append(str(_dict(attestation).get("name") or "") + "*")
    for section in ("validate", "mutate", "generate"):
        for item in _list(_dict(rule.get(section)).get("foreach")):
            _declare(_dict(item).get("context"), names)
    for target in _list(_dict(rule.get("mutate")).get("targets")):
        _declare(_dict(target).get("context"), names)
    return names


def _check_variable(variable: str, allowed: re.Pattern[str], declared: list[str]) -> None:
    query = variable.replace('"', "")
    if allowed.search(query) or any(wildcard_match(pattern, query) for pattern in declared):
        return
    raise InvalidVariable(variable, allowed, declared)


def _check_string(text: str, allowed: re.Pattern[str], declared: list[str]) -> None:
    """Substitute like Kyverno with every value null: innermost variables first, then what they leave behind."""
    value = text
    for _ in range(_MAX_ROUNDS):
        found = [m.group(2) for m in VARIABLE_RE.finditer(value)]
        if not found:
            return
        for token in found:
            variable = token.replace("{{", "").replace("}}", "").strip()
            shallow = variable.startswith("-")
            if shallow:
                variable = variable[1:].strip()
            if not variable:
                return  # an empty variable is refused by the JMESPath check, with its own message
            if variable != "@":  # "@" is the resource at this path: always request.object... or target...
                _check_variable(variable, allowed, declared)
            if value == token:
                return  # a whole-string variable becomes its (null) value
            value = value.replace(token, "null", 1)
            if shallow:
                return


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str):
                yield key
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)


def _check_document(node: Any, allowed: re.Pattern[str], declared: list[str]) -> None:
    for text in _strings(node):
        if "{{" in text:
            _check_string(text, allowed, declared)


def _without_attestation_conditions(rule: dict[str, Any]) -> dict[str, Any]:
    """Attestation conditions read the attestation payload, which only exists at verification time: not checked."""
    verifications = _list(rule.get("verifyImages"))
    if not verifications:
        return rule
    copied = []
    for verification in verifications:
        verification = dict(_dict(verification))
        verification["attestations"] = [{k: v for k, v in _dict(a).items() if k != "conditions"} for a in _list(verification.get("attestations"))]
        copied.append(verification)
    return {**rule, "verifyImages": copied}


def rule_variable_problem(rule: dict[str, Any], background: bool) -> str | None:
    """Kyverno's message for the first variable of ``rule`` that names nothing, or None."""
    rule = _without_attestation_conditions(rule)
    targets = _list(_dict(rule.get("mutate")).get("targets"))
    declared = declared_names(rule)
    if _dict(rule.get("mutate")).get("targets") is not None:
        # the targets' names are resolved before any target exists, with the rule's context and preconditions
        outer = {"context": rule.get("context"), "preconditions": rule.get("preconditions")}
        outer_declared: list[str] = []
        _declare(rule.get("context"), outer_declared)
        specs: list[dict[str, Any]] = []
        for index, target in enumerate(targets):
            specs.append({k: v for k, v in _dict(target).items() if k in ("apiVersion", "kind", "namespace", "name", "uid")})
            try:
                _check_document({**outer, "targets": specs}, ALLOWED_NAMES[(background, False)], outer_declared)
            except InvalidVariable as exc:
                return f"invalid variables defined at mutate.targets[{index}]: {exc}"
    try:
        _check_document(rule, ALLOWED_NAMES[(background, bool(targets) or _dict(rule.get("mutate")).get("targets") is not None)], declared)
    except InvalidVariable as exc:
        return f"variable substitution failed for rule {rule.get('name') or ''}: {exc}"
    return None


def policy_variable_problems(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """``(field path, message)`` for Kyverno's ``ValidateVariables`` (every rule, in background mode when the policy
    runs in the background) and, for mutate-existing-on-policy-update rules, ``ValidateOnPolicyUpdate``."""
    background = spec.get("background") is not False
    problems: list[tuple[str, str]] = []
    rules = [(index, rule) for index, rule in enumerate(_list(spec.get("rules"))) if isinstance(rule, dict)]
    for index, rule in rules:
        problem = rule_variable_problem(rule, background)
        if problem:
            problems.append((f"spec.rules[{index}]", f"policy contains invalid variables: {problem}"))
            return problems
    on_update = any(
        _dict(rule.get("mutate")).get("mutateExistingOnPolicyUpdate") is True
        or (_dict(rule.get("mutate")).get("mutateExistingOnPolicyUpdate") is None and spec.get("mutateExistingOnPolicyUpdate") is True and rule.get("mutate"))
        for _, rule in rules
    )
    if on_update and not background:
        for index, rule in rules:
            problem = rule_variable_problem(rule, True)
            if problem:
                problems.append((f"spec.rules[{index}]", f"update event, policy contains invalid variables: {problem}"))
                break
    return problems
