"""match/exclude semantics from Kyverno's documentation (kinds syntax, any/all, exclude precedence, user info)."""

from typing import Any

import pytest

from stockade.engine.match import RequestInfo, ResourceKind, match_reasons, parse_kind_selector, selector_matches

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1", "namespace": "prod", "labels": {"app": "web"}, "annotations": {"team": "a"}}}
DEPLOY = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "dev"}}


def matches(rule: dict[str, Any], resource: dict[str, Any] = POD, **kwargs: Any) -> bool:
    return not match_reasons(rule, resource, ResourceKind.of(resource, kwargs.pop("subresource", "")), **kwargs)


@pytest.mark.parametrize(
    ("selector", "parsed"),
    [
        ("Pod", ("*", "*", "Pod", "")),
        ("v1/Pod", ("*", "v1", "Pod", "")),
        ("Pod/exec", ("*", "*", "Pod", "exec")),
        ("Pod.status", ("*", "*", "Pod", "status")),
        ("*/scale", ("*", "*", "*", "scale")),
        ("*/*", ("*", "*", "*", "*")),
        ("apps/v1/Deployment", ("apps", "v1", "Deployment", "")),
        ("v1/Pod/exec", ("*", "v1", "Pod", "exec")),
        ("batch/v1/Job/status", ("batch", "v1", "Job", "status")),
    ],
)
def test_kind_selector_forms(selector: str, parsed: tuple[str, str, str, str]) -> None:
    assert parse_kind_selector(selector) == parsed


def test_kinds_match_group_version_and_wildcards() -> None:
    assert matches({"match": {"resources": {"kinds": ["Pod"]}}})
    assert matches({"match": {"resources": {"kinds": ["v1/Pod"]}}})
    assert not matches({"match": {"resources": {"kinds": ["v2/Pod"]}}})
    assert matches({"match": {"any": [{"resources": {"kinds": ["apps/v1/Deployment"]}}]}}, DEPLOY)
    assert not matches({"match": {"any": [{"resources": {"kinds": ["batch/v1/Deployment"]}}]}}, DEPLOY)
    assert matches({"match": {"resources": {"kinds": ["*"]}}})
    # a plain kind never matches a subresource request, Pod/exec does
    assert not matches({"match": {"resources": {"kinds": ["Pod"]}}}, subresource="exec")
    assert matches({"match": {"resources": {"kinds": ["Pod/exec"]}}}, subresource="exec")


def test_names_namespaces_annotations_with_wildcards() -> None:
    assert matches({"match": {"resources": {"kinds": ["Pod"], "names": ["web-*"]}}})
    assert not matches({"match": {"resources": {"kinds": ["Pod"], "names": ["api-?"]}}})
    assert matches({"match": {"resources": {"kinds": ["Pod"], "namespaces": ["pr?d"]}}})
    assert not matches({"match": {"resources": {"kinds": ["Pod"], "namespaces": ["dev"]}}})
    assert matches({"match": {"resources": {"kinds": ["Pod"], "annotations": {"te*": "a"}}}})
    assert not matches({"match": {"resources": {"kinds": ["Pod"], "annotations": {"team": "b"}}}})


def test_namespace_kind_matches_namespaces_by_its_own_name() -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}
    assert matches({"match": {"resources": {"kinds": ["Namespace"], "namespaces": ["prod"]}}}, namespace)


def test_any_is_or_and_all_is_and() -> None:
    any_rule = {"match": {"any": [{"resources": {"kinds": ["Deployment"]}}, {"resources": {"kinds": ["Pod"]}}]}}
    all_rule = {"match": {"all": [{"resources": {"kinds": ["Pod"]}}, {"resources": {"namespaces": ["dev"]}}]}}
    assert matches(any_rule)
    assert not matches(all_rule)


