"""A ValidatingPolicy's validations evaluated as one CEL program with its variables bound inside it
(stockade.celpolicy.chain), against Kubernetes' variable semantics.

Kubernetes (``k8s.io/apiserver/pkg/admission/plugin/cel``, the composition environment Kyverno's ValidatingPolicy
uses) declares each variable as a lazily evaluated field of ``variables``: a variable is computed when an expression
first reads it, once per request, with its full CEL type; a variable that fails only fails the expressions that
actually read it; validations run in order and the first false one decides the message.  Each test checks the
outcome Kubernetes gives and whether the policy went through the chained program (``validation_chain`` built) or
the expression-by-expression path, and, where chained, that both paths agree.
"""

from __future__ import annotations

from typing import Any

import pytest

from stockade.celpolicy import AdmissionInput, CelPolicy, CelPolicyEvaluator
from stockade.celpolicy import evaluator as evaluator_module
from stockade.celpolicy.compiler import PolicyCompiler

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "default", "labels": {"app": "web"}, "creationTimestamp": "2024-01-01T00:00:00Z"},
    "spec": {
        "replicas": 3,
        "containers": [{"name": "c0", "image": "nginx:1"}, {"name": "c1", "image": "busybox:1"}],
        "initContainers": [{"name": "i0", "image": "alpine:3"}],
    },
}


def policy(variables: list[dict[str, str]], validations: list[dict[str, str]]) -> CelPolicy:
    return CelPolicy(
        {
            "apiVersion": "policies.kyverno.io/v1",
            "kind": "ValidatingPolicy",
            "metadata": {"name": "chain"},
            "spec": {
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
                "variables": variables,
                "validations": validations,
            },
        }
    )


def outcome(evaluator: CelPolicyEvaluator, subject: CelPolicy, pod: dict[str, Any] = POD) -> tuple[str, str]:
    response = evaluator.validate(subject, AdmissionInput(pod, operation="CREATE"))
    assert response is not None and len(response.rules) == 1
    return response.rules[0].status, response.rules[0].message


def evaluate(subject: CelPolicy, pod: dict[str, Any] = POD) -> tuple[tuple[str, str], bool]:
    """(status, message) and whether the policy was chained; when chained, the one-by-one path must agree."""
    compiler = PolicyCompiler()
    result = outcome(CelPolicyEvaluator(compiler=compiler), subject, pod)
    spec = subject.spec
    chained = compiler.validation_chain(subject.key, spec.get("variables"), spec.get("validations")) is not None
    if chained:
        original = evaluator_module.chained_verdict
        evaluator_module.chained_verdict = lambda *arguments: None  # type: ignore[assignment]
        try:
            assert outcome(CelPolicyEvaluator(), subject, pod) == result
        finally:
            evaluator_module.chained_verdict = original
    return result, chained


CONTAINERS = {"name": "containers", "expression": "object.spec.containers + object.spec.?initContainers.orValue([])"}


def test_variable_read_as_variables_name_is_chained() -> None:
    subject = policy([CONTAINERS], [
        {"expression": "variables.containers.size() == 3", "message": "three containers"},
        {"expression": "variables.containers.all(c, c.image.contains(':'))", "message": "tagged"},
    ])
    assert evaluate(subject) == (("pass", "success"), True)


def test_first_false_validation_decides_the_message() -> None:
    subject = policy([CONTAINERS], [
        {"expression": "variables.containers.size() == 3", "message": "three containers"},
        {"expression": "variables.containers.all(c, c.image.startsWith('nginx'))", "message": "nginx only"},
        {"expression": "variables.containers.size() == 0", "message": "no containers"},
    ])
    assert evaluate(subject) == (("fail", "nginx only"), True)


def test_message_expression_reads_variables() -> None:
    subject = policy([CONTAINERS, {"name": "names", "expression": "variables.containers.map(c, c.name)"}], [
        {"expression": "variables.names.size() < 3", "messageExpression": "'too many: ' + variables.names.join(',')"},
    ])
    assert evaluate(subject) == (("fail", "too many: c0,c1,i0"), True)


