"""Kyverno's UpdateRequests: what an admitted request records (field names and meaning as Kyverno's webhooks write
them), and how the leader replays them (Completed and deleted, retried with backoff, then Failed; a trigger
replaced by another object fails at once) against an in-memory cluster."""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from stockade.controllers.generate import GenerateController
from stockade.controllers.updaterequest import (
    COMPLETED,
    FAILED,
    PENDING,
    UpdateRequestController,
    outcome,
    plan_update_requests,
    replayed_request,
    worth_a_look,
)
from stockade.controllers.webhookconfig import ApiResource
from stockade.engine.match import RequestInfo, ResourceKind
from stockade.kube.controller import Result
from stockade.kube.errors import from_response
from stockade.kube.informer import Informer
from stockade.policy.model import KyvernoPolicy
from stockade.webhook.admission import AdmissionRequest
from tests.unit.controllers.fakecluster import FakeCluster, IdleWatch

NAMESPACE = "kyverno"


def generate_policy(synchronize: bool = False) -> KyvernoPolicy:
    return KyvernoPolicy(
        {
            "apiVersion": "kyverno.io/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "ns-defaults"},
            "spec": {
                "rules": [
                    {
                        "name": "make-cm",
                        "match": {"any": [{"resources": {"kinds": ["Namespace"], "selector": {"matchLabels": {"team": "a"}}}}]},
                        "generate": {
                            "synchronize": synchronize,
                            "apiVersion": "v1",
                            "kind": "ConfigMap",
                            "name": "defaults",
                            "namespace": "{{ request.object.metadata.name }}",
                            "data": {"data": {"k": "v"}},
                        },
                    },
                    {"name": "check", "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]}, "validate": {"pattern": {"metadata": {"name": "?*"}}}},
                ]
            },
        }
    )


def mutate_policy() -> KyvernoPolicy:
    return KyvernoPolicy(
        {
            "apiVersion": "kyverno.io/v1",
            "kind": "Policy",
            "metadata": {"name": "label-secrets", "namespace": "ns1"},
            "spec": {
                "rules": [
                    {
                        "name": "label",
                        "match": {"any": [{"resources": {"kinds": ["ConfigMap"], "names": ["trigger"]}}]},
                        "mutate": {
                            "targets": [{"apiVersion": "v1", "kind": "Secret", "name": "s", "namespace": "ns1"}],
                            "patchStrategicMerge": {"metadata": {"labels": {"from": "{{ request.object.metadata.name }}"}}},
                        },
                    }
                ]
            },
        }
    )


def review(operation: str, obj: dict[str, Any], old: dict[str, Any] | None = None, kind: str = "Namespace") -> AdmissionRequest:
    subject = obj or old or {}
    metadata = subject.get("metadata") or {}
    plural = {"Namespace": "namespaces", "ConfigMap": "configmaps"}[kind]
    return AdmissionRequest(
        uid="req-1",
        operation=operation,
        kind=ResourceKind("", "v1", kind),
        resource={"group": "", "version": "v1", "resource": plural},
        sub_resource="",
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        object=obj,
        old_object=old or {},
        user_info=RequestInfo(username="alice", groups=("devs",), roles=("ns1:editor",)),
        dry_run=False,
    )


def namespace(name: str, labels: dict[str, str], uid: str = "uid-1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "uid": uid, "labels": labels}}


# -- what admission records ------------------------------------------------------------------------------------------
def test_generate_request_is_one_per_policy_with_kyverno_fields() -> None:
    obj = namespace("ns2", {"team": "a"})
    [request] = plan_update_requests(NAMESPACE, [generate_policy()], review("CREATE", obj))
    assert request["apiVersion"] == "kyverno.io/v2" and request["kind"] == "UpdateRequest"
    assert request["metadata"] == {"generateName": "ur-", "namespace": NAMESPACE, "labels": {"generate.kyverno.io/policy-name": "ns-defaults"}}
    spec = request["spec"]
    assert (spec["requestType"], spec["policy"], spec["rule"], spec["deleteDownstream"], spec["resource"]) == ("generate", "ns-defaults", "", False, {})
    assert spec["ruleContext"] == [
        {"rule": "make-cm", "deleteDownstream": False, "trigger": {"apiVersion": "v1", "kind": "Namespace", "name": "ns2", "uid": "uid-1"}}
    ]
    assert spec["context"]["userInfo"] == {"userInfo": {"username": "alice", "groups": ["devs"]}, "roles": ["ns1:editor"]}
    info = spec["context"]["admissionRequestInfo"]
    assert info["operation"] == "CREATE"
    admission = info["admissionRequest"]
    assert admission["kind"] == {"group": "", "version": "v1", "kind": "Namespace"}
    assert admission["resource"] == {"group": "", "version": "v1", "resource": "namespaces"}
    assert (admission["operation"], admission["object"], admission["uid"], admission["dryRun"]) == ("CREATE", obj, "req-1", False)
    assert "oldObject" not in admission


def test_requests_that_trigger_nothing_record_nothing() -> None:
    assert plan_update_requests(NAMESPACE, [generate_policy()], review("CREATE", namespace("team-b", {"team": "b"}))) == []
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "ns1"}}
    assert plan_update_requests(NAMESPACE, [generate_policy()], review("CREATE", cm, kind="ConfigMap")) == []
    dry = review("CREATE", namespace("ns2", {"team": "a"}))
    object.__setattr__(dry, "dry_run", True)
    assert plan_update_requests(NAMESPACE, [generate_policy()], dry) == []


