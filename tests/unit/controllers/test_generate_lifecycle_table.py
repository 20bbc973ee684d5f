"""The generate lifecycle, event by event: Kyverno 1.19.1's behaviour (read from its policy controller
``pkg/policy``, webhook ``pkg/webhooks/resource/generation`` and ``gpol``, background controller ``pkg/background``)
against Stockade's (``stockade/controllers/generate.py`` unless named).  "sync" = synchronize, "orphan" =
orphanDownstreamOnPolicyDelete, "genEx" = generateExisting; "same" rows are covered by the tests named in brackets or
by the modules next to this one; the rows this module tests are marked (here).

ClusterPolicy / Policy (data, clone, cloneList, foreach)
========================================  =================================================  ==========================================  =========
event                                     Kyverno                                            Stockade                                    same?
========================================  =================================================  ==========================================  =========
policy created                            canBackgroundProcess (generate/mutateExisting      reconcile_policies → _policy_event          same
                                          rule, no requester variables) → sync data rules                                                (here)
                                          re-applied to their downstream's triggers; every
                                          genEx rule over existing triggers
policy spec unchanged (metadata only)     nothing (DeepEqual spec)                           reconcile_policies: skipped                 same (here;
                                                                                                                                         was: genEx
                                                                                                                                         on raw diff)
policy spec changed                       as created, genEx for *every* genEx rule           reconcile_policies → _policy_event          same (here;
                                                                                                                                         was: changed
                                                                                                                                         rules only)
rule removed (sync, not orphan)           UR deleting its downstream (data, cloneList,       reconcile_policies → delete_downstream      same for
                                          foreach kinds; clone too by the code, but the                                                  data/cloneList;
                                          suite's README for cpol-clone-sync-delete-rule                                                 clone kept
                                          says clone copies stay)                                                                        (documented)
rule removed, nosync or orphan            nothing                                            reconcile_policies                          same
rule retargeted, no rule removed          old downstream unlabelled (policy/rule labels)     _unlabel_downstream                         same
update leaves no background rule /        whole update ignored (no cleanup, unlabel,         reconcile_policies (reacts_to_policy_      same (here;
policy needs the requester                sync or genEx)                                     events)                                     was: acted)
policy deleted (sync, not orphan)         UR deleting every labelled downstream (the         reconcile_policies → delete_downstream      same, except
                                          stated intent, kyverno#1401: single-clone copies                                               single clone
                                          stay)                                                                                          (kept, as
                                                                                                                                         #1401 says)
policy deleted, orphan or nosync          nothing                                            reconcile_policies                          same
periodic reconcile (1h)                   the policy-event pass again (data sync + genEx);   resync → _policy_event                      same (here;
                                          never creates for a sync rule without genEx,                                                   was: every
                                          never deletes                                                                                  sync rule)
trigger CREATE/UPDATE, rule passes        UR: create missing; sync: data target replaced     process_event → apply_downstream            same (was:
                                          on every regeneration, copy unless equal to its   (should_update: differs from rendering)     additions by
                                          source (others' additions go)                                                                  others kept)
trigger UPDATE, new fails, old matched    sync: downstream of the trigger deleted (policy    process_event (no_longer_applies) →         same
(or new fails preconditions old passed)   + trigger labels, rule's kinds); nosync: nothing   delete_downstream
trigger UPDATE, neither matches           nothing                                            process_event                               same
trigger UPDATE/DELETE exempted by a       skip (checked before matching): no generate, no    process_event (exempted)                    same (here;
PolicyException                           cleanup                                                                                        was: cleanup)
trigger DELETE                            old matches (operations incl.): DELETE in          process_event (trigger_action)              same
                                          operations → generate; else sync → delete
trigger DELETE not persisted              trigger still stored (same uid, not terminating):  process_event (_still_stored →             same (here;
                                          error, retried, nothing done                       TriggerPending, retried, given up)          was: acted)
downstream edited/deleted (not by us)     sync: re-applied from the trigger its labels       _process_non_trigger → _regenerate_for      same (here;
                                          name, unless the rule's match/exclude select it    (_matches: match blocks only)               was: full
                                          for the operation (preconditions not consulted);                                               evaluation)
                                          nosync: nothing
clone source edited                       copies naming it by source labels regenerated      _process_copies_of                          same (here;
                                          from their triggers; no other trigger gains one                                                was: rule
                                                                                                                                         over every
                                                                                                                                         trigger)
clone source deleted                      sync: the trigger's downstream (policy+trigger     _process_copies_of → delete_downstream      same
                                          labels, rule's kinds) deleted
namespace (trigger) deleted               its DELETE as any trigger; objects inside go with  process_event                               same
                                          it
background SA's own requests              skipBackgroundRequests rules dropped; non-trigger  rules_for_request, process_event           same
                                          handling skipped                                   (own_request)
========================================  =================================================  ==========================================  =========

GeneratingPolicy / NamespacedGeneratingPolicy
========================================  =================================================  ==========================================  =========
event                                     Kyverno                                            Stockade                                    same?
========================================  =================================================  ==========================================  =========
policy created / spec changed / periodic  sync: triggers named by its downstream re-run     _gpol_policy_event → _sync_gpol_downstream  same (here;
                                          (pass: write + drop stale; no match: delete; gone:                                             was: every
                                          nothing); none known: cache restore, no writes;                                                trigger, and
                                          genEx: every matching trigger (create; sync: drop                                              pruning of
                                          stale)                                             _apply_gpol_to_existing                     vanished ones)
spec unchanged                            nothing                                            _reconcile_gpols                            same (here)
policy deleted                            sync and not orphan: downstream deleted            _reconcile_gpols → delete_gpol_downstream   same
sync turned off                           watchers removed, downstream left                  process_watched_change ignores it           same
trigger CREATE                            generate (no stale cleanup)                        _process_gpol_event                         same
trigger UPDATE                            generate; sync: drop stale, no match: delete;      _process_gpol_event                         same (here;
                                          exception skip: nothing                                                                        was: deleted
                                                                                                                                         on a skip)
trigger DELETE                            DELETE in operations → generate; else sync →       _process_gpol_event                         same
                                          delete
downstream edited/deleted, source edited  sync: watch → regenerate / delete copies           process_watched_change                      same
existing object not ours                  never adopted                                      _upsert (owned_by)                          same
========================================  =================================================  ==========================================  =========
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from stockade.controllers.generate import GenerateController, TriggerEvent, TriggerPending, reacts_to_policy_events
from stockade.policy.model import KyvernoPolicy, PolicyException
from tests.unit.controllers.fakecluster import FakeCluster
from tests.unit.controllers.test_controllers_generate_nontrigger import Snapshot, Store, clone_policy, data_policy


def cluster_with(*namespaces: str) -> FakeCluster:
    cluster = FakeCluster()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
    cluster.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "regcred", "namespace": "default"}, "data": {"k": "djE="}})
    for name in namespaces:
        cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return cluster


def with_generate_existing(policy: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(policy)
    changed["spec"]["generateExisting"] = True
    return changed


def test_which_policies_react_to_policy_events() -> None:
    assert reacts_to_policy_events(KyvernoPolicy(data_policy()))
    validate = {"name": "v", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "validate": {"pattern": {"metadata": {"name": "?*"}}}}
    assert not reacts_to_policy_events(KyvernoPolicy({**data_policy(), "spec": {"rules": [validate]}}))
    requester = data_policy()
    requester["spec"]["rules"][0]["generate"]["data"]["data"]["by"] = "{{serviceAccountName}}"
    assert not reacts_to_policy_events(KyvernoPolicy(requester))
    by_role = data_policy()
    by_role["spec"]["rules"][0]["match"]["any"][0]["clusterRoles"] = ["admin"]
    assert not reacts_to_policy_events(KyvernoPolicy(by_role))
    object_only = data_policy()
    object_only["spec"]["rules"][0]["generate"]["data"]["data"]["by"] = "{{request.object.metadata.labels.owner}}"
    assert reacts_to_policy_events(KyvernoPolicy(object_only))


def test_a_synchronized_rule_without_generate_existing_never_reaches_existing_triggers() -> None:
    cluster = cluster_with("ns1")
    controller = GenerateController(None, Store(data_policy()), cluster_data=cluster)  # type: ignore[arg-type]
    controller.reconcile_policies()
    controller.resync()
    assert cluster.find("ConfigMap", "ns1", "zk") is None
    controller.store.snapshot = Snapshot([KyvernoPolicy(with_generate_existing(data_policy()))])
    controller.reconcile_policies()
    assert cluster.find("ConfigMap", "ns1", "zk") is not None


def test_generate_existing_runs_for_every_rule_on_a_spec_change_and_not_on_a_metadata_change() -> None:
    """Kyverno enqueues a policy whose spec changed and runs all its generateExisting rules; an unchanged rule's
    missing (nosync) downstream comes back then, not on a change of labels or annotations."""
    cluster = cluster_with("ns1")
    policy = with_generate_existing(data_policy(sync=False))
    controller = GenerateController(None, Store(policy), cluster_data=cluster)  # type: ignore[arg-type]
    controller.reconcile_policies()
    assert cluster.find("ConfigMap", "ns1", "zk") is not None
    cluster.request("DELETE", "/api/v1/namespaces/ns1/configmaps/zk")
    relabelled = copy.deepcopy(policy)
    relabelled["metadata"]["labels"] = {"team": "a"}
    controller.store.snapshot = Snapshot([KyvernoPolicy(relabelled)])
    controller.reconcile_policies()
    controller.resync()  # the periodic pass is the policy-event pass: generateExisting creates what is missing
    assert cluster.find("ConfigMap", "ns1", "zk") is not None
    cluster.request("DELETE", "/api/v1/namespaces/ns1/configmaps/zk")
    controller.store.snapshot = Snapshot([KyvernoPolicy(relabelled)])
    controller.reconcile_policies()
    assert cluster.find("ConfigMap", "ns1", "zk") is None  # metadata only: nothing
    extended = copy.deepcopy(relabelled)
    extra = copy.deepcopy(extended["spec"]["rules"][0])
    extra["name"] = "extra"
    extra["generate"]["name"] = "extra"
    extended["spec"]["rules"].append(extra)
    controller.store.snapshot = Snapshot([KyvernoPolicy(extended)])
    controller.reconcile_policies()
    assert cluster.find("ConfigMap", "ns1", "extra") is not None
    assert cluster.find("ConfigMap", "ns1", "zk") is not None  # the unchanged rule ran again too


def test_an_edited_clone_source_only_reaches_the_copies_that_name_it() -> None:
    cluster = cluster_with("ns1", "ns2")
    controller = GenerateController(None, Store(clone_policy()), cluster_data=cluster)  # type: ignore[arg-type]
    controller.reconcile_policies()
    first = cluster.find("Namespace", "", "ns1")
    assert first is not None
    assert controller.process_event(TriggerEvent("CREATE", first)) == []
    assert cluster.find("Secret", "ns1", "copy") is not None and cluster.find("Secret", "ns2", "copy") is None
    source = cluster.find("Secret", "default", "regcred")
    assert source is not None
    edited = cluster.add({**copy.deepcopy(source), "data": {"k": "djI="}})
    assert controller.process_event(TriggerEvent("UPDATE", edited, source)) == []
    assert (cluster.find("Secret", "ns1", "copy") or {}).get("data") == {"k": "djI="}
    assert cluster.find("Secret", "ns2", "copy") is None  # ns2 never triggered the rule: Kyverno gives it no copy


def test_a_changed_synchronized_data_rule_reaches_foreach_downstream_and_the_periodic_pass_never_deletes() -> None:
    policy = data_policy()
    rule = policy["spec"]["rules"][0]
    rule["generate"] = {
        "synchronize": True,
        "foreach": [
            {
                "list": "['a', 'b']",
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": "each-{{element}}",
                "namespace": "{{request.object.metadata.name}}",
                "data": {"data": {"v": "1"}},
            }
        ],
    }
    cluster = cluster_with("ns1")
    controller = GenerateController(None, Store(policy), cluster_data=cluster)  # type: ignore[arg-type]
    controller.reconcile_policies()
    namespace = cluster.find("Namespace", "", "ns1")
    assert namespace is not None
    assert controller.process_event(TriggerEvent("CREATE", namespace)) == []
    assert cluster.find("ConfigMap", "ns1", "each-a") is not None and cluster.find("ConfigMap", "ns1", "each-b") is not None
    changed = copy.deepcopy(policy)
    changed["spec"]["rules"][0]["generate"]["foreach"][0]["data"]["data"]["v"] = "2"
    controller.store.snapshot = Snapshot([KyvernoPolicy(changed)])
    controller.reconcile_policies()
    assert (cluster.find("ConfigMap", "ns1", "each-a") or {}).get("data") == {"v": "2"}
    assert (cluster.find("ConfigMap", "ns1", "each-b") or {}).get("data") == {"v": "2"}
    relabelled = cluster.add({**namespace, "metadata": {**namespace["metadata"], "labels": {"x": "y"}}})
    excluding = copy.deepcopy(changed)
    excluding["spec"]["rules"][0]["exclude"] = {"any": [{"resources": {"selector": {"matchLabels": {"x": "y"}}}}]}
    controller.store.snapshot = Snapshot([KyvernoPolicy(excluding)])
    controller.reconcile_policies()
    controller.resync()
    assert relabelled["metadata"]["labels"] == {"x": "y"}
    assert cluster.find("ConfigMap", "ns1", "each-a") is not None  # no longer applies: kept, never deleted by a pass


class _Evaluator:
    def __init__(self, exceptions: list[PolicyException]) -> None:
        self.engine = type("EngineWithExceptions", (), {"exceptions": exceptions})()


def test_a_trigger_exempted_by_a_policy_exception_keeps_its_downstream_on_update_and_delete() -> None:
    """Kyverno's background check skips a rule for a trigger a PolicyException exempts before it looks at matching,
    so neither an UPDATE nor a DELETE of such a trigger cleans up after a synchronized rule."""
    exception = PolicyException(
        {
            "apiVersion": "kyverno.io/v2",
            "kind": "PolicyException",
            "metadata": {"name": "exempt", "namespace": "default"},
            "spec": {
                "exceptions": [{"policyName": "p", "ruleNames": ["gen"]}],
                "match": {"any": [{"resources": {"kinds": ["Namespace"], "selector": {"matchLabels": {"exempt": "yes"}}}}]},
            },
        }
    )
    cluster = cluster_with("ns1")
    store = Store(data_policy())
    store.snapshot.evaluator = _Evaluator([exception])  # type: ignore[attr-defined]
    controller = GenerateController(None, store, cluster_data=cluster)  # type: ignore[arg-type]
    namespace = cluster.find("Namespace", "", "ns1")
    assert namespace is not None
    assert controller.process_event(TriggerEvent("CREATE", namespace)) == []
    assert cluster.find("ConfigMap", "ns1", "zk") is not None
    exempt = cluster.add({**namespace, "metadata": {**namespace["metadata"], "labels": {"exempt": "yes"}}})
    assert controller.process_event(TriggerEvent("UPDATE", exempt, namespace)) == []
    assert cluster.find("ConfigMap", "ns1", "zk") is not None
    cluster.request("DELETE", "/api/v1/namespaces/ns1")
    assert controller.process_event(TriggerEvent("DELETE", {}, exempt)) == []
    assert cluster.find("ConfigMap", "ns1", "zk") is not None
    # without the exception the same UPDATE and DELETE would clean up
    store.snapshot.evaluator = _Evaluator([])  # type: ignore[attr-defined]
    assert controller.process_event(TriggerEvent("DELETE", {}, exempt)) == []
    assert cluster.find("ConfigMap", "ns1", "zk") is None


def test_a_trigger_delete_is_acted_on_once_persisted() -> None:
    """Kyverno's background controller checks that a deleted trigger is gone (or terminating) before it cleans up:
    a DELETE another admission step refused leaves the downstream in place."""
    cluster = cluster_with("ns1")
    controller = GenerateController(None, Store(data_policy()), cluster_data=cluster)  # type: ignore[arg-type]
    namespace = cluster.find("Namespace", "", "ns1")
    assert namespace is not None
    assert controller.process_event(TriggerEvent("CREATE", namespace)) == []
    with pytest.raises(TriggerPending):
        controller.process_event(TriggerEvent("DELETE", {}, namespace))
    assert cluster.find("ConfigMap", "ns1", "zk") is not None
    terminating = cluster.add({**namespace, "metadata": {**namespace["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}})
    assert controller.process_event(TriggerEvent("DELETE", {}, terminating)) == []
    assert cluster.find("ConfigMap", "ns1", "zk") is None
    downstream_of_another = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "ns1", "uid": "u-x", "labels": {"generate.kyverno.io/policy-name": "other"}}}
    assert controller.process_event(TriggerEvent("DELETE", {}, downstream_of_another)) == []  # a downstream object: no wait


def seed_policy(operations: list[str] | None = None) -> dict[str, Any]:
    """Triggers are ConfigMaps named ``seed`` (a precondition); the downstream is a ConfigMap too."""
    resources: dict[str, Any] = {"kinds": ["ConfigMap"]}
    if operations:
        resources["operations"] = operations
    generate = {"apiVersion": "v1", "kind": "ConfigMap", "name": "derived", "namespace": "{{request.object.metadata.namespace}}", "synchronize": True, "data": {"data": {"from": "seed"}}}
    rule = {
        "name": "derive",
        "match": {"any": [{"resources": resources}]},
        "preconditions": {"all": [{"key": "{{request.object.metadata.name}}", "operator": "Equals", "value": "seed"}]},
        "generate": generate,
    }
    return {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "seeds"}, "spec": {"rules": [rule]}}


def test_a_downstream_object_the_rule_matches_is_left_to_its_trigger_handling() -> None:
    """Kyverno does not restore a downstream object that the rule's match/exclude blocks select for the request's
    operation (it is "both the source and the trigger"), whatever the preconditions say; one that is not selected
    for that operation is restored."""
    cluster = cluster_with("ns1")
    controller = GenerateController(None, Store(seed_policy()), cluster_data=cluster)  # type: ignore[arg-type]
    seed = cluster.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "seed", "namespace": "ns1"}})
    assert controller.process_event(TriggerEvent("CREATE", seed)) == []
    derived = cluster.find("ConfigMap", "ns1", "derived")
    assert derived is not None
    edited = cluster.add({**derived, "data": {"from": "me"}})
    assert controller.process_event(TriggerEvent("UPDATE", edited, derived)) == []
    assert (cluster.find("ConfigMap", "ns1", "derived") or {}).get("data") == {"from": "me"}

    cluster = cluster_with("ns1")
    controller = GenerateController(None, Store(seed_policy(["CREATE", "UPDATE"])), cluster_data=cluster)  # type: ignore[arg-type]
    seed = cluster.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "seed", "namespace": "ns1"}})
    assert controller.process_event(TriggerEvent("CREATE", seed)) == []
    derived = cluster.find("ConfigMap", "ns1", "derived")
    assert derived is not None
    cluster.request("DELETE", "/api/v1/namespaces/ns1/configmaps/derived")
    assert controller.process_event(TriggerEvent("DELETE", {}, derived)) == []  # DELETE is not among the operations
    assert (cluster.find("ConfigMap", "ns1", "derived") or {}).get("data") == {"from": "seed"}
