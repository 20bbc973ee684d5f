"""Kyverno's ValidateVariables / hasInvalidVariables: every variable of a rule must name a built-in or a declared
context entry, judged with Kyverno's patterns for the policy's mode (background, mutate targets)."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.lint.allowed_variables import policy_variable_problems, rule_variable_problem
from stockade.lint.check import check_policy

MATCH = {"any": [{"resources": {"kinds": ["ConfigMap"]}}]}


def validate_rule(message: str, context: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    rule: dict[str, Any] = {"name": "r", "match": MATCH, "validate": {"message": message, "deny": {}}, **extra}
    if context is not None:
        rule["context"] = context
    return rule


@pytest.mark.parametrize(
    "message",
    [
        "{{ request.object.metadata.name }}",
        "{{ element.name }} at {{ elementIndex }}",
        "{{ images.containers.*.tag }}",
        "{{ to_upper(request.object.metadata.name) }}",
        "{{@}}",
        'label {{ request.object.metadata.labels."{{ element.name }}" }}',
    ],
)
def test_built_in_names_pass_in_background_mode(message: str) -> None:
    assert rule_variable_problem(validate_rule(message), background=True) is None


@pytest.mark.parametrize("message", ["{{ reqest.object.metadata.name }}", "{{ name }}", "{{ target.metadata.name }}"])
def test_names_nothing_declares_are_refused(message: str) -> None:
    problem = rule_variable_problem(validate_rule(message), background=False)
    assert problem is not None and problem.startswith("variable substitution failed for rule r: variable ")


def test_requester_names_exist_only_outside_background_mode() -> None:
    rule = validate_rule("{{ serviceAccountName }}")
    assert rule_variable_problem(rule, background=False) is None
    assert rule_variable_problem(rule, background=True) is not None


def test_context_entries_declare_their_names_by_source() -> None:
    entries = [{"name": "owner", "variable": {"value": "x"}}, {"name": "cm", "configMap": {"name": "c", "namespace": "d"}}]
    assert rule_variable_problem(validate_rule("{{ owner }} {{ ownership.x }} {{ cm.data.key }}", entries), background=True) is None
    # a ConfigMap entry declares its data and metadata, not the bare name
    assert rule_variable_problem(validate_rule("{{ cm }}", entries), background=True) is not None
    # an entry with no source declares nothing
    assert rule_variable_problem(validate_rule("{{ empty }}", [{"name": "empty"}]), background=True) is not None


def test_foreach_context_counts_at_the_first_level_only() -> None:
    nested = {"list": "request.object.x", "context": [{"name": "inner", "variable": {"value": 1}}], "deny": {}}
    rule = {"name": "r", "match": MATCH, "validate": {"message": "{{ inner }}", "foreach": [nested]}}
    assert rule_variable_problem(rule, background=True) is None
    deeper = {"name": "r", "match": MATCH, "validate": {"message": "{{ inner }}", "foreach": [{"list": "a", "foreach": [nested]}]}}
    assert rule_variable_problem(deeper, background=True) is not None


def test_target_names_only_inside_a_target_mutation() -> None:
    """target.* is defined once a target is fetched: in the patch, not in the rule's context or the target's name."""
    patch = {"data": {"copy": "{{ target.data.value }}"}}
    good: dict[str, Any] = {"name": "r", "match": MATCH, "mutate": {"targets": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "t"}], "patchStrategicMerge": patch}}
    assert rule_variable_problem(good, background=True) is None
    in_name = {**good, "mutate": {**good["mutate"], "targets": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "t", "namespace": "{{ target.metadata.namespace }}"}]}}
    problem = rule_variable_problem(in_name, background=True)
    assert problem is not None and problem.startswith("invalid variables defined at mutate.targets[0]: variable target.metadata.namespace")
    in_context = {**good, "context": [{"name": "v", "variable": {"jmesPath": "{{ target.data.value }}"}}]}
    assert (rule_variable_problem(in_context, background=False) or "").startswith("invalid variables defined at mutate.targets[0]")


def test_attestation_conditions_are_not_checked_but_names_are_declared() -> None:
    rule = {
        "name": "r",
        "match": MATCH,
        "verifyImages": [{"imageReferences": ["*"], "attestations": [{"name": "sbom", "conditions": [{"all": [{"key": "{{ payload.x }}", "operator": "Equals", "value": 1}]}]}]}],
        "validate": {"message": "{{ sbom.x }}"},
    }
    assert rule_variable_problem(rule, background=True) is None


def test_escaped_variables_are_text() -> None:
    assert rule_variable_problem(validate_rule("\\{{ anything }}"), background=True) is None


def test_policy_check_refuses_with_kyvernos_message() -> None:
    spec: dict[str, Any] = {"rules": [validate_rule("{{ reqest.object.metadata.name }}")]}
    policy: dict[str, Any] = {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": spec}
    assert policy_variable_problems(spec)[0][1].startswith("policy contains invalid variables: variable substitution failed for rule r:")
    findings = check_policy(policy)
    assert any("policy contains invalid variables" in f.message and f.severity.name == "ERROR" for f in findings)
