"""Denial Events: what is recorded, aggregation of repeats, and the webhook hooks (events, generator)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from webhook_helpers import pod, review, start_server

from stockade.controllers.events import CLUSTER_EVENT_NAMESPACE, EventRecorder, denial_events
from stockade.engine.response import EngineResponse, RuleResponse
from stockade.policy.model import KyvernoPolicy
from stockade.webhook.admission import AdmissionDecision, parse_review
from stockade.webhook.certs import CertificateManager


class FakeCoreApi:
    def __init__(self) -> None:
        self.created: list[tuple[str, dict[str, Any]]] = []
        self.patched: list[tuple[str, str, dict[str, Any]]] = []

    def create_namespaced_event(self, namespace: str, body: dict[str, Any]) -> None:
        self.created.append((namespace, body))

    def patch_namespaced_event(self, name: str, namespace: str, body: dict[str, Any], **_: Any) -> None:
        self.patched.append((name, namespace, body))


def policy(kind: str = "ClusterPolicy", namespace: str = "") -> KyvernoPolicy:
    metadata: dict[str, Any] = {"name": "require-team", "uid": "policy-uid"}
    if namespace:
        metadata["namespace"] = namespace
    return KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": kind, "metadata": metadata, "spec": {"rules": []}})


def denial(the_policy: KyvernoPolicy, message: str = "label 'team' is required") -> AdmissionDecision:
    rule = RuleResponse("check-team", "Validation", "fail", message, failure_action="Enforce")
    return AdmissionDecision(False, "blocked", responses=[EngineResponse(the_policy, {}, {}, [rule])])


def admission(operation: str = "CREATE", dry_run: bool = False) -> Any:
    new = pod(labels={"app": "x"})
    old = {**pod(labels={"team": "a"}), "metadata": {"name": "web", "namespace": "default", "uid": "pod-uid"}}
    body = review(new if operation != "DELETE" else None, operation, old if operation != "CREATE" else None)  # type: ignore[arg-type]
    body["request"]["dryRun"] = dry_run
    return parse_review(body)


def test_create_denial_makes_one_warning_event_on_the_cluster_policy_in_default() -> None:
    (event,) = denial_events(admission(), denial(policy()))
    assert event.namespace == CLUSTER_EVENT_NAMESPACE and event.type == "Warning" and event.reason == "PolicyViolation"
    assert event.regarding_dict == {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "name": "require-team", "uid": "policy-uid"}
    assert event.message == "Pod default/web CREATE blocked: rule check-team fail: label 'team' is required"


def test_update_denial_also_regards_the_existing_object_and_policy_events_use_its_namespace() -> None:
    events = denial_events(admission("UPDATE"), denial(policy("Policy", "team-a")))
    assert [e.namespace for e in events] == ["team-a", "default"]
    assert events[1].regarding_dict["uid"] == "pod-uid" and events[1].regarding_dict["kind"] == "Pod"
    assert "UPDATE blocked by policy require-team rule check-team" in events[1].message


def test_allowed_dry_run_and_audit_failures_make_no_events() -> None:
    assert denial_events(admission(), AdmissionDecision(True)) == []
    assert denial_events(admission(dry_run=True), denial(policy())) == []
    audit = AdmissionDecision(False, "x", responses=[EngineResponse(policy(), {}, {}, [RuleResponse("r", "Validation", "fail", "m", failure_action="Audit")])])
    assert denial_events(admission(), audit) == []


def test_repeats_are_folded_into_one_event_with_a_count_then_patched() -> None:
    core = FakeCoreApi()
    recorder = EventRecorder(None, "kyverno", core_api=core, start=False)
    for _ in range(50):
        recorder.record_denial(admission(), denial(policy()))
    recorder.record_denial(admission(), denial(policy(), message="another reason"))
    recorder.close()
    assert len(core.created) == 2
    namespace, body = core.created[0]
    assert namespace == "default" and body["count"] == 50 and body["type"] == "Warning" and body["reason"] == "PolicyViolation"
    assert body["involvedObject"]["name"] == "require-team" and body["source"] == {"component": "kyverno-admission"} and body["reportingComponent"] == "kyverno-admission"
    assert core.created[1][1]["count"] == 1
    # a later repeat updates the same Event instead of creating another
    again = EventRecorder(None, core_api=core, start=False)
    again._written = recorder._written
    again.record_denial(admission(), denial(policy()))
    again.close()
    assert len(core.created) == 2
    (name, patch_namespace, patch), = core.patched
    assert name == body["metadata"]["name"] and patch_namespace == "default" and patch["count"] == 51


def test_a_full_queue_drops_instead_of_blocking() -> None:
    recorder = EventRecorder(None, core_api=FakeCoreApi(), capacity=2, start=False)
    for index in range(5):
        recorder.record_denial(admission(), denial(policy(), message=f"reason {index}"))
    assert recorder.dropped == 3


class Recorder:
    def __init__(self) -> None:
        self.denials: list[Any] = []
        self.successes: list[Any] = []
        self.generated: list[Any] = []

    def record_denial(self, request: Any, decision: Any) -> None:
        self.denials.append((request, decision))

    def record_success(self, request: Any, decision: Any) -> None:
        self.successes.append((request, decision))

    def submit(self, request: Any) -> None:
        self.generated.append(request)


def test_server_hooks_events_on_denial_and_generator_on_allowed(policy_dir: Path, tmp_path: Path) -> None:
    running = start_server(policy_dir, CertificateManager(hosts=["localhost", "127.0.0.1"], directory=tmp_path / "certs"))
    hooks = Recorder()
    running.server.state.events = hooks
    running.server.state.generator = hooks
    client = running.client()
    try:
        denied = review(pod(labels={"app": "x"}))
        assert client.post_review("/validate/fail", denied)["response"]["allowed"] is False
        dry = review(pod(labels={"app": "x"}))
        dry["request"]["dryRun"] = True
        client.post_review("/validate/fail", dry)
        allowed = review(pod(labels={"team": "a"}))
        allowed["request"]["uid"] = str(uuid.uuid4())
        assert client.post_review("/validate/fail", allowed)["response"]["allowed"] is True
        client.post_review("/mutate/ignore", allowed)  # mutations never trigger generation
    finally:
        client.close()
        running.stop()
    assert [request.uid for request, _ in hooks.denials] == [denied["request"]["uid"]]
    assert allowed["request"]["uid"] in [request.uid for request, _ in hooks.successes]
    assert [request.uid for request in hooks.generated] == [allowed["request"]["uid"]]


def test_reporting_component_follows_kyvernos_event_sources_or_stockade_style() -> None:
    """Kyverno's pkg/event: reportingController is the source (kyverno-admission, kyverno-mutate, ...) and
    reportingInstance "<controller>-<host>"; --event-components stockade reports everything as "stockade"."""
    from stockade.controllers.events import SOURCE_MUTATE, EventSpec

    core = FakeCoreApi()
    recorder = EventRecorder(None, "kyverno", core_api=core, start=False, instance="host-1")
    recorder.record_denial(admission(), denial(policy()))
    recorder.submit(EventSpec("default", (("kind", "ClusterPolicy"), ("name", "p")), "PolicyApplied", "m", "Normal", "Resource Mutated", SOURCE_MUTATE))
    recorder.close()
    assert [(body["reportingComponent"], body["reportingInstance"]) for _, body in core.created] == [
        ("kyverno-admission", "kyverno-admission-host-1"),
        ("kyverno-mutate", "kyverno-mutate-host-1"),
    ]
    plain = FakeCoreApi()
    stockade_style = EventRecorder(None, core_api=plain, start=False)  # the default
    stockade_style.record_denial(admission(), denial(policy()))
    stockade_style.close()
    assert plain.created[0][1]["reportingComponent"] == "stockade"


def test_mutating_policy_success_event_is_resource_mutated_on_the_policy() -> None:
    """Kyverno's NewPolicyAppliedEvent: a MutatingPolicy's PolicyApplied Event regards the policy (its own
    apiVersion/kind) with action "Resource Mutated" and "<Kind> <ns>/<name> is successfully mutated"."""
    from stockade.celpolicy.model import CelPolicy
    from stockade.controllers.events import ACTION_MUTATED, success_events
    from stockade.engine.kyvernoconfig import parse_kyverno_config

    mpol = CelPolicy({"apiVersion": "policies.kyverno.io/v1beta1", "kind": "MutatingPolicy", "metadata": {"name": "add-labels", "uid": "u"}, "spec": {}})
    decision = AdmissionDecision(True, "", responses=[EngineResponse(mpol, {}, {}, [RuleResponse("", "Mutation", "pass", "mutated")])])
    request = admission()
    (event,) = success_events(request, decision, parse_kyverno_config({"generateSuccessEvents": "true"}))
    assert (event.namespace, event.type, event.reason, event.action) == ("default", "Normal", "PolicyApplied", ACTION_MUTATED)
    assert event.regarding_dict == {"apiVersion": "policies.kyverno.io/v1beta1", "kind": "MutatingPolicy", "name": "add-labels", "uid": "u"}
    assert event.message == "Pod default/web is successfully mutated"
