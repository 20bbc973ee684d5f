"""Kyverno's "non-trigger" admissions of generate rules: an edited or deleted downstream object of a synchronized rule
is restored from its trigger at once, an edited clone source is copied again, a deleted one takes its copies along;
without synchronize nothing happens."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stockade.controllers.generate import GenerateController, TriggerEvent, cloned_from, downstream_origin
from stockade.policy.model import KyvernoPolicy, Rule
from tests.unit.controllers.fakecluster import FakeCluster


def data_policy(sync: bool = True) -> dict[str, Any]:
    generate = {"apiVersion": "v1", "kind": "ConfigMap", "name": "zk", "namespace": "{{request.object.metadata.name}}", "synchronize": sync, "data": {"data": {"ZK": "a"}}}
    rule = {"name": "gen", "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]}, "generate": generate}
    return {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {"rules": [rule]}}


def clone_policy(sync: bool = True) -> dict[str, Any]:
    generate = {"apiVersion": "v1", "kind": "Secret", "name": "copy", "namespace": "{{request.object.metadata.name}}", "synchronize": sync, "clone": {"namespace": "default", "name": "regcred"}}
    rule = {"name": "gen", "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]}, "generate": generate}
    return {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "c"}, "spec": {"rules": [rule]}}


@dataclass
class Snapshot:
    policies: list[KyvernoPolicy]
    documents: tuple[Any, ...] = ()
    errors: dict[Any, str] = field(default_factory=dict)


class Store:
    def __init__(self, *docs: dict[str, Any]) -> None:
        self.listeners: list[Any] = []
        self.snapshot = Snapshot([KyvernoPolicy(d) for d in docs])


def setup(policy: dict[str, Any]) -> tuple[FakeCluster, GenerateController, dict[str, Any]]:
    cluster = FakeCluster()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
    cluster.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "regcred", "namespace": "default"}, "data": {"k": "djE="}})
    namespace = cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"}})
    controller = GenerateController(None, Store(policy), cluster_data=cluster)  # type: ignore[arg-type]
    assert controller.process_event(TriggerEvent("CREATE", namespace)) == []
    return cluster, controller, namespace


def test_downstream_labels_name_their_origin() -> None:
    cluster, _, namespace = setup(data_policy())
    generated = cluster.find("ConfigMap", "ns1", "zk")
    assert generated is not None
    origin = downstream_origin(generated)
    assert origin is not None and (origin.policy_name, origin.rule_name, origin.trigger_kind, origin.trigger_uid) == ("p", "gen", "Namespace", namespace["metadata"]["uid"])
    assert downstream_origin({"metadata": {"labels": {"app.kubernetes.io/managed-by": "kyverno"}}}) is None


def test_kyverno_restores_an_edited_synchronized_downstream_object_at_once() -> None:
    cluster, controller, _ = setup(data_policy())
    old = cluster.find("ConfigMap", "ns1", "zk")
    assert old is not None
    edited = cluster.add({**old, "data": {"ZK": "changed"}})
    assert controller.process_event(TriggerEvent("UPDATE", edited, old)) == []
    assert (cluster.find("ConfigMap", "ns1", "zk") or {})["data"] == {"ZK": "a"}


def test_kyverno_recreates_a_deleted_synchronized_downstream_object() -> None:
    cluster, controller, _ = setup(data_policy())
    old = cluster.find("ConfigMap", "ns1", "zk")
    assert old is not None
    cluster.request("DELETE", "/api/v1/namespaces/ns1/configmaps/zk")
    controller.process_event(TriggerEvent("DELETE", {}, old))
    assert cluster.find("ConfigMap", "ns1", "zk") is not None


def test_without_synchronize_a_deleted_downstream_object_stays_deleted() -> None:
    cluster, controller, _ = setup(data_policy(sync=False))
    old = cluster.find("ConfigMap", "ns1", "zk")
    assert old is not None
    cluster.request("DELETE", "/api/v1/namespaces/ns1/configmaps/zk")
    controller.process_event(TriggerEvent("DELETE", {}, old))
    assert cluster.find("ConfigMap", "ns1", "zk") is None


def test_an_edited_clone_source_is_copied_again_and_a_deleted_one_takes_its_copies() -> None:
    cluster, controller, _ = setup(clone_policy())
    assert (cluster.find("Secret", "ns1", "copy") or {}).get("data") == {"k": "djE="}
    old = cluster.find("Secret", "default", "regcred")
    assert old is not None
    edited = cluster.add({**old, "data": {"k": "djI="}})
    controller.process_event(TriggerEvent("UPDATE", edited, old))
    assert (cluster.find("Secret", "ns1", "copy") or {}).get("data") == {"k": "djI="}
    cluster.request("DELETE", "/api/v1/namespaces/default/secrets/regcred")
    controller.process_event(TriggerEvent("DELETE", {}, edited))
    assert cluster.find("Secret", "ns1", "copy") is None


def test_clone_sources_of_synchronized_rules_only() -> None:
    source = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "regcred", "namespace": "default", "labels": {"a": "b"}}}
    assert cloned_from(KyvernoPolicy(clone_policy()).rules[0], source) == "clone"
    assert cloned_from(KyvernoPolicy(clone_policy(sync=False)).rules[0], source) == ""
    listed = Rule({"name": "r", "generate": {"synchronize": True, "namespace": "x", "cloneList": {"namespace": "default", "kinds": ["v1/Secret"], "selector": {"matchLabels": {"a": "b"}}}}})
    assert cloned_from(listed, source) == "cloneList"
    unlabelled = {**source, "metadata": {"name": "regcred", "namespace": "default"}}
    assert cloned_from(listed, unlabelled) == "" and cloned_from(listed, unlabelled, source) == "cloneList"
    assert cloned_from(listed, {**source, "kind": "ConfigMap"}) == ""


def test_a_rule_matching_delete_generates_from_the_deleted_trigger() -> None:
    generate = {"apiVersion": "v1", "kind": "ConfigMap", "name": "farewell", "namespace": "{{request.object.metadata.labels.downstream}}", "synchronize": True, "data": {"data": {"gone": "{{request.object.metadata.name}}"}}}
    rule = {"name": "on-delete", "match": {"any": [{"resources": {"kinds": ["Namespace"], "operations": ["DELETE"]}}]}, "generate": generate}
    policy = {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "d"}, "spec": {"rules": [rule]}}
    cluster = FakeCluster()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns2"}})
    doomed = cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1", "labels": {"downstream": "ns2"}}})
    controller = GenerateController(None, Store(policy), cluster_data=cluster)  # type: ignore[arg-type]
    assert controller.process_event(TriggerEvent("CREATE", doomed)) == []
    assert cluster.find("ConfigMap", "ns2", "farewell") is None  # CREATE does not match
    cluster.request("DELETE", "/api/v1/namespaces/ns1")
    assert controller.process_event(TriggerEvent("DELETE", {}, doomed)) == []
    assert (cluster.find("ConfigMap", "ns2", "farewell") or {}).get("data") == {"gone": "ns1"}


class SelfAwareCluster(FakeCluster):
    def request(self, method: str, path: str, body: Any = None, **options: Any) -> Any:
        if path == "/apis/authentication.k8s.io/v1/selfsubjectreviews":
            return {"status": {"userInfo": {"username": "system:serviceaccount:kyverno:stockade"}}}
        return super().request(method, path, body, **options)


def test_skip_background_requests_ignores_the_controllers_own_writes() -> None:
    from stockade.engine.match import RequestInfo

    policy = data_policy()
    keep = {**policy["spec"]["rules"][0], "name": "keep", "skipBackgroundRequests": False}
    keep["generate"] = {**keep["generate"], "name": "kept"}
    policy["spec"]["rules"].append(keep)
    cluster = SelfAwareCluster()
    namespace = cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"}})
    controller = GenerateController(None, Store(policy), cluster_data=cluster)  # type: ignore[arg-type]
    own = RequestInfo(username="system:serviceaccount:kyverno:stockade")
    assert controller.process_event(TriggerEvent("CREATE", namespace, info=own)) == []
    assert cluster.find("ConfigMap", "ns1", "zk") is None  # skipBackgroundRequests defaults to true
    assert cluster.find("ConfigMap", "ns1", "kept") is not None
    assert controller.process_event(TriggerEvent("CREATE", namespace, info=RequestInfo(username="alice"))) == []
    assert cluster.find("ConfigMap", "ns1", "zk") is not None


def test_removing_a_synchronized_rule_deletes_data_copies_but_keeps_clone_copies() -> None:
    both = data_policy()
    clone_rule = clone_policy()["spec"]["rules"][0]
    both["spec"]["rules"].append({**clone_rule, "name": "clone"})
    cluster, controller, _ = setup(both)
    controller.reconcile_policies()
    assert cluster.find("ConfigMap", "ns1", "zk") is not None and cluster.find("Secret", "ns1", "copy") is not None
    other = {**both["spec"]["rules"][0], "name": "other", "generate": {**both["spec"]["rules"][0]["generate"], "name": "other"}}
    controller.store.snapshot = Snapshot([KyvernoPolicy({**both, "spec": {"rules": [other]}})])
    controller.reconcile_policies()
    assert cluster.find("ConfigMap", "ns1", "zk") is None  # Kyverno deletes a removed data rule's downstream
    assert cluster.find("Secret", "ns1", "copy") is not None  # and keeps a removed clone rule's copies


def test_a_policy_left_without_background_rules_ignores_the_removal_of_its_generate_rules() -> None:
    """Kyverno's policy controller drops the update of a policy it cannot process in the background (no generate
    or mutate-existing rule left, or requester variables): the removed rule's downstream stays."""
    cluster, controller, _ = setup(data_policy())
    controller.reconcile_policies()
    validate = {"name": "check", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "validate": {"pattern": {"metadata": {"name": "?*"}}}}
    controller.store.snapshot = Snapshot([KyvernoPolicy({**data_policy(), "spec": {"rules": [validate]}})])
    controller.reconcile_policies()
    assert cluster.find("ConfigMap", "ns1", "zk") is not None
    controller.store.snapshot = Snapshot([])  # deleting the policy still cleans up what its last generate rules made
    controller.reconcile_policies()
    assert cluster.find("ConfigMap", "ns1", "zk") is not None  # the removed rule is no longer known: nothing to do


