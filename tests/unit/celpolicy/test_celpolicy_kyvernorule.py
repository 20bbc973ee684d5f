"""ClusterPolicy ``validate.cel`` rules against cluster facts: the Namespace object and paramKind scope."""

from typing import Any

import stockade.celpolicy  # noqa: F401  registers the validate.cel handler
from stockade.engine.contextloader import ContextProviders
from stockade.engine.engine import Engine, Request
from stockade.engine.match import RequestInfo
from stockade.policy.model import KyvernoPolicy

ENVIRONMENT_RULE = {
    "name": "image-matches-namespace-environment",
    "match": {"any": [{"resources": {"kinds": ["Deployment"]}}]},
    "validate": {
        "cel": {
            "variables": [
                {
                    "name": "environment",
                    "expression": "'environment' in namespaceObject.metadata.labels ? namespaceObject.metadata.labels['environment'] : 'prod'",
                },
            ],
            "expressions": [
                {
                    "expression": "object.spec.template.spec.containers.all(c, c.image.startsWith(variables.environment + '.'))",
                    "messageExpression": "'only ' + variables.environment + ' images are allowed in namespace ' + namespaceObject.metadata.name",
                }
            ],
        }
    },
}

NAMESPACES = {
    "production-ns": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "production-ns", "labels": {"kubernetes.io/metadata.name": "production-ns"}}},
    "staging-ns": {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "staging-ns", "labels": {"kubernetes.io/metadata.name": "staging-ns", "environment": "staging"}},
    },
}


def cpol(rule: dict[str, Any]) -> KyvernoPolicy:
    return KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {"rules": [rule]}})


def deployment(namespace: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": namespace},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}},
    }


def run(engine: Engine, rule: dict[str, Any], resource: dict[str, Any]) -> tuple[str, str]:
    response = engine.validate(engine.policy_context(cpol(rule), Request(resource=resource)))
    return response.rules[0].status, response.rules[0].message


def test_in_a_cluster_namespace_object_is_the_stored_namespace_with_its_labels() -> None:
    """Kyverno's validate.cel handler reads the Namespace from the cluster (client.GetNamespace) when it runs in one,
    so ``namespaceObject.metadata.labels`` holds the API server's ``kubernetes.io/metadata.name`` label at least."""
    engine = Engine(providers=ContextProviders(namespaces=NAMESPACES.get))
    assert run(engine, ENVIRONMENT_RULE, deployment("production-ns", "prod.example.com/nginx")) == (
        "pass",
        "Validation rule 'image-matches-namespace-environment' passed.",
    )
    assert run(engine, ENVIRONMENT_RULE, deployment("staging-ns", "prod.example.com/nginx")) == (
        "fail",
        "only staging images are allowed in namespace staging-ns",
    )


def test_in_a_cluster_a_missing_namespace_is_a_rule_error() -> None:
    """Kyverno answers "Error getting the resource's namespace" when the Namespace cannot be read."""
    engine = Engine(providers=ContextProviders(namespaces=NAMESPACES.get))
    status, message = run(engine, ENVIRONMENT_RULE, deployment("gone-ns", "prod.example.com/nginx"))
    assert status == "error"
    assert message.startswith("Error getting the resource's namespace")


def test_offline_namespace_object_carries_only_its_name() -> None:
    """Without a cluster Kyverno hands the rule a Namespace with just a name, so reading its labels fails the
    expression (a runtime error under the default failurePolicy Fail denies)."""
    status, message = run(Engine(), ENVIRONMENT_RULE, deployment("production-ns", "prod.example.com/nginx"))
    assert status == "fail"
    assert "variable 'environment' failed" in message and "labels" in message


PARAM_RULE = {
    "name": "namespace-name-01",
    "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
    "validate": {
        "cel": {
            "paramKind": {"apiVersion": "rules.example.com/v1", "kind": "NamespaceConstraint"},
            "paramRef": {"name": "namespace-constraint-test.example.com", "parameterNotFoundAction": "Deny"},
            "expressions": [{"expression": "object.metadata.name == params.name", "messageExpression": "'Namespace name must be ' + params.name"}],
        }
    },
}

CONSTRAINT = {"apiVersion": "rules.example.com/v1", "kind": "NamespaceConstraint", "metadata": {"name": "namespace-constraint-test.example.com"}, "name": "production-ns-01"}


def constraint_lookup(api_version: str, kind: str, namespace: str, name: str | None) -> list[dict[str, Any]]:
    if (api_version, kind, namespace, name) == ("rules.example.com/v1", "NamespaceConstraint", "", CONSTRAINT["metadata"]["name"]):
        return [CONSTRAINT]
    return []


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def test_cluster_scoped_custom_param_kind_is_resolved_through_discovery() -> None:
    """Kyverno's CollectParams asks the cluster whether paramKind is namespaced (client.IsNamespaced), so a
    cluster-scoped CRD as paramKind is read without a namespace, even for a cluster-scoped Namespace request."""
    scopes = {("rules.example.com/v1", "NamespaceConstraint"): False}
    providers = ContextProviders(kind_namespaced=lambda api_version, kind: scopes.get((api_version, kind)))
    engine = Engine(providers=providers, resource_lookup=constraint_lookup)
    assert run(engine, PARAM_RULE, namespace("production-ns-01")) == ("pass", "Validation rule 'namespace-name-01' passed.")
    assert run(engine, PARAM_RULE, namespace("testing-ns-01")) == ("fail", "Namespace name must be production-ns-01")


def test_namespaced_param_kind_for_a_cluster_scoped_request_is_an_error() -> None:
    """When paramKind is namespaced and neither paramRef.namespace nor the request gives one, Kyverno errors."""
    providers = ContextProviders(kind_namespaced=lambda api_version, kind: True)
    engine = Engine(providers=providers, resource_lookup=constraint_lookup)
    status, message = run(engine, PARAM_RULE, namespace("production-ns-01"))
    assert status == "error"
    assert "can't use namespaced paramRef to match cluster-scoped resources" in message


def test_authorizer_checks_reach_the_cluster_authorizer_for_a_service_account_or_the_requester() -> None:
    """Kyverno e2e cel/authorizor-checks: ``authorizer.serviceAccount(ns, name)...check(verb).allowed()`` is answered
    by the cluster's authorizer; checks built on ``authorizer`` itself ask about the requesting user."""
    asked: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def authorize(user: dict[str, Any], attributes: dict[str, Any]) -> tuple[str, str]:
        asked.append((user, attributes))
        return ("allow", "") if user.get("username") == "system:serviceaccount:default:test-account" else ("noOpinion", "")

    expression = "authorizer.serviceAccount('default', 'test-account').group('').resource('pods').namespace('default').check('delete').allowed()"
    rule = {"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "validate": {"cel": {"expressions": [{"expression": expression}]}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": []}}
    engine = Engine(providers=ContextProviders(authorizer=authorize))
    assert run(engine, rule, pod)[0] == "pass"
    assert asked[-1] == ({"username": "system:serviceaccount:default:test-account"}, {"group": "", "resource": "pods", "subresource": "", "namespace": "default", "name": "", "verb": "delete"})
    requester = {**rule, "validate": {"cel": {"expressions": [{"expression": "authorizer.group('').resource('pods').check('delete').allowed()"}]}}}
    request = Request(resource=pod, info=RequestInfo(username="alice", groups=("devs",)))
    response = engine.validate(engine.policy_context(cpol(requester), request))
    assert response.rules[0].status == "fail"
    assert asked[-1][0] == {"username": "alice", "groups": ["devs"]}
