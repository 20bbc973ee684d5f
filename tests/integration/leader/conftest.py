"""Fixtures of the leader-election tests: a fresh namespace per test on the shared apiserver."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stockade.kube.client import KubeClient
from stockade.testing.kubeobjects import temporary_namespace


@pytest.fixture()
def lease_namespace(kube_client: KubeClient) -> Iterator[str]:
    """Leases are namespaced, so a namespace of our own keeps tests from seeing each other's replicas."""
    with temporary_namespace(kube_client, "leader") as name:
        try:
            yield name
        finally:
            kube_client.request("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{name}/leases")
