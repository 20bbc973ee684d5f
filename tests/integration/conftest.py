"""One etcd + kube-apiserver for the whole integration run: starting one costs seconds, so every area shares it.

Tests that use it isolate themselves with their own namespaces and names, and remove any cluster-scoped object
(webhook configurations above all) they create.  Missing binaries fail the run: build them with
.ci/build-apiserver.sh (scripts/test-setup.sh does).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stockade.testing.apiserver import ControlPlane, ControlPlaneUnavailable


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(workdir=tmp_path_factory.mktemp("kube"))
    try:
        plane.start()
    except ControlPlaneUnavailable as exc:
        pytest.fail(f"{exc} (run scripts/test-setup.sh, which builds kube-apiserver with .ci/build-apiserver.sh)")
    yield plane
    plane.stop()