def test_a_policy_needing_the_requester_ignores_the_removal_of_its_generate_rules() -> None:
    both = data_policy()
    both["spec"]["rules"].append({**both["spec"]["rules"][0], "name": "second", "generate": {**both["spec"]["rules"][0]["generate"], "name": "second"}})
    cluster, controller, _ = setup(both)
    controller.reconcile_policies()
    assert cluster.find("ConfigMap", "ns1", "second") is not None
    kept = {**both["spec"]["rules"][0], "generate": {**both["spec"]["rules"][0]["generate"], "data": {"data": {"by": "{{request.userInfo.username}}"}}}}
    controller.store.snapshot = Snapshot([KyvernoPolicy({**both, "spec": {"rules": [kept]}})])
    controller.reconcile_policies()
    assert cluster.find("ConfigMap", "ns1", "second") is not None  # a requester variable: Kyverno ignores the update
    assert (cluster.find("ConfigMap", "ns1", "zk") or {}).get("data") == {"ZK": "a"}  # no data sync either
    controller.store.snapshot = Snapshot([KyvernoPolicy({**both, "spec": {"rules": [both["spec"]["rules"][0]]}})])
    controller.reconcile_policies()
    assert cluster.find("ConfigMap", "ns1", "second") is not None  # known rules are now those of the ignored update


