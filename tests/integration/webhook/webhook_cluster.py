"""Helpers for the webhook integration tests: raw API calls and a `stockade serve` subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from stockade.testing.apiserver import ControlPlane, free_port

POLICIES = """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: require-team-label
spec:
  validationFailureAction: Enforce
  rules:
  - name: check-team
    match:
      any:
      - resources:
          kinds: [Pod]
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
  name: disallow-latest
spec:
  validationFailureAction: Audit
  emitWarning: true  # Kyverno answers with Audit failures only for policies that ask for it
  rules:
  - name: no-latest
    match:
      any:
      - resources:
          kinds: [Pod]
    validate:
      message: "the latest tag is not allowed"
      pattern:
        spec:
          containers:
          - image: "!*:latest"
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: add-managed-label
spec:
  rules:
  - name: add-label
    match:
      any:
      - resources:
          kinds: [ConfigMap]
    mutate:
      patchStrategicMerge:
        metadata:
          labels:
            stockade.io/managed: "true"
"""

POLICIES += """
---
apiVersion: policies.kyverno.io/v1beta1
kind: ValidatingPolicy
metadata:
  name: no-forbidden-label
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [pods]
  validations:
  - expression: "!has(object.metadata.labels) || !('forbidden' in object.metadata.labels)"
    message: "the forbidden label is forbidden"
"""

POLICIES += """
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: strict-namespaces-need-owner
spec:
  validationFailureAction: Enforce
  rules:
  - name: check-owner
    match:
      any:
      - resources:
          kinds: [Pod]
          namespaceSelector:
            matchLabels:
              stockade-test/strict: "true"
    validate:
      message: "pods in strict namespaces need an owner label"
      pattern:
        metadata:
          labels:
            owner: "?*"
"""

MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


class Kube:
    """Just enough of the Kubernetes REST API, with access to status, warnings and error messages."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any], list[str]]:
        return self.plane.request(method, path, body)

    def names(self, collection: str) -> list[str]:
        status, body, _ = self.request("GET", collection + "?labelSelector=webhook.stockade.io%2Fmanaged-by%3Dstockade")
        assert status == 200, body
        return [item["metadata"]["name"] for item in body.get("items", [])]


def pod(name: str, labels: dict[str, str] | None = None, image: str = "nginx:1.27") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": [{"name": "c", "image": image}]}}


def deployment(name: str, pod_labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name, **pod_labels}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}},
        },
    }


class Serve:
    """`stockade serve --register-webhooks` as a child process, pointed at the test control plane."""

    def __init__(self, plane: ControlPlane, policy_dir: Path, workdir: Path, extra_args: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.log_path = workdir / "serve.log"
        plane.ensure_namespace("stockade-system")  # leader election keeps its Leases there
        self.plane = plane
        command = [
            sys.executable, "-c", "from stockade.cli.main import main; main()",
            "serve", str(policy_dir),
            "--host", "127.0.0.1", "--port", str(self.port),
            "--register-webhooks", "--kubeconfig", str(plane.kubeconfig),
            "--webhook-url", f"https://127.0.0.1:{self.port}",
            "--cert-dir", str(workdir / "certs"),
            "--namespace", "stockade-system",
            *extra_args,
        ]
        with open(self.log_path, "wb") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def wait_registered(self, kube: Kube, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"stockade serve exited early:\n{self.log()}")
            if kube.names(VALIDATING) and kube.names(MUTATING):
                return
            time.sleep(0.3)
        raise AssertionError(f"webhooks not registered in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int, timeout: float = 30.0) -> int:
        self.process.send_signal(signum)
        return self.process.wait(timeout=timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.signal(signal.SIGTERM)


def install_policy_report_crd(kube: "Kube") -> None:
    """A schema-less stand-in for the wgpolicyk8s.io PolicyReport CRD (the tests check our writes, not its schema);
    returns once it is served."""
    body = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "policyreports.wgpolicyk8s.io"},
        "spec": {
            "group": "wgpolicyk8s.io",
            "scope": "Namespaced",
            "names": {"plural": "policyreports", "singular": "policyreport", "kind": "PolicyReport", "listKind": "PolicyReportList"},
            "versions": [{"name": "v1alpha2", "served": True, "storage": True, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }
    status, created, _ = kube.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body)
    assert status in (201, 409), created
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, _, _ = kube.request("GET", "/apis/wgpolicyk8s.io/v1alpha2/namespaces/default/policyreports")
        if status == 200:
            return
        time.sleep(0.3)
    raise AssertionError("PolicyReport CRD not served")