def test_synchronized_trigger_that_stops_matching_deletes_downstream() -> None:
    old, new = namespace("ns2", {"team": "a"}), namespace("ns2", {"team": "b"})
    [request] = plan_update_requests(NAMESPACE, [generate_policy(synchronize=True)], review("UPDATE", new, old))
    assert request["spec"]["ruleContext"] == [
        {"rule": "make-cm", "deleteDownstream": True, "synchronize": True, "trigger": {"apiVersion": "v1", "kind": "Namespace", "name": "ns2", "uid": "uid-1"}}
    ]
    assert plan_update_requests(NAMESPACE, [generate_policy(synchronize=False)], review("UPDATE", new, old)) == []
    [deleted] = plan_update_requests(NAMESPACE, [generate_policy(synchronize=True)], review("DELETE", {}, old))
    assert deleted["spec"]["ruleContext"][0]["deleteDownstream"] is True


def test_edited_downstream_object_records_its_trigger_from_labels() -> None:
    labels = {
        "app.kubernetes.io/managed-by": "kyverno",
        "generate.kyverno.io/policy-name": "ns-defaults",
        "generate.kyverno.io/policy-namespace": "",
        "generate.kyverno.io/rule-name": "make-cm",
        "generate.kyverno.io/trigger-kind": "Namespace",
        "generate.kyverno.io/trigger-version": "v1",
        "generate.kyverno.io/trigger-name": "ns2",
        "generate.kyverno.io/trigger-uid": "uid-1",
    }
    old = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "defaults", "namespace": "ns2", "labels": labels}}
    [request] = plan_update_requests(NAMESPACE, [generate_policy(synchronize=True)], review("DELETE", {}, old, kind="ConfigMap"))
    assert request["spec"]["ruleContext"] == [
        {"rule": "make-cm", "deleteDownstream": False, "synchronize": True, "trigger": {"apiVersion": "v1", "kind": "Namespace", "name": "ns2", "uid": "uid-1"}}
    ]


