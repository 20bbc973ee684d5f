"""Type errors, unknown functions, syntax errors and cost-limit violations name policy, field path and position."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.cel import CelCompileError, CelEnvironment
from stockade.celpolicy import AdmissionInput, CelPolicy, CelPolicyEvaluator
from stockade.celpolicy.compiler import PolicyCompiler

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
       "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
RULES = {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]}


def _validating(expressions: list[str], variables: list[dict[str, str]] | None = None, kind: str = "ValidatingPolicy") -> CelPolicy:
    spec: dict[str, Any] = {"matchConstraints": RULES, "validations": [{"expression": e} for e in expressions]}
    if variables:
        spec["variables"] = variables
    api = "policies.kyverno.io/v1" if kind == "ValidatingPolicy" else "admissionregistration.k8s.io/v1"
    return CelPolicy({"apiVersion": api, "kind": kind, "metadata": {"name": "checks"}, "spec": spec})


def _error_message(policy: CelPolicy) -> str:
    evaluator = CelPolicyEvaluator()
    if policy.kind == "ValidatingAdmissionPolicy":
        response = evaluator.validate_admission(policy, [], AdmissionInput(object=POD))
    else:
        response = evaluator.validate(policy, AdmissionInput(object=POD))
    assert response is not None and len(response.rules) == 1
    assert response.rules[0].status == "error", response.rules[0].message
    return response.rules[0].message


@pytest.mark.parametrize(
    ("expression", "detail", "line", "column"),
    [
        # '+' of int and string: the operator is at 1-based column 31
        ("object.spec.containers.size() + 'a' == 1", "no matching overload for '_+_'", 1, 31),
        # unknown function: cel reports the call position
        ("nosuch(object)", "undeclared reference to 'nosuch'", 1, 7),
        ("object.spec.(", "Syntax error", 1, 13),
        ("object.spec.containers.all(c,\n  c.image.startsWith(1))", "no matching overload for 'startsWith'", 2, 21),
    ],
)
def test_compile_errors_name_policy_field_and_position(expression: str, detail: str, line: int, column: int) -> None:
    message = _error_message(_validating(["true", expression]))
    assert "ValidatingPolicy//checks" in message
    assert "spec.validations[1].expression" in message
    assert detail in message
    assert f"at line {line}, column {column}" in message
    assert repr(expression) in message


def test_compile_error_position_points_at_the_offending_character() -> None:
    expression = "object.metadata.name.size() + 'x'"
    with pytest.raises(CelCompileError) as caught:
        CelEnvironment(["object"]).compile(expression)
    assert caught.value.line == 1 and expression[caught.value.column - 1] == "+"


def test_variable_compile_error_surfaces_where_it_is_used() -> None:
    policy = _validating(["variables.broken == 1"], variables=[{"name": "broken", "expression": "undefinedThing"}])
    message = _error_message(policy)
    assert "variable 'broken' failed" in message and "spec.variables[0].expression" in message
    assert "undeclared reference to 'undefinedThing'" in message


def test_admission_policy_compile_error_is_reported_too() -> None:
    message = _error_message(_validating(["object.spec.replicas > 1 + 'x'"], kind="ValidatingAdmissionPolicy"))
    assert "ValidatingAdmissionPolicy//checks" in message and "spec.validations[0].expression" in message


def test_cost_limit_names_policy_field_and_expression() -> None:
    expression = "lists.range(20000).all(i, i >= 0)"
    message = _error_message(_validating(["true", expression]))
    assert "cost limit exceeded" in message
    assert "ValidatingPolicy//checks" in message and "spec.validations[1].expression" in message
    assert repr(expression) in message


def test_runtime_errors_name_the_expression() -> None:
    message = _error_message(_validating(["object.spec.nodeName == 'x'"]))
    assert "nodeName" in message and "object.spec.nodeName == 'x'" in message


def test_struct_literal_rewrite_does_not_report_misleading_positions() -> None:
    compiler = PolicyCompiler()
    with pytest.raises(CelCompileError) as caught:
        compiler.compile("MutatingPolicy//m", "spec.mutations[0].applyConfiguration.expression",
                         "Object{spec: Object.spec{replicas: 'a' - 1}}")
    assert "MutatingPolicy//m" in str(caught.value) and "spec.mutations[0]" in str(caught.value)
    assert caught.value.column is None


def test_expressions_are_compiled_once_per_policy_not_per_resource() -> None:
    compiler = PolicyCompiler()
    evaluator = CelPolicyEvaluator(compiler=compiler)
    policy = _validating(["object.metadata.name != ''", "size(object.spec.containers) > 0"])
    for index in range(25):
        pod = dict(POD, metadata={"name": f"p{index}", "namespace": "default"})
        response = evaluator.validate(policy, AdmissionInput(object=pod))
        assert response is not None and response.rules[0].status == "pass"
    assert compiler.compiled_count == 2


def test_variables_fail_lazily_like_kubernetes() -> None:
    # isController errors for a Pod (no spec.template), but the ternary never reaches it for Pods.
    variables = [
        {"name": "isPod", "expression": "object.kind == 'Pod'"},
        {"name": "isController", "expression": "has(object.spec.template.spec)"},
        {"name": "podSpec", "expression": "variables.isPod ? object.spec : variables.isController ? object.spec.template.spec : {}"},
    ]
    pod = dict(POD, kind="Pod")
    policy = _validating(["variables.podSpec.containers.size() == 1"], variables=variables)
    response = CelPolicyEvaluator().validate(policy, AdmissionInput(object=pod))
    assert response is not None and response.rules[0].status == "pass"
    reaching = _validating(["variables.isController"], variables=variables)
    message = _error_message(reaching)
    assert "variable 'isController' failed" in message and "template" in message
