"""`stockade serve` doing cluster-side work: generate rules, background scans into PolicyReports, denial Events."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from webhook_cluster import VALIDATING, Kube, Serve, pod

from stockade.testing.apiserver import ControlPlane

POLICIES = """\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: default-quota-config}
spec:
  rules:
  - name: quota-config
    match: {any: [{resources: {kinds: [Namespace], selector: {matchLabels: {stockade-test/generate: "yes"}}}}]}
    # this test's client and the server share the control plane's admin identity, so the client's writes are the
    # server's own (background) requests, which generate rules skip by default
    skipBackgroundRequests: false
    generate:
      apiVersion: v1
      kind: ConfigMap
      name: quota
      namespace: "{{ request.object.metadata.name }}"
      synchronize: true
      data:
        data: {pods: "10", owner: "{{ request.object.metadata.labels.owner || 'nobody' }}"}
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: scanned-owner}
spec:
  validationFailureAction: Audit
  background: true
  rules:
  - name: owner-label
    match: {any: [{resources: {kinds: [Pod], namespaces: ["scan-*"]}}]}
    validate:
      message: "pods need an owner label"
      pattern: {metadata: {labels: {owner: "?*"}}}
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: no-privileged-team}
spec:
  validationFailureAction: Enforce
  rules:
  - name: team-not-root
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      message: "team root may not run pods"
      pattern: {metadata: {labels: {=(team): "!root"}}}
"""


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def eventually(condition: Any, what: str, details: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout}s\n{details()}")


@pytest.fixture()
def scan_namespace(kube: Kube) -> str:
    """A namespace with a non-compliant Pod stored before the server starts: only a background scan can see it."""
    name = unique("scan")
    status, body, _ = kube.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    assert status == 201, body
    status, body, _ = kube.request("POST", f"/api/v1/namespaces/{name}/pods", pod("ownerless"))
    assert status == 201, body
    return name


@pytest.fixture()
def workers_serve(control_plane: ControlPlane, kube: Kube, tmp_path: Path, policy_report_crd: None, scan_namespace: str) -> Iterator[Serve]:
    directory = tmp_path / "policies"
    directory.mkdir()
    (directory / "policies.yaml").write_text(POLICIES)
    server = Serve(control_plane, directory, tmp_path, extra_args=("--background-scan-interval", "3"))
    try:
        eventually(lambda: kube.names(VALIDATING), "validating webhook registered", server.log)  # no mutate rules here
        yield server
    finally:
        server.stop()


def test_generate_background_scan_and_events(workers_serve: Serve, kube: Kube, scan_namespace: str) -> None:
    # generate: a labelled Namespace gets its ConfigMap, with variables from the trigger and Kyverno's labels
    name = unique("gen")
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"stockade-test/generate": "yes", "owner": "ops"}}}
    status, body, _ = kube.request("POST", "/api/v1/namespaces", namespace)
    assert status == 201, body

    def generated() -> dict[str, Any] | None:
        status, config, _ = kube.request("GET", f"/api/v1/namespaces/{name}/configmaps/quota")
        return config if status == 200 else None

    config = eventually(generated, "generated ConfigMap", workers_serve.log)
    assert config["data"] == {"pods": "10", "owner": "ops"}
    assert config["metadata"]["labels"]["generate.kyverno.io/policy-name"] == "default-quota-config"

    # background scan: the Pod stored before the server started is reported as failing
    def scanned() -> dict[str, Any] | None:
        status, listing, _ = kube.request("GET", f"/apis/wgpolicyk8s.io/v1alpha2/namespaces/{scan_namespace}/policyreports")
        for report in listing.get("items", []) if status == 200 else []:
            if any(r.get("policy") == "scanned-owner" for r in report.get("results", [])):
                return report
        return None

    report = eventually(scanned, "background scan PolicyReport", workers_serve.log)
    result = next(r for r in report["results"] if r["policy"] == "scanned-owner")
    assert result["result"] == "fail" and result["rule"] == "owner-label"
    assert report["scope"]["name"] == "ownerless"

    # a denial leaves a PolicyViolation Event on the policy
    status, body, _ = kube.request("POST", "/api/v1/namespaces/default/pods", pod(unique("root"), {"team": "root"}))
    assert status == 400 and "team root may not run pods" in body["message"], body

    def violation() -> dict[str, Any] | None:
        status, listing, _ = kube.request("GET", "/api/v1/namespaces/default/events?fieldSelector=reason%3DPolicyViolation")
        for event in listing.get("items", []) if status == 200 else []:
            if event.get("involvedObject", {}).get("name") == "no-privileged-team" and "team root may not run pods" in event.get("message", ""):
                return event
        return None

    event = eventually(violation, "PolicyViolation event", workers_serve.log)
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "ClusterPolicy"
