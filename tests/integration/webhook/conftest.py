"""Fixtures of the webhook tests; the shared control plane comes from tests/integration/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from webhook_cluster import POLICIES, Kube, Serve

from stockade.testing.apiserver import ControlPlane


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> Kube:
    return Kube(control_plane)


@pytest.fixture()
def policy_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "policies"
    directory.mkdir()
    (directory / "policies.yaml").write_text(POLICIES)
    return directory


@pytest.fixture()
def serve(control_plane: ControlPlane, kube: Kube, policy_dir: Path, tmp_path: Path) -> Iterator[Serve]:
    server = Serve(control_plane, policy_dir, tmp_path)
    try:
        server.wait_registered(kube)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def policy_report_crd(kube: Kube) -> None:
    """A schema-less stand-in for the wgpolicyk8s.io PolicyReport CRD (the tests check our writes, not its schema)."""
    import time

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
