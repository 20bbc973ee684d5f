"""CEL values that cross into Python and back keep their CEL type, as in cel-go where variables, library results and
later expressions share one value space: durations, timestamps, uint, bytes, null, optionals and type values.

Expected values follow CEL's definitions: ``string(duration)`` is the seconds count then ``s`` (cel-go
``Duration.ConvertToType(StringType)``), ``string(timestamp)`` RFC 3339 in UTC, JSON conversion of bytes is
standard base64, and the Kubernetes list library's ``sum``/``min``/``max`` accept durations and timestamps.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from stockade.cel import CelEnvironment, CelEvalError, to_json
from stockade.celpolicy import AdmissionInput, CelPolicy, CelPolicyEvaluator
from stockade.celpolicy.compiler import PolicyCompiler
from stockade.celpolicy.scope import Scope

UTC = datetime.timezone.utc
OBJECT = {"metadata": {"name": "p", "creationTimestamp": "2024-01-01T00:00:00Z", "labels": {"app": "web"}}, "spec": {}}
VARIABLES = [
    {"name": "maxAge", "expression": 'duration("72h")'},
    {"name": "created", "expression": "timestamp(object.metadata.creationTimestamp)"},
    {"name": "mixed", "expression": '[duration("1h"), {"at": timestamp("2024-01-02T00:00:00Z")}]'},
    {"name": "count", "expression": "5u"},
    {"name": "raw", "expression": 'b"abc"'},
    {"name": "nothing", "expression": "null"},
    {"name": "missing", "expression": "object.?spec.foo"},
    {"name": "labels", "expression": "object.metadata.?labels"},
    {"name": "kind", "expression": "type(object)"},
    {"name": "labelCount", "expression": "variables.labels.orValue({}).size()"},
]


@pytest.fixture()
def scope() -> Scope:
    bound = Scope(PolicyCompiler(), "policy", {"object": OBJECT}, {})
    bound.bind_variables(VARIABLES)
    assert bound.variable_errors == {}
    return bound


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('timestamp("2024-01-05T00:00:00Z") - variables.created > variables.maxAge', True),
        ('timestamp("2024-01-03T00:00:00Z") - variables.created > variables.maxAge', False),
        ("string(variables.maxAge)", "259200s"),
        ("string(variables.created)", "2024-01-01T00:00:00Z"),
        ("variables.created + variables.mixed[0]", datetime.datetime(2024, 1, 1, 1, tzinfo=UTC)),
        ("variables.mixed[1].at > variables.created", True),
        ("variables.maxAge == duration('259200s')", True),
        ("variables.count + 1u", 6),
        ("type(variables.count) == uint", True),
        ('variables.raw + b"d"', b"abcd"),
        ("variables.nothing == null", True),
        ("variables.missing.orValue(7)", 7),
        ("variables.missing.hasValue()", False),
        ("variables.labels.hasValue() && variables.labels.value().app == 'web'", True),
        ("variables.labels.orValue({}).app", "web"),
        ("variables.kind == map", True),
        ("variables.labelCount", 1),
    ],
)
def test_variables_keep_their_cel_type(scope: Scope, expression: str, expected: Any) -> None:
    assert scope.evaluate("spec.validations[0].expression", expression) == expected


def test_uint_arithmetic_with_an_int_fails_as_in_cel(scope: Scope) -> None:
    # uint stays uint: CEL has no int + uint overload, so this must not silently succeed.
    with pytest.raises(CelEvalError):
        scope.evaluate("spec.validations[0].expression", "variables.count + 1")


def test_duration_variable_in_a_validating_policy_message_and_condition() -> None:
    policy = CelPolicy(
        {
            "apiVersion": "policies.kyverno.io/v1",
            "kind": "ValidatingPolicy",
            "metadata": {"name": "max-age"},
            "spec": {
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
                "variables": [
                    {"name": "maxAge", "expression": 'duration("72h")'},
                    {"name": "age", "expression": 'timestamp("2024-01-10T00:00:00Z") - timestamp(object.metadata.creationTimestamp)'},
                ],
                "matchConditions": [{"name": "has-age", "expression": "timestamp(object.metadata.creationTimestamp) + duration('1s') > timestamp('2023-12-31T00:00:00Z')"}],
                "validations": [
                    {"expression": "variables.age <= variables.maxAge", "messageExpression": "'older than ' + string(variables.maxAge)"}
                ],
            },
        }
    )
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", **OBJECT["metadata"]}, "spec": {}}
    response = CelPolicyEvaluator().validate(policy, AdmissionInput(pod))
    assert response is not None
    assert [(rule.status, rule.message) for rule in response.rules] == [("fail", "older than 259200s")]


def test_mutation_output_renders_cel_values_as_json() -> None:
    policy = CelPolicy(
        {
            "apiVersion": "policies.kyverno.io/v1",
            "kind": "MutatingPolicy",
            "metadata": {"name": "stamp"},
            "spec": {
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]},
                "variables": [{"name": "ttl", "expression": 'duration("90m")'}],
                "mutations": [
                    {
                        "patchType": "ApplyConfiguration",
                        "applyConfiguration": {
                            "expression": "Object{data: {'ttl': variables.ttl, 'at': timestamp('2024-01-01T00:00:00.5Z'), 'raw': b'hi'}}"
                        },
                    }
                ],
            },
        }
    )
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}}
    response = CelPolicyEvaluator().mutate(policy, AdmissionInput(config_map))
    assert response is not None and response.rules[0].status == "pass"
    assert response.patched_resource["data"] == {"ttl": "5400s", "at": "2024-01-01T00:00:00.5Z", "raw": "aGk="}


def test_library_results_may_hold_durations_and_timestamps() -> None:
    env = CelEnvironment(["object"])
    assert env.evaluate('[duration("1h"), duration("2h")].max()', {"object": {}}) == datetime.timedelta(hours=2)
    assert env.evaluate('[duration("1h"), duration("30m")].sum()', {"object": {}}) == datetime.timedelta(minutes=90)
    assert env.evaluate('[timestamp("2024-01-01T00:00:00Z"), timestamp("2023-01-01T00:00:00Z")].min().getFullYear()', {"object": {}}) == 2023
    assert env.evaluate('[timestamp("2024-01-01T00:00:00Z")].slice(0, 1)[0] + duration("1s")', {"object": {}}) == datetime.datetime(
        2024, 1, 1, 0, 0, 1, tzinfo=UTC
    )


def test_to_json_follows_cel_json_conversion() -> None:
    assert to_json({"d": datetime.timedelta(seconds=1, microseconds=500000), "n": [None, 1, "x"]}) == {"d": "1.5s", "n": [None, 1, "x"]}
    assert to_json(datetime.datetime(2024, 2, 3, 4, 5, 6, 120000, tzinfo=UTC)) == "2024-02-03T04:05:06.12Z"
    assert to_json(b"\x00\xff") == "AP8="
