"""Admission Events as Kyverno writes them, aggregation of repeats, and the webhook hooks (events, generator)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from webhook_helpers import pod, review, start_server

from stockade.controllers.events import (
    ACTION_BLOCKED,
    ACTION_PASSED,
    CLUSTER_EVENT_NAMESPACE,
    SOURCE_ADMISSION,
    EventRecorder,
    admission_events,
)
from stockade.engine.kyvernoconfig import parse_kyverno_config
from stockade.engine.response import EngineResponse, RuleResponse
from stockade.kube.client import MERGE_PATCH
from stockade.policy.model import KyvernoPolicy
from stockade.webhook.admission import AdmissionDecision, parse_review, resource_label
from stockade.webhook.certs import CertificateManager
from tests.unit.kubefake import FakeKube


def created(kube: FakeKube) -> list[tuple[str, dict[str, Any]]]:
    """(namespace, body) of every Event created, in order, read from the REST path each was POSTed to."""
    events = []
    for call in kube.sent("POST"):
        prefix, namespace, collection = call.path.rsplit("/", 2)
        assert (prefix, collection) == ("/api/v1/namespaces", "events"), call.path
        events.append((namespace, call.body))
    return events


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


def test_create_denial_makes_one_blocked_warning_event_on_the_cluster_policy_in_default() -> None:
    """Kyverno's NewPolicyFailEvent with blocked=true: "<Kind> <ns>/<name>: [<rule>] <status> (blocked); <message>"."""
    (event,) = admission_events(admission(), denial(policy()))
    assert event.namespace == CLUSTER_EVENT_NAMESPACE and event.type == "Warning" and event.reason == "PolicyViolation"
    assert event.regarding_dict == {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "name": "require-team", "uid": "policy-uid"}
    assert event.related_dict == {"apiVersion": "v1", "kind": "Pod", "name": "web", "namespace": "default"}
    assert event.message == "Pod default/web: [check-team] fail (blocked); label 'team' is required"
    assert (event.action, event.source) == (ACTION_BLOCKED, SOURCE_ADMISSION)


def test_update_denial_regards_only_the_policy_in_its_namespace() -> None:
    """Kyverno writes no Event on the resource of a denied request (GenerateEvents with blocked=true)."""
    events = admission_events(admission("UPDATE"), denial(policy("Policy", "team-a")))
    assert [(e.namespace, e.regarding_dict["kind"]) for e in events] == [("team-a", "Policy")]


def test_dry_runs_and_nameless_objects_make_no_events() -> None:
    assert admission_events(admission(), AdmissionDecision(True)) == []
    assert admission_events(admission(dry_run=True), denial(policy())) == []


def two_rule_policy() -> KyvernoPolicy:
    """Kyverno's e2e two-rules-with-different-action: one Enforce rule, one Audit rule in the same policy."""
    return KyvernoPolicy(
        {
            "apiVersion": "kyverno.io/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "check-ns-labels"},
            "spec": {
                "rules": [
                    {"name": "require-ns-purpose-label", "validate": {"failureAction": "Enforce", "pattern": {}}},
                    {"name": "require-ns-env-label", "validate": {"failureAction": "Audit", "pattern": {}}},
                ]
            },
        }
    )


