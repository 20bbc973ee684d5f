"""Policies whose CEL could build values far beyond any request are rejected at load and by /policyvalidate."""

from __future__ import annotations

from typing import Any

from stockade.lint.policies import validate_policy_document

RULES = {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]}
# Eleven doublings of a request string: up to 2**11 * 3 MiB = 6 GiB, without a single comprehension iteration.
HOSTILE = "object.metadata.name"
for _level in range(11):
    HOSTILE = f"cel.bind(s, {HOSTILE}, s + s)"
HOSTILE = f"({HOSTILE}).size() > 0"
NESTED_MAPS = (
    "[1,2,3,4,5,6,7,8].map(a, [1,2,3,4,5,6,7,8].map(b, [1,2,3,4,5,6,7,8].map(c, "
    "object.metadata.name + object.metadata.name))).size() > 0"
)


def _policy(kind: str, spec: dict[str, Any], api: str = "policies.kyverno.io/v1") -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "metadata": {"name": "hostile"}, "spec": spec}


def _validating(expressions: list[str], variables: list[dict[str, str]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"matchConstraints": RULES, "validations": [{"expression": e} for e in expressions]}
    if variables is not None:
        spec["variables"] = variables
    return _policy("ValidatingPolicy", spec)


def test_hostile_validation_is_rejected_naming_policy_field_and_budget() -> None:
    result = validate_policy_document(_validating(["object.spec.replicas <= 5", HOSTILE]))
    assert not result.ok
    assert [problem.path for problem in result.errors] == ["spec.validations[1].expression"]
    message = result.message()
    assert message.startswith('ValidatingPolicy "hostile" is invalid: spec.validations[1].expression: ')
    assert "estimated CEL expression cost exceeds budget by factor of" in message
    assert "limit 10,000,000" in message


def test_nested_maps_doubling_strings_are_rejected() -> None:
    result = validate_policy_document(_validating([NESTED_MAPS]))
    assert [problem.path for problem in result.errors] == ["spec.validations[0].expression"]


def test_ordinary_validating_policy_passes() -> None:
    result = validate_policy_document(_validating(
        ["object.spec.containers.all(c, c.image.startsWith(variables.registry))",
         "object.spec.containers.all(c, c.ports.all(p, p.containerPort in variables.ports))"],
        [{"name": "registry", "expression": "'registry.example.com/'"}, {"name": "ports", "expression": "[80, 443]"}],
    ))
    assert result.ok, result.message()


def test_hostile_variable_is_rejected_and_its_size_carries_into_later_expressions() -> None:
    hostile_variable = validate_policy_document(_validating(["true"], [{"name": "big", "expression": HOSTILE.removesuffix(".size() > 0")}]))
    assert [problem.path for problem in hostile_variable.errors] == ["spec.variables[0].expression"]
    # Each variable alone is cheap; concatenating the doubled variable again is not.
    doubled = "object.metadata.name + object.metadata.name + object.metadata.name + object.metadata.name"
    variables = [{"name": "v0", "expression": doubled}] + [
        {"name": f"v{index}", "expression": f"variables.v{index - 1} + variables.v{index - 1}"} for index in range(1, 6)
    ]
    result = validate_policy_document(_validating(["variables.v5.size() > 0"], variables))
    assert [problem.path for problem in result.errors][-1].startswith("spec.variables[")
    assert not result.ok


def test_other_policy_kinds_and_fields_are_estimated() -> None:
    mutating = _policy("MutatingPolicy", {"matchConstraints": RULES, "matchConditions": [{"name": "m", "expression": HOSTILE}],
                                          "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[]"}}]})
    assert [p.path for p in validate_policy_document(mutating).errors] == ["spec.matchConditions[0].expression"]
    message = _policy("ValidatingPolicy", {"matchConstraints": RULES, "validations": [
        {"expression": "false", "messageExpression": f"string({HOSTILE})"}]})
    assert [p.path for p in validate_policy_document(message).errors] == ["spec.validations[0].messageExpression"]
    vap = _policy("ValidatingAdmissionPolicy", {"matchConstraints": RULES, "validations": [{"expression": "true"}],
                                                "auditAnnotations": [{"key": "k", "valueExpression": f"string({HOSTILE})"}]},
                  api="admissionregistration.k8s.io/v1")
    assert [p.path for p in validate_policy_document(vap).errors] == ["spec.auditAnnotations[0].valueExpression"]
    cluster = _policy("ClusterPolicy", {"rules": [{"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                                                  "validate": {"cel": {"expressions": [{"expression": HOSTILE}]}}}]},
                      api="kyverno.io/v1")
    result = validate_policy_document(cluster)
    assert [p.path for p in result.errors] == ["spec.rules[0].validate.cel.expressions[0].expression"]
    assert result.errors[0].rule == "r"


def test_policy_validation_endpoint_denies_the_hostile_policy() -> None:
    from stockade.webhook.admission import parse_review
    from stockade.webhook.server import policy_validation_decision

    def review(policy: dict[str, Any]) -> Any:
        return parse_review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u1", "operation": "CREATE", "kind": {"group": "policies.kyverno.io", "version": "v1", "kind": "ValidatingPolicy"},
            "resource": {"group": "policies.kyverno.io", "version": "v1", "resource": "validatingpolicies"},
            "name": "hostile", "object": policy, "userInfo": {"username": "admin"}}})

    denied = policy_validation_decision(review(_validating([HOSTILE])))
    assert not denied.allowed
    assert "spec.validations[0].expression" in denied.message and "exceeds budget by factor of" in denied.message
    assert policy_validation_decision(review(_validating(["object.spec.replicas <= 5"]))).allowed
