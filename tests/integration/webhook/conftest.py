"""Fixtures of the webhook tests; the shared control plane comes from tests/integration/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from webhook_cluster import POLICIES, Kube, Serve, install_policy_report_crd

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
    install_policy_report_crd(kube)
