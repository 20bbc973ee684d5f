"""Fixtures of the installation tests (helpers live in install_tools.py: conftest modules of different test
directories share one module name, so tests cannot import from them)."""

from __future__ import annotations

import os

import pytest
from install_tools import BIN, Tools

from stockade.testing.apiserver import ControlPlane


@pytest.fixture(scope="session")
def tools(control_plane: ControlPlane) -> Tools:
    helm, kubectl = BIN / "helm", BIN / "kubectl"
    for binary, builder in ((helm, ".ci/build-helm.sh"), (kubectl, ".ci/build-apiserver.sh kubectl")):
        if not os.access(binary, os.X_OK):
            pytest.fail(f"{binary} is missing: run {builder} (scripts/test-setup.sh does)")
    return Tools(control_plane, helm, kubectl)
