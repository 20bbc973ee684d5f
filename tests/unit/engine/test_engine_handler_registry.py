"""The engine picks each rule's handler from a registry by rule type (Kyverno's pkg/engine does the same)."""

from typing import Any

from stockade.engine.engine import Engine, Request
from stockade.engine.handlers.registry import (
    DEFAULT_HANDLERS,
    VALIDATE_CEL,
    VALIDATE_PATTERN,
    HandlerRegistry,
    HandlerResult,
    HandlerServices,
    validate_type,
)
from stockade.engine.policycontext import PolicyContext
from stockade.engine.response import rule_pass
from stockade.policy.model import KyvernoPolicy, Rule

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
MATCH_POD = {"any": [{"resources": {"kinds": ["Pod"]}}]}
PATTERN_RULE = {"name": "named", "match": MATCH_POD, "validate": {"pattern": {"metadata": {"name": "?*"}}}}
CEL_RULE = {"name": "cel", "match": MATCH_POD, "validate": {"cel": {"expressions": [{"expression": "true"}]}}}


def policy(*rules: dict[str, Any]) -> KyvernoPolicy:
    return KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {"rules": list(rules)}})


def statuses(engine: Engine, *rules: dict[str, Any]) -> list[tuple[str, str, str]]:
    response = engine.validate(engine.policy_context(policy(*rules), Request(resource=POD)))
    return [(r.name, r.status, r.message) for r in response.rules]


def test_validate_rules_are_typed_by_the_check_they_carry() -> None:
    assert validate_type(Rule(PATTERN_RULE)) == VALIDATE_PATTERN
    assert validate_type(Rule(CEL_RULE)) == VALIDATE_CEL


def test_registered_handler_is_the_one_that_runs() -> None:
    seen: list[str] = []

    def recording(pctx: PolicyContext, rule: Rule, resource: dict[str, Any], services: HandlerServices) -> HandlerResult:
        seen.append(rule.name)
        return resource, rule_pass(rule.name, "Validation", "recorded")

    registry = DEFAULT_HANDLERS.copy()
    registry.register(VALIDATE_PATTERN, recording)
    assert statuses(Engine(handlers=registry), PATTERN_RULE) == [("named", "pass", "recorded")]
    assert seen == ["named"]
    # the copy left the shared registry alone
    assert statuses(Engine(), PATTERN_RULE) == [("named", "pass", "validation rule 'named' passed.")]


def test_rule_type_without_handler_is_a_rule_error_naming_the_type() -> None:
    (result,) = statuses(Engine(handlers=HandlerRegistry()), CEL_RULE)
    assert result[:2] == ("cel", "error")
    assert "no handler registered for validate.cel rules" in result[2]
