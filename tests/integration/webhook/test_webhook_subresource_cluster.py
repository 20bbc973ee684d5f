"""Against a real kube-apiserver: a rule matching a subresource kind (``Pod/eviction``) is registered for that
subresource, sees the API-initiated eviction (a CREATE of pods/eviction whose object is a policy/v1 Eviction), can
read the evicted Pod through an apiCall context entry, and refuses the eviction; a rule matching plain ``Pod`` is not
applied to the subresource request (Kyverno's kind check compares the subresource too: ``Pod`` means none)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from webhook_cluster import VALIDATING, Kube, Serve, pod

from stockade.testing.apiserver import ControlPlane

POLICIES = """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: guard-evictions
spec:
  background: false
  rules:
  - name: keep-pinned-pods
    match:
      any:
      - resources:
          kinds: [Pod/eviction]
    context:
    - name: pinned
      apiCall:
        urlPath: /api/v1/namespaces/{{request.namespace}}/pods/{{request.name}}
        jmesPath: metadata.labels.pinned
    validate:
      failureAction: Enforce
      message: pods labelled pinned=true stay where they are
      deny:
        conditions:
          all:
          - key: "{{ pinned }}"
            operator: Equals
            value: "true"
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: pods-have-named-containers
spec:
  background: false
  rules:
  - name: named-containers
    match:
      any:
      - resources:
          kinds: [Pod]
    validate:
      failureAction: Enforce
      message: every container needs a name
      pattern:
        spec:
          containers:
          - name: "?*"
"""


@pytest.fixture()
def eviction_serve(control_plane: ControlPlane, kube: Kube, tmp_path: Path) -> Iterator[Serve]:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "policies.yaml").write_text(POLICIES)
    server = Serve(control_plane, policies, tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not kube.names(VALIDATING):  # validate rules only: no mutating configuration to wait for
            assert server.process.poll() is None and time.monotonic() < deadline, server.log()
            time.sleep(0.3)
        yield server
    finally:
        server.stop()


def _evict(kube: Kube, namespace: str, name: str) -> tuple[int, dict[str, Any]]:
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
    status, body, _ = kube.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", eviction)
    return status, body


def _gone(kube: Kube, namespace: str, name: str, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body, _ = kube.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        if status == 404 or (status == 200 and body["metadata"].get("deletionTimestamp")):
            return True
        time.sleep(0.3)
    return False


def test_an_eviction_rule_reads_the_pod_and_refuses_its_eviction(eviction_serve: Serve, kube: Kube, control_plane: ControlPlane) -> None:
    namespace = f"evict-{uuid.uuid4().hex[:6]}"
    control_plane.ensure_namespace(namespace)
    try:
        configurations = kube.request("GET", f"{VALIDATING}?labelSelector=webhook.stockade.io%2Fmanaged-by%3Dstockade")[1]["items"]
        resources = {resource for item in configurations for hook in item["webhooks"] for rule in hook["rules"] for resource in rule["resources"]}
        assert "pods/eviction" in resources, resources

        for name, pinned in (("pinned", "true"), ("movable", "false")):
            status, body, _ = kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod(name, {"pinned": pinned}))
            assert status == 201, body

        status, body = _evict(kube, namespace, "pinned")
        assert status == 400, body
        assert "pods labelled pinned=true stay where they are" in body["message"]
        assert "guard-evictions" in body["message"] and "keep-pinned-pods" in body["message"]
        status, stored, _ = kube.request("GET", f"/api/v1/namespaces/{namespace}/pods/pinned")
        assert status == 200 and not stored["metadata"].get("deletionTimestamp"), stored

        # the Eviction object has no spec.containers: had the plain Pod rule been applied, its pattern would fail
        status, body = _evict(kube, namespace, "movable")
        assert status == 201, body
        assert _gone(kube, namespace, "movable")
    finally:
        kube.request("DELETE", f"/api/v1/namespaces/{namespace}")
