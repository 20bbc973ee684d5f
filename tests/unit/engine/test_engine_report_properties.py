"""A rule's ``reportProperties`` (Kyverno's rule field): substituted in the rule's context, they join the properties
of the rule's report results."""

from typing import Any

from stockade.engine.engine import Engine, Request
from stockade.policy.model import KyvernoPolicy

NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bar", "labels": {"owner": "david"}}}


def policy(**rule_extra: Any) -> KyvernoPolicy:
    rule = {
        "name": "check-owner",
        "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
        "context": [{"name": "objName", "variable": {"jmesPath": "request.object.metadata.name"}}],
        "validate": {"failureAction": "Audit", "message": "owner required", "pattern": {"metadata": {"labels": {"owner": "?*"}}}},
        **rule_extra,
    }
    return KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "require-owner"}, "spec": {"rules": [rule]}})


def properties(cpol: KyvernoPolicy) -> list[dict[str, str]]:
    engine = Engine()
    response = engine.validate(engine.policy_context(cpol, Request(resource=NAMESPACE, operation="CREATE")))
    return [rule.properties for rule in response.rules]


def test_report_properties_are_substituted_from_the_request_and_the_rule_context() -> None:
    cpol = policy(reportProperties={"operation": "{{ request.operation }}", "objName": "{{ objName }}"})
    assert properties(cpol) == [{"operation": "CREATE", "objName": "bar"}]


def test_rules_without_report_properties_add_none_and_unresolvable_ones_are_left_out() -> None:
    assert properties(policy()) == [{}]
    assert properties(policy(reportProperties={"missing": "{{ nothing.here }}", "fixed": "x"})) == [{"fixed": "x"}]
