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


# Warnings are errors everywhere (pyproject.toml), with one exception kept here, narrowly and on purpose: unclosed
# sockets in the integration tests. They come from keep-alive connections of clients that the tests (and the
# in-process controllers they drive) drop without closing, found when warnings became errors; the unit tests and all
# other warning categories stay strict. Removing this filter is tracked work (see the closing note of this stop).
_INTEGRATION_RESOURCE_WARNINGS = pytest.mark.filterwarnings("ignore:unclosed <(socket|ssl):ResourceWarning")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.path):
            item.add_marker(_INTEGRATION_RESOURCE_WARNINGS)