def namespace_admission(name: str) -> Any:
    """As the API server sends it: a Namespace review carries the Namespace's own name as request namespace."""
    body = review({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    body["request"].update(kind={"group": "", "version": "v1", "kind": "Namespace"}, resource={"group": "", "version": "v1", "resource": "namespaces"}, namespace=name)
    return parse_review(body)


def test_audit_rule_failure_on_an_admitted_request_is_a_passed_violation_on_policy_and_resource() -> None:
    """Kyverno's allowed-request events: the failing Audit rule gives a Warning PolicyViolation on the policy with
    action "Resource Passed" and no "(blocked)", and the resource gets one Event per rule of that policy."""
    rules = [
        RuleResponse("require-ns-purpose-label", "Validation", "pass", "validation rule 'require-ns-purpose-label' passed.", failure_action="Enforce"),
        RuleResponse("require-ns-env-label", "Validation", "fail", "validation error: env needed.", failure_action="Audit"),
    ]
    decision = AdmissionDecision(True, responses=[EngineResponse(two_rule_policy(), {}, {}, rules)])
    events = admission_events(namespace_admission("good-ns-1"), decision)
    assert len(events) == 3
    on_resource_pass, on_policy, on_resource_fail = events
    assert (on_policy.reason, on_policy.type, on_policy.action) == ("PolicyViolation", "Warning", ACTION_PASSED)
    assert on_policy.message == "Namespace good-ns-1: [require-ns-env-label] fail; validation error: env needed."
    assert on_policy.namespace == "default" and on_policy.regarding_dict["name"] == "check-ns-labels"
    assert on_policy.related_dict == {"apiVersion": "v1", "kind": "Namespace", "name": "good-ns-1"}
    assert on_resource_fail.regarding_dict == {"apiVersion": "v1", "kind": "Namespace", "name": "good-ns-1"}
    assert on_resource_fail.message == "policy check-ns-labels/require-ns-env-label fail: validation error: env needed."
    assert on_resource_pass.message == "policy check-ns-labels/require-ns-purpose-label pass: validation rule 'require-ns-purpose-label' passed."


def test_a_namespace_is_named_without_the_request_namespace_in_events_and_block_messages() -> None:
    """Kyverno e2e two-rules-with-different-action: "Namespace bad-ns-1: ..." and "resource Namespace//bad-ns-1",
    although the API server sends a Namespace's own name as the request namespace."""
    request = namespace_admission("bad-ns-1")
    rule = RuleResponse("require-ns-purpose-label", "Validation", "fail", "purpose needed.", failure_action="Enforce")
    (event,) = admission_events(request, AdmissionDecision(False, "blocked", responses=[EngineResponse(two_rule_policy(), {}, {}, [rule])]))
    assert event.message == "Namespace bad-ns-1: [require-ns-purpose-label] fail (blocked); purpose needed."
    assert event.related_dict == {"apiVersion": "v1", "kind": "Namespace", "name": "bad-ns-1"}
    assert resource_label(request.subject, request) == "Namespace//bad-ns-1"


def test_denial_events_cover_enforce_policies_only_and_success_events_follow_the_configmap() -> None:
    """A denied request is explained by enforce policies (Kyverno runs audit policies only after admitting); a
    policy that passed gets PolicyApplied only under generateSuccessEvents."""
    audit_policy = KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "audit-only"}, "spec": {"rules": []}})
    audit_fail = EngineResponse(audit_policy, {}, {}, [RuleResponse("r", "Validation", "fail", "m", failure_action="Audit")])
    blocked = denial(policy())
    blocked.responses.append(audit_fail)
    assert [e.regarding_dict["name"] for e in admission_events(admission(), blocked)] == ["require-team"]
    passed = AdmissionDecision(True, responses=[EngineResponse(policy(), {}, {}, [RuleResponse("check-team", "Validation", "pass", "ok")])])
    assert admission_events(admission(), passed, parse_kyverno_config({})) == []
    (applied,) = admission_events(admission(), passed, parse_kyverno_config({"generateSuccessEvents": "true"}))
    assert (applied.reason, applied.type, applied.action, applied.message) == ("PolicyApplied", "Normal", ACTION_PASSED, "Pod default/web: pass")


def test_exception_skips_give_policy_skipped_events_on_exception_and_policy() -> None:
    """Kyverno's NewPolicyExceptionEvents for rules skipped by a PolicyException on an admitted request."""
    skipped = RuleResponse("check-team", "Validation", "skip", "rule is skipped due to policy exceptionsops/allow-web", exceptions=["ops/allow-web"])
    decision = AdmissionDecision(True, responses=[EngineResponse(policy(), {}, {}, [skipped])])
    on_exception, on_policy = admission_events(admission(), decision)
    assert on_exception.regarding_dict == {"apiVersion": "kyverno.io/v2", "kind": "PolicyException", "name": "allow-web", "namespace": "ops"}
    assert on_exception.namespace == "ops" and on_exception.reason == "PolicySkipped" and on_exception.action == ACTION_PASSED
    assert on_exception.message == "resource Pod/default/web was skipped from policy rule require-team/check-team"
    assert on_policy.message == "resource Pod/default/web was skipped from rule check-team due to policy exceptions ops/allow-web"


def test_repeats_are_folded_into_one_event_with_a_count_then_patched() -> None:
    kube = FakeKube()
    recorder = EventRecorder(None, "kyverno", client=kube, start=False)
    for _ in range(50):
        recorder.record_denial(admission(), denial(policy()))
    recorder.record_denial(admission(), denial(policy(), message="another reason"))
    recorder.close()
    assert len(created(kube)) == 2
    namespace, body = created(kube)[0]
    assert namespace == "default" and body["count"] == 50 and body["type"] == "Warning" and body["reason"] == "PolicyViolation"
    assert body["involvedObject"]["name"] == "require-team" and body["source"] == {"component": "kyverno-admission"}
    assert body["reportingComponent"] == "kyverno-admission" and body["related"]["name"] == "web"
    assert body["action"] == "Resource Blocked"
    assert created(kube)[1][1]["count"] == 1
    # a later repeat updates the same Event instead of creating another
    again = EventRecorder(None, client=kube, start=False)
    again._written = recorder._written
    again.record_denial(admission(), denial(policy()))
    again.close()
    assert len(created(kube)) == 2
    (patch,) = kube.sent("PATCH")
    assert patch.path == f"/api/v1/namespaces/default/events/{body['metadata']['name']}" and patch.content_type == MERGE_PATCH
    assert patch.body["count"] == 51
    assert kube.objects[patch.path]["count"] == 51 and kube.objects[patch.path]["reason"] == "PolicyViolation"


