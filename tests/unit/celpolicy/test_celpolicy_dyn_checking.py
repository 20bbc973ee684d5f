"""Type-checking as cel-go does it for values of unknown or opaque type.

cel-go's checker (checker/types.go ``internalIsAssignable``) lets anything meet ``dyn``/``google.protobuf.Any``, and
treats opaque types (Quantity, IP, CIDR, URL, Semver, Kyverno's Image and GVR, the authorizer's types), durations and
timestamps as nullable, so ``quantity(q) == null`` compiles; ``?.``, ``.orValue()`` and ``.hasValue()`` apply to the
``map(string, any)`` results of Kyverno's ``resource.get``/``resource.list``.  A plain map, list or string compared
with ``null`` is refused by cel-go as well, and must stay refused here.
"""

from __future__ import annotations

import pytest

from stockade.celpolicy import CelPolicy, CelPolicyEvaluator, PolicyCompileError
from stockade.celpolicy.compiler import PolicyCompiler
from stockade.celpolicy.providers import StaticResources

ACCEPTED = [
    'resource.get("v1", "configmaps", "ns", "a").?data.?env.hasValue()',
    'resource.get("v1", "configmaps", "ns", "a").?data.orValue({}).size() > 0',
    'resource.list("v1", "configmaps", "ns").?items.orValue([]).exists(i, i.?metadata.?name.orValue("") == "x")',
    'type(resource.get("v1", "configmaps", "ns", "a")) != type(null)',
    'resource.get("v1", "configmaps", "ns", "a").data == null',
    'http.Get("http://example.com").?a.orValue(1) == 1',
    'globalContext.Get("entry", "") == null',
    'json.unmarshal("{}") == null',
    'x509.decode("pem") == null',
    'quantity("1") == null',
    'url("http://x") != null',
    'ip("1.1.1.1") == null',
    'cidr("10.0.0.0/8") == null',
    'semver("1.0.0") == null',
    'image("nginx") != null',
    'duration("1s") == null',
    'timestamp("2024-01-01T00:00:00Z") == null',
    "true ? quantity('1') : null",
    "object.?spec.?containers.orValue([]).all(c, c.?securityContext.?seLinuxOptions.?type.orValue('') == '')",
]

REFUSED = [
    '[1] == ["a"]',
    "{'a': 1} == null",
    "'a' == null",
]


@pytest.mark.parametrize("expression", ACCEPTED)
def test_compiles_as_in_cel_go(expression: str) -> None:
    PolicyCompiler().compile("policy", "spec.conditions[0].expression", expression)


@pytest.mark.parametrize("expression", REFUSED)
def test_still_refused_as_in_cel_go(expression: str) -> None:
    with pytest.raises(PolicyCompileError):
        PolicyCompiler().compile("policy", "spec.conditions[0].expression", expression)


def test_opaque_values_still_dispatch_their_member_functions() -> None:
    compiler = PolicyCompiler()
    environment = compiler.environment
    for expression in (
        "quantity('1').add(quantity('2')).isGreaterThan(quantity('2'))",
        "cidr('10.0.0.0/8').ip().family() == 4",
        "image('nginx:1').tag() == '1'",
        "semver('1.0.0').isLessThan(semver('2.0.0'))",
        "quantity('1') != null",
    ):
        assert environment.evaluate(expression, {"object": {}}) is True, expression


def _deleting_policy(condition: str) -> CelPolicy:
    return CelPolicy(
        {
            "apiVersion": "policies.kyverno.io/v1beta1",
            "kind": "DeletingPolicy",
            "metadata": {"name": "cleanup"},
            "spec": {
                "schedule": "*/1 * * * *",
                "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}]},
                "conditions": [{"name": "lookup", "expression": condition}],
            },
        }
    )


@pytest.mark.parametrize(
    ("present", "expected"),
    [(True, "pass"), (False, "fail")],
)
def test_deleting_policy_condition_over_a_looked_up_resource(present: bool, expected: str) -> None:
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "env-config", "namespace": "test"}, "data": {"env": "dev"}}
    evaluator = CelPolicyEvaluator(providers={"resource": StaticResources([config_map] if present else [])})
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "test"}}
    condition = 'resource.list("v1", "configmaps", "test").?items.orValue([]).exists(c, c.?data.?env.orValue("") == "dev")'
    response = evaluator.delete(_deleting_policy(condition), deployment)
    assert response is not None
    assert [rule.status for rule in response.rules] == [expected]
