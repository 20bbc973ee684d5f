"""Kind selectors with subresources resolve to webhook rules as Kyverno's webhook controller resolves them.

Kyverno's mergeWebhook sends every kind selector that names a kind (not ``*``) through discovery (FindResources):
the top-level resources whose group/version/kind match, then, when the selector has a subresource part, the
subresources of those parents that discovery serves (``<plural>/<subresource>`` matched with wildcards), under the
parent's group and version and with the subresource's own scope; only those subresources are registered, and a
selector discovery cannot resolve registers nothing.  ``*`` kinds skip discovery and keep the policy's scope."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.controllers.webhookconfig import ApiResource, WebhookTarget, build_configurations, find_resources, static_resolver
from stockade.policy.model import KyvernoPolicy

# What discovery lists for core/v1, apps/v1 and a CRD group serving a same-named plural ("pods") without subresources.
SERVED: tuple[ApiResource, ...] = (
    ApiResource("", "v1", "pods", "Pod"),
    ApiResource("", "v1", "pods/attach", "PodAttachOptions"),
    ApiResource("", "v1", "pods/binding", "Binding"),
    ApiResource("", "v1", "pods/ephemeralcontainers", "Pod"),
    ApiResource("", "v1", "pods/eviction", "Eviction"),
    ApiResource("", "v1", "pods/exec", "PodExecOptions"),
    ApiResource("", "v1", "pods/log", "Pod"),
    ApiResource("", "v1", "pods/portforward", "PodPortForwardOptions"),
    ApiResource("", "v1", "pods/proxy", "PodProxyOptions"),
    ApiResource("", "v1", "pods/status", "Pod"),
    ApiResource("", "v1", "namespaces", "Namespace", namespaced=False),
    ApiResource("", "v1", "namespaces/finalize", "Namespace", namespaced=False),
    ApiResource("", "v1", "namespaces/status", "Namespace", namespaced=False),
    ApiResource("", "v1", "configmaps", "ConfigMap"),
    ApiResource("apps", "v1", "deployments", "Deployment"),
    ApiResource("apps", "v1", "deployments/scale", "Scale"),
    ApiResource("apps", "v1", "deployments/status", "Deployment"),
    ApiResource("apps", "v1", "statefulsets", "StatefulSet"),
    ApiResource("apps", "v1", "statefulsets/scale", "Scale"),
    ApiResource("metrics.example.io", "v1beta1", "pods", "PodMetrics"),
)
POD_SUBRESOURCES = {"attach", "binding", "ephemeralcontainers", "eviction", "exec", "log", "portforward", "proxy", "status"}


def names(found: list[ApiResource]) -> set[tuple[str, str, str]]:
    return {(r.group, r.version, r.resource) for r in found}


def test_kind_with_all_subresources_is_every_served_subresource_and_not_the_parent() -> None:
    found = find_resources(SERVED, "*", "*", "Pod", "*")
    assert names(found) == {("", "v1", f"pods/{sub}") for sub in POD_SUBRESOURCES}


def test_one_subresource_and_unknown_ones() -> None:
    assert names(find_resources(SERVED, "*", "*", "Pod", "exec")) == {("", "v1", "pods/exec")}
    assert find_resources(SERVED, "*", "*", "Pod", "foo") == []
    assert find_resources(SERVED, "*", "*", "Foo", "*") == []
    # Scale is only ever the kind of subresources: no top-level resource has it
    assert find_resources(SERVED, "*", "*", "Scale", "") == []


def test_subresources_stay_under_their_parents_group_and_version() -> None:
    assert names(find_resources(SERVED, "apps", "v1", "Deployment", "scale")) == {("apps", "v1", "deployments/scale")}
    assert names(find_resources(SERVED, "*", "*", "*", "scale")) == {("apps", "v1", "deployments/scale"), ("apps", "v1", "statefulsets/scale")}
    assert find_resources(SERVED, "apps", "v2", "Deployment", "scale") == []


def test_all_kinds_and_subresources_are_both() -> None:
    found = names(find_resources(SERVED, "*", "*", "*", "*"))
    assert {("", "v1", "pods"), ("", "v1", "pods/exec"), ("apps", "v1", "deployments"), ("apps", "v1", "deployments/scale")} <= found
    assert ("metrics.example.io", "v1beta1", "pods/exec") not in found


def policy(*kinds: str, operations: list[str] | None = None, kind: str = "ClusterPolicy") -> KyvernoPolicy:
    resources: dict[str, Any] = {"kinds": list(kinds)}
    if operations:
        resources["operations"] = operations
    metadata: dict[str, Any] = {"name": "p", "annotations": {"pod-policies.kyverno.io/autogen-controllers": "none"}}
    if kind == "Policy":
        metadata["namespace"] = "team"
    return KyvernoPolicy({
        "apiVersion": "kyverno.io/v1",
        "kind": kind,
        "metadata": metadata,
        "spec": {"rules": [{"name": "r", "match": {"any": [{"resources": resources}]}, "validate": {"message": "m", "pattern": {"metadata": {"labels": {"team": "?*"}}}}}]},
    })


def validating_rules(*policies: KyvernoPolicy) -> list[dict[str, Any]]:
    _, validating = build_configurations(list(policies), WebhookTarget(url="https://x"), b"ca", static_resolver(SERVED))
    return [rule for webhook in validating["webhooks"] for rule in webhook["rules"]]


def test_pod_all_subresources_registers_them_namespaced_with_every_operation() -> None:
    (rule,) = validating_rules(policy("Pod/*"))
    assert rule == {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["CONNECT", "CREATE", "DELETE", "UPDATE"],
        "resources": sorted(f"pods/{sub}" for sub in POD_SUBRESOURCES),
        "scope": "Namespaced",
    }


def test_cluster_scoped_subresources_keep_their_own_scope() -> None:
    (rule,) = validating_rules(policy("Namespace/status", operations=["UPDATE"]))
    assert rule == {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["namespaces/status"], "scope": "*"}


def test_unresolvable_selectors_register_nothing() -> None:
    assert validating_rules(policy("Pod/foo")) == []
    assert validating_rules(policy("Scale")) == []
    # the resolvable selector of the same rule still counts
    (rule,) = validating_rules(policy("Pod/foo", "Pod/exec", operations=["CONNECT"]))
    assert rule["resources"] == ["pods/exec"]


def test_wildcard_kind_with_a_subresource_skips_discovery_and_takes_the_policys_scope() -> None:
    assert validating_rules(policy("*/scale")) == [
        {"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["CONNECT", "CREATE", "DELETE", "UPDATE"], "resources": ["*/scale"], "scope": "*"}
    ]
    assert {r["scope"] for r in validating_rules(policy("*/scale", kind="Policy"))} == {"Namespaced"}


@pytest.mark.parametrize("selector", ["Pod/exec", "v1/Pod/exec"])
def test_builtin_table_knows_the_pod_subresources(selector: str) -> None:
    _, validating = build_configurations([policy(selector, operations=["CONNECT"])], WebhookTarget(url="https://x"), b"ca", static_resolver())
    (webhook,) = validating["webhooks"]
    assert webhook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CONNECT"], "resources": ["pods/exec"], "scope": "Namespaced"}]