def test_written_events_are_told_apart_by_every_part_of_their_identity() -> None:
    """Written Events are remembered by a digest of their identity: messages that differ only in their last
    character stay two Events, and a repeat of either one after the other still updates its own Event."""
    kube = FakeKube()
    recorder = EventRecorder(None, "kyverno", client=kube, start=False)
    long_reason = "x" * 900
    recorder.record_denial(admission(), denial(policy(), message=long_reason + "a"))
    recorder.record_denial(admission(), denial(policy(), message=long_reason + "b"))
    recorder.close()
    (_, first), (_, second) = created(kube)
    assert first["message"].endswith("a") and second["message"].endswith("b")
    again = EventRecorder(None, "kyverno", client=kube, start=False)
    again._written = recorder._written
    again.record_denial(admission(), denial(policy(), message=long_reason + "b"))
    again.record_denial(admission(), denial(policy(), message=long_reason + "a"))
    again.close()
    assert len(created(kube)) == 2
    patched = [call.path.rsplit("/", 1)[1] for call in kube.sent("PATCH")]
    assert patched == [second["metadata"]["name"], first["metadata"]["name"]]


def test_a_full_queue_drops_instead_of_blocking() -> None:
    recorder = EventRecorder(None, client=FakeKube(), capacity=2, start=False)
    for index in range(5):
        recorder.record_denial(admission(), denial(policy(), message=f"reason {index}"))
    assert recorder.dropped == 3


class Recorder:
    def __init__(self) -> None:
        self.denials: list[Any] = []
        self.successes: list[Any] = []
        self.generated: list[Any] = []
        self.scopes: list[Any] = []

    def record_denial(self, request: Any, decision: Any) -> None:
        self.denials.append((request, decision))

    def record_success(self, request: Any, decision: Any) -> None:
        self.successes.append((request, decision))

    def submit(self, request: Any, *, served: Any = None, route: Any = None) -> None:
        self.generated.append(request)
        self.scopes.append((sorted(p.key for p in served or ()), route))


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
    # the /validate/fail webhook hands on the work of the policies it serves (those with failurePolicy Fail)
    [(served, route)] = hooks.scopes
    assert served and route.scope.family == "kyverno" and route.failure == "Fail"


def test_reporting_component_follows_kyvernos_event_sources_or_stockade_style() -> None:
    """Kyverno's pkg/event: reportingController is the source (kyverno-admission, kyverno-mutate, ...) and
    reportingInstance "<controller>-<host>"; --event-components stockade reports everything as "stockade"."""
    from stockade.controllers.events import SOURCE_MUTATE, EventSpec

    kube = FakeKube()
    recorder = EventRecorder(None, "kyverno", client=kube, start=False, instance="host-1")
    recorder.record_denial(admission(), denial(policy()))
    recorder.submit(EventSpec("default", (("kind", "ClusterPolicy"), ("name", "p")), "PolicyApplied", "m", "Normal", "Resource Mutated", SOURCE_MUTATE))
    recorder.close()
    assert [(body["reportingComponent"], body["reportingInstance"]) for _, body in created(kube)] == [
        ("kyverno-admission", "kyverno-admission-host-1"),
        ("kyverno-mutate", "kyverno-mutate-host-1"),
    ]
    plain = FakeKube()
    stockade_style = EventRecorder(None, client=plain, start=False)  # the default
    stockade_style.record_denial(admission(), denial(policy()))
    stockade_style.close()
    assert created(plain)[0][1]["reportingComponent"] == "stockade"


def test_mutating_policy_success_event_is_resource_mutated_on_the_policy() -> None:
    """Kyverno's NewPolicyAppliedEvent: a MutatingPolicy's PolicyApplied Event regards the policy (in the v1beta1
    version Kyverno's client reads it with, even when stored as v1) with action "Resource Mutated" and
    "<Kind> <ns>/<name> is successfully mutated"."""
    from stockade.celpolicy.model import CelPolicy
    from stockade.controllers.events import ACTION_MUTATED, admission_events
    from stockade.engine.kyvernoconfig import parse_kyverno_config

    mpol = CelPolicy({"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy", "metadata": {"name": "add-labels", "uid": "u"}, "spec": {}})
    decision = AdmissionDecision(True, "", responses=[EngineResponse(mpol, {}, {}, [RuleResponse("", "Mutation", "pass", "mutated")])])
    request = admission()
    (event,) = admission_events(request, decision, parse_kyverno_config({"generateSuccessEvents": "true"}))
    assert (event.namespace, event.type, event.reason, event.action) == ("default", "Normal", "PolicyApplied", ACTION_MUTATED)
    assert event.regarding_dict == {"apiVersion": "policies.kyverno.io/v1beta1", "kind": "MutatingPolicy", "name": "add-labels", "uid": "u"}
    assert event.message == "Pod default/web is successfully mutated"