def test_variable_reading_another_variable() -> None:
    subject = policy([
        CONTAINERS,
        {"name": "images", "expression": "variables.containers.map(c, c.image)"},
        {"name": "untagged", "expression": "variables.images.filter(i, !i.contains(':'))"},
    ], [{"expression": "variables.untagged.size() == 0 && variables.images.size() == 3", "message": "tag images"}])
    assert evaluate(subject) == (("pass", "success"), True)
    assert evaluate(subject, {**POD, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}) == (("fail", "tag images"), True)


def test_comments_in_expressions() -> None:
    subject = policy([{"name": "n", "expression": "object.spec.replicas // the desired count"}], [
        {"expression": "variables.n > 5 // more than five", "message": "few replicas"},
    ])
    assert evaluate(subject) == (("fail", "few replicas"), True)


@pytest.mark.parametrize(
    ("variable", "validation"),
    [
        # optional: absent and present values, chained as values of optional type
        ("object.metadata.?labels.?app", "variables.v.orValue('') == 'web' && variables.v.hasValue()"),
        ("object.metadata.?labels.?team", "!variables.v.hasValue() && variables.v.orValue('none') == 'none'"),
        # uint keeps its type: uint arithmetic works (an int operand would not)
        ("uint(object.spec.replicas)", "variables.v + 1u == 4u && type(variables.v) == uint"),
        ("[1u, uint(object.spec.replicas)]", "variables.v.all(x, x > 0u) && variables.v[1] == 3u"),
        # duration and timestamp
        ("duration('72h')", "variables.v > duration('1h') && string(variables.v) == '259200s'"),
        ("timestamp(object.metadata.creationTimestamp)", "variables.v + duration('24h') == timestamp('2024-01-02T00:00:00Z')"),
        # a type value
        ("type(object.spec.replicas)", "variables.v == int"),
    ],
)
def test_variables_keep_their_cel_type(variable: str, validation: str) -> None:
    subject = policy([{"name": "v", "expression": variable}], [{"expression": validation, "message": "typed"}])
    assert evaluate(subject) == (("pass", "success"), True)


def test_uint_variable_with_an_int_operand_is_an_error() -> None:
    # CEL has no uint + int overload: the chained program fails and the one-by-one path reports the error.
    subject = policy([{"name": "v", "expression": "uint(object.spec.replicas)"}], [{"expression": "variables.v + 1 > 0"}])
    (status, message), chained = evaluate(subject)
    assert chained and status == "error" and "No matching overloads" in message


def test_failing_variable_used_fails_the_validation_naming_it() -> None:
    subject = policy([{"name": "bad", "expression": "object.spec.nothing.here"}], [
        {"expression": "object.spec.replicas > 0"},
        {"expression": "variables.bad == 1"},
    ])
    (status, message), chained = evaluate(subject)
    assert chained and status == "error"
    assert "variable 'bad' failed" in message and "nothing" in message


def test_failing_variable_not_used_does_not_matter() -> None:
    subject = policy([{"name": "bad", "expression": "object.spec.nothing.here"}, CONTAINERS], [
        {"expression": "variables.containers.size() == 3", "message": "three"},
    ])
    assert evaluate(subject) == (("pass", "success"), True)


def test_failing_variable_on_a_branch_not_taken_does_not_matter() -> None:
    # Lazy variables: the expression reads ``bad`` only when replicas > 10.
    subject = policy([{"name": "bad", "expression": "object.spec.nothing.here"}], [
        {"expression": "object.spec.replicas > 10 ? variables.bad == 1 : true"},
    ])
    assert evaluate(subject) == (("pass", "success"), True)
    assert evaluate(subject, {**POD, "spec": {"replicas": 11}})[0][0] == "error"


def test_variables_by_index_are_not_chained() -> None:
    subject = policy([CONTAINERS], [{"expression": "variables['containers'].size() == 3", "message": "three"}])
    assert evaluate(subject) == (("pass", "success"), False)


def test_has_on_a_variable_is_not_chained() -> None:
    subject = policy([CONTAINERS], [{"expression": "has(variables.containers) && variables.containers.size() == 3"}])
    assert evaluate(subject) == (("pass", "success"), False)


