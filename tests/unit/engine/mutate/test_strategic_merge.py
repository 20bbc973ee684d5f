"""patchStrategicMerge as Kyverno applies it (anchors preprocessed, then kyaml's merge)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from stockade.engine.mutate import PatchError, apply_strategic_merge


def pod(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": spec or {"containers": [{"name": "app", "image": "nginx:1.25"}]}}


def deployment(containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"template": {"spec": {"containers": containers}}}}


# --- plain merge --------------------------------------------------------------------------

def test_adds_a_label_without_touching_the_input() -> None:
    resource = pod()
    snapshot = copy.deepcopy(resource)
    outcome = apply_strategic_merge(resource, {"metadata": {"labels": {"team": "blue"}}})
    assert outcome.resource["metadata"]["labels"] == {"app": "web", "team": "blue"}
    assert not outcome.skipped
    assert resource == snapshot


def test_null_in_patch_deletes_the_field() -> None:
    outcome = apply_strategic_merge(pod(), {"metadata": {"labels": {"app": None}}})
    assert outcome.resource["metadata"]["labels"] == {}


def test_explicit_null_in_resource_is_kept_and_null_never_added() -> None:
    resource = pod()
    resource["spec"]["nodeName"] = None
    outcome = apply_strategic_merge(resource, {"spec": {"hostname": None, "priority": 1}})
    assert "nodeName" in outcome.resource["spec"] and outcome.resource["spec"]["nodeName"] is None
    assert "hostname" not in outcome.resource["spec"]
    assert outcome.resource["spec"]["priority"] == 1


def test_patch_that_changes_nothing_is_reported_as_skipped() -> None:
    outcome = apply_strategic_merge(pod(), {"metadata": {"labels": {"app": "web"}}})
    assert outcome.skipped
    assert outcome.message == "no patches applied"


# --- lists ----------------------------------------------------------------------------------

def test_containers_merge_by_name_and_new_ones_come_first() -> None:
    resource = pod(containers=[{"name": "app", "image": "nginx"}])
    patch = {"spec": {"containers": [{"name": "sidecar", "image": "envoy"}]}}
    containers = apply_strategic_merge(resource, patch).resource["spec"]["containers"]
    assert containers == [{"name": "sidecar", "image": "envoy"}, {"name": "app", "image": "nginx"}]


def test_patched_existing_element_moves_to_the_patch_position() -> None:
    resource = pod(containers=[{"name": "a", "image": "x"}, {"name": "b", "image": "y"}])
    patch = {"spec": {"containers": [{"name": "b", "imagePullPolicy": "Always"}]}}
    containers = apply_strategic_merge(resource, patch).resource["spec"]["containers"]
    assert containers == [{"name": "b", "image": "y", "imagePullPolicy": "Always"},
                          {"name": "a", "image": "x"}]


def test_env_inside_container_is_merged_by_name() -> None:
    resource = deployment([{"name": "app", "env": [{"name": "A", "value": "1"}]}])
    patch = {"spec": {"template": {"spec": {"containers": [
        {"name": "app", "env": [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}]}]}}}}
    env = apply_strategic_merge(resource, patch).resource["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}]


def test_list_without_merge_strategy_is_replaced() -> None:
    resource = pod(containers=[{"name": "a"}], tolerations=[{"key": "one"}])
    outcome = apply_strategic_merge(resource, {"spec": {"tolerations": [{"key": "two"}]}})
    assert outcome.resource["spec"]["tolerations"] == [{"key": "two"}]


def test_lists_of_custom_resources_are_replaced_even_with_names() -> None:
    resource = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
                "spec": {"items": [{"name": "a", "v": 1}, {"name": "b", "v": 2}]}}
    outcome = apply_strategic_merge(resource, {"spec": {"items": [{"name": "b", "v": 3}]}})
    assert outcome.resource["spec"]["items"] == [{"name": "b", "v": 3}]


def test_finalizers_merge_by_value_with_new_values_first() -> None:
    resource = pod()
    resource["metadata"]["finalizers"] = ["a", "b"]
    outcome = apply_strategic_merge(resource, {"metadata": {"finalizers": ["c", "a"]}})
    assert outcome.resource["metadata"]["finalizers"] == ["c", "a", "b"]


def test_container_ports_without_protocol_match_on_port() -> None:
    resource = pod(containers=[{"name": "a", "ports": [{"containerPort": 80}]}])
    patch = {"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80, "name": "http"}]}]}}
    ports = apply_strategic_merge(resource, patch).resource["spec"]["containers"][0]["ports"]
    assert ports == [{"containerPort": 80, "name": "http"}]


def test_patch_delete_directive_removes_a_list_element() -> None:
    resource = pod(containers=[{"name": "a"}, {"name": "b"}])
    outcome = apply_strategic_merge(resource, {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}})
    assert outcome.resource["spec"]["containers"] == [{"name": "b"}]


def test_patch_replace_directive_on_a_map_drops_other_keys() -> None:
    resource = pod()
    outcome = apply_strategic_merge(resource, {"metadata": {"labels": {"$patch": "replace", "only": "me"}}})
    assert outcome.resource["metadata"]["labels"] == {"only": "me"}


def test_patch_replace_directive_on_a_merged_list() -> None:
    resource = pod(containers=[{"name": "a"}, {"name": "b"}])
    patch = {"spec": {"containers": [{"$patch": "replace"}, {"name": "c"}]}}
    outcome = apply_strategic_merge(resource, patch)
    assert outcome.resource["spec"]["containers"] == [{"name": "c"}]


def test_unknown_directive_is_an_error() -> None:
    with pytest.raises(PatchError, match="unknown patch strategy 'rename'"):
        apply_strategic_merge(pod(), {"metadata": {"labels": {"$patch": "rename"}}})


def test_retain_keys_is_not_a_directive_for_kyaml() -> None:
    outcome = apply_strategic_merge(pod(), {"spec": {"$retainKeys": ["containers"]}})
    assert outcome.resource["spec"]["$retainKeys"] == ["containers"]


def test_map_patched_onto_scalar_is_an_error() -> None:
    with pytest.raises(PatchError, match="wrong node kind"):
        apply_strategic_merge(pod(), {"metadata": {"name": {"first": "x"}}})


# --- anchors --------------------------------------------------------------------------------

def test_add_if_not_present_only_adds_missing_fields() -> None:
    resource = pod()
    resource["metadata"]["annotations"] = {"keep": "old"}
    patch = {"metadata": {"annotations": {"+(keep)": "new", "+(added)": "yes"}}}
    outcome = apply_strategic_merge(resource, patch)
    assert outcome.resource["metadata"]["annotations"] == {"keep": "old", "added": "yes"}


def test_add_if_not_present_in_list_element_adds_to_container_lacking_it() -> None:
    resource = pod(containers=[{"name": "a"}])
    patch = {"spec": {"containers": [{"+(imagePullPolicy)": "Always"}]}}
    containers = apply_strategic_merge(resource, patch).resource["spec"]["containers"]
    assert containers == [{"name": "a", "imagePullPolicy": "Always"}]


def test_add_if_not_present_in_list_is_resolved_once_for_all_elements() -> None:
    """Kyverno resolves `+()` on one working copy shared by all resource elements, so once
    the first container already has the field, later containers do not get it either."""
    resource = pod(containers=[{"name": "a", "imagePullPolicy": "Never"}, {"name": "b"}])
    patch = {"spec": {"containers": [{"+(imagePullPolicy)": "Always"}]}}
    outcome = apply_strategic_merge(resource, patch)
    assert outcome.skipped
    assert outcome.resource["spec"]["containers"] == resource["spec"]["containers"]


def test_conditional_anchor_on_map_gates_siblings() -> None:
    patch = {"metadata": {"labels": {"(app)": "web", "tier": "front"}}}
    assert apply_strategic_merge(pod(), patch).resource["metadata"]["labels"]["tier"] == "front"
    failing = {"metadata": {"labels": {"(app)": "db", "tier": "front"}}}
    outcome = apply_strategic_merge(pod(), failing)
    assert outcome.skipped
    assert outcome.reason.startswith("condition failed:")
    assert "tier" not in outcome.resource["metadata"]["labels"]


def test_conditional_anchor_with_missing_key_skips() -> None:
    outcome = apply_strategic_merge(pod(), {"spec": {"(hostNetwork)": True, "dnsPolicy": "Default"}})
    assert outcome.skipped
    assert 'could not found "hostNetwork" key in the resource' in outcome.reason


def test_conditional_anchor_in_list_applies_to_each_matching_element() -> None:
    resource = pod(containers=[{"name": "a", "image": "nginx:latest"}, {"name": "b", "image": "redis:7"}])
    patch = {"spec": {"containers": [{"(image)": "*:latest", "imagePullPolicy": "Always"}]}}
    containers = apply_strategic_merge(resource, patch).resource["spec"]["containers"]
    by_name = {container["name"]: container for container in containers}
    assert by_name["a"]["imagePullPolicy"] == "Always"
    assert "imagePullPolicy" not in by_name["b"]
    assert all("(image)" not in container for container in containers)


def test_conditional_anchor_in_absent_list_adds_nothing() -> None:
    patch = {"spec": {"initContainers": [{"(name)": "*", "env": [{"name": "X", "value": "1"}]}]}}
    outcome = apply_strategic_merge(pod(), patch)
    assert outcome.skipped
    assert "initContainers" not in outcome.resource["spec"]


def test_global_anchor_failure_skips_whole_patch() -> None:
    patch = {"metadata": {"annotations": {"x": "y"}},
             "spec": {"containers": [{"<(image)": "busybox*"}]}}
    outcome = apply_strategic_merge(pod(), patch)
    assert outcome.skipped
    assert outcome.reason.startswith("global condition failed:")
    assert "annotations" not in outcome.resource["metadata"]


def test_global_anchor_in_list_passes_when_any_element_matches() -> None:
    resource = pod(containers=[{"name": "a"}], volumes=[{"name": "v1", "hostPath": {"path": "/x"}},
                                                        {"name": "v2", "emptyDir": {}}])
    patch = {"metadata": {"annotations": {"safe-to-evict": "true"}},
             "spec": {"volumes": [{"<(emptyDir)": {}}]}}
    outcome = apply_strategic_merge(resource, patch)
    assert outcome.resource["metadata"]["annotations"] == {"safe-to-evict": "true"}
    assert outcome.resource["spec"]["volumes"] == resource["spec"]["volumes"]


def test_scalar_condition_compares_yaml_text_of_numbers() -> None:
    resource = deployment([{"name": "a"}])
    resource["spec"]["replicas"] = 3
    outcome = apply_strategic_merge(resource, {"spec": {"(replicas)": 3, "paused": True}})
    assert outcome.resource["spec"]["paused"] is True


def test_negated_condition() -> None:
    resource = pod(containers=[{"name": "a", "image": "nginx:latest"}, {"name": "b", "image": "redis:7"}])
    patch = {"spec": {"containers": [{"(image)": "!*:latest", "imagePullPolicy": "IfNotPresent"}]}}
    containers = apply_strategic_merge(resource, patch).resource["spec"]["containers"]
    by_name = {container["name"]: container for container in containers}
    assert by_name["b"]["imagePullPolicy"] == "IfNotPresent"
    assert "imagePullPolicy" not in by_name["a"]
