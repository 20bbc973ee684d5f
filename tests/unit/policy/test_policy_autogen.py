"""Autogen expands Pod rules for controllers the way Kyverno names and rewrites them."""

from typing import Any

from stockade.policy.autogen import compute_rules


def policy(rule: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "p", "annotations": annotations or {}},
        "spec": {"rules": [rule]},
    }


POD_RULE = {
    "name": "check",
    "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
    "validate": {"message": "x {{request.object.metadata.name}}", "pattern": {"spec": {"hostNetwork": False}}},
}


def test_pod_rule_gets_controller_and_cronjob_variants() -> None:
    rules = compute_rules(policy(POD_RULE))
    names = [r["name"] for r in rules]
    assert names == ["check", "autogen-check", "autogen-cronjob-check"]
    controllers = rules[1]
    assert controllers["match"]["any"][0]["resources"]["kinds"] == [
        "apps/v1/DaemonSet",
        "apps/v1/Deployment",
        "batch/v1/Job",
        "apps/v1/ReplicaSet",
        "v1/ReplicationController",
        "apps/v1/StatefulSet",
    ]
    assert controllers["validate"]["pattern"] == {"spec": {"template": {"spec": {"hostNetwork": False}}}}
    assert controllers["validate"]["message"] == "x {{request.object.spec.template.metadata.name}}"
    cron = rules[2]
    assert cron["match"]["any"][0]["resources"]["kinds"] == ["batch/v1/CronJob"]
    assert cron["validate"]["pattern"] == {"spec": {"jobTemplate": {"spec": {"template": {"spec": {"hostNetwork": False}}}}}}
    assert "request.object.spec.jobTemplate.spec.template.metadata.name" in cron["validate"]["message"]


def test_annotation_limits_controllers_or_disables_autogen() -> None:
    rules = compute_rules(policy(POD_RULE, {"pod-policies.kyverno.io/autogen-controllers": "Deployment"}))
    assert [r["name"] for r in rules] == ["check", "autogen-check"]
    assert rules[1]["match"]["any"][0]["resources"]["kinds"] == ["apps/v1/Deployment"]
    assert [r["name"] for r in compute_rules(policy(POD_RULE, {"pod-policies.kyverno.io/autogen-controllers": "none"}))] == ["check"]


def test_rules_with_names_selectors_or_other_kinds_are_not_expanded() -> None:
    named = {**POD_RULE, "match": {"any": [{"resources": {"kinds": ["Pod"], "names": ["x"]}}]}}
    assert len(compute_rules(policy(named))) == 1
    mixed = {**POD_RULE, "match": {"any": [{"resources": {"kinds": ["Pod", "Service"]}}]}}
    assert len(compute_rules(policy(mixed))) == 1
    json_patch = {"name": "m", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "mutate": {"patchesJson6902": "[]"}}
    assert len(compute_rules(policy(json_patch))) == 1


def test_long_names_are_truncated_to_63_characters() -> None:
    rule = {**POD_RULE, "name": "r" * 70}
    generated = compute_rules(policy(rule))[1:]
    assert [len(r["name"]) for r in generated] == [63, 63]
    assert generated[0]["name"] == ("autogen-" + "r" * 70)[:63]
