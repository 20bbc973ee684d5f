"""mutate.targets in the cluster, through the generate controller's pipeline against an in-memory cluster: CREATE and
DELETE triggers, per-target preconditions, conflicts recomputed from the fresh object, Events, and
mutateExistingOnPolicyUpdate on policy creation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stockade.controllers.generate import GenerateController, TriggerEvent
from stockade.controllers.mutateexisting import on_policy_update
from stockade.controllers.webhookconfig import _rule_in_phase
from stockade.policy.model import KyvernoPolicy
from tests.unit.controllers.fakecluster import FakeCluster, refuse_writes


def policy(*, operations: list[str] | None = None, on_update: bool = False, preconditions: list[dict[str, Any]] | None = None) -> KyvernoPolicy:
    target: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret", "name": "secret-*", "namespace": "{{ request.object.metadata.namespace }}"}
    if preconditions:
        target["preconditions"] = {"all": preconditions}
    resources: dict[str, Any] = {"kinds": ["ConfigMap"], "names": ["trigger"]}
    if operations:
        resources["operations"] = operations
    return KyvernoPolicy(
        {
            "apiVersion": "kyverno.io/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "mutate-secrets", "uid": "pol-uid"},
            "spec": {
                "rules": [
                    {
                        "name": "label-secrets",
                        "match": {"any": [{"resources": resources}]},
                        "mutate": {
                            "mutateExistingOnPolicyUpdate": on_update,
                            "targets": [target],
                            "patchStrategicMerge": {"metadata": {"labels": {"foo": "{{ request.object.metadata.name }}"}}},
                        },
                    }
                ]
            },
        }
    )


@dataclass
class Snapshot:
    policies: list[KyvernoPolicy]
    documents: tuple[Any, ...] = ()
    errors: dict[Any, str] = field(default_factory=dict)


class Store:
    def __init__(self, *policies: KyvernoPolicy) -> None:
        self.listeners: list[Any] = []
        self.snapshot = Snapshot(list(policies))


class Events:
    """The recorder's two doors: ``submit`` for every Event, ``submit_success`` for PolicyApplied ones, which the real
    recorder writes only when the Kyverno ConfigMap's ``generateSuccessEvents`` is on (``successes_enabled`` here)."""

    def __init__(self, successes_enabled: bool = True) -> None:
        self.specs: list[Any] = []
        self.successes_enabled = successes_enabled

    def submit(self, spec: Any) -> None:
        self.specs.append(spec)

    def submit_success(self, spec: Any) -> None:
        if self.successes_enabled:
            self.specs.append(spec)


def setup(*policies: KyvernoPolicy) -> tuple[FakeCluster, GenerateController, Events]:
    cluster = FakeCluster()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"}})
    cluster.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "secret-a", "namespace": "ns1"}, "data": {"k": "dg=="}})
    cluster.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "secret-b", "namespace": "ns1", "labels": {"keep": "me"}}})
    cluster.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "other", "namespace": "ns1"}})
    cluster.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "secret-a", "namespace": "ns2"}})
    events = Events()
    controller = GenerateController(None, Store(*policies), cluster_data=cluster, events=events)  # type: ignore[arg-type]
    return cluster, controller, events


def configmap(cluster: FakeCluster) -> dict[str, Any]:
    return cluster.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "trigger", "namespace": "ns1"}, "data": {"a": "1"}})


def labels(cluster: FakeCluster, namespace: str, name: str) -> dict[str, str]:
    return (cluster.find("Secret", namespace, name) or {}).get("metadata", {}).get("labels") or {}


def test_mutate_existing_rules_register_their_triggers_in_the_validating_webhook() -> None:
    rule = policy().rules[0]
    assert _rule_in_phase(rule, "validate") and not _rule_in_phase(rule, "mutate")


