"""Kyverno's admission checks of generate rules: target scopes, immutable fields on update, required permissions."""

from __future__ import annotations

import copy
from typing import Any

from stockade.lint import generate as checks
from stockade.lint.policies import validate_policy_document

SCOPED = checks.cluster_scoped_keys([("v1", "Namespace"), ("rbac.authorization.k8s.io/v1", "ClusterRole"), ("iam.example.io/v1", "Role")])


def policy(generate: dict[str, Any], *, kind: str = "ClusterPolicy", namespace: str = "", match_kind: str = "Namespace", name: str = "gen") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p"}
    if namespace:
        metadata["namespace"] = namespace
    rule = {"name": name, "match": {"any": [{"resources": {"kinds": [match_kind]}}]}, "generate": generate}
    return {"apiVersion": "kyverno.io/v1", "kind": kind, "metadata": metadata, "spec": {"rules": [rule]}}


def messages(problems: list[tuple[str, str]]) -> list[str]:
    return [message for _, message in problems]


def test_kyverno_requires_a_target_namespace_for_namespaced_kinds() -> None:
    document = policy({"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "data": {}})
    assert messages(checks.scope_problems(document, SCOPED)) == ["target namespace must be set for a namespaced resource"]


def test_kyverno_forbids_a_target_namespace_for_cluster_wide_kinds_of_crds_too() -> None:
    document = policy({"apiVersion": "iam.example.io/v1", "kind": "Role", "name": "r", "namespace": "{{request.object.metadata.name}}", "data": {}})
    assert messages(checks.scope_problems(document, SCOPED)) == ["target namespace must not be set for a cluster-wide resource"]
    document["spec"]["rules"][0]["generate"]["apiVersion"] = "rbac.authorization.k8s.io/v1"  # the namespaced Role
    assert checks.scope_problems(document, SCOPED) == []


def test_clone_list_scopes_as_kyverno_checks_them() -> None:
    mixed = policy({"namespace": "x", "cloneList": {"kinds": ["v1/Secret", "rbac.authorization.k8s.io/v1/ClusterRole"], "namespace": "default"}})
    assert "mixed scope of target resources is forbidden" in messages(checks.scope_problems(mixed, SCOPED))
    cluster_with_namespace = policy({"namespace": "x", "cloneList": {"kinds": ["rbac.authorization.k8s.io/v1/ClusterRole"], "namespace": "default"}})
    assert messages(checks.scope_problems(cluster_with_namespace, SCOPED)) == ["namespace is forbidden for cluster-wide target resources"]
    missing = policy({"namespace": "x", "cloneList": {"kinds": ["v1/Secret"]}})
    assert messages(checks.scope_problems(missing, SCOPED)) == ["namespace is required for namespaced target resources"]
    fine = policy({"namespace": "x", "cloneList": {"kinds": ["v1/Secret", "v1/ConfigMap"], "namespace": "default"}})
    assert checks.scope_problems(fine, SCOPED) == []


def test_a_namespaced_policy_generates_only_into_its_own_namespace() -> None:
    elsewhere = policy({"apiVersion": "v1", "kind": "Secret", "name": "s", "namespace": "other", "data": {}}, kind="Policy", namespace="default")
    (problem,) = messages(checks.scope_problems(elsewhere, SCOPED))
    assert "a namespaced policy cannot generate resources in other namespaces, expected: default, received: other" in problem
    cluster_target = policy({"apiVersion": "iam.example.io/v1", "kind": "Role", "name": "r", "namespace": "default", "data": {}}, kind="Policy", namespace="default")
    assert any("the target must be a namespaced resource" in m for m in messages(checks.scope_problems(cluster_target, SCOPED)))
    own = policy({"apiVersion": "v1", "kind": "Secret", "name": "s", "namespace": "default", "clone": {"name": "a", "namespace": "default"}}, kind="Policy", namespace="default")
    assert checks.scope_problems(own, SCOPED) == []


def test_kyverno_rejects_the_deprecated_generate_existing_on_policy_update() -> None:
    document = policy({"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "namespace": "x", "data": {}})
    document["spec"]["generateExistingOnPolicyUpdate"] = True
    (problem,) = validate_policy_document(document).errors
    assert problem.path == "spec.generateExistingOnPolicyUpdate"


def test_only_one_generate_pattern() -> None:
    document = policy({"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "namespace": "x", "data": {}, "clone": {"name": "a", "namespace": "b"}})
    assert "only one of generate patterns(data, clone, cloneList and foreach) can be specified" in [p.message for p in validate_policy_document(document).errors]


SYNCED = {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "namespace": "x", "synchronize": True, "data": {"data": {"a": "1"}}}


def test_immutable_generate_rule_fields_on_update() -> None:
    old = policy(copy.deepcopy(SYNCED))
    renamed = copy.deepcopy(old)
    renamed["spec"]["rules"][0]["name"] = "other"
    assert checks.update_problem(renamed, old) == ("", checks.IMMUTABLE_CHANGE)
    result = validate_policy_document(renamed, old)
    assert not result.ok and result.errors[0].message == checks.IMMUTABLE_CHANGE
    rematched = copy.deepcopy(old)
    rematched["spec"]["rules"][0]["match"] = {"any": [{"resources": {"kinds": ["Pod"]}}]}
    assert checks.update_problem(rematched, old)[1] == checks.IMMUTABLE_CHANGE


def test_mutable_generate_fields_change_freely() -> None:
    old = policy(copy.deepcopy(SYNCED))
    new = copy.deepcopy(old)
    new["spec"]["rules"][0]["generate"].update(synchronize=False, data={"data": {"b": "2"}}, orphanDownstreamOnPolicyDelete=True, generateExisting=True)
    assert checks.update_problem(new, old) == ("", "")
    assert validate_policy_document(new, old).ok


def test_without_synchronization_the_match_may_change() -> None:
    old = policy({**SYNCED, "synchronize": False})
    new = copy.deepcopy(old)
    new["spec"]["rules"][0]["match"] = {"any": [{"resources": {"kinds": ["Pod"]}}]}
    assert checks.update_problem(new, old) == ("", "")


def test_a_changed_pattern_or_a_removed_rule_only_warns_of_stale_targets() -> None:
    old = policy({"apiVersion": "v1", "kind": "Secret", "name": "s", "namespace": "x", "synchronize": True, "clone": {"name": "a", "namespace": "x"}})
    new = copy.deepcopy(old)
    new["spec"]["rules"][0]["generate"]["clone"]["name"] = "b"
    result = validate_policy_document(new, old)
    assert result.ok and result.warnings == [checks.STALE_TARGETS_WARNING]
    assert result.warnings[0].startswith("no synchronization will be performed to the old target resource upon policy updates")
    emptied = copy.deepcopy(old)
    emptied["spec"]["rules"][0] = {"name": "v", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "validate": {"pattern": {"metadata": {}}}}
    assert checks.update_problem(emptied, old) == (checks.STALE_TARGETS_WARNING, "")


def test_permission_checks_follow_kyverno() -> None:
    synced = policy(copy.deepcopy(SYNCED))
    found = [(c.user, c.verbs, c.api_version, c.kind, c.namespace) for c in checks.permission_checks(synced)]
    assert found == [("admission", ("list", "get"), "v1", "ConfigMap", "x"), ("background", ("get", "create", "update", "delete"), "v1", "ConfigMap", "x")]
    plain = policy({"apiVersion": "kyverno.io/v1", "kind": "Policy/status", "name": "p", "namespace": "x", "data": {}})
    (check,) = checks.permission_checks(plain)
    assert (check.user, check.verbs, check.kind, check.subresource) == ("background", ("get", "create"), "Policy", "status")
    variable_kind = policy({"apiVersion": "v1", "kind": "{{request.object.kind}}", "name": "p", "namespace": "x", "data": {}})
    assert checks.permission_checks(variable_kind) == []
    clone_list = policy({"namespace": "x", "cloneList": {"kinds": ["v1/Secret", "v1/ConfigMap"], "namespace": "d"}})
    assert [(c.api_version, c.kind) for c in checks.permission_checks(clone_list)] == [("v1", "Secret")]
    message = checks.permission_message("system:serviceaccount:k:bg", check, ["create"])
    assert message.endswith("system:serviceaccount:k:bg requires permissions create for resource kyverno.io/v1/Policy/status in namespace x")