def test_copies_find_their_source_by_uid_even_when_the_clone_name_is_a_variable() -> None:
    policy = clone_policy()
    rule = policy["spec"]["rules"][0]
    rule["context"] = [{"name": "source", "variable": {"value": "regcred"}}]
    rule["generate"]["clone"]["name"] = "{{source}}"
    cluster, controller, _ = setup(policy)
    copied = cluster.find("Secret", "ns1", "copy")
    assert copied is not None
    source = cluster.find("Secret", "default", "regcred")
    assert source is not None
    assert copied["metadata"]["labels"]["generate.kyverno.io/source-uid"] == source["metadata"]["uid"]
    assert cloned_from(KyvernoPolicy(policy).rules[0], source) == ""  # the coordinates alone do not say
    edited = cluster.add({**source, "data": {"k": "djM="}})
    assert controller.process_event(TriggerEvent("UPDATE", edited, source)) == []
    assert (cluster.find("Secret", "ns1", "copy") or {}).get("data") == {"k": "djM="}


def test_a_retargeted_rule_leaves_its_old_downstream_unlabelled_and_out_of_its_cleanup() -> None:
    import copy as copy_module

    cluster, controller, namespace = setup(data_policy())
    controller.reconcile_policies()
    renamed = copy_module.deepcopy(data_policy())
    renamed["spec"]["rules"][0]["generate"]["name"] = "zk-new"
    controller.store.snapshot = Snapshot([KyvernoPolicy(renamed)])
    controller.reconcile_policies()
    old = cluster.find("ConfigMap", "ns1", "zk") or {}
    assert "generate.kyverno.io/rule-name" not in old["metadata"]["labels"]  # Kyverno unlabels the old target
    controller.process_event(TriggerEvent("UPDATE", namespace, namespace))
    assert cluster.find("ConfigMap", "ns1", "zk-new") is not None
    controller.store.snapshot = Snapshot([])  # the policy deleted: its rule's labelled downstream goes, the unlabelled one stays
    controller.reconcile_policies()
    assert cluster.find("ConfigMap", "ns1", "zk-new") is None and cluster.find("ConfigMap", "ns1", "zk") is not None


def test_an_object_the_updated_rule_names_stays_its_own_even_if_produced_before_the_update_was_seen() -> None:
    import copy as copy_module

    cluster, controller, namespace = setup(data_policy())
    controller.reconcile_policies()
    renamed = copy_module.deepcopy(data_policy())
    renamed["spec"]["rules"][0]["generate"]["name"] = "zk-new"
    controller.store.snapshot = Snapshot([KyvernoPolicy(renamed)])
    controller.process_event(TriggerEvent("UPDATE", namespace, namespace))  # the trigger event wins the race
    controller.reconcile_policies()
    new = cluster.find("ConfigMap", "ns1", "zk-new") or {}
    assert new["metadata"]["labels"]["generate.kyverno.io/rule-name"] == "gen"
    old = cluster.find("ConfigMap", "ns1", "zk") or {}
    assert "generate.kyverno.io/rule-name" not in old["metadata"]["labels"]
