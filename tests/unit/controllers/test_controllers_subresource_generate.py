"""Generation from subresource requests (Kyverno e2e generate-on-subresource-trigger, generate-on-eviction-subresource-
trigger), for ClusterPolicy generate rules and GeneratingPolicies alike.

Kyverno's webhooks hand every admitted request of a matched subresource to the background controller, whatever the
operation (an eviction is a CREATE, an exec a CONNECT); the background controller finds no stored trigger for it and
takes the request's own object (Eviction, PodExecOptions) as the trigger (pkg/background/common GetTrigger).  A
GeneratingPolicy matches the request as a request of the parent resource's subresource (``pods/eviction``), so a policy
naming only ``pods`` is not triggered by it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from stockade.controllers.generate import GenerateController, TriggerEvent
from stockade.engine.match import RequestInfo
from stockade.policy.loader import Document
from stockade.policy.model import KyvernoPolicy
from tests.unit.controllers.fakecluster import FakeCluster
from tests.unit.controllers.test_controllers_mutate_existing import BINDING_POLICY

CONFIGMAP = (
    '[{"kind": dyn("ConfigMap"), "apiVersion": dyn("v1"), '
    '"metadata": dyn({"name": "noted", "namespace": string(object.metadata.namespace)}), '
    '"data": dyn({"kind": string(object.kind)})}]'
)

EVICTION = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web", "namespace": "ns1"}}

def _parsed_exec_object() -> dict[str, Any]:
    """The PodExecOptions of a ``pods/exec`` CONNECT as the webhook parses it: the API server sends it without
    metadata, and the review gets the request's namespace as Kyverno's ConvertResource gives it."""
    from stockade.webhook.admission import parse_review

    options = {"apiVersion": "v1", "kind": "PodExecOptions", "command": ["ls"], "container": "web", "stdout": True}
    request = {
        "uid": "u1", "operation": "CONNECT", "namespace": "ns1", "name": "web", "subResource": "exec",
        "kind": {"group": "", "version": "v1", "kind": "PodExecOptions"}, "resource": {"group": "", "version": "v1", "resource": "pods"},
        "object": options, "userInfo": {"username": "alice"},
    }
    return parse_review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).object


EXEC = _parsed_exec_object()


def gpol(resources: list[str], operations: list[str], *, skip_background: bool | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": operations, "resources": resources}]},
        "generate": [{"expression": f"generator.Apply(object.metadata.namespace, {CONFIGMAP})"}],
    }
    if skip_background is not None:
        spec["evaluation"] = {"skipBackgroundRequests": skip_background}
    return {"apiVersion": "policies.kyverno.io/v1beta1", "kind": "GeneratingPolicy", "metadata": {"name": "on-subresource"}, "spec": spec}


def cpol(kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "on-subresource"},
        "spec": {
            "rules": [
                {
                    "name": "note",
                    "match": {"any": [{"resources": {"kinds": [kind]}}]},
                    "generate": {
                        "synchronize": False,
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "name": "noted",
                        "namespace": "{{request.namespace}}",
                        "data": {"data": {"kind": "{{request.object.kind}}"}},
                    },
                }
            ]
        },
    }


@dataclass
class Snapshot:
    documents: tuple[Document, ...]
    policies: list[KyvernoPolicy] = field(default_factory=list)
    errors: dict[Any, str] = field(default_factory=dict)


class Store:
    def __init__(self, *docs: dict[str, Any]) -> None:
        self.listeners: list[Any] = []
        policies = [KyvernoPolicy(d) for d in docs if d["kind"] == "ClusterPolicy"]
        self.snapshot = Snapshot(tuple(Document(d, "test", i) for i, d in enumerate(docs)), policies)


@dataclass
class Review:
    """The parts of an admission request the generate controller reads."""

    operation: str
    object: dict[str, Any]
    sub_resource: str
    user_info: RequestInfo = field(default_factory=lambda: RequestInfo(username="alice"))
    old_object: dict[str, Any] = field(default_factory=dict)
    kind: Any = None
    resource: dict[str, str] = field(default_factory=lambda: {"group": "", "version": "v1", "resource": "pods"})
    dry_run: bool = False
    namespace: str = "ns1"
    name: str = "web"


def run(review: Review, *docs: dict[str, Any], background: str = "") -> tuple[FakeCluster, list[Any]]:
    cluster = FakeCluster()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"}})
    ctl = GenerateController(None, Store(*docs), cluster_data=cluster, background_username=background)  # type: ignore[arg-type]
    ctl.submit(review)
    key = ctl.controller.queue.get(timeout=0)
    if key is None:
        return cluster, []
    event = ctl.queued_event(key)
    assert isinstance(event, TriggerEvent) and event.subresource
    return cluster, ctl.process_event(event)


CASES = [
    pytest.param(Review("CREATE", EVICTION, "eviction"), gpol(["pods/eviction"], ["*"]), "Eviction", id="gpol-eviction-create"),
    pytest.param(Review("CONNECT", EXEC, "exec"), gpol(["pods/exec"], ["CONNECT"]), "PodExecOptions", id="gpol-exec-connect"),
    pytest.param(Review("CREATE", EVICTION, "eviction"), cpol("Pod/eviction"), "Eviction", id="cpol-eviction-create"),
    pytest.param(Review("CONNECT", EXEC, "exec"), cpol("Pod/exec"), "PodExecOptions", id="cpol-exec-connect"),
]


@pytest.mark.parametrize(("review", "policy", "kind"), CASES)
def test_a_subresource_request_generates_from_the_object_it_carries(review: Review, policy: dict[str, Any], kind: str) -> None:
    cluster, failures = run(review, policy)
    assert failures == []
    generated = cluster.find("ConfigMap", "ns1", "noted")
    assert generated is not None and generated["data"] == {"kind": kind}
    labels = generated["metadata"]["labels"]
    assert (labels["generate.kyverno.io/trigger-kind"], labels["generate.kyverno.io/policy-name"]) == (kind, "on-subresource")


@pytest.mark.parametrize(
    ("review", "policy"),
    [
        pytest.param(Review("CREATE", EVICTION, "eviction"), gpol(["pods"], ["CREATE"]), id="gpol-names-the-parent-only"),
        pytest.param(Review("CONNECT", EXEC, "exec"), gpol(["pods/eviction"], ["*"]), id="gpol-names-another-subresource"),
        pytest.param(Review("CONNECT", EXEC, "exec"), gpol(["pods/exec"], ["CREATE"]), id="gpol-names-another-operation"),
        pytest.param(Review("CONNECT", EXEC, "exec"), cpol("Pod/eviction"), id="cpol-names-another-subresource"),
        pytest.param(Review("CREATE", EVICTION, "eviction"), cpol("Pod"), id="cpol-names-the-parent-only"),
    ],
)
def test_a_policy_that_does_not_name_the_subresource_and_operation_generates_nothing(review: Review, policy: dict[str, Any]) -> None:
    cluster, failures = run(review, policy)
    assert failures == []
    assert cluster.find("ConfigMap", "ns1", "noted") is None


def test_a_connect_without_a_subresource_is_not_taken() -> None:
    cluster = FakeCluster()
    ctl = GenerateController(None, Store(gpol(["pods/exec"], ["CONNECT"])), cluster_data=cluster)  # type: ignore[arg-type]
    assert ctl.submit(Review("CONNECT", EXEC, "")) is None
    assert ctl.controller.queue.get(timeout=0) is None


def test_a_dry_run_subresource_request_has_no_side_effects() -> None:
    review = Review("CREATE", EVICTION, "eviction", dry_run=True)
    cluster, failures = run(review, gpol(["pods/eviction"], ["*"]))
    assert failures == [] and cluster.find("ConfigMap", "ns1", "noted") is None


@pytest.mark.parametrize(("skip", "generated"), [(None, False), (True, False), (False, True)])
def test_background_account_subresource_requests_follow_skip_background_requests(skip: bool | None, generated: bool) -> None:
    """Kyverno's gpol webhook drops background-account requests unless the policy sets skipBackgroundRequests false."""
    account = "system:serviceaccount:kyverno:kyverno-background-controller"
    review = Review("CREATE", EVICTION, "eviction", user_info=RequestInfo(username=account))
    cluster, failures = run(review, gpol(["pods/eviction"], ["*"], skip_background=skip), background=account)
    assert failures == []
    assert (cluster.find("ConfigMap", "ns1", "noted") is not None) is generated