def test_non_bool_validation_is_reported_by_the_one_by_one_path() -> None:
    subject = policy([{"name": "n", "expression": "object.spec.replicas"}], [{"expression": "dyn(variables.n)"}])
    (status, message), chained = evaluate(subject)
    assert chained and status == "error" and "must evaluate to a bool" in message


def test_a_provider_call_is_not_chained() -> None:
    # Evaluating the program and then, after an error, the expressions one by one would repeat the call.
    get = "resource.Get('v1', 'configmaps', 'default', 'x')"
    compiler = PolicyCompiler()
    for variables, validations in (
        ([{"name": "cm", "expression": get}], [{"expression": "variables.cm.data.size() > 0"}]),
        ([], [{"expression": f"{get}.data.size() > 0"}]),
    ):
        assert compiler.validation_chain("ValidatingPolicy//provider", variables, validations) is None
    # A variable no validation reads is never evaluated, so its call does not matter.
    unread = [{"name": "cm", "expression": get}]
    assert compiler.validation_chain("ValidatingPolicy//provider", unread, [{"expression": "object.spec.replicas > 0"}]) is not None


def test_iteration_budget_over_all_validations_falls_back() -> None:
    # Each validation iterates 4,000 items, within cel-cpp's 10,000 per evaluation; together they exceed it, so the
    # chained program fails and the validations are evaluated one by one, as Kubernetes budgets each expression.
    pod = {**POD, "spec": {"items": list(range(4000))}}
    subject = policy([], [{"expression": "object.spec.items.all(x, x >= 0)"} for _ in range(3)])
    assert evaluate(subject, pod) == (("pass", "success"), True)


def test_chain_is_built_once_per_policy() -> None:
    compiler = PolicyCompiler()
    subject = policy([CONTAINERS], [{"expression": "variables.containers.size() == 3"}])
    spec = subject.spec
    first = compiler.validation_chain(subject.key, spec["variables"], spec["validations"])
    assert first is not None
    assert compiler.validation_chain(subject.key, spec["variables"], spec["validations"]) is first


def admission_policy(variables: list[dict[str, str]], validations: list[dict[str, str]], failure: str = "Fail") -> CelPolicy:
    return CelPolicy(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "vap-chain"},
            "spec": {
                "failurePolicy": failure,
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
                "variables": variables,
                "validations": validations,
            },
        }
    )


def admission_outcome(subject: CelPolicy) -> tuple[tuple[str, str], bool]:
    compiler = PolicyCompiler()
    response = CelPolicyEvaluator(compiler=compiler).validate_admission(subject, [], AdmissionInput(POD, operation="CREATE"))
    assert len(response.rules) == 1
    chained = compiler.validation_chain(subject.key, subject.spec["variables"], subject.spec["validations"]) is not None
    return (response.rules[0].status, response.rules[0].message), chained


def test_admission_policy_message_expression_reads_variables() -> None:
    subject = admission_policy([CONTAINERS], [
        {"expression": "variables.containers.size() > 0"},
        {"expression": "variables.containers.size() < 2", "messageExpression": "string(variables.containers.size()) + ' containers'"},
    ])
    assert admission_outcome(subject) == (("fail", "3 containers"), True)


def test_admission_policy_blank_message_expression_falls_back_to_the_expression() -> None:
    # Kubernetes: a messageExpression that yields a blank string is ignored; without a message the failed
    # expression is named.
    subject = admission_policy([CONTAINERS], [{"expression": "variables.containers.size() < 2", "messageExpression": "' '"}])
    assert admission_outcome(subject) == (("fail", "failed expression: variables.containers.size() < 2"), True)


def test_admission_policy_ignore_skips_a_validation_whose_variable_fails() -> None:
    # failurePolicy Ignore: a validation that errors is skipped; the next one decides.
    subject = admission_policy([{"name": "bad", "expression": "object.spec.nothing.here"}], [
        {"expression": "variables.bad == 1", "message": "bad"},
        {"expression": "object.spec.replicas > 5", "message": "few replicas"},
    ], failure="Ignore")
    assert admission_outcome(subject) == (("fail", "few replicas"), True)
