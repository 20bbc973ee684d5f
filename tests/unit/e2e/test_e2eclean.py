"""The e2e runner's isolation decision: what a unit left behind, measured against the state after install."""

from __future__ import annotations

from typing import Any

from stockade.testing.e2eclean import (
    ALWAYS_REMOVED,
    CleanupReport,
    ClusterObject,
    ObjectKey,
    missing_since_baseline,
    object_from_metadata,
    plan_cleanup,
    take_baseline,
)


def obj(group: str, resource: str, name: str, namespace: str = "", kind: str = "Thing", **flags: Any) -> ClusterObject:
    return ClusterObject(ObjectKey(group, resource, namespace, name), kind, "v1", **flags)


INSTALL = [
    obj("", "namespaces", "default", kind="Namespace"),
    obj("", "namespaces", "kyverno", kind="Namespace"),
    obj("", "namespaces", "kube-system", kind="Namespace"),
    obj("", "configmaps", "kyverno", "kyverno", kind="ConfigMap"),
    obj("", "serviceaccounts", "default", "default", kind="ServiceAccount"),
    obj("rbac.authorization.k8s.io", "clusterroles", "cluster-admin", kind="ClusterRole"),
    obj("apiextensions.k8s.io", "customresourcedefinitions", "clusterpolicies.kyverno.io", kind="CustomResourceDefinition"),
    obj("", "events", "boot.123", "default", kind="Event"),
]


def labels(plan: list[ClusterObject]) -> list[str]:
    return [o.label for o in plan]


def test_an_unchanged_cluster_needs_nothing_and_volatile_kinds_are_never_diffed() -> None:
    baseline = take_baseline(INSTALL)
    assert ObjectKey("", "events", "default", "boot.123") not in baseline.keys
    assert baseline.namespaces == {"default", "kyverno", "kube-system"}
    later = [
        *INSTALL,
        obj("", "events", "pod.456", "default", kind="Event"),
        obj("coordination.k8s.io", "leases", "kube-scheduler", "kube-system", kind="Lease"),
        obj("discovery.k8s.io", "endpointslices", "kubernetes-x1", "default", kind="EndpointSlice"),
        obj("apiregistration.k8s.io", "apiservices", "v1.example.com", kind="APIService"),
    ]
    assert plan_cleanup(baseline, later) == []


def test_a_policy_left_by_a_script_is_removed_wherever_it_is_and_before_anything_else() -> None:
    baseline = take_baseline(INSTALL)
    later = [
        *INSTALL,
        obj("", "namespaces", "aa-test", kind="Namespace"),
        obj("", "configmaps", "leftover", "default", kind="ConfigMap"),
        obj("kyverno.io", "clusterpolicies", "deny-all", kind="ClusterPolicy"),
        obj("kyverno.io", "policies", "ns-policy", "aa-test", kind="Policy"),
        obj("policies.kyverno.io", "namespacedvalidatingpolicies", "nvpol", "default", kind="NamespacedValidatingPolicy"),
        obj("kyverno.io", "updaterequests", "ur-1", "kyverno", kind="UpdateRequest"),
        obj("admissionregistration.k8s.io", "mutatingadmissionpolicybindings", "b", kind="MutatingAdmissionPolicyBinding"),
    ]
    assert labels(plan_cleanup(baseline, later)) == [
        "MutatingAdmissionPolicyBinding/b",
        "ClusterPolicy/deny-all",
        "Policy/aa-test/ns-policy",
        "UpdateRequest/kyverno/ur-1",
        "NamespacedValidatingPolicy/default/nvpol",
        "ConfigMap/default/leftover",
        "Namespace/aa-test",
    ]