def test_request_name_of_a_connect_is_the_pods_though_its_object_has_none() -> None:
    """Kyverno's ``request.name`` is the admission request's (the Pod ``web``), not the PodExecOptions' (it has none)."""
    policy = cpol("Pod/exec")
    policy["spec"]["rules"][0]["generate"]["data"]["data"]["pod"] = "{{request.name}}"
    cluster, failures = run(Review("CONNECT", EXEC, "exec"), policy)
    assert failures == []
    generated = cluster.find("ConfigMap", "ns1", "noted")
    assert generated is not None and generated["data"] == {"kind": "PodExecOptions", "pod": "web"}


# -- recorded as UpdateRequests before the answer, replayed from the recorded admission request ---------------------
def parsed(operation: str, obj: dict[str, Any], subresource: str, user: str = "alice") -> Any:
    """The review as the webhook parses it (Kyverno's admission request, subresource and parent resource included)."""
    from stockade.webhook.admission import parse_review

    kind = {"group": obj["apiVersion"].rpartition("/")[0], "version": obj["apiVersion"].rpartition("/")[2], "kind": obj["kind"]}
    request = {
        "uid": "u1", "operation": operation, "namespace": "ns1", "name": "web", "subResource": subresource, "kind": kind,
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "object": obj, "userInfo": {"username": user, "groups": ["devs"]},
    }
    return parse_review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})