def test_create_trigger_patches_matching_targets_with_events() -> None:
    cluster, controller, events = setup(policy())
    failures = controller.process_event(TriggerEvent("CREATE", configmap(cluster)))
    assert failures == []
    assert labels(cluster, "ns1", "secret-a") == {"foo": "trigger"}
    assert labels(cluster, "ns1", "secret-b") == {"keep": "me", "foo": "trigger"}
    assert labels(cluster, "ns1", "other") == {} and labels(cluster, "ns2", "secret-a") == {}
    assert cluster.find("Secret", "ns1", "secret-a")["data"] == {"k": "dg=="}  # the rest of the target is kept
    assert controller.mutate_existing.stats.mutated == 2
    assert [(e.reason, e.message, e.type, e.namespace) for e in events.specs] == [("PolicyApplied", "resource mutated", "Normal", "default")] * 2
    assert dict(events.specs[0].regarding)["kind"] == "ClusterPolicy"
    # the target is the related object, by kind, namespace and name (Kyverno's ResourceSpec of it)
    assert sorted(tuple(sorted(dict(e.related).items())) for e in events.specs) == [
        (("kind", "Secret"), ("name", "secret-a"), ("namespace", "ns1")),
        (("kind", "Secret"), ("name", "secret-b"), ("namespace", "ns1")),
    ]


def test_delete_trigger_uses_the_deleted_object_as_request_object() -> None:
    cluster, controller, _ = setup(policy(operations=["DELETE"]))
    cm = configmap(cluster)
    assert controller.process_event(TriggerEvent("CREATE", cm)) == []
    assert labels(cluster, "ns1", "secret-a") == {}  # the rule only matches DELETE
    assert controller.process_event(TriggerEvent("DELETE", {}, old_resource=cm)) == []
    assert labels(cluster, "ns1", "secret-a") == {"foo": "trigger"}


def test_per_target_preconditions_use_the_target() -> None:
    wanted = [{"key": "{{ target.metadata.labels.keep || '' }}", "operator": "Equals", "value": "me"}]
    cluster, controller, _ = setup(policy(preconditions=wanted))
    assert controller.process_event(TriggerEvent("CREATE", configmap(cluster))) == []
    assert labels(cluster, "ns1", "secret-a") == {}
    assert labels(cluster, "ns1", "secret-b") == {"keep": "me", "foo": "trigger"}