def test_background_scan_violations_are_kyverno_scan_events_on_resource_and_policy() -> None:
    """Kyverno's background scan (source kyverno-scan) writes, for each failing rule, a Warning PolicyViolation on the
    resource ("policy <p>/<rule> fail: <msg>") and one on the policy with the resource as related; nothing is blocked,
    passing and skipped rules give none (e2e events/message-exceeds-1024-characters, background-only/no-admission-event)."""
    scanned = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "badpod01", "namespace": "default", "uid": "pod-uid"}}
    rules = [RuleResponse("restricted", "Validation", "fail", "It violates PodSecurity"), RuleResponse("other", "Validation", "pass", "ok")]
    kube = FakeKube()
    recorder = EventRecorder(None, "kyverno", client=kube, start=False)
    recorder.record_scan(scanned, [EngineResponse(policy(), scanned, scanned, rules)])
    recorder.record_scan(scanned, [EngineResponse(policy(), scanned, scanned, [RuleResponse("check-team", "Validation", "pass", "ok")])])
    recorder.close()
    assert len(created(kube)) == 2
    (resource_namespace, on_resource), (policy_namespace, on_policy) = created(kube)
    assert resource_namespace == "default" and on_resource["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "badpod01", "namespace": "default", "uid": "pod-uid"}
    assert on_resource["message"] == "policy require-team/restricted fail: It violates PodSecurity"
    assert (on_resource["reason"], on_resource["type"], on_resource["action"], on_resource["reportingComponent"]) == ("PolicyViolation", "Warning", ACTION_PASSED, "kyverno-scan")
    assert policy_namespace == "default" and on_policy["involvedObject"]["name"] == "require-team" and on_policy["related"]["name"] == "badpod01"
    assert on_policy["message"] == "Pod default/badpod01: [restricted] fail; It violates PodSecurity"
    assert on_policy["reportingComponent"] == "kyverno-scan" and on_policy["action"] == ACTION_PASSED


def test_controller_success_events_follow_generate_success_events_and_actions() -> None:
    """Kyverno's event generator drops every PolicyApplied Event unless generateSuccessEvents is on, and those whose
    action successEventActions leaves out (e2e events/clusterpolicy/generate-events-upon-successful-generation)."""
    from stockade.controllers.events import generate_events

    the_policy = policy()
    generated = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "zk", "namespace": "test-ns"}}]
    config: list[Any] = [parse_kyverno_config({})]
    kube = FakeKube()
    recorder = EventRecorder(None, "kyverno", client=kube, start=False, kyverno_config=lambda: config[0])
    for spec in generate_events(the_policy, "r", generated):
        recorder.submit_success(spec)
    config[0] = parse_kyverno_config({"generateSuccessEvents": "true", "successEventActions": "Resource Generated"})
    for spec in generate_events(the_policy, "r", generated):
        recorder.submit_success(spec)
    config[0] = parse_kyverno_config({"generateSuccessEvents": "true"})
    for spec in generate_events(the_policy, "other", generated):
        recorder.submit_success(spec)
    recorder.close()
    actions = [(body["action"], body["reportingComponent"], body["involvedObject"]["kind"]) for _, body in created(kube)]
    assert actions == [("Resource Generated", "kyverno-generate", "ClusterPolicy"), ("None", "kyverno-generate", "ConfigMap")]


def test_the_same_violation_from_admission_and_from_a_scan_are_two_events() -> None:
    """Kyverno's admission webhook and background scan are different reporting components: their Events about
    the same violation are not folded into one (e2e events/clusterpolicy/message-exceeds-1024-characters)."""
    from stockade.controllers.events import SOURCE_SCAN

    kube = FakeKube()
    recorder = EventRecorder(None, "kyverno", client=kube, start=False)
    rule = RuleResponse("check-team", "Validation", "fail", "label 'team' is required", failure_action="Audit")
    decision = AdmissionDecision(True, responses=[EngineResponse(policy(), {}, {}, [rule])])
    request = admission()
    recorder.record_success(request, decision)
    scanned = request.subject
    recorder.record_scan(scanned, [EngineResponse(policy(), scanned, scanned, [rule])])
    recorder.close()
    on_resource = [body for _, body in created(kube) if body["involvedObject"]["kind"] == "Pod"]
    assert sorted(body["reportingComponent"] for body in on_resource) == ["kyverno-admission", f"kyverno-{SOURCE_SCAN}"]
    assert all(body["count"] == 1 for body in on_resource)