def recording(*docs: dict[str, Any], cluster: Any = None) -> tuple[Any, GenerateController]:
    from stockade.controllers.updaterequest import UpdateRequestWriter
    from tests.unit.controllers.test_controllers_update_requests import NAMESPACE, UrCluster

    if cluster is None:
        cluster = UrCluster()
        for name in ("ns1", NAMESPACE):
            cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    generator = GenerateController(None, Store(*docs), cluster_data=cluster)
    generator.update_requests = UpdateRequestWriter(None, NAMESPACE, cluster=cluster)
    return cluster, generator


def replay_all(cluster: Any, *docs: dict[str, Any]) -> list[Any]:
    """A new leader (nothing of the admitting process's memory) replays every stored UpdateRequest once."""
    from stockade.controllers.updaterequest import UpdateRequestController
    from stockade.kube.informer import Informer
    from tests.unit.controllers.test_controllers_update_requests import NAMESPACE, UrListWatch

    leader = GenerateController(None, Store(*docs), cluster_data=cluster)
    controller = UpdateRequestController(leader, NAMESPACE, cluster=cluster, max_retries=3)
    controller.informer = Informer(UrListWatch(cluster))
    controller.informer.apply_listing(cluster.update_requests())
    return [controller.reconcile(f"{NAMESPACE}/{ur['metadata']['name']}") for ur in cluster.update_requests()]


DURABLE = [
    pytest.param("CREATE", EVICTION, "eviction", gpol(["pods/eviction"], ["*"]), "cel-generate", "Eviction", id="gpol-eviction-create"),
    pytest.param("CONNECT", EXEC, "exec", gpol(["pods/exec"], ["CONNECT"]), "cel-generate", "PodExecOptions", id="gpol-exec-connect"),
    pytest.param("CREATE", EVICTION, "eviction", cpol("Pod/eviction"), "generate", "Eviction", id="cpol-eviction-create"),
    pytest.param("CONNECT", EXEC, "exec", cpol("Pod/exec"), "generate", "PodExecOptions", id="cpol-exec-connect"),
]


@pytest.mark.parametrize(("operation", "obj", "subresource", "policy", "request_type", "kind"), DURABLE)
def test_a_subresource_trigger_is_recorded_before_the_answer_and_replayed_from_the_admission_request(
    operation: str, obj: dict[str, Any], subresource: str, policy: dict[str, Any], request_type: str, kind: str
) -> None:
    """Kyverno's webhooks record a subresource request's work as any other, with the admission request (its
    ``subResource`` and parent ``resource``); the background controller, finding no stored trigger, takes the
    request's object from it (pkg/background/common GetTrigger).  Nothing waits in memory meanwhile, so the work
    survives the admitting process: a new leader, knowing nothing of it, generates the downstream."""
    cluster, generator = recording(policy)
    record = generator.submit(parsed(operation, obj, subresource))
    assert callable(record)
    record()
    assert generator.controller.queue.get(timeout=0) is None  # nothing held in memory
    [stored] = cluster.update_requests()
    spec = stored["spec"]
    admission = spec["context"]["admissionRequestInfo"]["admissionRequest"]
    assert (spec["requestType"], admission["operation"], admission["subResource"], admission["resource"]["resource"], admission["name"]) == (
        request_type, operation, subresource, "pods", "web"
    )
    assert spec["ruleContext"][0]["trigger"]["kind"] == kind and spec["ruleContext"][0]["deleteDownstream"] is False
    assert cluster.find("ConfigMap", "ns1", "noted") is None  # not done at admission
    assert replay_all(cluster, policy) == [None]
    generated = cluster.find("ConfigMap", "ns1", "noted")
    assert generated is not None and generated["data"] == {"kind": kind}
    assert cluster.update_requests() == []  # completed and deleted