def test_conflicting_write_is_recomputed_from_the_fresh_target() -> None:
    cluster, controller, _ = setup(policy())
    original_request = cluster.request
    raced = {"done": False}

    def racing_request(method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        if method == "PUT" and not raced["done"] and body["metadata"]["name"] == "secret-a":
            raced["done"] = True  # someone else edits the target between our read and our write
            current = cluster.find("Secret", "ns1", "secret-a")
            current["metadata"]["labels"] = {"edited": "yes"}
            cluster.add(current)
        return original_request(method, path, body, **kwargs)

    cluster.request = racing_request  # type: ignore[method-assign]
    assert controller.process_event(TriggerEvent("CREATE", configmap(cluster))) == []
    assert labels(cluster, "ns1", "secret-a") == {"edited": "yes", "foo": "trigger"}
    assert controller.mutate_existing.stats.conflicts == 1


def test_unwritable_target_is_a_failure_and_an_error_event() -> None:
    cluster, controller, events = setup(policy())
    refuse_writes(cluster)
    failures = controller.process_event(TriggerEvent("CREATE", configmap(cluster)))
    assert len(failures) == 2 and all(f.rule == "label-secrets" for f in failures)
    assert all(str(f).count("rule label-secrets on") == 1 for f in failures)  # said once, not re-wrapped
    assert {e.reason for e in events.specs} == {"PolicyError"}
    assert events.specs[0].message.startswith("policy mutate-secrets/label-secrets error:")


def test_on_policy_update_applies_to_existing_triggers_once() -> None:
    cluster, controller, _ = setup(policy(on_update=True))
    configmap(cluster)
    controller.reconcile_policies()
    assert labels(cluster, "ns1", "secret-a") == {"foo": "trigger"}
    cluster.add({**cluster.find("Secret", "ns1", "secret-a"), "metadata": {**cluster.find("Secret", "ns1", "secret-a")["metadata"], "labels": {}}})
    controller.reconcile_policies()  # unchanged policy: not applied again
    assert labels(cluster, "ns1", "secret-a") == {}


def test_without_on_policy_update_existing_triggers_are_left_alone() -> None:
    cluster, controller, _ = setup(policy(on_update=False))
    configmap(cluster)
    controller.reconcile_policies()
    assert labels(cluster, "ns1", "secret-a") == {}


def test_on_policy_update_setting_precedence() -> None:
    legacy = KyvernoPolicy({"kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {"mutateExistingOnPolicyUpdate": True, "rules": []}})
    rule_off = policy(on_update=False).rules[0]
    plain = KyvernoPolicy({"kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {"rules": [{"name": "r", "mutate": {"targets": [{}]}}]}}).rules[0]
    assert on_policy_update(legacy, plain) and not on_policy_update(legacy, rule_off)


def test_a_subresource_target_is_read_as_its_parent_and_written_through_the_subresource() -> None:
    """Kyverno splits a target kind such as ``Node/status``: the parent object is patched and updated through its
    status subresource."""

    class StatusCluster(FakeCluster):
        def __init__(self) -> None:
            super().__init__()
            self.writes: list[str] = []

        def request(self, method: str, path: str, body: Any = None, **options: Any) -> Any:
            if method == "PUT":
                self.writes.append(path)
                path = path.removesuffix("/status")
            return super().request(method, path, body, **options)

    subresource_policy = policy()
    subresource_policy.raw["spec"]["rules"][0]["mutate"]["targets"][0]["kind"] = "Secret/status"
    subresource_policy = KyvernoPolicy(subresource_policy.raw)
    cluster = StatusCluster()
    cluster.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "secret-a", "namespace": "ns1"}})
    controller = GenerateController(None, Store(subresource_policy), cluster_data=cluster)  # type: ignore[arg-type]
    assert controller.process_event(TriggerEvent("CREATE", configmap(cluster))) == []
    assert cluster.writes == ["/api/v1/namespaces/ns1/secrets/secret-a/status"]
    assert labels(cluster, "ns1", "secret-a") == {"foo": "trigger"}


# Kyverno's Pod/binding trigger of a mutate-existing rule: the Pod the binding request names is labelled with its node
BINDING_POLICY: dict[str, Any] = {
    "apiVersion": "kyverno.io/v1",
    "kind": "ClusterPolicy",
    "metadata": {"name": "on-binding"},
    "spec": {
        "rules": [
            {
                "name": "label-bound-pod",
                "match": {"any": [{"resources": {"kinds": ["Pod/binding"]}}]},
                "mutate": {
                    "targets": [{"apiVersion": "v1", "kind": "Pod", "name": "{{ request.name }}", "namespace": "{{ request.namespace }}"}],
                    "patchStrategicMerge": {"metadata": {"labels": {"node": "{{ request.object.target.name }}"}}},
                },
            }
        ]
    },
}


def test_a_subresource_request_triggers_mutate_existing_rules_by_its_parent_kind() -> None:
    """Kyverno's Pod/binding trigger: the scheduler's binding request (a Binding object) mutates the bound Pod."""
    from stockade.engine.match import RequestInfo

    binding_policy = KyvernoPolicy(BINDING_POLICY)
    cluster = FakeCluster()
    cluster.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "ns1"}})
    controller = GenerateController(None, Store(binding_policy), cluster_data=cluster)  # type: ignore[arg-type]

    @dataclass
    class Review:
        operation: str = "CREATE"
        object: dict[str, Any] = field(
            default_factory=lambda: {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web", "namespace": "ns1"}, "target": {"kind": "Node", "name": "node-1"}}
        )
        old_object: dict[str, Any] = field(default_factory=dict)
        user_info: RequestInfo = field(default_factory=RequestInfo)
        kind: Any = None
        resource: dict[str, str] = field(default_factory=lambda: {"group": "", "version": "v1", "resource": "pods"})
        sub_resource: str = "binding"
        dry_run: bool = False

    controller.submit(Review())
    key = controller.controller.queue.get(timeout=0)
    assert key is not None
    event = controller.queued_event(key)
    assert isinstance(event, TriggerEvent)
    assert event is not None and event.subresource and event.gvk is not None and (event.gvk.kind, event.gvk.subresource) == ("Pod", "binding")
    assert controller.process_event(event) == []
    assert ((cluster.find("Pod", "ns1", "web") or {}).get("metadata") or {}).get("labels") == {"node": "node-1"}


class Reports:
    def __init__(self) -> None:
        self.results: list[tuple[str, str, str, str, dict[str, str]]] = []

    def submit(self, trigger: dict[str, Any], responses: list[Any], **options: Any) -> None:
        for response in responses:
            for rule in response.rules:
                self.results.append((trigger["metadata"]["name"], rule.name, rule.status, rule.message, rule.properties))


def test_each_mutated_target_goes_into_the_triggers_report() -> None:
    """Kyverno e2e reports/background/mutate-existing: the trigger's report says "mutated Secret/secret-1 in namespace
    staging" with the target in ``patched-target``."""
    cluster, controller, _ = setup(policy())
    reports = Reports()
    controller.mutate_existing.reports = reports
    trigger = cluster.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "trigger", "namespace": "ns1", "uid": "t1"}})
    assert controller.process_event(TriggerEvent("CREATE", trigger)) == []
    assert sorted(reports.results, key=lambda r: r[3]) == [
        ("trigger", "label-secrets", "pass", "mutated Secret/secret-a in namespace ns1", {"patched-target": "/v1, Kind=Secret Name=secret-a Namespace=ns1"}),
        ("trigger", "label-secrets", "pass", "mutated Secret/secret-b in namespace ns1", {"patched-target": "/v1, Kind=Secret Name=secret-b Namespace=ns1"}),
    ]