def test_every_policy_kind_of_the_brief_is_always_removed() -> None:
    for group_resource in [
        ("kyverno.io", "clusterpolicies"), ("kyverno.io", "policies"), ("kyverno.io", "policyexceptions"),
        ("kyverno.io", "cleanuppolicies"), ("kyverno.io", "clustercleanuppolicies"), ("kyverno.io", "globalcontextentries"),
        ("kyverno.io", "updaterequests"), ("policies.kyverno.io", "validatingpolicies"), ("policies.kyverno.io", "namespacedmutatingpolicies"),
        ("policies.kyverno.io", "namespaceddeletingpolicies"), ("policies.kyverno.io", "imagevalidatingpolicies"),
        ("policies.kyverno.io", "generatingpolicies"), ("policies.kyverno.io", "policyexceptions"),
        ("admissionregistration.k8s.io", "validatingadmissionpolicies"), ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"),
        ("admissionregistration.k8s.io", "mutatingadmissionpolicies"),
    ]:
        assert group_resource in ALWAYS_REMOVED, group_resource
    # a policy that was there at install time goes too: the standard install has none
    baseline = take_baseline([*INSTALL, obj("kyverno.io", "clusterpolicies", "preinstalled", kind="ClusterPolicy")])
    assert labels(plan_cleanup(baseline, [*INSTALL, obj("kyverno.io", "clusterpolicies", "preinstalled", kind="ClusterPolicy")])) == ["ClusterPolicy/preinstalled"]


def test_content_of_removed_namespaces_owned_objects_and_managed_webhooks_are_left_to_their_owners() -> None:
    baseline = take_baseline(INSTALL)
    later = [
        *INSTALL,
        obj("", "namespaces", "scratch", kind="Namespace"),
        obj("", "configmaps", "in-scratch", "scratch", kind="ConfigMap"),
        obj("", "pods", "web-abc", "default", kind="Pod", owned=True),
        obj("apps", "deployments", "web", "default", kind="Deployment"),
        obj("admissionregistration.k8s.io", "validatingwebhookconfigurations", "kyverno-resource-validating-webhook-cfg-extra", kind="ValidatingWebhookConfiguration", managed=True),
        obj("apiextensions.k8s.io", "customresourcedefinitions", "foos.example.com", kind="CustomResourceDefinition"),
        obj("", "namespaces", "going", kind="Namespace", deleting=True),
    ]
    assert labels(plan_cleanup(baseline, later)) == [
        "CustomResourceDefinition/foos.example.com",
        "Deployment/default/web",
        "Namespace/scratch",
    ]


def test_metadata_decides_ownership_management_and_deletion() -> None:
    managed = object_from_metadata(
        "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration",
        {"name": "kyverno-resource-validating-webhook-cfg", "labels": {"webhook.kyverno.io/managed-by": "kyverno"}},
    )
    assert managed.managed and not managed.owned
    foreign = object_from_metadata("", "v1", "configmaps", "ConfigMap", {"name": "c", "namespace": "default", "labels": {"webhook.kyverno.io/managed-by": "someone-else"}})
    assert not foreign.managed and foreign.key == ObjectKey("", "configmaps", "default", "c") and foreign.api_version == "v1"
    owned = object_from_metadata("apps", "v1", "replicasets", "ReplicaSet", {"name": "r", "namespace": "d", "ownerReferences": [{"kind": "Deployment"}], "deletionTimestamp": "2026-01-01T00:00:00Z"})
    assert owned.owned and owned.deleting and owned.api_version == "apps/v1"


def test_install_objects_a_test_deleted_are_reported_and_the_report_reads_plainly() -> None:
    baseline = take_baseline(INSTALL)
    assert missing_since_baseline(baseline, [o for o in INSTALL if o.key.resource != "configmaps"]) == [ObjectKey("", "configmaps", "kyverno", "kyverno")]
    assert CleanupReport().describe() == "nothing left behind"
    text = CleanupReport(removed=[f"ConfigMap/default/c{i}" for i in range(14)], stuck=["Namespace/x"]).describe(limit=2)
    assert text == "removed 14 left behind: ConfigMap/default/c0, ConfigMap/default/c1, ... (12 more); still terminating: Namespace/x"
