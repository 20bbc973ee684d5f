"""Events the generate controller writes for a ClusterPolicy generate rule, as Kyverno's background controller does."""

from __future__ import annotations

from typing import Any

from stockade.controllers.events import ACTION_GENERATED, ACTION_NONE, SOURCE_GENERATE, EventSpec
from stockade.controllers.generate import GenerateController, TriggerEvent
from stockade.policy.model import KyvernoPolicy
from tests.unit.controllers.fakecluster import FakeCluster
from tests.unit.controllers.test_controllers_generating_policy import Store

POLICY = {
    "apiVersion": "kyverno.io/v1",
    "kind": "ClusterPolicy",
    "metadata": {"name": "zk-kafka-address", "uid": "policy-uid"},
    "spec": {
        "rules": [
            {
                "name": "k-kafka-address",
                "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
                "generate": {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "zk-kafka-address",
                    "namespace": "{{request.object.metadata.name}}",
                    "data": {"data": {"ZK_ADDRESS": "192.168.10.10:2181"}},
                },
            }
        ]
    },
}


class Collected:
    def __init__(self) -> None:
        self.events: list[EventSpec] = []

    def submit_success(self, spec: EventSpec) -> None:
        self.events.append(spec)


def test_a_generated_resource_gives_kyverno_generate_events_on_resource_and_policy() -> None:
    """Kyverno's NewResourceGenerationEvent (on the generated object, action None) and NewBackgroundSuccessEvent
    (on the policy, "resource generated", action "Resource Generated"), both from kyverno-generate."""
    cluster = FakeCluster()
    store = Store()
    store.snapshot.policies = [KyvernoPolicy(POLICY)]
    sink = Collected()
    controller = GenerateController(None, store, cluster_data=cluster, events=sink)  # type: ignore[arg-type]
    namespace: dict[str, Any] = cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"}})
    assert controller.process_event(TriggerEvent("CREATE", namespace)) == []
    assert cluster.find("ConfigMap", "ns1", "zk-kafka-address") is not None
    on_resource, on_policy = sink.events
    assert on_resource.namespace == "ns1" and on_resource.source == SOURCE_GENERATE
    assert on_resource.regarding_dict == {"apiVersion": "v1", "kind": "ConfigMap", "name": "zk-kafka-address", "namespace": "ns1"}
    assert (on_resource.reason, on_resource.type, on_resource.action) == ("PolicyApplied", "Normal", ACTION_NONE)
    assert on_resource.message == "Created ConfigMap zk-kafka-address as a result of applying policy zk-kafka-address/k-kafka-address"
    assert on_policy.namespace == "default" and on_policy.source == SOURCE_GENERATE
    assert on_policy.regarding_dict == {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "name": "zk-kafka-address", "uid": "policy-uid"}
    assert (on_policy.reason, on_policy.type, on_policy.action, on_policy.message) == ("PolicyApplied", "Normal", ACTION_GENERATED, "resource generated")
    assert on_policy.related_dict["name"] == "zk-kafka-address"
