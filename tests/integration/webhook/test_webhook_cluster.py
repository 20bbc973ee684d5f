"""Against a real kube-apiserver: denial, warnings, stored mutations, and cleanup on shutdown or after a crash."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from webhook_cluster import MUTATING, VALIDATING, Kube, Serve, deployment, pod

from stockade.testing.apiserver import ControlPlane


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_violating_deployment_is_denied_with_policy_message(serve: Serve, kube: Kube) -> None:
    name = unique("web")
    status, body, _ = kube.request("POST", "/apis/apps/v1/namespaces/default/deployments", deployment(name, {}))
    assert status == 400, body
    message = body["message"]
    assert 'admission webhook "validate.stockade.svc-fail" denied the request' in message
    assert f"resource Deployment/default/{name} was blocked due to the following policies" in message
    assert "require-team-label:" in message and "autogen-check-team" in message
    status, body, _ = kube.request("POST", "/apis/apps/v1/namespaces/default/deployments", deployment(unique("ok"), {"team": "a"}))
    assert status == 201, body


def test_validating_policy_denies_pod(serve: Serve, kube: Kube) -> None:
    name = unique("forbidden")
    status, body, _ = kube.request("POST", "/api/v1/namespaces/default/pods", pod(name, {"team": "a", "forbidden": "yes"}))
    assert status == 400, body
    assert "Policy no-forbidden-label failed: the forbidden label is forbidden" in body["message"]  # Kyverno's CEL denial


def test_namespace_selector_uses_live_namespace_labels(serve: Serve, kube: Kube) -> None:
    strict = unique("strict")
    status, body, _ = kube.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": strict, "labels": {"stockade-test/strict": "true"}}})
    assert status == 201, body
    status, body, _ = kube.request("POST", f"/api/v1/namespaces/{strict}/pods", pod("no-owner", {"team": "a"}))
    assert status == 400 and "strict-namespaces-need-owner" in body["message"], body
    status, body, _ = kube.request("POST", f"/api/v1/namespaces/{strict}/pods", pod("with-owner", {"team": "a", "owner": "me"}))
    assert status == 201, body
    status, body, _ = kube.request("POST", "/api/v1/namespaces/default/pods", pod(unique("relaxed"), {"team": "a"}))
    assert status == 201, body


def test_audit_failure_of_an_emit_warning_policy_is_admitted_with_warning(serve: Serve, kube: Kube) -> None:
    status, body, warnings = kube.request("POST", "/api/v1/namespaces/default/pods", pod(unique("latest"), {"team": "a"}, "nginx:latest"))
    assert status == 201, body
    assert any("policy disallow-latest.no-latest:" in w and "the latest tag is not allowed" in w for w in warnings), warnings


def test_admitted_resource_gets_a_policy_report(policy_report_crd: None, serve: Serve, kube: Kube) -> None:
    import time

    status, created, _ = kube.request("POST", "/api/v1/namespaces/default/pods", pod(unique("reported"), {"team": "a"}, "nginx:latest"))
    assert status == 201, created
    uid = created["metadata"]["uid"]
    deadline = time.monotonic() + 30
    report: dict = {}
    wanted = {"disallow-latest", "require-team-label", "no-forbidden-label"}
    # the ClusterPolicy and the ValidatingPolicy results come from two webhooks (as in Kyverno) and are merged
    while time.monotonic() < deadline:
        status, report, _ = kube.request("GET", f"/apis/wgpolicyk8s.io/v1alpha2/namespaces/default/policyreports/{uid}")
        if status == 200 and wanted <= {r["policy"] for r in report.get("results") or []}:
            break
        time.sleep(0.2)
    assert status == 200, serve.log()
    assert report["scope"]["uid"] == uid and report["metadata"]["ownerReferences"][0]["uid"] == uid
    results = {(r["policy"], r["rule"]): r["result"] for r in report["results"]}
    assert results[("disallow-latest", "no-latest")] == "fail"
    assert results[("require-team-label", "check-team")] == "pass"
    assert results[("no-forbidden-label", "no-forbidden-label")] == "pass"
    assert report["summary"]["fail"] == 1


def test_mutation_is_visible_on_stored_object(serve: Serve, kube: Kube) -> None:
    name = unique("cm")
    status, body, _ = kube.request("POST", "/api/v1/namespaces/default/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
    assert status == 201, body
    status, stored, _ = kube.request("GET", f"/api/v1/namespaces/default/configmaps/{name}")
    assert stored["metadata"]["labels"] == {"stockade.io/managed": "true"}


def test_excluded_namespace_is_not_sent_to_webhook(serve: Serve, kube: Kube) -> None:
    kube.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "stockade-system"}})
    status, body, _ = kube.request("POST", "/api/v1/namespaces/stockade-system/pods", pod(unique("unlabelled")))
    assert status == 201, body


def test_registered_rules_cover_only_needed_kinds(serve: Serve, kube: Kube) -> None:
    _, validating, _ = kube.request("GET", f"{VALIDATING}/stockade-resource-validating-webhook-cfg")
    resources = {r for rule in validating["webhooks"][0]["rules"] for r in rule["resources"]}
    assert "pods" in resources and "deployments" in resources and "configmaps" not in resources
    _, mutating, _ = kube.request("GET", f"{MUTATING}/stockade-resource-mutating-webhook-cfg")
    assert {r for rule in mutating["webhooks"][0]["rules"] for r in rule["resources"]} == {"configmaps"}


def test_sigterm_removes_webhook_configurations(serve: Serve, kube: Kube) -> None:
    assert serve.signal(signal.SIGTERM) == 0, serve.log()
    assert kube.names(VALIDATING) == [] and kube.names(MUTATING) == []
    status, body, _ = kube.request("POST", "/api/v1/namespaces/default/pods", pod(unique("after-stop")))
    assert status == 201, body


def test_sigkill_then_cleanup_restores_cluster(serve: Serve, kube: Kube, control_plane: ControlPlane) -> None:
    # the API server loads webhook configurations through its own watch: until it calls the webhook (a Pod without
    # the label is denied), a create would pass whether or not the server is alive
    deadline = time.monotonic() + 30
    while True:
        status, body, _ = kube.request("POST", "/api/v1/namespaces/default/pods?dryRun=All", pod(unique("probe")))
        if status != 201 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert status == 400 and "rule check-team failed" in body["message"], body
    serve.signal(signal.SIGKILL)
    assert kube.names(VALIDATING)
    status, body, _ = kube.request("POST", "/api/v1/namespaces/default/pods", pod(unique("blocked"), {"team": "a"}))
    assert status >= 500 and "failed calling webhook" in body["message"], body
    result = subprocess.run(
        [sys.executable, "-c", "from stockade.cli.main import main; main()", "cleanup", "--kubeconfig", str(control_plane.kubeconfig)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "removed 3 webhook configuration(s)" in result.stdout  # resource mutating + validating, policy validation
    assert kube.names(VALIDATING) == [] and kube.names(MUTATING) == []
    status, body, _ = kube.request("POST", "/api/v1/namespaces/default/pods", pod(unique("restored")))
    assert status == 201, body


def test_replicas_share_the_ca_through_a_secret(control_plane: ControlPlane, kube: Kube) -> None:
    from stockade.kube.connection import load_api_client
    from stockade.controllers.tlssecret import SecretStore
    from stockade.webhook.certs import CertificateManager

    client = load_api_client(str(control_plane.kubeconfig))
    name = unique("tls")
    first = CertificateManager(hosts=["127.0.0.1"], store=SecretStore(client, "default", name))
    first.start()
    second = CertificateManager(hosts=["127.0.0.1"], store=SecretStore(client, "default", name))
    second.start()
    assert first.ca_bundle and second.ca_bundle == first.ca_bundle
    status, secret, _ = kube.request("GET", f"/api/v1/namespaces/default/secrets/{name}")
    assert status == 200 and set(secret["data"]) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    assert secret["metadata"]["labels"] == {"webhook.stockade.io/managed-by": "stockade"}
    import datetime as dt

    first.renew_before = dt.timedelta(days=400)  # force a leaf renewal: a replace with resourceVersion
    assert first.refresh() is True
    first.renew_before = second.renew_before
    assert second.refresh() is True  # the other replica adopts it from the Secret
    assert second.serving is not None and first.serving is not None and second.serving.cert_pem == first.serving.cert_pem


def test_certificate_writes_keep_the_labels_and_annotations_of_a_precreated_secret(control_plane: ControlPlane, kube: Kube) -> None:
    """The chart creates the (empty) TLS Secret so uninstall deletes it; our writes must not strip Helm's metadata."""
    from stockade.kube.connection import load_api_client
    from stockade.controllers.tlssecret import SecretStore
    from stockade.webhook.certs import CertificateManager

    name = unique("tls")
    metadata = {"name": name, "labels": {"app.kubernetes.io/managed-by": "Helm"}, "annotations": {"meta.helm.sh/release-name": "stockade"}}
    status, _, _ = kube.request("POST", "/api/v1/namespaces/default/secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": "Opaque"})
    assert status == 201
    manager = CertificateManager(hosts=["127.0.0.1"], store=SecretStore(load_api_client(str(control_plane.kubeconfig)), "default", name))
    manager.start()
    status, secret, _ = kube.request("GET", f"/api/v1/namespaces/default/secrets/{name}")
    assert status == 200 and {"ca.crt", "tls.crt"} <= set(secret["data"])
    assert secret["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "Helm", "webhook.stockade.io/managed-by": "stockade"}
    assert secret["metadata"]["annotations"] == {"meta.helm.sh/release-name": "stockade"}
    kube.request("DELETE", f"/api/v1/namespaces/default/secrets/{name}")


def test_two_replicas_hand_over_and_only_the_last_one_removes_webhooks(control_plane: ControlPlane, kube: Kube, policy_dir: Path, tmp_path: Path) -> None:
    """A rolling update must never leave the cluster unprotected; uninstalling must leave nothing behind."""
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
    first = Serve(control_plane, policy_dir, tmp_path / "first")
    second: Serve | None = None
    try:
        first.wait_registered(kube)
        second = Serve(control_plane, policy_dir, tmp_path / "second")
        wait_for(lambda: "stockade webhook serving" in second.log(), "second replica serving", second.log)
        wait_for(lambda: _client_url(kube).endswith(f":{first.port}/validate/fail"), "first replica registered", first.log)
        assert first.signal(signal.SIGTERM) == 0, first.log()
        assert "other replicas are running" in first.log()
        # the survivor takes the Lease over and points the webhooks at itself
        wait_for(lambda: _client_url(kube).endswith(f":{second.port}/validate/fail"), "second replica took over", second.log)
        status, body, _ = kube.request("POST", "/api/v1/namespaces/default/pods", pod(unique("still-checked"), {"team": "a", "forbidden": "yes"}))
        assert status == 400 and "no-forbidden-label" in body["message"], body
        assert second.signal(signal.SIGTERM) == 0, second.log()
        assert kube.names(VALIDATING) == [] and kube.names(MUTATING) == []
    finally:
        first.stop()
        if second is not None:
            second.stop()


def _client_url(kube: Kube) -> str:
    status, config, _ = kube.request("GET", f"{VALIDATING}/stockade-resource-validating-webhook-cfg")
    if status != 200:
        return ""
    return str(config["webhooks"][0]["clientConfig"].get("url", ""))


def wait_for(condition: Any, what: str, details: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise AssertionError(f"{what}: not within {timeout}s\n{details()}")


CARELESS_POLICY = """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: careless-nested-foreach
spec:
  webhookConfiguration:
    timeoutSeconds: 30
  rules:
  - name: quadratic
    match:
      any:
      - resources:
          kinds: [Pod]
    validate:
      failureAction: Enforce
      foreach:
      - list: request.object.spec.items
        foreach:
        - list: request.object.spec.items
          deny:
            conditions:
              any:
              - key: "{{ element }}"
                operator: Equals
                value: never-present
"""


def test_sigterm_during_a_slow_review_exits_within_10s_and_removes_webhooks(control_plane: ControlPlane, kube: Kube, tmp_path: Path) -> None:
    """Hostile-input rule for a registered server: SIGTERM while a minutes-long evaluation is in flight still ends the
    process within 10 s, and the webhook configurations are gone (a cluster is never left failing closed)."""
    import json
    import ssl
    import threading
    import urllib.request
    import uuid

    policies = tmp_path / "careless"
    policies.mkdir()
    (policies / "policy.yaml").write_text(CARELESS_POLICY)
    serve = Serve(control_plane, policies, tmp_path)
    try:
        deadline = time.monotonic() + 60
        while "stockade-resource-validating-webhook-cfg" not in kube.names(VALIDATING):  # validate-only: no mutating config
            assert time.monotonic() < deadline and serve.process.poll() is None, serve.log()
            time.sleep(0.3)
        review = {
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
                "namespace": "default", "name": "slow", "userInfo": {"username": "alice"},
                "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "slow", "namespace": "default"},
                           "spec": {"containers": [{"name": "c", "image": "nginx"}], "items": [f"item-{i}" for i in range(2000)]}},
            },
        }
        context = ssl.create_default_context(cafile=str(tmp_path / "certs" / "ca.crt"))
        request = urllib.request.Request(f"https://127.0.0.1:{serve.port}/validate/fail", data=json.dumps(review).encode(), headers={"Content-Type": "application/json"})
        in_flight = threading.Thread(target=lambda: urllib.request.urlopen(request, context=context, timeout=60).read(), daemon=True)  # noqa: S310
        in_flight.start()
        time.sleep(2.0)
        assert in_flight.is_alive(), "the careless review finished before SIGTERM: nothing was in flight"
        started = time.monotonic()
        serve.process.send_signal(signal.SIGTERM)
        assert serve.process.wait(timeout=30) == 0, serve.log()
        assert time.monotonic() - started < 10, f"SIGTERM took {time.monotonic() - started:.1f}s\n{serve.log()}"
        assert kube.names(VALIDATING) == [] and kube.names(MUTATING) == []
    finally:
        serve.stop()