def test_a_subresource_request_generates_from_its_own_object() -> None:
    """Kyverno's generate rules on Pod/eviction (e2e generate-on-eviction-subresource-trigger): the Eviction the
    request carries is the trigger, never stored, so the downstream is created at once with the trigger's labels
    (kind Eviction, group policy); no wait for a stored trigger, nothing to keep in step."""
    from stockade.engine.match import RequestInfo

    policy = KyvernoPolicy(
        {
            "apiVersion": "kyverno.io/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "on-eviction"},
            "spec": {
                "rules": [
                    {
                        "name": "note-eviction",
                        "match": {"any": [{"resources": {"kinds": ["Pod/eviction"]}}]},
                        "generate": {
                            "synchronize": False,
                            "apiVersion": "v1",
                            "kind": "ConfigMap",
                            "name": "evicted",
                            "namespace": "{{request.namespace}}",
                            "data": {"data": {"pod": "{{request.name}}"}},
                        },
                    }
                ]
            },
        }
    )
    cluster = FakeCluster()
    controller = GenerateController(None, Store(policy), cluster_data=cluster)  # type: ignore[arg-type]

    @dataclass
    class Review:
        operation: str = "CREATE"
        object: dict[str, Any] = field(default_factory=lambda: {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web", "namespace": "ns1"}})
        old_object: dict[str, Any] = field(default_factory=dict)
        user_info: RequestInfo = field(default_factory=lambda: RequestInfo(username="alice"))
        kind: Any = None
        resource: dict[str, str] = field(default_factory=lambda: {"group": "", "version": "v1", "resource": "pods"})
        sub_resource: str = "eviction"
        dry_run: bool = False
        namespace: str = "ns1"
        name: str = "web"

    controller.submit(Review())
    key = controller.controller.queue.get(timeout=0)
    assert key is not None
    event = controller.queued_event(key)
    assert isinstance(event, TriggerEvent) and event.subresource
    assert controller.process_event(event) == []
    generated = cluster.find("ConfigMap", "ns1", "evicted")
    assert generated is not None and generated["data"] == {"pod": "web"}
    labels = generated["metadata"]["labels"]
    assert (labels["generate.kyverno.io/trigger-kind"], labels["generate.kyverno.io/trigger-group"]) == ("Eviction", "policy")
