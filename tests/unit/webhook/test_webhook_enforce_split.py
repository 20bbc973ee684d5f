"""``split_responses``: the results Kyverno's validating webhook evaluates before answering and those after, including
the shortcut for policies whose rules all run before the answer (the response is passed on whole)."""

from typing import Any

from stockade.engine.response import FAIL, PASS, EngineResponse, RuleResponse
from stockade.policy.model import KyvernoPolicy
from stockade.webhook.enforceset import split_responses

MATCH_POD = {"any": [{"resources": {"kinds": ["Pod"]}}]}


def cpol(name: str, *rules: dict[str, Any], **spec: Any) -> KyvernoPolicy:
    return KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": name}, "spec": {"rules": list(rules), **spec}})


def rule(name: str, **validate: Any) -> dict[str, Any]:
    return {"name": name, "match": MATCH_POD, "validate": {"pattern": {"metadata": {"name": "?*"}}, **validate}}


def response(policy: KyvernoPolicy, *names: str) -> EngineResponse:
    return EngineResponse(policy, {}, {}, [RuleResponse(name, "Validation", FAIL if name.startswith("f") else PASS, "") for name in names])


def names(responses: list[EngineResponse]) -> list[tuple[str, list[str]]]:
    return [(r.policy_name, [rule.name for rule in r.rules]) for r in responses]


def test_an_enforce_policy_is_answered_from_whole() -> None:
    policy = cpol("enforce", rule("f1"), rule("p2"), validationFailureAction="Enforce")
    whole = response(policy, "f1", "p2")
    synchronous, deferred = split_responses([whole], "default", {})
    assert synchronous == [whole] and synchronous[0] is whole
    assert deferred == []


def test_audit_rules_are_deferred_and_mixed_policies_split() -> None:
    audit = cpol("audit", rule("f1"), validationFailureAction="Audit")
    mixed = cpol("mixed", rule("f1"), rule("f2", failureAction="Audit"), validationFailureAction="Enforce")
    synchronous, deferred = split_responses([response(audit, "f1"), response(mixed, "f1", "f2")], "default", {})
    assert names(synchronous) == [("mixed", ["f1"])]
    assert names(deferred) == [("audit", ["f1"]), ("mixed", ["f2"])]


def test_namespace_overrides_decide_per_request() -> None:
    policy = cpol("overridden", rule("f1"), validationFailureAction="Enforce", validationFailureActionOverrides=[{"action": "Audit", "namespaces": ["dev-*"]}])
    assert names(split_responses([response(policy, "f1")], "dev-1", {})[1]) == [("overridden", ["f1"])]
    assert names(split_responses([response(policy, "f1")], "prod", {})[0]) == [("overridden", ["f1"])]


def test_results_naming_no_rule_follow_the_policy() -> None:
    """A timeout stands in for a policy that never ran, under the policy's name: synchronous when any rule is."""
    enforce = cpol("enforce", rule("f1"), validationFailureAction="Enforce")
    audit = cpol("audit", rule("f1"), validationFailureAction="Audit")
    ruleless = cpol("ruleless", validationFailureAction="Enforce")
    synchronous, deferred = split_responses([response(enforce, "enforce"), response(audit, "audit"), response(ruleless, "ruleless")], None, {})
    assert names(synchronous) == [("enforce", ["enforce"])]
    assert names(deferred) == [("audit", ["audit"]), ("ruleless", ["ruleless"])]
