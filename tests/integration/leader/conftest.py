"""Fixtures of the leader-election tests: an API client and a fresh namespace per test on the shared apiserver."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from stockade.kube.connection import load_api_client
from stockade.testing.apiserver import ControlPlane


@pytest.fixture(scope="session")
def api_client(control_plane: ControlPlane) -> Any:
    return load_api_client(str(control_plane.kubeconfig))


@pytest.fixture()
def lease_namespace(api_client: Any) -> Iterator[str]:
    """Leases are namespaced, so a namespace of our own keeps tests from seeing each other's replicas."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    name = f"leader-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        coordination = client.CoordinationV1Api(api_client)
        coordination.delete_collection_namespaced_lease(name)
        core.delete_namespace(name)
