"""GeneratingPolicy and MutatingPolicy work recorded as Kyverno's ``cel-generate`` / ``cel-mutate`` UpdateRequests.

What admission records follows Kyverno's gpol and mpol webhook handlers: one request per policy whose resource rules
select the request, the GeneratingPolicy's one rule context named after the policy (``namespace/name`` when
namespaced), a DELETE recorded only when the policy generates on it or synchronizes (then it removes the
downstream), an UPDATE synchronized when the policy is.  The leader replays each request for its policy alone; a
``cel-mutate`` request without an admission request (Kyverno's policy controller writes those) applies the policy to
what exists.  Admission stores the requests before it answers and falls back to in-memory work when it cannot."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pytest

from stockade.celpolicy.model import CelPolicy
from stockade.controllers.generate import GenerateController, TriggerEvent
from stockade.controllers.updaterequest import (
    CEL_GENERATE,
    CEL_MUTATE,
    COMPLETED,
    PENDING,
    UpdateRequestController,
    UpdateRequestWriter,
    plan_mutating_requests,
    plan_update_requests,
)
from stockade.controllers.webhookconfig import ApiResource
from stockade.engine.match import RequestInfo, ResourceKind
from stockade.kube.errors import from_response
from stockade.kube.informer import Informer
from stockade.policy.loader import Document
from stockade.webhook.admission import AdmissionRequest
from tests.unit.controllers.fakecluster import FakeCluster
from tests.unit.controllers.test_controllers_update_requests import NAMESPACE, UrCluster, UrListWatch, stored_status

BACKGROUND_USER = "system:serviceaccount:kyverno:kyverno-background-controller"
CONFIGMAPS = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}


def netpol(name: str) -> str:
    return (
        f'[{{"kind": dyn("NetworkPolicy"), "apiVersion": dyn("networking.k8s.io/v1"), '
        f'"metadata": dyn({{"name": "{name}", "namespace": string(object.metadata.namespace)}}), '
        '"spec": dyn({"podSelector": dyn({}), "policyTypes": dyn(["Ingress"])})}]'
    )


def gpol(name: str = "gen", *, sync: bool = False, operations: tuple[str, ...] = ("CREATE", "UPDATE"), namespace: str = "", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "evaluation": {"synchronize": {"enabled": sync}},
        "matchConstraints": {"resourceRules": [{**CONFIGMAPS, "operations": list(operations)}]},
        "generate": [{"expression": f"generator.Apply(object.metadata.namespace, {netpol(name)})"}],
    }
    body.update(spec)
    metadata = {"name": name, "namespace": namespace} if namespace else {"name": name}
    kind = "NamespacedGeneratingPolicy" if namespace else "GeneratingPolicy"
    return {"apiVersion": "policies.kyverno.io/v1beta1", "kind": kind, "metadata": metadata, "spec": body}


LABEL_FOO = 'Object{metadata: Object.metadata{labels: Object.metadata.labels{foo: "bar"}}}'


def mpol(name: str = "m", *, namespace: str = "", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "evaluation": {"mutateExisting": {"enabled": True}},
        "matchConstraints": {"resourceRules": [{**CONFIGMAPS, "resources": ["secrets"]}]},
        "targetMatchConstraints": {"resourceRules": [CONFIGMAPS]},
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": LABEL_FOO}}],
    }
    body.update(spec)
    metadata = {"name": name, "namespace": namespace} if namespace else {"name": name}
    kind = "NamespacedMutatingPolicy" if namespace else "MutatingPolicy"
    return {"apiVersion": "policies.kyverno.io/v1beta1", "kind": kind, "metadata": metadata, "spec": body}


def configmap(name: str = "cm", namespace: str = "ns1", uid: str = "cm-uid") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace, "uid": uid}, "data": {"k": "v"}}


def secret(name: str = "s", namespace: str = "ns1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace, "uid": f"{name}-uid"}}


def review(operation: str, obj: dict[str, Any], old: dict[str, Any] | None = None, *, user: str = "alice", sub_resource: str = "") -> AdmissionRequest:
    subject = obj or old or {}
    metadata = subject.get("metadata") or {}
    plural = {"ConfigMap": "configmaps", "Secret": "secrets"}[str(subject.get("kind"))]
    return AdmissionRequest(
        uid="req-1",
        operation=operation,
        kind=ResourceKind("", "v1", str(subject.get("kind"))),
        resource={"group": "", "version": "v1", "resource": plural},
        sub_resource=sub_resource,
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        object=obj,
        old_object=old or {},
        user_info=RequestInfo(username=user, groups=("devs",)),
        dry_run=False,
    )


def planned(operation: str, *docs: dict[str, Any], obj: dict[str, Any] | None = None, old: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    subject = configmap()
    new = subject if obj is None and operation != "DELETE" else (obj or {})
    return plan_update_requests(NAMESPACE, [], review(operation, new, old if old is not None else (subject if operation != "CREATE" else None)), [CelPolicy(d) for d in docs])


# -- what admission records ------------------------------------------------------------------------------------------
def test_generating_policy_request_has_kyverno_fields() -> None:
    [request] = planned("CREATE", gpol())
    assert request["apiVersion"] == "kyverno.io/v2" and request["kind"] == "UpdateRequest"
    assert request["metadata"] == {"generateName": "ur-", "namespace": NAMESPACE}  # Kyverno labels no CEL request
    spec = request["spec"]
    assert (spec["requestType"], spec["policy"]) == (CEL_GENERATE, "gen")
    assert spec["ruleContext"] == [
        {"rule": "gen", "deleteDownstream": False, "trigger": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "ns1", "name": "cm", "uid": "cm-uid"}}
    ]
    admission = spec["context"]["admissionRequestInfo"]["admissionRequest"]
    assert (admission["operation"], admission["object"], spec["context"]["userInfo"]["userInfo"]["username"]) == ("CREATE", configmap(), "alice")


def test_update_is_synchronized_only_for_a_synchronizing_policy() -> None:
    [synced] = planned("UPDATE", gpol(sync=True))
    assert synced["spec"]["ruleContext"][0]["synchronize"] is True
    [plain] = planned("UPDATE", gpol(sync=False))
    assert "synchronize" not in plain["spec"]["ruleContext"][0]
    # a policy that lists only CREATE hears of an UPDATE only when it synchronizes (its downstream follows the trigger)
    assert planned("UPDATE", gpol(sync=False, operations=("CREATE",))) == []
    [follows] = planned("UPDATE", gpol(sync=True, operations=("CREATE",)))
    assert follows["spec"]["ruleContext"][0]["synchronize"] is True


def test_delete_removes_downstream_when_synchronized_and_generates_when_the_policy_matches_it() -> None:
    [removal] = planned("DELETE", gpol(sync=True))
    assert removal["spec"]["ruleContext"][0]["deleteDownstream"] is True
    assert removal["spec"]["ruleContext"][0]["trigger"]["name"] == "cm"  # the deleted object is the trigger
    assert planned("DELETE", gpol(sync=False)) == []
    [on_delete] = planned("DELETE", gpol(sync=True, operations=("DELETE",)))
    assert on_delete["spec"]["ruleContext"][0]["deleteDownstream"] is False


def test_only_policies_whose_resource_rules_select_the_request_record() -> None:
    assert planned("CREATE", gpol(), obj=secret()) == []
    excluded = gpol(matchConstraints={"resourceRules": [CONFIGMAPS], "excludeResourceRules": [{**CONFIGMAPS, "resourceNames": ["cm"]}]})
    assert planned("CREATE", excluded) == []
    [own] = planned("CREATE", gpol(namespace="ns1"), gpol("elsewhere", namespace="ns2"))
    assert own["spec"]["policy"] == "ns1/gen" and own["spec"]["ruleContext"][0]["rule"] == "ns1/gen"
    # selectors and match conditions are the replay's to judge: a request recorded once too often costs one write
    [selected] = planned("CREATE", gpol(matchConditions=[{"name": "never", "expression": "false"}]))
    assert selected["spec"]["requestType"] == CEL_GENERATE
    assert plan_update_requests(NAMESPACE, [], review("CREATE", configmap(), sub_resource="status"), [CelPolicy(gpol())]) == []


def test_selection_skips_selectors_and_keeps_the_operations_of_exclusions() -> None:
    """The planner shares the evaluator's resource-rule matching (`celpolicy.matching.resource_rules_match`) but reads
    it generously: selectors are left to the replay, and an exclusion still needs its own operation when the
    policy hears of an UPDATE whatever operations its rules list (a synchronized policy)."""
    [unselected] = planned("CREATE", gpol(matchConstraints={"resourceRules": [CONFIGMAPS], "objectSelector": {"matchLabels": {"team": "a"}}}))
    assert unselected["spec"]["requestType"] == CEL_GENERATE
    creates_excluded = {"resourceRules": [{**CONFIGMAPS, "operations": ["CREATE"]}], "excludeResourceRules": [{**CONFIGMAPS, "operations": ["CREATE"]}]}
    assert planned("CREATE", gpol(sync=True, matchConstraints=creates_excluded)) == []
    [follows] = planned("UPDATE", gpol(sync=True, matchConstraints=creates_excluded))  # the CREATE exclusion is no UPDATE's
    assert follows["spec"]["ruleContext"][0]["synchronize"] is True
    updates_excluded = {**creates_excluded, "excludeResourceRules": [{**CONFIGMAPS, "operations": ["UPDATE"]}]}
    assert planned("UPDATE", gpol(sync=True, matchConstraints=updates_excluded)) == []
    assert planned("CREATE", gpol(matchConstraints={"resourceRules": []})) == []  # no rules: no webhook, no request


def test_mutating_policy_request_names_the_policy_and_carries_the_admission_request() -> None:
    policies = [CelPolicy(mpol()), CelPolicy(mpol("local", namespace="ns1"))]
    requests = plan_mutating_requests(NAMESPACE, policies, review("CREATE", secret()))
    assert [(r["spec"]["requestType"], r["spec"]["policy"]) for r in requests] == [(CEL_MUTATE, "m"), (CEL_MUTATE, "ns1/local")]
    assert all("ruleContext" not in r["spec"] and r["metadata"] == {"generateName": "ur-", "namespace": NAMESPACE} for r in requests)
    assert requests[0]["spec"]["context"]["admissionRequestInfo"]["admissionRequest"]["object"] == secret()
    assert plan_mutating_requests(NAMESPACE, policies, review("CREATE", configmap())) == []
    assert [r["spec"]["policy"] for r in plan_mutating_requests(NAMESPACE, policies, review("CREATE", secret(namespace="ns2")))] == ["m"]


# -- the leader's replay ---------------------------------------------------------------------------------------------
@dataclass
class Snapshot:
    documents: tuple[Document, ...]
    policies: list[Any] = field(default_factory=list)
    errors: dict[Any, str] = field(default_factory=dict)
    cel_policies: list[CelPolicy] = field(default_factory=list)


class Store:
    def __init__(self, *docs: dict[str, Any]) -> None:
        self.listeners: list[Any] = []
        self.snapshot = Snapshot(tuple(Document(d, "test", i) for i, d in enumerate(docs)), cel_policies=[CelPolicy(d) for d in docs])


def setup(*docs: dict[str, Any], background_user: str = "") -> tuple[UrCluster, GenerateController, UpdateRequestController]:
    cluster = UrCluster()
    cluster.resources.append(ApiResource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"))
    for name in (NAMESPACE, "ns1", "ns2"):
        cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    generator = GenerateController(None, Store(*docs), cluster_data=cluster, background_username=background_user)  # type: ignore[arg-type]
    controller = UpdateRequestController(generator, NAMESPACE, cluster=cluster, max_retries=3, backoff_seconds=0.5)  # type: ignore[arg-type]
    controller.informer = Informer(UrListWatch(cluster))
    return cluster, generator, controller


def replay(cluster: UrCluster, controller: UpdateRequestController, body: dict[str, Any], name: str = "ur-1") -> Any:
    body = copy.deepcopy(body)
    body["metadata"].pop("generateName", None)
    body["metadata"]["name"] = name
    cluster.add(body)
    assert controller.informer is not None
    controller.informer.apply_listing(cluster.update_requests())
    return controller.reconcile(f"{NAMESPACE}/{name}")


def test_cel_generate_request_runs_its_policy_alone_then_is_completed_and_deleted() -> None:
    cluster, _, controller = setup(gpol("gen"), gpol("other"))
    trigger = cluster.add(configmap())
    [mine, _theirs] = plan_update_requests(NAMESPACE, [], review("CREATE", trigger), [CelPolicy(gpol("gen")), CelPolicy(gpol("other"))])
    assert replay(cluster, controller, mine) is None
    assert cluster.find("NetworkPolicy", "ns1", "gen") is not None
    assert cluster.find("NetworkPolicy", "ns1", "other") is None  # the other policy's request does that
    assert cluster.status_writes == [{"state": COMPLETED}] and cluster.find("UpdateRequest", NAMESPACE, "ur-1") is None


def test_cel_generate_delete_request_removes_the_trigger_downstream() -> None:
    cluster, generator, controller = setup(gpol(sync=True))
    trigger = cluster.add(configmap())
    [create] = plan_update_requests(NAMESPACE, [], review("CREATE", trigger), [CelPolicy(gpol(sync=True))])
    assert replay(cluster, controller, create, "ur-create") is None
    assert cluster.find("NetworkPolicy", "ns1", "gen") is not None
    cluster.request("DELETE", "/api/v1/namespaces/ns1/configmaps/cm")
    [delete] = plan_update_requests(NAMESPACE, [], review("DELETE", {}, trigger), [CelPolicy(gpol(sync=True))])
    assert replay(cluster, controller, delete, "ur-delete") is None
    assert cluster.find("NetworkPolicy", "ns1", "gen") is None


def test_cel_generate_request_for_a_trigger_not_stored_yet_is_retried() -> None:
    cluster, _, controller = setup(gpol())
    [body] = plan_update_requests(NAMESPACE, [], review("CREATE", configmap()), [CelPolicy(gpol())])
    assert replay(cluster, controller, body) is not None  # requeued after its backoff
    status = stored_status(cluster, "ur-1") or {}
    assert (status["state"], status["retryCount"]) == (PENDING, 1) and cluster.find("NetworkPolicy", "ns1", "gen") is None


def test_cel_mutate_request_mutates_the_targets_of_its_policy_alone() -> None:
    other = mpol("other", mutations=[{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": LABEL_FOO.replace("foo", "other")}}])
    cluster, _, controller = setup(mpol(), other)
    cluster.add(configmap())
    trigger = cluster.add(secret())
    [body, _] = plan_mutating_requests(NAMESPACE, [CelPolicy(mpol()), CelPolicy(other)], review("CREATE", trigger))
    assert replay(cluster, controller, body) is None and cluster.status_writes == [{"state": COMPLETED}]
    assert ((cluster.find("ConfigMap", "ns1", "cm") or {}).get("metadata") or {}).get("labels") == {"foo": "bar"}


def test_cel_mutate_request_without_an_admission_request_applies_the_policy_to_what_exists() -> None:
    cluster, _, controller = setup(mpol())
    cluster.add(configmap())
    cluster.add(configmap("cm2", "ns2", uid="u2"))
    body = {"apiVersion": "kyverno.io/v2", "kind": "UpdateRequest", "metadata": {"namespace": NAMESPACE}, "spec": {"requestType": CEL_MUTATE, "policy": "m"}}
    assert replay(cluster, controller, body) is None and cluster.status_writes == [{"state": COMPLETED}]
    for namespace, name in (("ns1", "cm"), ("ns2", "cm2")):
        assert ((cluster.find("ConfigMap", namespace, name) or {}).get("metadata") or {}).get("labels") == {"foo": "bar"}
    missing = {**body, "spec": {"requestType": CEL_MUTATE, "policy": "gone"}}
    assert replay(cluster, controller, missing, "ur-2") is None
    assert (stored_status(cluster, "ur-2") or {})["state"] == "Failed"  # a policy that is not loaded never will be by retrying


# -- admission: stored before the answer, in memory when it cannot be -------------------------------------------------
class FailingUrCluster(UrCluster):
    def request(self, method: str, path: str, body: Any = None, *, query: dict[str, str] | None = None, content_type: str = "application/json") -> Any:
        if method == "POST" and "updaterequests" in path:
            raise from_response(500, "etcd is unwell", method=method, path=path)
        return super().request(method, path, body, query=query, content_type=content_type)


def queued_keys(generator: GenerateController) -> list[str]:
    keys = []
    while (key := generator.controller.queue.get(timeout=0)) is not None:
        keys.append(key)
        generator.controller.queue.done(key)
    return keys


def test_admission_stores_generating_policy_work_and_queues_nothing_in_memory() -> None:
    cluster, generator, _ = setup(gpol(), gpol("bg", evaluation={"synchronize": {"enabled": False}, "skipBackgroundRequests": False}))
    generator.update_requests = UpdateRequestWriter(None, NAMESPACE, cluster=cluster)  # type: ignore[arg-type]
    record = generator.submit(review("CREATE", configmap()))
    assert callable(record)
    record()
    assert sorted(r["spec"]["policy"] for r in cluster.update_requests()) == ["bg", "gen"]
    assert queued_keys(generator) == []
    # the background controller's own request: only a policy that opts in (skipBackgroundRequests: false) records
    cluster.objects = {k: v for k, v in cluster.objects.items() if k[1] != "UpdateRequest"}
    generator.background_username = BACKGROUND_USER
    record = generator.submit(review("CREATE", configmap(), user=BACKGROUND_USER))
    assert callable(record)
    record()
    assert [r["spec"]["policy"] for r in cluster.update_requests()] == ["bg"]


def test_admission_falls_back_to_memory_when_requests_cannot_be_stored() -> None:
    cluster, generator, _ = setup(gpol())
    failing = FailingUrCluster()
    generator.update_requests = UpdateRequestWriter(None, NAMESPACE, cluster=failing)  # type: ignore[arg-type]
    record = generator.submit(review("CREATE", configmap()))
    assert callable(record)
    record()
    [key] = queued_keys(generator)
    assert key.startswith("event/")


def test_a_paused_writer_leaves_the_work_in_memory_rather_than_dropping_it() -> None:
    """While the UpdateRequest CRD is missing (a 404 paused the writer), admitted work is queued in memory."""
    cluster, generator, _ = setup(gpol())
    writer = UpdateRequestWriter(None, NAMESPACE, cluster=FakeCluster())  # type: ignore[arg-type]  # no UpdateRequest resource: 404
    generator.update_requests = writer
    record = generator.submit(review("CREATE", configmap()))
    assert callable(record)
    record()
    assert writer.paused and len(queued_keys(generator)) == 1
    assert generator.submit(review("CREATE", configmap("cm2", uid="u2"))) is None  # paused: straight to memory
    assert len(queued_keys(generator)) == 1


def test_mutating_webhook_admission_stores_cel_mutate_work() -> None:
    cluster, generator, _ = setup(mpol(), mpol("off", evaluation={"admission": {"enabled": False}, "mutateExisting": {"enabled": True}}))
    generator.update_requests = UpdateRequestWriter(None, NAMESPACE, cluster=cluster)  # type: ignore[arg-type]
    record = generator.submit_mutating(review("CREATE", secret()), None, None)
    assert callable(record)
    record()
    # an admission-disabled policy is driven by policy events only, as Kyverno's MatchedMutateExistingPolicies
    assert [(r["spec"]["requestType"], r["spec"]["policy"]) for r in cluster.update_requests()] == [(CEL_MUTATE, "m")]
    assert queued_keys(generator) == []
    assert generator.submit_mutating(review("CREATE", configmap()), None, None) is None


def test_each_webhook_records_the_work_of_its_own_policies_once() -> None:
    """A Namespace CREATE reaches the ClusterPolicy webhook and each GeneratingPolicy's webhook; as with Kyverno's
    per-webhook handlers, each records only its own policies' work, so no request is recorded twice."""
    from stockade.policy.model import KyvernoPolicy
    from stockade.webhook.admission import SCOPE_KYVERNO, PolicyScope, Route
    from tests.unit.controllers.test_controllers_update_requests import generate_policy

    cluster_policy = generate_policy()
    cluster, generator, _ = setup(gpol("gen"), gpol("other"))
    generator.store.snapshot.policies = [cluster_policy]
    generator.update_requests = UpdateRequestWriter(None, NAMESPACE, cluster=cluster)  # type: ignore[arg-type]
    cm = configmap()
    cluster_route = generator.submit(review("CREATE", cm), served=[cluster_policy], route=Route("validate", None, PolicyScope(SCOPE_KYVERNO)))
    assert cluster_route is None  # the ClusterPolicy generates from Namespaces only: nothing to record for a ConfigMap
    gen_route = generator.submit(review("CREATE", cm), served=[], route=Route("validate", None, PolicyScope("gpol", ("gen",))))
    assert callable(gen_route)
    gen_route()
    assert [r["spec"]["policy"] for r in cluster.update_requests()] == ["gen"]
    # a ValidatingPolicy's webhook serves no GeneratingPolicy, and an unknown policy name selects none
    assert generator.submit(review("CREATE", cm), served=[], route=Route("validate", None, PolicyScope("vpol", ("gen",)))) is None
    assert generator.submit(review("CREATE", cm), served=[], route=Route("validate", None, PolicyScope("gpol", ("nope",)))) is None
    # the ClusterPolicy webhook of the other failure policy serves none of them
    ignored = KyvernoPolicy({**cluster_policy.raw, "spec": {**cluster_policy.raw["spec"], "failurePolicy": "Ignore"}})
    namespace_review = AdmissionRequest(
        uid="r", operation="CREATE", kind=ResourceKind("", "v1", "Namespace"), resource={"group": "", "version": "v1", "resource": "namespaces"},
        sub_resource="", namespace="", name="ns2", object={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns2", "labels": {"team": "a"}}},
        old_object={}, user_info=RequestInfo(username="alice"), dry_run=False,
    )
    generator.store.snapshot.policies = [ignored]
    assert generator.submit(namespace_review, served=[], route=Route("validate", None, PolicyScope(SCOPE_KYVERNO))) is None
    record = generator.submit(namespace_review, served=[ignored], route=Route("validate", None, PolicyScope(SCOPE_KYVERNO)))
    assert callable(record)
    record()
    assert sorted(r["spec"]["requestType"] for r in cluster.update_requests()) == ["cel-generate", "generate"]


# -- subresource requests (a pods/exec CONNECT, a pods/eviction CREATE) -----------------------------------------------
# Kyverno's mpol webhook records a cel-mutate request for every mutateExisting policy whose matchConstraints select
# the request, subresource requests included (MatchedMutateExistingPolicies matches the request's resource and
# subResource); its background processor replays it from the recorded admission request: ``request`` is that
# request (``request.name`` the Pod's, ``request.subResource`` the subresource) and the trigger is the object it
# carried, never a stored one (an Eviction or a PodExecOptions cannot be read back).
TOUCHED = "Object{metadata: Object.metadata{labels: Object.metadata.labels{via: request.subResource, by: request.userInfo.username}}}"
THE_REQUESTS_POD = 'resource.Get("v1", "pods", request.namespace, request.name)'


def subresource_mpol(
    name: str = "on-sub", *, resources: tuple[str, ...] = ("pods/exec",), operations: tuple[str, ...] = ("CONNECT",), targets: dict[str, Any] | None = None, **spec: Any
) -> dict[str, Any]:
    return mpol(
        name,
        matchConstraints={"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": list(operations), "resources": list(resources)}]},
        targetMatchConstraints=targets if targets is not None else {"expression": THE_REQUESTS_POD},
        mutations=[{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": TOUCHED}}],
        **spec,
    )


def pod(name: str = "web", namespace: str = "ns1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "uid": f"{name}-uid"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}


def exec_review(user: str = "alice", *, dry_run: bool = False) -> AdmissionRequest:
    from tests.unit.controllers.test_controllers_subresource_generate import EXEC, parsed

    return dataclasses.replace(parsed("CONNECT", EXEC, "exec", user), dry_run=dry_run)


def eviction_review(user: str = "alice") -> AdmissionRequest:
    from tests.unit.controllers.test_controllers_subresource_generate import EVICTION, parsed

    return parsed("CREATE", EVICTION, "eviction", user)


def pod_labels(cluster: FakeCluster, name: str = "web") -> dict[str, str]:
    return dict((((cluster.find("Pod", "ns1", name) or {}).get("metadata") or {}).get("labels")) or {})


def recorded_mutating(*docs: dict[str, Any], background_user: str = "") -> tuple[UrCluster, GenerateController, UpdateRequestController]:
    cluster, generator, controller = setup(*docs, background_user=background_user)
    generator.update_requests = UpdateRequestWriter(None, NAMESPACE, cluster=cluster)  # type: ignore[arg-type]
    cluster.add(pod())
    return cluster, generator, controller


def submitted(generator: GenerateController, admitted: AdmissionRequest) -> None:
    record = generator.submit_mutating(admitted, None, None)
    if record is not None:
        record()


SUBRESOURCE_CASES = [
    pytest.param(exec_review, subresource_mpol(), "exec", "PodExecOptions", {"via": "exec", "by": "alice"}, id="exec-connect-target-expression"),
    pytest.param(
        eviction_review,
        subresource_mpol(resources=("pods/eviction",), operations=("CREATE",), targets={"resourceRules": [{**CONFIGMAPS, "resources": ["pods"]}]}),
        "eviction",
        "Eviction",
        {"via": "eviction", "by": "alice"},
        id="eviction-create-target-rules",
    ),
]


@pytest.mark.parametrize(("make_review", "policy", "subresource", "kind", "expected"), SUBRESOURCE_CASES)
def test_a_subresource_request_records_cel_mutate_work_replayed_from_the_admission_request(
    make_review: Any, policy: dict[str, Any], subresource: str, kind: str, expected: dict[str, str]
) -> None:
    cluster, generator, _ = recorded_mutating(policy)
    submitted(generator, make_review())
    assert queued_keys(generator) == []  # nothing held in memory: the request is the record
    [stored] = cluster.update_requests()
    spec = stored["spec"]
    admission = spec["context"]["admissionRequestInfo"]["admissionRequest"]
    assert (spec["requestType"], spec["policy"], "ruleContext" in spec) == (CEL_MUTATE, "on-sub", False)
    assert (admission["subResource"], admission["resource"]["resource"], admission["name"], admission["object"]["kind"]) == (subresource, "pods", "web", kind)
    assert pod_labels(cluster) == {}  # not done at admission
    # a new leader, knowing nothing of the admission, replays it at once (no stored trigger to wait for) and mutates
    # the Pod the request names
    leader = UpdateRequestController(GenerateController(None, Store(policy), cluster_data=cluster), NAMESPACE, cluster=cluster, max_retries=3)
    leader.informer = Informer(UrListWatch(cluster))
    leader.informer.apply_listing(cluster.update_requests())
    assert leader.reconcile(f"{NAMESPACE}/{stored['metadata']['name']}") is None
    assert cluster.status_writes == [{"state": COMPLETED}] and cluster.update_requests() == []
    assert pod_labels(cluster) == expected


@pytest.mark.parametrize(
    "policy",
    [
        pytest.param(subresource_mpol(resources=("pods",), operations=("CREATE", "UPDATE", "CONNECT")), id="names-the-parent-only"),
        pytest.param(subresource_mpol(resources=("pods/eviction",), operations=("CREATE", "CONNECT")), id="names-another-subresource"),
        pytest.param(subresource_mpol(operations=("CREATE",)), id="names-another-operation"),
    ],
)
def test_a_subresource_request_the_policy_does_not_name_records_nothing(policy: dict[str, Any]) -> None:
    cluster, generator, _ = recorded_mutating(policy)
    assert generator.submit_mutating(exec_review(), None, None) is None
    assert cluster.update_requests() == [] and queued_keys(generator) == []


def test_subresource_wildcards_select_the_request() -> None:
    policies = [CelPolicy(subresource_mpol("any-of-pods", resources=("pods/*",))), CelPolicy(subresource_mpol("all", resources=("*/*",)))]
    assert [r["spec"]["policy"] for r in plan_mutating_requests(NAMESPACE, policies, exec_review())] == ["any-of-pods", "all"]


def test_a_dry_run_subresource_request_records_nothing() -> None:
    cluster, generator, _ = recorded_mutating(subresource_mpol())
    assert generator.submit_mutating(exec_review(dry_run=True), None, None) is None
    assert plan_mutating_requests(NAMESPACE, [CelPolicy(subresource_mpol())], exec_review(dry_run=True)) == []
    assert cluster.update_requests() == [] and queued_keys(generator) == []


def test_an_admission_disabled_policy_records_nothing_for_a_subresource_request() -> None:
    disabled = subresource_mpol("off", evaluation={"admission": {"enabled": False}, "mutateExisting": {"enabled": True}})
    cluster, generator, _ = recorded_mutating(disabled, subresource_mpol())
    submitted(generator, exec_review())
    assert [r["spec"]["policy"] for r in cluster.update_requests()] == ["on-sub"]


@pytest.mark.parametrize(("skip", "recorded"), [(None, []), (True, []), (False, ["on-sub"])])
def test_background_account_subresource_requests_follow_skip_background_requests(skip: bool | None, recorded: list[str]) -> None:
    """Kyverno's mpol handler drops the background account's requests (filterBackgroundPolicies) unless the policy
    sets ``skipBackgroundRequests: false``; so does its mutate-existing request creation."""
    evaluation: dict[str, Any] = {"mutateExisting": {"enabled": True}}
    if skip is not None:
        evaluation["skipBackgroundRequests"] = skip
    cluster, generator, _ = recorded_mutating(subresource_mpol(evaluation=evaluation), background_user=BACKGROUND_USER)
    submitted(generator, exec_review(BACKGROUND_USER))
    assert [r["spec"]["policy"] for r in cluster.update_requests()] == recorded
    submitted(generator, exec_review("alice"))  # anyone else's request records whatever the setting
    assert len(cluster.update_requests()) == len(recorded) + 1


class SelfReviewingCluster(UrCluster):
    """Answers a SelfSubjectReview with the user this controller writes as."""

    OWN_USER = "system:serviceaccount:stockade:stockade"

    def request(self, method: str, path: str, body: Any = None, *, query: dict[str, str] | None = None, content_type: str = "application/json") -> Any:
        if method == "POST" and path.endswith("/selfsubjectreviews"):
            return {"status": {"userInfo": {"username": self.OWN_USER}}}
        return super().request(method, path, body, query=query, content_type=content_type)


def test_requests_the_controller_makes_itself_are_background_requests_for_mutating_policies_too() -> None:
    """Our controllers are Kyverno's background controller: a request made as the user they write as is a background
    request for a MutatingPolicy as for generate (one test, ``GenerateController.is_background_request``), so a
    mutateExisting write of ours does not trigger the policies that skip background requests."""
    cluster = SelfReviewingCluster()
    for name in (NAMESPACE, "ns1"):
        cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    opted_in = mpol("opted-in", evaluation={"mutateExisting": {"enabled": True}, "skipBackgroundRequests": False})
    generator = GenerateController(None, Store(mpol(), opted_in), cluster_data=cluster)  # type: ignore[arg-type]
    generator.update_requests = UpdateRequestWriter(None, NAMESPACE, cluster=cluster)  # type: ignore[arg-type]
    submitted(generator, review("UPDATE", secret(), secret(), user=SelfReviewingCluster.OWN_USER))
    assert [r["spec"]["policy"] for r in cluster.update_requests()] == ["opted-in"]


def test_without_update_requests_a_subresource_trigger_is_mutated_in_memory_without_waiting() -> None:
    """The in-memory path (no UpdateRequests) reads the request's object too: a target expression is resolved at
    once rather than waiting for a PodExecOptions to be stored."""
    cluster, generator, _ = setup(subresource_mpol())
    cluster.add(pod())
    assert generator.submit_mutating(exec_review(), ("on-sub",), False) is None
    key = generator.controller.queue.get(timeout=0)
    assert key is not None
    event = generator.queued_event(key)
    assert isinstance(event, TriggerEvent) and event.cel_mutate is not None and event.cel_mutate.request_name == "web"
    assert generator.process_event(event) == []
    assert pod_labels(cluster) == {"via": "exec", "by": "alice"}