@pytest.mark.parametrize(
    ("operation", "obj", "subresource", "policy"),
    [
        pytest.param("CREATE", EVICTION, "eviction", gpol(["pods"], ["CREATE"]), id="gpol-names-the-parent-only"),
        pytest.param("CONNECT", EXEC, "exec", gpol(["pods/exec"], ["CREATE"]), id="gpol-names-another-operation"),
        pytest.param("CONNECT", EXEC, "exec", cpol("Pod/eviction"), id="cpol-names-another-subresource"),
        pytest.param("CREATE", EVICTION, "eviction", cpol("Pod"), id="cpol-names-the-parent-only"),
    ],
)
def test_a_subresource_request_no_policy_names_records_nothing(operation: str, obj: dict[str, Any], subresource: str, policy: dict[str, Any]) -> None:
    cluster, generator = recording(policy)
    assert generator.submit(parsed(operation, obj, subresource)) is None
    assert cluster.update_requests() == [] and generator.controller.queue.get(timeout=0) is None


def test_request_name_of_a_replayed_connect_is_the_pods() -> None:
    """The replay gives ``request.name`` the recorded request's name (the Pod), as the admission-time evaluation did."""
    policy = cpol("Pod/exec")
    policy["spec"]["rules"][0]["generate"]["data"]["data"]["pod"] = "{{request.name}}"
    cluster, generator = recording(policy)
    record = generator.submit(parsed("CONNECT", EXEC, "exec"))
    assert callable(record)
    record()
    assert replay_all(cluster, policy) == [None]
    generated = cluster.find("ConfigMap", "ns1", "noted")
    assert generated is not None and generated["data"] == {"kind": "PodExecOptions", "pod": "web"}


def test_a_binding_records_a_mutate_existing_request_replayed_on_the_bound_pod() -> None:
    """Kyverno's Pod/binding trigger of a mutate-existing rule: one ``mutate`` request naming the Binding as its
    resource; its replay patches the Pod the request names."""
    policy = BINDING_POLICY
    cluster, generator = recording(policy)
    cluster.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "ns1"}})
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web", "namespace": "ns1"}, "target": {"kind": "Node", "name": "node-1"}}
    record = generator.submit(parsed("CREATE", binding, "binding"))
    assert callable(record)
    record()
    [stored] = cluster.update_requests()
    assert (stored["spec"]["requestType"], stored["spec"]["rule"], stored["spec"]["resource"]["kind"]) == ("mutate", "label-bound-pod", "Binding")
    assert ((cluster.find("Pod", "ns1", "web") or {}).get("metadata") or {}).get("labels") is None
    assert replay_all(cluster, policy) == [None]
    assert ((cluster.find("Pod", "ns1", "web") or {}).get("metadata") or {}).get("labels") == {"node": "node-1"}
    assert cluster.update_requests() == []


def test_a_failed_write_leaves_the_subresource_work_in_memory() -> None:
    """Without the UpdateRequest resource (a 404) the work is done in memory, as for any other trigger."""
    cluster = FakeCluster()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"}})
    _, generator = recording(cpol("Pod/eviction"), cluster=cluster)
    record = generator.submit(parsed("CREATE", EVICTION, "eviction"))
    assert callable(record)
    record()
    key = generator.controller.queue.get(timeout=0)
    assert key is not None
    event = generator.queued_event(key)
    assert isinstance(event, TriggerEvent) and event.subresource and event.request_name == "web"
    assert generator.process_event(event) == []
    assert cluster.find("ConfigMap", "ns1", "noted") is not None
