"""Kyverno's UpdateRequests: what an admitted request records (field names and meaning as Kyverno's webhooks write
them), and how the leader replays them (Completed and deleted, retried with backoff, then Failed; a trigger
replaced by another object fails at once) against an in-memory cluster."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from stockade.controllers.generate import GenerateController
from stockade.controllers.updaterequest import (
    COMPLETED,
    FAILED,
    PENDING,
    UpdateRequestController,
    collection_path,
    outcome,
    plan_update_requests,
    replayed_request,
)
from stockade.controllers.webhookconfig import ApiResource
from stockade.engine.match import RequestInfo, ResourceKind
from stockade.policy.model import KyvernoPolicy
from stockade.webhook.admission import AdmissionRequest
from tests.unit.controllers.fakecluster import FakeCluster

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
def test_outcome_retries_with_exponential_backoff_then_fails() -> None:
    assert outcome([], 3, max_retries=2, backoff=0.5, max_backoff=10) .delete
    first = outcome(["boom"], 0, max_retries=2, backoff=0.5, max_backoff=10)
    assert (first.state, first.retry_count, first.retry_after, first.message) == (PENDING, 1, 0.5, "boom")
    second = outcome(["boom"], 1, max_retries=2, backoff=0.5, max_backoff=10)
    assert (second.state, second.retry_count, second.retry_after) == (PENDING, 2, 1.0)
    last = outcome(["boom"], 2, max_retries=2, backoff=0.5, max_backoff=10)
    assert (last.state, last.retry_count, last.retry_after, last.delete) == (FAILED, 3, None, False)
    assert outcome(["boom"], 0, max_retries=5, backoff=0.5, max_backoff=0.7).retry_after == 0.5
    assert outcome(["boom"], 3, max_retries=5, backoff=0.5, max_backoff=0.7).retry_after == 0.7
    assert outcome(["gone"], 0, max_retries=5, backoff=0.5, max_backoff=1, permanent=True).state == FAILED


class UrCluster(FakeCluster):
    """The fake cluster serving UpdateRequests, with their status subresource."""

    def __init__(self) -> None:
        super().__init__()
        self.resources.append(ApiResource("kyverno.io", "v2", "updaterequests", "UpdateRequest"))
        self.status_writes: list[dict[str, Any]] = []

    def request(self, method: str, path: str, body: Any = None, *, query: dict[str, str] | None = None, content_type: str = "application/json") -> Any:
        if method == "GET" and path == collection_path(NAMESPACE):
            return {"items": [copy.deepcopy(o) for (a, k, ns, _), o in sorted(self.objects.items()) if k == "UpdateRequest" and ns == NAMESPACE]}
        if method == "GET":
            return self.get(path)
        if method == "PUT" and path.endswith("/status"):
            name = path.rsplit("/", 2)[1]
            current = self.get_object("kyverno.io/v2", "UpdateRequest", NAMESPACE, name)
            if current is None:
                raise self._missing(path)
            current["status"] = copy.deepcopy(body["status"])
            self.status_writes.append(copy.deepcopy(body["status"]))
            return self.add(current)
        return super().request(method, path, body, query=query, content_type=content_type)

    @staticmethod
    def _missing(path: str) -> Exception:
        from stockade.kube.errors import from_response

        return from_response(404, "not found", method="PUT", path=path)


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
    cluster = UrCluster()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    generator = GenerateController(None, Store(*policies), cluster_data=cluster)  # type: ignore[arg-type]
    controller = UpdateRequestController(generator, NAMESPACE, cluster=cluster, max_retries=max_retries)  # type: ignore[arg-type]
    return cluster, generator, controller


def store_request(cluster: UrCluster, body: dict[str, Any], name: str) -> str:
    body = copy.deepcopy(body)
    body["metadata"].pop("generateName", None)
    body["metadata"]["name"] = name
    cluster.add(body)
    return name


def test_completed_request_generates_and_is_deleted() -> None:
    cluster, _, controller = setup(generate_policy())
    trigger = cluster.add(namespace("ns2", {"team": "a"}))
    [body] = plan_update_requests(NAMESPACE, [generate_policy()], review("CREATE", trigger))
    store_request(cluster, body, "ur-1")
    controller.relist()
    result = controller.process("ur-1")
    assert result is not None and result.state == COMPLETED
    assert cluster.find("ConfigMap", "ns2", "defaults") is not None
    assert cluster.find("UpdateRequest", NAMESPACE, "ur-1") is None  # Completed requests are cleaned up
    assert cluster.status_writes == [{"state": COMPLETED}]
    assert controller.pending() == 0 and controller.completed == 1


def test_trigger_not_stored_is_retried_then_failed_with_reason_and_count() -> None:
    cluster, _, controller = setup(generate_policy(), max_retries=2)
    trigger = namespace("ns2", {"team": "a"})  # admitted, never stored
    [body] = plan_update_requests(NAMESPACE, [generate_policy()], review("CREATE", trigger))
    store_request(cluster, body, "ur-1")
    states = []
    for _ in range(3):
        result = controller.process("ur-1")
        assert result is not None
        states.append((result.state, result.retry_count))
    assert states == [(PENDING, 1), (PENDING, 2), (FAILED, 3)]
    stored = cluster.find("UpdateRequest", NAMESPACE, "ur-1")
    assert stored is not None and stored["status"]["state"] == FAILED and stored["status"]["retryCount"] == 3
    assert "not stored yet" in stored["status"]["message"]
    assert controller.process("ur-1") is None  # a Failed request is left alone
    assert cluster.find("ConfigMap", "ns2", "defaults") is None


def test_trigger_that_comes_into_being_during_retries_completes() -> None:
    cluster, _, controller = setup(generate_policy())
    trigger = namespace("ns2", {"team": "a"})
    [body] = plan_update_requests(NAMESPACE, [generate_policy()], review("CREATE", trigger))
    store_request(cluster, body, "ur-1")
    first = controller.process("ur-1")
    assert first is not None and first.state == PENDING and first.retry_after is not None
    cluster.add(trigger)
    second = controller.process("ur-1")
    assert second is not None and second.state == COMPLETED
    assert cluster.find("ConfigMap", "ns2", "defaults") is not None


def test_replaced_trigger_fails_at_once_without_downstream() -> None:
    """Kyverno's cpol-data-nosync-rejected-create: the recorded trigger's uid is not the stored object's."""
    cluster, _, controller = setup(generate_policy())
    cluster.add(namespace("ns2", {"team": "other"}, uid="live-uid"))
    [body] = plan_update_requests(NAMESPACE, [generate_policy()], review("CREATE", namespace("ns2", {"team": "a"}, uid="phantom-uid")))
    store_request(cluster, body, "ur-1")
    result = controller.process("ur-1")
    assert result is not None and (result.state, result.retry_count) == (FAILED, 1)
    assert "phantom-uid" in result.message
    assert cluster.find("ConfigMap", "ns2", "defaults") is None


