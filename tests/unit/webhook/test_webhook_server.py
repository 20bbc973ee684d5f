"""End-to-end through HTTPS: AdmissionReview in, Kyverno-shaped AdmissionReview out."""

from __future__ import annotations

import base64
import http.client as hc
import json
from pathlib import Path

import jsonpatch
from webhook_helpers import WebhookClient, pod, review, start_server

from stockade.webhook.certs import CertificateManager


def test_enforce_failure_denies_with_kyverno_block_message(client: WebhookClient) -> None:
    body = review(pod(labels={"app": "web"}))
    answer = client.post_review("/validate/fail", body)
    response = answer["response"]
    assert answer["kind"] == "AdmissionReview" and answer["apiVersion"] == "admission.k8s.io/v1"
    assert response["uid"] == body["request"]["uid"]
    assert response["allowed"] is False
    assert response["status"]["status"] == "Failure"
    message = response["status"]["message"]
    assert message.startswith("\n\nresource Pod/default/web was blocked due to the following policies \n\n")
    assert "require-team-label:\n  check-team: " in message
    assert "label 'team' is required" in message.replace("''", "'")


def test_compliant_pod_is_admitted_without_warnings(client: WebhookClient) -> None:
    response = client.post_review("/validate", review(pod(labels={"team": "a"})))["response"]
    assert response["allowed"] is True
    assert "warnings" not in response and "status" not in response


def test_audit_failure_admits_without_warning(client: WebhookClient) -> None:
    """Kyverno evaluates Audit rules after answering: their failures reach reports and Events, not the answer."""
    response = client.post_review("/validate", review(pod(labels={"team": "a"}, image="nginx:latest")))["response"]
    assert response == {"uid": response["uid"], "allowed": True}


def test_failure_policy_variants_split_policies(client: WebhookClient) -> None:
    # the mutate policy is failurePolicy: Ignore, so only /mutate/ignore (and /mutate) serve it
    assert "patch" not in client.post_review("/mutate/fail", review(pod(labels={"team": "a"})))["response"]
    assert "patch" in client.post_review("/mutate/ignore", review(pod(labels={"team": "a"})))["response"]
    # validate policies default to Fail
    assert client.post_review("/validate/ignore", review(pod()))["response"]["allowed"] is True
    assert client.post_review("/validate/fail", review(pod()))["response"]["allowed"] is False


def test_mutate_returns_base64_json_patch_that_applies(client: WebhookClient) -> None:
    original = pod(labels={"team": "a"})
    response = client.post_review("/mutate", review(original))["response"]
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    operations = json.loads(base64.b64decode(response["patch"]))
    patched = jsonpatch.apply_patch(original, operations)
    assert patched["metadata"]["labels"] == {"team": "a", "stockade.io/managed": "true"}


def test_mutate_adds_labels_map_when_missing(client: WebhookClient) -> None:
    original = pod()
    response = client.post_review("/mutate", review(original))["response"]
    patched = jsonpatch.apply_patch(original, json.loads(base64.b64decode(response["patch"])))
    assert patched["metadata"]["labels"] == {"stockade.io/managed": "true"}


def test_delete_is_evaluated_against_old_object(client: WebhookClient) -> None:
    body = review(None, operation="DELETE", old=pod(labels={"team": "a"}))  # type: ignore[arg-type]
    response = client.post_review("/validate", body)["response"]
    assert response["allowed"] is True
    assert "patch" not in client.post_review("/mutate", body)["response"]


def test_garbage_gets_400_with_reason(client: WebhookClient) -> None:
    status, data = client.request("POST", "/validate", b"{not json")
    assert status == 400 and b"not valid JSON" in data
    status, data = client.request("POST", "/validate", json.dumps({"kind": "Pod"}).encode())
    assert status == 400 and json.loads(data)["reason"].startswith("kind must be AdmissionReview")
    bad = review(pod())
    del bad["request"]["uid"]
    status, data = client.request("POST", "/mutate", json.dumps(bad).encode())
    assert status == 400 and "request.uid" in json.loads(data)["reason"]
    status, data = client.request("POST", "/validate", b"x=1", content_type="application/x-www-form-urlencoded")
    assert status == 400
    # the connection survives bad requests
    assert client.post_review("/validate", review(pod(labels={"team": "a"})))["response"]["allowed"] is True


def test_health_endpoints(client: WebhookClient) -> None:
    assert client.request("GET", "/health/liveness")[0] == 200
    status, data = client.request("GET", "/health/readiness")
    assert status == 200 and json.loads(data)["policies"] == 3


def test_metrics_count_requests_and_rule_results(client: WebhookClient) -> None:
    # "default" is not among the reported namespaces (ServerConfig.metrics_namespaces): it is counted as "other"
    client.post_review("/validate", review(pod()))
    client.post_review("/validate", review(pod(labels={"team": "a"})))
    status, data = client.request("GET", "/metrics")
    text = data.decode()
    assert status == 200
    assert 'kyverno_admission_requests_total{request_allowed="false",resource_kind="Pod",resource_namespace="other",resource_request_operation="CREATE",webhook="/validate"} 1.0' in text
    assert 'request_allowed="true"' in text
    assert "kyverno_admission_review_duration_seconds_bucket" in text
    fail_line = [line for line in text.splitlines() if line.startswith("kyverno_policy_results_total") and 'rule_name="check-team"' in line and 'rule_result="fail"' in line]
    assert fail_line and fail_line[0].endswith(" 1.0")
    assert "kyverno_policy_execution_duration_seconds_count" in text


def test_separate_metrics_port_serves_only_metrics(policy_dir: Path, tmp_path: Path) -> None:
    running = start_server(policy_dir, CertificateManager(hosts=["127.0.0.1"], directory=tmp_path / "c"), metrics_port=0)
    try:
        port = running.server.metrics_port
        assert port
        plain = hc.HTTPConnection("127.0.0.1", port, timeout=10)
        plain.request("GET", "/metrics")
        assert plain.getresponse().read().startswith(b"# HELP")
        plain.request("POST", "/validate", body=b"{}", headers={"Content-Type": "application/json"})
        assert plain.getresponse().status == 404
        plain.close()
    finally:
        running.stop()
