"""The HTTP-free decision logic: block message text, warnings, which rule outcomes deny."""

from __future__ import annotations

import pytest
import yaml

from webhook_helpers import pod, review

from stockade.engine.response import EngineResponse, RuleResponse
from stockade.policy.model import KyvernoPolicy
from stockade.webhook.admission import (
    InvalidAdmissionReview,
    block_message,
    blocking_rules,
    parse_review,
    review_response,
    warning_messages,
    AdmissionDecision,
)


def policy(name: str, failure_policy: str | None = None) -> KyvernoPolicy:
    spec: dict[str, object] = {"rules": []}
    if failure_policy:
        spec["failurePolicy"] = failure_policy
    return KyvernoPolicy(yaml.safe_load(f"{{apiVersion: kyverno.io/v1, kind: ClusterPolicy, metadata: {{name: {name}}}}}") | {"spec": spec})


def rule(name: str, status: str, action: str = "Enforce", message: str = "msg") -> RuleResponse:
    return RuleResponse(name, "Validation", status, message, failure_action=action)


def test_block_message_matches_kyverno_layout_and_never_folds_long_messages() -> None:
    """Kyverno v1.19 encodes the map with go-yaml v3 (indent 2, width unlimited): a long message stays on one line,
    so a client searching the denial for a phrase finds it whatever the length."""
    long = "validation error: The label `app.kubernetes.io/name` is required. Rule autogen-check-for-labels failed at path /spec/template/metadata/labels/app.kubernetes.io/name/"
    text = block_message("Deployment/default/inflate", {"require-labels": {"autogen-check-for-labels": long}})
    assert text == (
        "\n\nresource Deployment/default/inflate was blocked due to the following policies \n\n"
        "require-labels:\n"
        f"  autogen-check-for-labels: '{long}'\n"
    )


@pytest.mark.parametrize(
    ("message", "rendered"),
    [
        ("first line\nsecond line", "  r: |-\n    first line\n    second line\n"),  # go-yaml: literal block for line breaks
        ("ends with a break\n", "  r: |\n    ends with a break\n"),
        ("true", '  r: "true"\n'),  # text that would read back as a bool or a number is double-quoted
        ("10", '  r: "10"\n'),
        ("needs: a colon", "  r: 'needs: a colon'\n"),
        ("plain words", "  r: plain words\n"),
    ],
)
def test_block_message_scalar_styles_follow_go_yaml(message: str, rendered: str) -> None:
    text = block_message("Pod/default/web", {"p": {"r": message}})
    assert text.split("policies \n\n", 1)[1] == "p:\n" + rendered
    assert yaml.safe_load(text.split("policies \n\n", 1)[1]) == {"p": {"r": message}}


def test_block_message_is_the_same_whether_rendered_anew_or_reused_and_long_maps_are_not_held() -> None:
    from stockade.webhook.admission import BLOCK_YAML_CACHED_CHARS, _cached_block_yaml

    blocked = {"zeta": {"b": "needs: a colon", "a": "it's quoted"}, "alpha": {"r": "plain"}}
    expected = (
        "\n\nresource Pod/default/web was blocked due to the following policies \n\n"
        "alpha:\n  r: plain\nzeta:\n  a: it's quoted\n  b: 'needs: a colon'\n"
    )
    assert block_message("Pod/default/web", blocked) == expected
    assert block_message("Pod/default/web", {"alpha": {"r": "plain"}, "zeta": {"a": "it's quoted", "b": "needs: a colon"}}) == expected
    assert block_message("Pod/other/db", blocked) == expected.replace("Pod/default/web", "Pod/other/db")
    held = _cached_block_yaml.cache_info().currsize
    huge = "x " * BLOCK_YAML_CACHED_CHARS
    text = block_message("Pod/default/web", {"p": {"r": huge}})
    assert _cached_block_yaml.cache_info().currsize == held
    assert yaml.safe_load(text.split("policies \n\n", 1)[1]) == {"p": {"r": huge}}


def test_only_enforce_failures_and_fail_policy_errors_block() -> None:
    responses = [
        EngineResponse(policy("enforced"), {}, {}, [rule("a", "fail"), rule("b", "pass")]),
        EngineResponse(policy("audited"), {}, {}, [rule("c", "fail", "Audit")]),
        EngineResponse(policy("erroring"), {}, {}, [rule("d", "error", "Audit")]),
        EngineResponse(policy("ignored-errors", "Ignore"), {}, {}, [rule("e", "error")]),
    ]
    assert blocking_rules(responses) == {"enforced": {"a": "msg"}, "erroring": {"d": "msg"}}
    assert warning_messages(responses) == [
        "policy enforced.a: msg",
        "policy audited.c: msg",
        "policy erroring.d: msg",
        "policy ignored-errors.e: msg",
    ]


def test_review_response_shape() -> None:
    request = parse_review(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "u1", "operation": "CREATE", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"}, "object": {"kind": "Deployment"}, "subResource": ""},
        }
    )
    assert request.kind.group == "apps"
    denied = review_response(request, AdmissionDecision(False, "nope", patch=[{"op": "add", "path": "/x", "value": 1}]))
    assert denied == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "u1", "allowed": False, "status": {"status": "Failure", "message": "nope"}}}
    allowed = review_response(request, AdmissionDecision(True, warnings=["w"]))
    assert allowed["response"] == {"uid": "u1", "allowed": True, "warnings": ["w"]}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ([], "JSON object"),
        ({"kind": "AdmissionReview", "apiVersion": "v1"}, "unsupported apiVersion"),
        ({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}, "request is missing"),
        ({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"uid": "u", "operation": "PATCH"}}, "operation"),
        ({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"uid": "u", "operation": "CREATE", "kind": {"kind": "Pod"}}}, "neither object nor oldObject"),
    ],
)
def test_invalid_reviews_name_the_problem(body: object, reason: str) -> None:
    with pytest.raises(InvalidAdmissionReview, match=reason):
        parse_review(body)