def test_mutate_request_runs_only_its_rule() -> None:
    cluster, _, controller = setup(mutate_policy())
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"}})
    cluster.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns1"}})
    cm = cluster.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "trigger", "namespace": "ns1"}})
    [body] = plan_update_requests(NAMESPACE, [mutate_policy()], review("CREATE", cm, kind="ConfigMap"))
    store_request(cluster, body, "ur-m")
    result = controller.process("ur-m")
    assert result is not None and result.state == COMPLETED
    assert ((cluster.find("Secret", "ns1", "s") or {}).get("metadata") or {}).get("labels") == {"from": "trigger"}


def test_generate_request_leaves_other_policies_alone() -> None:
    cluster, _, controller = setup(generate_policy(), mutate_policy())
    cluster.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns1"}})
    trigger = cluster.add(namespace("ns2", {"team": "a"}))
    [body] = plan_update_requests(NAMESPACE, [generate_policy(), mutate_policy()], review("CREATE", trigger))
    store_request(cluster, body, "ur-1")
    assert (controller.process("ur-1") or outcome(["x"], 0, max_retries=0, backoff=0, max_backoff=0)).state == COMPLETED
    assert not ((cluster.find("Secret", "ns1", "s") or {}).get("metadata") or {}).get("labels")


def test_hand_written_request_without_status_is_pending() -> None:
    cluster, _, controller = setup(generate_policy())
    trigger = cluster.add(namespace("ns2", {"team": "a"}))
    [body] = plan_update_requests(NAMESPACE, [generate_policy()], review("CREATE", trigger))
    store_request(cluster, body, "ur-1")
    controller.relist()
    assert controller.pending() == 1


def test_completed_request_left_by_a_crashed_leader_is_deleted() -> None:
    cluster, _, controller = setup(generate_policy())
    trigger = cluster.add(namespace("ns2", {"team": "a"}))
    [body] = plan_update_requests(NAMESPACE, [generate_policy()], review("CREATE", trigger))
    body["status"] = {"state": COMPLETED}
    store_request(cluster, body, "ur-done")
    controller.relist()
    assert controller.pending() == 1
    assert controller.process("ur-done") is None
    assert cluster.find("UpdateRequest", NAMESPACE, "ur-done") is None and controller.pending() == 0