def test_mutate_existing_request_is_one_per_rule_with_the_trigger() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "trigger", "namespace": "ns1", "uid": "cm-uid"}}
    [request] = plan_update_requests(NAMESPACE, [mutate_policy()], review("CREATE", cm, kind="ConfigMap"))
    spec = request["spec"]
    assert (spec["requestType"], spec["policy"], spec["rule"], spec["deleteDownstream"]) == ("mutate", "ns1/label-secrets", "label", False)
    assert spec["resource"] == {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "ns1", "name": "trigger", "uid": "cm-uid"}
    assert "ruleContext" not in spec
    assert request["metadata"]["labels"] == {
        "mutate.updaterequest.kyverno.io/policy-name": "label-secrets",
        "mutate.updaterequest.kyverno.io/trigger-name": "trigger",
        "mutate.updaterequest.kyverno.io/trigger-namespace": "ns1",
        "mutate.updaterequest.kyverno.io/trigger-kind": "ConfigMap",
        "mutate.updaterequest.kyverno.io/trigger-apiversion": "v1",
    }
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "trigger", "namespace": "ns2"}}
    assert plan_update_requests(NAMESPACE, [mutate_policy()], review("CREATE", other, kind="ConfigMap")) == []  # a Policy's own namespace only


def test_replay_reads_back_what_admission_recorded() -> None:
    old, new = namespace("ns2", {"team": "a"}), namespace("ns2", {"team": "a", "x": "y"})
    [request] = plan_update_requests(NAMESPACE, [generate_policy()], review("UPDATE", new, old))
    operation, obj, old_obj, info, gvk = replayed_request(request)
    assert (operation, obj, old_obj, gvk) == ("UPDATE", new, old, ResourceKind("", "v1", "Namespace"))
    assert (info.username, info.groups, info.roles) == ("alice", ("devs",), ("ns1:editor",))


# -- the processing state machine -------------------------------------------------------------------------------------
def test_outcome_counts_failed_attempts_then_fails() -> None:
    assert outcome([], 3, max_retries=2).delete
    first = outcome(["boom"], 0, max_retries=2)
    assert (first.state, first.retry_count, first.message, first.delete) == (PENDING, 1, "boom", False)
    second = outcome(["boom"], 1, max_retries=2)
    assert (second.state, second.retry_count) == (PENDING, 2)
    last = outcome(["boom"], 2, max_retries=2)
    assert (last.state, last.retry_count, last.delete) == (FAILED, 3, False)
    assert outcome(["gone"], 0, max_retries=5, permanent=True).state == FAILED


def test_only_changes_made_by_others_bring_a_request_back() -> None:
    pending = {"metadata": {"name": "ur-1", "generation": 1}, "status": {"state": PENDING, "retryCount": 1}}
    retried = {"metadata": {"name": "ur-1", "generation": 1}, "status": {"state": PENDING, "retryCount": 2}}
    failed = {"metadata": {"name": "ur-1", "generation": 1}, "status": {"state": FAILED, "retryCount": 3}}
    completed = {"metadata": {"name": "ur-1", "generation": 1}, "status": {"state": COMPLETED}}
    assert not worth_a_look(pending, retried)  # our own retry write: the backoff stands
    assert not worth_a_look(pending, pending)  # a resync
    assert not worth_a_look(pending, failed)  # our own final write
    assert worth_a_look(failed, retried)  # an operator reset a Failed request for another try
    assert worth_a_look(pending, completed)
    assert worth_a_look(pending, {**pending, "metadata": {"name": "ur-1", "generation": 2}})


class UrCluster(FakeCluster):
    """The fake cluster serving UpdateRequests, with their status subresource (optimistic concurrency included)."""

    def __init__(self) -> None:
        super().__init__()
        self.resources.append(ApiResource("kyverno.io", "v2", "updaterequests", "UpdateRequest"))
        self.status_writes: list[dict[str, Any]] = []

    def request(self, method: str, path: str, body: Any = None, *, query: dict[str, str] | None = None, content_type: str = "application/json") -> Any:
        if method == "PUT" and path.endswith("/status"):
            name = path.rsplit("/", 2)[1]
            current = self.get_object("kyverno.io/v2", "UpdateRequest", NAMESPACE, name)
            if current is None:
                raise from_response(404, "not found", method="PUT", path=path)
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise from_response(409, "the object has been modified", method="PUT", path=path)
            current["status"] = copy.deepcopy(body["status"])
            self.status_writes.append(copy.deepcopy(body["status"]))
            return self.add(current)
        return super().request(method, path, body, query=query, content_type=content_type)

    def update_requests(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for (a, k, ns, _), o in sorted(self.objects.items()) if k == "UpdateRequest" and ns == NAMESPACE]


