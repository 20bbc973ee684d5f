"""GeneratingPolicy in the generate controller, against an in-memory cluster: labels, synchronize, clone source
label, no adoption of foreign objects, policy removal with and without orphaning, generateExisting."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stockade.celpolicy.model import CelPolicy
from stockade.controllers.generate import (
    GenerateController,
    TriggerEvent,
    WatchedChange,
    evaluation_enabled,
    gpol_labels,
    gpol_selector,
    owned_by,
)
from stockade.policy.loader import Document
from tests.unit.controllers.fakecluster import FakeCluster, selector_matches

NETPOL = (
    '[{"kind": dyn("NetworkPolicy"), "apiVersion": dyn("networking.k8s.io/v1"), '
    '"metadata": dyn({"name": "default-deny", "namespace": string(object.metadata.namespace)}), '
    '"spec": dyn({"podSelector": dyn({}), "policyTypes": dyn(["Ingress"])})}]'
)


def gpol(name: str = "gen", *, sync: bool = True, orphan: bool = False, existing: bool = False, expression: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "policies.kyverno.io/v1beta1",
        "kind": "GeneratingPolicy",
        "metadata": {"name": name},
        "spec": {
            "evaluation": {"synchronize": {"enabled": sync}, "orphanDownstreamOnPolicyDelete": {"enabled": orphan}, "generateExisting": {"enabled": existing}},
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]},
            "matchConditions": [{"name": "wanted", "expression": "has(object.data) && 'go' in object.data"}],
            "generate": [{"expression": expression or f"generator.Apply(object.metadata.namespace, {NETPOL})"}],
        },
    }


@dataclass
class Snapshot:
    documents: tuple[Document, ...]
    policies: list[Any] = field(default_factory=list)
    errors: dict[Any, str] = field(default_factory=dict)


class Store:
    def __init__(self, *docs: dict[str, Any]) -> None:
        self.listeners: list[Any] = []
        self.set(*docs)

    def set(self, *docs: dict[str, Any]) -> None:
        self.snapshot = Snapshot(tuple(Document(d, "test", i) for i, d in enumerate(docs)))


def controller(cluster: FakeCluster, store: Store) -> GenerateController:
    return GenerateController(None, store, cluster_data=cluster)  # type: ignore[arg-type]


def trigger(cluster: FakeCluster, name: str = "cm", namespace: str = "ns1", data: dict[str, str] | None = None) -> dict[str, Any]:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data if data is not None else {"go": "1"}}
    existing = cluster.find("ConfigMap", namespace, name)
    if existing is not None:
        body["metadata"]["uid"] = existing["metadata"]["uid"]
    return cluster.add(body)


def test_settings_and_labels() -> None:
    policy = CelPolicy(gpol(sync=True, orphan=True))
    assert evaluation_enabled(policy, "synchronize") and evaluation_enabled(policy, "orphanDownstreamOnPolicyDelete")
    assert not evaluation_enabled(policy, "generateExisting")
    assert not evaluation_enabled(CelPolicy({"kind": "GeneratingPolicy", "spec": {}}), "synchronize")
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n", "uid": "u1"}}
    labels = gpol_labels(policy, cm, "src")
    assert labels["generate.kyverno.io/trigger-version"] == "v1" and labels["generate.kyverno.io/trigger-group"] == ""
    assert labels["generate.kyverno.io/source-uid"] == "src" and "generate.kyverno.io/rule-name" not in labels
    assert selector_matches(gpol_selector(policy, "u1"), labels)
    assert not selector_matches(gpol_selector(policy), {**labels, "generate.kyverno.io/rule-name": "r"})
    assert owned_by({"metadata": {"labels": labels}}, policy, "u1") and not owned_by({"metadata": {"labels": labels}}, policy, "u2")


def test_create_labels_downstream_and_sync_follows_trigger() -> None:
    cluster = FakeCluster()
    store = Store(gpol())
    ctl = controller(cluster, store)
    cm = trigger(cluster)
    assert ctl.process_event(TriggerEvent("CREATE", cm)) == []
    netpol = cluster.find("NetworkPolicy", "ns1", "default-deny")
    assert netpol is not None
    labels = netpol["metadata"]["labels"]
    assert labels["generate.kyverno.io/policy-name"] == "gen"
    assert labels["generate.kyverno.io/trigger-uid"] == cm["metadata"]["uid"]
    assert labels["generate.kyverno.io/trigger-name"] == "cm" and labels["generate.kyverno.io/trigger-kind"] == "ConfigMap"
    # drift is repaired on the next trigger update
    cluster.add({**netpol, "spec": {"podSelector": {}, "policyTypes": ["Egress"]}})
    cm = trigger(cluster)
    assert ctl.process_event(TriggerEvent("UPDATE", cm, cm)) == []
    assert cluster.find("NetworkPolicy", "ns1", "default-deny")["spec"]["policyTypes"] == ["Ingress"]
    # the trigger stops matching: its downstream goes
    cm = trigger(cluster, data={})
    assert ctl.process_event(TriggerEvent("UPDATE", cm, cm)) == []
    assert cluster.find("NetworkPolicy", "ns1", "default-deny") is None


def test_delete_of_one_trigger_removes_only_its_downstream() -> None:
    cluster = FakeCluster()
    ctl = controller(cluster, Store(gpol()))
    first, second = trigger(cluster, "a", "ns1"), trigger(cluster, "b", "ns2")
    ctl.process_event(TriggerEvent("CREATE", first))
    ctl.process_event(TriggerEvent("CREATE", second))
    cluster.request("DELETE", "/api/v1/namespaces/ns1/configmaps/a")
    assert ctl.process_event(TriggerEvent("DELETE", {}, first)) == []
    assert cluster.find("NetworkPolicy", "ns1", "default-deny") is None
    assert cluster.find("NetworkPolicy", "ns2", "default-deny") is not None


def test_without_sync_a_trigger_update_renders_again_and_nothing_is_deleted() -> None:
    """Kyverno's generator.apply updates an existing object this policy made for this trigger on every evaluation
    (synchronize only adds watching the copies): a drifted copy is brought back by the trigger's next UPDATE, never
    by the drift itself, and deleting the trigger leaves the copy."""
    cluster = FakeCluster()
    ctl = controller(cluster, Store(gpol(sync=False)))
    cm = trigger(cluster)
    ctl.process_event(TriggerEvent("CREATE", cm))
    netpol = cluster.find("NetworkPolicy", "ns1", "default-deny")
    cluster.add({**netpol, "spec": {"podSelector": {}, "policyTypes": ["Egress"]}})
    assert cluster.find("NetworkPolicy", "ns1", "default-deny")["spec"]["policyTypes"] == ["Egress"]
    ctl.process_event(TriggerEvent("UPDATE", cm, cm))
    assert cluster.find("NetworkPolicy", "ns1", "default-deny")["spec"]["policyTypes"] == ["Ingress"]
    ctl.process_event(TriggerEvent("DELETE", {}, cm))
    assert cluster.find("NetworkPolicy", "ns1", "default-deny") is not None


def test_foreign_object_of_the_same_name_is_not_adopted() -> None:
    cluster = FakeCluster()
    foreign = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "default-deny", "namespace": "ns1"}, "spec": {"podSelector": {}}}
    cluster.add(foreign)
    ctl = controller(cluster, Store(gpol()))
    cm = trigger(cluster)
    assert ctl.process_event(TriggerEvent("CREATE", cm)) == []
    kept = cluster.find("NetworkPolicy", "ns1", "default-deny")
    assert "labels" not in kept["metadata"] and kept["spec"] == {"podSelector": {}}


def test_clone_carries_source_uid() -> None:
    cluster = FakeCluster()
    source = cluster.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "src", "namespace": "default"}, "data": {"k": "dg=="}})
    expression = 'generator.Apply(object.metadata.namespace, [resource.Get("v1", "secrets", "default", "src")])'
    ctl = controller(cluster, Store(gpol(expression=expression)))
    assert ctl.process_event(TriggerEvent("CREATE", trigger(cluster))) == []
    copy = cluster.find("Secret", "ns1", "src")
    assert copy is not None and copy["data"] == {"k": "dg=="}
    assert copy["metadata"]["labels"]["generate.kyverno.io/source-uid"] == source["metadata"]["uid"]
    assert copy["metadata"]["uid"] != source["metadata"]["uid"]


def test_policy_removal_deletes_synchronized_downstream_unless_orphaned() -> None:
    for orphan in (False, True):
        cluster = FakeCluster()
        store = Store(gpol(orphan=orphan))
        ctl = controller(cluster, store)
        ctl.reconcile_policies()
        ctl.process_event(TriggerEvent("CREATE", trigger(cluster)))
        store.set()
        ctl.reconcile_policies()
        assert (cluster.find("NetworkPolicy", "ns1", "default-deny") is not None) == orphan


def test_generate_existing_and_the_periodic_pass() -> None:
    """Kyverno's periodic pass re-applies a synchronized policy to the triggers its downstream names: one that no
    longer matches loses its downstream; one deleted unseen keeps it (its DELETE admission would have removed it)."""
    cluster = FakeCluster()
    trigger(cluster, "a", "ns1")
    trigger(cluster, "c", "ns3")
    trigger(cluster, "b", "ns2", data={})  # does not match
    store = Store(gpol(existing=True))
    ctl = controller(cluster, store)
    ctl.reconcile_policies()
    assert cluster.find("NetworkPolicy", "ns1", "default-deny") is not None
    assert cluster.find("NetworkPolicy", "ns3", "default-deny") is not None
    assert cluster.find("NetworkPolicy", "ns2", "default-deny") is None
    cluster.request("DELETE", "/api/v1/namespaces/ns1/configmaps/a")  # a trigger deleted while we were not told
    trigger(cluster, "c", "ns3", data={})  # a trigger changed unseen so that it no longer matches
    ctl.resync()
    assert cluster.find("NetworkPolicy", "ns1", "default-deny") is not None
    assert cluster.find("NetworkPolicy", "ns3", "default-deny") is None


def test_a_synchronized_policy_without_generate_existing_never_reaches_triggers_it_did_not_see() -> None:
    """Kyverno's policy events for a synchronized GeneratingPolicy only revisit the triggers its downstream names
    (none known: a cache-restore pass that writes nothing); existing triggers get downstream only with
    generateExisting."""
    cluster = FakeCluster()
    trigger(cluster, "a", "ns1")
    store = Store(gpol())
    ctl = controller(cluster, store)
    ctl.reconcile_policies()
    ctl.resync()
    assert cluster.find("NetworkPolicy", "ns1", "default-deny") is None
    changed = gpol()
    changed["spec"]["generate"] = [{"expression": f"generator.Apply(object.metadata.namespace, {NETPOL.replace('Ingress', 'Egress')})"}]
    store.set(changed)
    ctl.reconcile_policies()
    assert cluster.find("NetworkPolicy", "ns1", "default-deny") is None
    ctl.process_event(TriggerEvent("CREATE", trigger(cluster, "d", "ns4")))
    assert cluster.find("NetworkPolicy", "ns4", "default-deny") is not None
    store.set(gpol())  # a spec change: the trigger its downstream names is regenerated, the other one still not
    ctl.reconcile_policies()
    assert (cluster.find("NetworkPolicy", "ns4", "default-deny") or {}).get("spec", {}).get("policyTypes") == ["Ingress"]
    assert cluster.find("NetworkPolicy", "ns1", "default-deny") is None


def test_kyverno_reverts_an_edited_or_deleted_synchronized_downstream_object_from_the_watch() -> None:
    cluster = FakeCluster()
    ctl = controller(cluster, Store(gpol()))
    ctl.process_event(TriggerEvent("CREATE", trigger(cluster)))
    netpol = cluster.find("NetworkPolicy", "ns1", "default-deny") or {}
    edited = cluster.add({**netpol, "spec": {"podSelector": {}, "policyTypes": ["Egress"]}})
    assert ctl.process_watched_change(WatchedChange("MODIFIED", edited)) == []
    assert (cluster.find("NetworkPolicy", "ns1", "default-deny") or {})["spec"]["policyTypes"] == ["Ingress"]
    cluster.request("DELETE", "/apis/networking.k8s.io/v1/namespaces/ns1/networkpolicies/default-deny")
    assert ctl.process_watched_change(WatchedChange("DELETED", edited)) == []
    assert cluster.find("NetworkPolicy", "ns1", "default-deny") is not None


def test_without_sync_a_watched_change_is_left_alone() -> None:
    cluster = FakeCluster()
    ctl = controller(cluster, Store(gpol(sync=False)))
    ctl.process_event(TriggerEvent("CREATE", trigger(cluster)))
    netpol = cluster.find("NetworkPolicy", "ns1", "default-deny") or {}
    edited = cluster.add({**netpol, "spec": {"podSelector": {}, "policyTypes": ["Egress"]}})
    assert ctl.process_watched_change(WatchedChange("MODIFIED", edited)) == []
    assert (cluster.find("NetworkPolicy", "ns1", "default-deny") or {})["spec"]["policyTypes"] == ["Egress"]


def test_a_watched_clone_source_change_reaches_its_copies_and_its_deletion_removes_them() -> None:
    cluster = FakeCluster()
    source = cluster.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "src", "namespace": "default"}, "data": {"k": "dg=="}})
    expression = 'generator.Apply(object.metadata.namespace, [resource.Get("v1", "secrets", "default", "src")])'
    ctl = controller(cluster, Store(gpol(expression=expression)))
    ctl.process_event(TriggerEvent("CREATE", trigger(cluster)))
    changed = cluster.add({**source, "data": {"k": "dzI="}})
    assert ctl.process_watched_change(WatchedChange("MODIFIED", changed)) == []
    assert (cluster.find("Secret", "ns1", "src") or {})["data"] == {"k": "dzI="}
    cluster.request("DELETE", "/api/v1/namespaces/default/secrets/src")
    assert ctl.process_watched_change(WatchedChange("DELETED", changed)) == []
    assert cluster.find("Secret", "ns1", "src") is None


def test_a_changed_synchronized_policy_regenerates_and_drops_what_it_no_longer_produces() -> None:
    cluster = FakeCluster()
    cluster.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "src", "namespace": "default"}, "data": {"k": "dg=="}})
    cluster.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "src", "namespace": "default"}, "data": {"a": "b"}})
    secret_copy = 'generator.Apply(object.metadata.namespace, [resource.Get("v1", "secrets", "default", "src")])'
    store = Store(gpol(expression=secret_copy))
    ctl = controller(cluster, store)
    ctl.reconcile_policies()
    ctl.process_event(TriggerEvent("CREATE", trigger(cluster)))
    assert cluster.find("Secret", "ns1", "src") is not None
    store.set(gpol(expression=secret_copy.replace("secrets", "configmaps")))
    ctl.reconcile_policies()
    assert cluster.find("Secret", "ns1", "src") is None
    assert (cluster.find("ConfigMap", "ns1", "src") or {}).get("data") == {"a": "b"}


def test_generating_policies_read_global_context_entries_in_the_cluster() -> None:
    from stockade.controllers.webhookconfig import ApiResource

    cluster = FakeCluster()
    cluster.resources.append(ApiResource("kyverno.io", "v2alpha1", "globalcontextentries", "GlobalContextEntry", False))
    cluster.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app", "namespace": "default", "labels": {"app": "blue"}}})
    cluster.add({
        "apiVersion": "kyverno.io/v2alpha1", "kind": "GlobalContextEntry", "metadata": {"name": "apps"},
        "spec": {"kubernetesResource": {"group": "", "version": "v1", "resource": "configmaps", "namespace": "default"},
                 "projections": [{"name": "labels", "jmesPath": "[?metadata.name=='app'].metadata.labels.app"}]},
    })
    expression = (
        'generator.Apply(object.metadata.namespace, [{"kind": dyn("ConfigMap"), "apiVersion": dyn("v1"), '
        '"metadata": dyn({"name": "from-gctx", "namespace": string(object.metadata.namespace)}), '
        '"data": dyn({"app": string(globalContext.Get("apps", "labels")[0])})}])'
    )
    ctl = controller(cluster, Store(gpol(expression=expression)))
    assert ctl.process_event(TriggerEvent("CREATE", trigger(cluster))) == []
    assert (cluster.find("ConfigMap", "ns1", "from-gctx") or {}).get("data") == {"app": "blue"}


def test_requests_of_the_background_account_skip_generating_policies_unless_they_opt_in() -> None:
    """Kyverno's gpol webhook: a request by the configured background service account is a background request, and
    a GeneratingPolicy skips it unless spec.evaluation.skipBackgroundRequests is false (e2e generating-policies/
    webhook/skip-background-requests); other users' requests generate as usual."""
    from stockade.engine.match import RequestInfo

    background = "system:serviceaccount:kyverno:kyverno-background-controller"
    default = gpol("default")
    optin = gpol("optin", expression="generator.Apply(object.metadata.namespace, [{'kind': dyn('ConfigMap'), 'apiVersion': dyn('v1'), 'metadata': dyn({'name': 'optin'})}])")
    optin["spec"]["evaluation"]["skipBackgroundRequests"] = False
    cluster = FakeCluster()
    ctl = GenerateController(None, Store(default, optin), cluster_data=cluster, background_username=background)  # type: ignore[arg-type]
    cm = trigger(cluster)
    assert ctl.process_event(TriggerEvent("UPDATE", cm, cm, info=RequestInfo(username=background))) == []
    assert cluster.find("NetworkPolicy", "ns1", "default-deny") is None  # the default policy skipped it
    assert cluster.find("ConfigMap", "ns1", "optin") is not None  # the opted-in one did not
    assert ctl.process_event(TriggerEvent("UPDATE", cm, cm, info=RequestInfo(username="alice"))) == []
    assert cluster.find("NetworkPolicy", "ns1", "default-deny") is not None