def test_exclude_wins_over_match_and_exclude_all_needs_every_filter() -> None:
    rule = {"match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "exclude": {"any": [{"resources": {"namespaces": ["prod"]}}]}}
    assert not matches(rule)
    rule_all = {
        "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
        "exclude": {"all": [{"resources": {"namespaces": ["prod"]}}, {"resources": {"names": ["api-*"]}}]},
    }
    assert matches(rule_all)


def test_empty_match_block_never_matches() -> None:
    assert not matches({"match": {"any": [{"resources": {}}]}})


def test_selectors_with_expressions_and_wildcards() -> None:
    labels = {"app": "web", "tier": "front"}
    assert selector_matches({"matchLabels": {"app": "w*"}}, labels)
    assert selector_matches({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "back"]}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["front"]}]}, labels)
    assert selector_matches({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, labels)
    assert matches({"match": {"resources": {"kinds": ["Pod"], "selector": {"matchLabels": {"app": "web"}}}}})


def test_namespace_selector_uses_namespace_labels() -> None:
    rule = {"match": {"resources": {"kinds": ["Pod"], "namespaceSelector": {"matchLabels": {"env": "prod"}}}}}
    assert matches(rule, namespace_labels={"env": "prod"})
    assert not matches(rule, namespace_labels={"env": "dev"})


def test_operations_and_user_info() -> None:
    rule = {"match": {"any": [{"resources": {"kinds": ["Pod"], "operations": ["UPDATE"]}}]}}
    assert not matches(rule, operation="CREATE")
    assert matches(rule, operation="UPDATE")
    user_rule = {"match": {"any": [{"resources": {"kinds": ["Pod"]}, "subjects": [{"kind": "User", "name": "alice"}]}]}}
    assert matches(user_rule, info=RequestInfo(username="alice"))
    assert not matches(user_rule, info=RequestInfo(username="bob"))
    roles_rule = {"match": {"any": [{"resources": {"kinds": ["Pod"]}, "clusterRoles": ["admin"]}]}}
    assert matches(roles_rule, info=RequestInfo(username="x", cluster_roles=("admin",)))
    assert not matches(roles_rule, info=RequestInfo(username="x", cluster_roles=("view",)))
    sa_rule = {"exclude": {"any": [{"subjects": [{"kind": "ServiceAccount", "name": "ci", "namespace": "tools"}]}]}, "match": {"resources": {"kinds": ["Pod"]}}}
    assert not matches(sa_rule, info=RequestInfo(username="system:serviceaccount:tools:ci"))


def test_namespaced_policy_only_sees_its_namespace() -> None:
    assert match_reasons({"match": {"resources": {"kinds": ["Pod"]}}}, POD, ResourceKind.of(POD), policy_namespace="dev")


NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}


def test_kinds_plus_any_other_criterion_is_still_checked_after_the_kind_gate() -> None:
    """A rule that selects on kinds only matches once its kind passes; any other criterion, even an empty selector
    or an exclude block, is still evaluated."""
    assert matches({"match": {"any": [{"resources": {"kinds": ["Pod"]}}]}})
    assert matches({"match": {"all": [{"resources": {"kinds": ["Pod"]}}, {"resources": {"kinds": ["v1/Pod"]}}]}})
    assert not matches({"match": {"all": [{"resources": {"kinds": ["Pod"]}}, {"resources": {"kinds": ["Deployment"]}}]}})
    assert not matches({"match": {"any": [{"resources": {"kinds": ["Pod"], "names": ["db-*"]}}]}})
    assert not matches({"match": {"any": [{"resources": {"kinds": ["Pod"], "operations": ["DELETE"]}}]}})
    assert not matches({"match": {"any": [{"resources": {"kinds": ["Namespace"], "namespaceSelector": {}}}]}}, NAMESPACE)
    assert not matches({"match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "exclude": {"any": [{"resources": {"namespaces": ["prod"]}}]}})
    info = RequestInfo(username="alice")
    assert not matches({"match": {"any": [{"resources": {"kinds": ["Pod"]}, "subjects": [{"kind": "User", "name": "bob"}]}]}}, info=info)
    assert matches({"match": {"any": [{"resources": {"kinds": ["Pod"], "names": []}}]}})
    assert match_reasons({"match": {"any": [{"resources": {"kinds": ["Pod"]}}]}}, POD, ResourceKind.of(POD), policy_namespace="dev")