class UrListWatch:
    """Lists the fake cluster's UpdateRequests; its watch stays open (no events) until closed."""

    def __init__(self, cluster: UrCluster) -> None:
        self.cluster = cluster
        self.lists = 0
        self.closed = threading.Event()

    def list(self) -> tuple[list[dict[str, Any]], str]:
        self.lists += 1
        return self.cluster.update_requests(), "1"

    def watch(self, resource_version: str, timeout_seconds: int) -> Any:
        return IdleWatch(self.closed)


@dataclass
class Snapshot:
    policies: list[KyvernoPolicy]
    documents: tuple[Any, ...] = ()
    errors: dict[Any, str] = field(default_factory=dict)


class Store:
    def __init__(self, *policies: KyvernoPolicy) -> None:
        self.listeners: list[Any] = []
        self.snapshot = Snapshot(list(policies))


def setup(*policies: KyvernoPolicy, max_retries: int = 3) -> tuple[UrCluster, GenerateController, UpdateRequestController]:
    """A reconciler whose informer store is filled by `sync` (what the watch would deliver), not by a thread."""
    cluster = UrCluster()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    generator = GenerateController(None, Store(*policies), cluster_data=cluster)  # type: ignore[arg-type]
    controller = UpdateRequestController(generator, NAMESPACE, cluster=cluster, max_retries=max_retries, backoff_seconds=0.5, max_backoff_seconds=1.5)  # type: ignore[arg-type]
    controller.informer = Informer(UrListWatch(cluster))
    return cluster, generator, controller


def sync(cluster: UrCluster, controller: UpdateRequestController) -> None:
    assert controller.informer is not None
    controller.informer.apply_listing(cluster.update_requests())


def store_request(cluster: UrCluster, body: dict[str, Any], name: str) -> str:
    body = copy.deepcopy(body)
    body["metadata"].pop("generateName", None)
    body["metadata"]["name"] = name
    cluster.add(body)
    return f"{NAMESPACE}/{name}"


def stored_status(cluster: UrCluster, name: str) -> dict[str, Any] | None:
    found = cluster.find("UpdateRequest", NAMESPACE, name)
    return None if found is None else dict(found.get("status") or {})


def test_pending_request_that_succeeds_generates_and_is_deleted() -> None:
    cluster, _, controller = setup(generate_policy())
    trigger = cluster.add(namespace("ns2", {"team": "a"}))
    [body] = plan_update_requests(NAMESPACE, [generate_policy()], review("CREATE", trigger))
    key = store_request(cluster, body, "ur-1")
    sync(cluster, controller)
    assert controller.reconcile(key) is None
    assert cluster.find("ConfigMap", "ns2", "defaults") is not None
    assert cluster.find("UpdateRequest", NAMESPACE, "ur-1") is None  # Completed requests are cleaned up
    assert cluster.status_writes == [{"state": COMPLETED}]
    assert (controller.completed, controller.failed, controller.retried) == (1, 0, 0)


def test_failure_is_retried_after_a_growing_delay_with_its_count_stored_then_failed() -> None:
    cluster, _, controller = setup(generate_policy(), max_retries=2)
    trigger = namespace("ns2", {"team": "a"})  # admitted, never stored
    [body] = plan_update_requests(NAMESPACE, [generate_policy()], review("CREATE", trigger))
    key = store_request(cluster, body, "ur-1")
    results, statuses = [], []
    for _ in range(3):
        sync(cluster, controller)
        results.append(controller.reconcile(key))
        statuses.append(stored_status(cluster, "ur-1") or {})
    assert results == [Result(requeue_after=0.5), Result(requeue_after=1.0), None]
    assert [(s["state"], s["retryCount"]) for s in statuses] == [(PENDING, 1), (PENDING, 2), (FAILED, 3)]
    assert all("not stored yet" in s["message"] for s in statuses)
    assert cluster.find("ConfigMap", "ns2", "defaults") is None
    assert (controller.completed, controller.failed, controller.retried) == (0, 1, 2)
    # a Failed request is left for an operator to read
    writes = len(cluster.status_writes)
    sync(cluster, controller)
    assert controller.reconcile(key) is None
    assert len(cluster.status_writes) == writes and (stored_status(cluster, "ur-1") or {})["state"] == FAILED