def test_an_update_exempted_by_a_policy_exception_keeps_the_downstream() -> None:
    """Kyverno deletes a synchronized policy's downstream on UPDATE only when the trigger no longer matches (no
    result); a skip by a PolicyException is a result, so the downstream stays."""
    exception = {
        "apiVersion": "policies.kyverno.io/v1alpha1",
        "kind": "PolicyException",
        "metadata": {"name": "allow", "namespace": "ns1"},
        "spec": {"policyRefs": [{"name": "gen", "kind": "GeneratingPolicy"}], "matchConditions": [{"name": "exempt", "expression": "'exempt' in object.data"}]},
    }
    cluster = FakeCluster()
    ctl = controller(cluster, Store(gpol(), exception))
    created = trigger(cluster)
    ctl.process_event(TriggerEvent("CREATE", created))
    assert cluster.find("NetworkPolicy", "ns1", "default-deny") is not None
    exempt = trigger(cluster, data={"go": "1", "exempt": "1"})
    ctl.process_event(TriggerEvent("UPDATE", exempt, created))
    assert cluster.find("NetworkPolicy", "ns1", "default-deny") is not None
    unmatched = trigger(cluster, data={})
    ctl.process_event(TriggerEvent("UPDATE", unmatched, exempt))
    assert cluster.find("NetworkPolicy", "ns1", "default-deny") is None
