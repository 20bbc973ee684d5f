"""Fixtures of the admission-feature tests; the shared control plane comes from tests/integration/conftest.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from admission_cluster import NAMESPACE, Api, InProcessWebhook, pod

from stockade.controllers.events import EventRecorder
from stockade.controllers.userroles import RoleResolver
from stockade.testing.apiserver import ControlPlane

CRDS = Path(__file__).resolve().parents[3] / "deploy" / "crds" / "policies.yaml"

POLICIES = f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: admission-test-require-team
spec:
  validationFailureAction: Enforce
  rules:
  - name: check-team
    match:
      any:
      - resources:
          kinds: [Pod]
          namespaces: [{NAMESPACE}]
    validate:
      message: "label 'team' is required"
      pattern:
        metadata:
          labels:
            team: "?*"
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: admission-test-editors-need-owner
spec:
  validationFailureAction: Enforce
  background: false  # matching by roles needs a requester: Kyverno rejects it in background mode
  rules:
  - name: editors-need-owner
    match:
      any:
      - resources:
          kinds: [ConfigMap]
          namespaces: [{NAMESPACE}]
        roles: ["{NAMESPACE}:cm-editor"]
    validate:
      message: "config maps made by editors need an owner label"
      pattern:
        metadata:
          labels:
            owner: "?*"
"""


@pytest.fixture(scope="session")
def api(control_plane: ControlPlane) -> Api:
    client = Api(control_plane)
    client.ensure("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    return client


@pytest.fixture(scope="session")
def cluster_policy_crd(api: Api) -> None:
    """The ClusterPolicy CRD, from deploy/crds when present, else a schema-less stand-in; left in place (a type
    without objects has no effect on other tests, and deleting it could race with another fixture creating it)."""
    crd = None
    if CRDS.exists():
        crd = next((d for d in yaml.safe_load_all(CRDS.read_text()) if d and d["metadata"]["name"] == "clusterpolicies.kyverno.io"), None)
    if crd is None:
        crd = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "clusterpolicies.kyverno.io"},
            "spec": {
                "group": "kyverno.io",
                "scope": "Cluster",
                "names": {"plural": "clusterpolicies", "singular": "clusterpolicy", "kind": "ClusterPolicy", "listKind": "ClusterPolicyList"},
                "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
            },
        }
    api.ensure("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if api.request("GET", "/apis/kyverno.io/v1/clusterpolicies")[0] == 200:
            return
        time.sleep(0.3)
    raise AssertionError("ClusterPolicy CRD not served")


@pytest.fixture()
def webhook(control_plane: ControlPlane, api: Api, tmp_path: Path) -> Iterator[InProcessWebhook]:
    policy_dir = tmp_path / "policies"
    policy_dir.mkdir()
    (policy_dir / "policies.yaml").write_text(POLICIES)
    server = InProcessWebhook(control_plane, policy_dir, tmp_path)
    try:
        server.state.events = EventRecorder(server.api_client)
        assert server.store.snapshot is not None
        server.store.snapshot.evaluator.role_resolver = RoleResolver(server.api_client, ttl_seconds=0.5)
        server.register()
        _wait_until_enforced(api)
        yield server
    finally:
        server.stop()


def _wait_until_enforced(api: Api) -> None:
    """The apiserver picks new webhook configurations up asynchronously: probe until a violation is denied."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status, _ = api.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods?dryRun=All", pod("probe"))
        if status == 400:
            return
        time.sleep(0.3)
    raise AssertionError("webhook not enforced within 30s")