def test_a_new_leader_goes_on_counting_from_the_stored_retry_count() -> None:
    cluster, _, controller = setup(generate_policy(), max_retries=2)
    [body] = plan_update_requests(NAMESPACE, [generate_policy()], review("CREATE", namespace("ns2", {"team": "a"})))
    body["status"] = {"state": PENDING, "retryCount": 2, "message": "trigger not stored yet"}
    key = store_request(cluster, body, "ur-1")
    sync(cluster, controller)
    assert controller.reconcile(key) is None
    assert (stored_status(cluster, "ur-1") or {})["state"] == FAILED and (stored_status(cluster, "ur-1") or {})["retryCount"] == 3


def test_a_stale_read_is_not_written_over() -> None:
    cluster, _, controller = setup(generate_policy())
    trigger = namespace("ns2", {"team": "a"})
    [body] = plan_update_requests(NAMESPACE, [generate_policy()], review("CREATE", trigger))
    key = store_request(cluster, body, "ur-1")
    sync(cluster, controller)
    stored = cluster.find("UpdateRequest", NAMESPACE, "ur-1")
    assert stored is not None
    stored["status"] = {"state": PENDING, "retryCount": 1}
    cluster.add(stored)  # another writer, not yet seen by the informer
    assert controller.reconcile(key) == Result(requeue=True)
    assert cluster.status_writes == [] and (stored_status(cluster, "ur-1") or {})["retryCount"] == 1


def test_trigger_that_comes_into_being_during_retries_completes() -> None:
    cluster, _, controller = setup(generate_policy())
    trigger = namespace("ns2", {"team": "a"})
    [body] = plan_update_requests(NAMESPACE, [generate_policy()], review("CREATE", trigger))
    key = store_request(cluster, body, "ur-1")
    sync(cluster, controller)
    assert controller.reconcile(key) == Result(requeue_after=0.5)
    cluster.add(trigger)
    sync(cluster, controller)
    assert controller.reconcile(key) is None
    assert cluster.find("ConfigMap", "ns2", "defaults") is not None
    assert cluster.find("UpdateRequest", NAMESPACE, "ur-1") is None
    # the key's backoff starts again from the bottom
    assert controller.backoff.failures(key) == 0


def test_replaced_trigger_fails_at_once_without_downstream() -> None:
    """Kyverno's cpol-data-nosync-rejected-create: the recorded trigger's uid is not the stored object's."""
    cluster, _, controller = setup(generate_policy())
    cluster.add(namespace("ns2", {"team": "other"}, uid="live-uid"))
    [body] = plan_update_requests(NAMESPACE, [generate_policy()], review("CREATE", namespace("ns2", {"team": "a"}, uid="phantom-uid")))
    key = store_request(cluster, body, "ur-1")
    sync(cluster, controller)
    assert controller.reconcile(key) is None
    status = stored_status(cluster, "ur-1") or {}
    assert (status["state"], status["retryCount"]) == (FAILED, 1) and "phantom-uid" in status["message"]
    assert cluster.find("ConfigMap", "ns2", "defaults") is None


def test_mutate_request_runs_only_its_rule() -> None:
    cluster, _, controller = setup(mutate_policy())
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"}})
    cluster.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns1"}})
    cm = cluster.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "trigger", "namespace": "ns1"}})
    [body] = plan_update_requests(NAMESPACE, [mutate_policy()], review("CREATE", cm, kind="ConfigMap"))
    key = store_request(cluster, body, "ur-m")
    sync(cluster, controller)
    assert controller.reconcile(key) is None and cluster.status_writes == [{"state": COMPLETED}]
    assert ((cluster.find("Secret", "ns1", "s") or {}).get("metadata") or {}).get("labels") == {"from": "trigger"}