@pytest.mark.parametrize(("field", "value"), [("groups", 1.5), ("groups", "admins"), ("extra", [["a", "b"]]), ("extra", "x")])
def test_user_info_of_the_wrong_type_is_an_invalid_review(field: str, value: object) -> None:
    """Found by the fuzzer: these raised TypeError/ValueError instead of the typed refusal."""
    body = review(pod())
    body["request"]["userInfo"][field] = value
    with pytest.raises(InvalidAdmissionReview, match=f"userInfo.{field}"):
        parse_review(body)


def test_resource_of_the_wrong_type_is_an_invalid_review() -> None:
    body = review(pod())
    body["request"]["resource"] = "pods"
    with pytest.raises(InvalidAdmissionReview, match="request.resource"):
        parse_review(body)


@pytest.mark.parametrize("admission", [True, False])
def test_background_only_policies_are_not_applied_at_admission(admission: bool) -> None:
    """Kyverno: `spec.admission: false` leaves a policy to background scans; its webhook never applies it."""
    from stockade.engine.engine import Engine
    from stockade.webhook.admission import AdmissionEvaluator, parse_review

    deny_pods = KyvernoPolicy(yaml.safe_load(f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {{name: validate}}
spec:
  admission: {str(admission).lower()}
  background: true
  rules:
  - name: validate
    match: {{any: [{{resources: {{kinds: [Pod]}}}}]}}
    validate: {{failureAction: Enforce, deny: {{}}}}
"""))
    decision = AdmissionEvaluator(Engine(), [deny_pods]).validate(parse_review(review(pod())))
    assert decision.allowed is (not admission)


@pytest.mark.parametrize("field", ["object", "oldObject"])
@pytest.mark.parametrize("metadata", [[], 1.5, "m"])
def test_metadata_of_the_wrong_type_is_an_invalid_review(field: str, metadata: object) -> None:
    """Found by the fuzzer: a list or number as metadata reached the engine (AttributeError while mutating)."""
    body = review(pod())
    body["request"]["oldObject"] = pod()
    body["request"]["operation"] = "UPDATE"
    body["request"][field]["metadata"] = metadata
    with pytest.raises(InvalidAdmissionReview, match=f"request.{field}.metadata must be an object"):
        parse_review(body)


@pytest.mark.parametrize("emit", [True, False])
def test_emit_warning_policies_report_applied_mutations_as_warnings(emit: bool) -> None:
    """Kyverno's spec.emitWarning: every non-skipped result of the policy goes back as a warning, the applied
    mutation ("mutated Pod/...") included."""
    from stockade.engine.engine import Engine
    from stockade.webhook.admission import AdmissionEvaluator

    labeller = KyvernoPolicy(yaml.safe_load(f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {{name: add-labels}}
spec:
  emitWarning: {str(emit).lower()}
  rules:
  - name: add-labels
    match: {{any: [{{resources: {{kinds: [Pod]}}}}]}}
    mutate: {{patchStrategicMerge: {{metadata: {{labels: {{foo: bar}}}}}}}}
"""))
    decision = AdmissionEvaluator(Engine(), [labeller]).mutate(parse_review(review(pod())))
    assert decision.patch
    expected = ["policy add-labels.add-labels: mutated Pod/web in namespace default"] if emit else []
    assert decision.warnings == expected


def test_policies_read_the_admission_request_fields_under_request() -> None:
    """Kyverno e2e variables/lazyload/conditions: preconditions on ``{{ request.name }}``; Kyverno's admission context
    holds the whole AdmissionRequest (name, uid, kind, resource, dryRun), not only object and operation."""
    from stockade.engine.engine import Engine
    from stockade.webhook.admission import AdmissionEvaluator

    only_test = KyvernoPolicy(yaml.safe_load("""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: preconditions}
spec:
  rules:
  - name: test
    match: {any: [{resources: {kinds: [Pod]}}]}
    preconditions:
      all:
      - {key: '{{ request.name }}', operator: Equals, value: test}
      - {key: '{{ request.kind.kind }}/{{ request.resource.resource }}/{{ request.dryRun }}', operator: Equals, value: Pod/pods/false}
    validate: {failureAction: Enforce, deny: {}}
"""))
    evaluator = AdmissionEvaluator(Engine(), [only_test])
    assert evaluator.validate(parse_review(review(pod(name="test")))).allowed is False
    assert evaluator.validate(parse_review(review(pod(name="other")))).allowed is True


def test_a_connect_requests_options_object_reads_as_in_the_requests_namespace() -> None:
    # kube-apiserver sends a pods/exec CONNECT with a PodExecOptions that has no metadata; Kyverno reads it with the
    # request's namespace (admissionutils.ConvertResource), which object.metadata.namespace and generate labels use
    body = review({"apiVersion": "v1", "kind": "PodExecOptions", "command": ["ls"], "stdout": True}, operation="CONNECT")
    body["request"].update(
        namespace="team-a", name="web", subResource="exec",
        kind={"group": "", "version": "v1", "kind": "PodExecOptions"},
        resource={"group": "", "version": "v1", "resource": "pods"},
    )
    request = parse_review(body)
    assert request.object == {"apiVersion": "v1", "kind": "PodExecOptions", "command": ["ls"], "stdout": True, "metadata": {"namespace": "team-a"}}
    assert request.old_object == {}


def test_a_namespace_object_keeps_no_namespace() -> None:
    body = review({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    body["request"].update(namespace="team-a", kind={"group": "", "version": "v1", "kind": "Namespace"})
    assert parse_review(body).object == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
