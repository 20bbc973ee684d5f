"""Fixtures for the background controllers against the shared real kube-apiserver.

Controllers are built directly (no `stockade serve`): on the shared `api_client` (tests/integration/conftest.py), a
PolicyStore over a temporary policy directory, and ClusterData for raw reads and writes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stockade.controllers.clusterdata import ClusterData
from stockade.kube.errors import AlreadyExists, KubeError
from stockade.webhook.policystore import PolicyStore


@pytest.fixture(scope="session")
def cluster(api_client: Any) -> ClusterData:
    return ClusterData(api_client, ttl_seconds=0.0, discovery_ttl_seconds=5.0)


@pytest.fixture()
def suffix() -> str:
    return uuid.uuid4().hex[:6]


@pytest.fixture()
def namespaces(cluster: ClusterData) -> Iterator[Callable[..., dict[str, Any]]]:
    """Creates namespaces (deleted afterwards; without a namespace controller they stay Terminating, unnamed reuse)."""
    created: list[str] = []

    def make(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}
        obj = cluster.request("POST", "/api/v1/namespaces", body)
        created.append(name)
        return {**obj, "apiVersion": "v1", "kind": "Namespace"}

    yield make
    for name in created:
        try:
            cluster.request("DELETE", f"/api/v1/namespaces/{name}")
        except KubeError:
            pass


@pytest.fixture()
def policy_store(tmp_path: Path) -> Callable[[str], PolicyStore]:
    directory = tmp_path / "policies"
    directory.mkdir()

    def make(text: str) -> PolicyStore:
        (directory / "policies.yaml").write_text(text)
        store = PolicyStore([str(directory)])
        store.load()
        return store

    return make


def install_crds(cluster: ClusterData, bodies: list[dict[str, Any]], served: tuple[str, ...], what: str) -> None:
    """Create CRDs (existing ones are fine, other tests share them) and wait until every path in ``served`` answers."""
    for body in bodies:
        try:
            cluster.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body)
        except AlreadyExists:
            pass
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            for path in served:
                cluster.request("GET", path)
            return
        except KubeError:
            time.sleep(0.3)
    raise AssertionError(f"{what} not served")


@pytest.fixture(scope="session")
def policy_report_crds(cluster: ClusterData) -> None:
    """Schema-less stand-ins for the wgpolicyk8s.io report CRDs, created once and left for other tests to share."""
    bodies = [
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.wgpolicyk8s.io"},
            "spec": {
                "group": "wgpolicyk8s.io",
                "scope": scope,
                "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
                "versions": [
                    {"name": "v1alpha2", "served": True, "storage": True, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
                ],
            },
        }
        for kind, plural, scope in (("PolicyReport", "policyreports", "Namespaced"), ("ClusterPolicyReport", "clusterpolicyreports", "Cluster"))
    ]
    install_crds(cluster, bodies, ("/apis/wgpolicyk8s.io/v1alpha2/clusterpolicyreports", "/apis/wgpolicyk8s.io/v1alpha2/policyreports"), "PolicyReport CRDs")


@pytest.fixture(scope="session")
def open_report_crds(cluster: ClusterData) -> None:
    """The openreports.io Report/ClusterReport CRDs as shipped in deploy/crds, created once and left for other tests."""
    import yaml

    shipped = Path(__file__).resolve().parents[3] / "deploy" / "crds" / "openreports.yaml"
    bodies = [body for body in yaml.safe_load_all(shipped.read_text()) if body]
    install_crds(cluster, bodies, ("/apis/openreports.io/v1alpha1/clusterreports", "/apis/openreports.io/v1alpha1/reports"), "openreports.io CRDs")