def test_generate_request_leaves_other_policies_alone() -> None:
    cluster, _, controller = setup(generate_policy(), mutate_policy())
    cluster.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns1"}})
    trigger = cluster.add(namespace("ns2", {"team": "a"}))
    [body] = plan_update_requests(NAMESPACE, [generate_policy(), mutate_policy()], review("CREATE", trigger))
    key = store_request(cluster, body, "ur-1")
    sync(cluster, controller)
    assert controller.reconcile(key) is None and cluster.status_writes == [{"state": COMPLETED}]
    assert not ((cluster.find("Secret", "ns1", "s") or {}).get("metadata") or {}).get("labels")


def test_hand_written_request_without_status_is_pending() -> None:
    cluster, _, controller = setup(generate_policy())
    trigger = cluster.add(namespace("ns2", {"team": "a"}))
    [body] = plan_update_requests(NAMESPACE, [generate_policy()], review("CREATE", trigger))
    key = store_request(cluster, body, "ur-1")
    sync(cluster, controller)
    assert controller.reconcile(key) is None
    assert cluster.status_writes == [{"state": COMPLETED}] and cluster.find("ConfigMap", "ns2", "defaults") is not None


def test_completed_request_left_by_a_crashed_leader_is_deleted_without_a_replay() -> None:
    cluster, _, controller = setup(generate_policy())
    trigger = cluster.add(namespace("ns2", {"team": "a"}))
    [body] = plan_update_requests(NAMESPACE, [generate_policy()], review("CREATE", trigger))
    body["status"] = {"state": COMPLETED}
    key = store_request(cluster, body, "ur-done")
    sync(cluster, controller)
    assert controller.reconcile(key) is None
    assert cluster.find("UpdateRequest", NAMESPACE, "ur-done") is None
    assert cluster.status_writes == [] and cluster.find("ConfigMap", "ns2", "defaults") is None


def test_failed_request_is_left_untouched() -> None:
    cluster, _, controller = setup(generate_policy())
    trigger = cluster.add(namespace("ns2", {"team": "a"}))
    [body] = plan_update_requests(NAMESPACE, [generate_policy()], review("CREATE", trigger))
    body["status"] = {"state": FAILED, "retryCount": 4, "message": "earlier trouble"}
    key = store_request(cluster, body, "ur-failed")
    sync(cluster, controller)
    assert controller.reconcile(key) is None
    assert stored_status(cluster, "ur-failed") == {"state": FAILED, "retryCount": 4, "message": "earlier trouble"}
    assert cluster.status_writes == [] and cluster.find("ConfigMap", "ns2", "defaults") is None


def test_started_controller_recovers_what_its_first_listing_finds() -> None:
    """The informer's initial listing is the recovery pass: requests stored before the start are completed."""
    cluster, _, controller = setup(generate_policy())
    list_watch = UrListWatch(cluster)
    controller = UpdateRequestController(controller.generator, NAMESPACE, cluster=cluster, list_watch=list_watch)  # type: ignore[arg-type]
    assert controller.needs_leadership
    for index, name in enumerate(("ns1", "ns2")):
        trigger = cluster.add(namespace(name, {"team": "a"}, uid=f"uid-{index}"))
        [body] = plan_update_requests(NAMESPACE, [generate_policy()], review("CREATE", trigger))
        store_request(cluster, body, f"ur-{index}")
    controller.start()
    try:
        deadline = time.monotonic() + 30
        while cluster.update_requests() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cluster.update_requests() == []
        assert cluster.find("ConfigMap", "ns1", "defaults") is not None and cluster.find("ConfigMap", "ns2", "defaults") is not None
        assert list_watch.lists == 1 and controller.completed == 2
    finally:
        controller.stop()
    assert controller.controller is None and controller.informer is None
