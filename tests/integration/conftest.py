"""One etcd + kube-apiserver for the whole integration run: starting one costs seconds, so every area shares it.

Tests that use it isolate themselves with their own namespaces and names, and remove any cluster-scoped object
(webhook configurations above all) they create.  Missing binaries fail the run: build them with
.ci/build-apiserver.sh (scripts/test-setup.sh does).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator

import pytest

from stockade.kube.client import KubeClient
from stockade.kube.connection import ApiConnection, load_api_client
from stockade.testing.apiserver import ControlPlane, ControlPlaneUnavailable

WEBHOOK_CONFIGURATIONS = (
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
)
LOCAL_URL = re.compile(r"^https://127\.0\.0\.1:(\d+)/")


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(workdir=tmp_path_factory.mktemp("kube"))
    try:
        plane.start()
    except ControlPlaneUnavailable as exc:
        pytest.fail(f"{exc} (run scripts/test-setup.sh, which builds kube-apiserver with .ci/build-apiserver.sh)")
    yield plane
    plane.stop()


@pytest.fixture(scope="session")
def api_client(control_plane: ControlPlane) -> ApiConnection:
    """The admin's connection to the shared API server, what controllers are built on."""
    return load_api_client(str(control_plane.kubeconfig))


@pytest.fixture(scope="session")
def kube_client(api_client: ApiConnection) -> KubeClient:
    """Raw REST as the admin, for the tests' own reads and writes (objects as dicts, failures as typed errors)."""
    return KubeClient(api_client)


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _orphaned_webhook_configurations(plane: ControlPlane) -> list[tuple[str, str]]:
    """Webhook configurations that send reviews to a local port nobody listens on any more: with failurePolicy Fail
    they refuse every later write they match, so one leak would fail every test after it."""
    orphaned: list[tuple[str, str]] = []
    for path in WEBHOOK_CONFIGURATIONS:
        status, body, _ = plane.request("GET", path)
        if status != 200:
            continue
        for item in body.get("items") or []:
            ports = {
                int(match.group(1))
                for hook in item.get("webhooks") or []
                if (match := LOCAL_URL.match(str((hook.get("clientConfig") or {}).get("url") or "")))
            }
            if ports and not any(_listening(port) for port in ports):
                orphaned.append((path, str(item["metadata"]["name"])))
    return orphaned


@pytest.fixture(autouse=True)
def no_orphaned_webhooks(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails the test that left a webhook configuration behind its stopped server, and removes it, so the failure
    stays with that test instead of spreading to every later one."""
    yield
    if "control_plane" not in request.fixturenames:
        return
    plane: ControlPlane = request.getfixturevalue("control_plane")
    orphaned = _orphaned_webhook_configurations(plane)
    for path, name in orphaned:
        plane.request("DELETE", f"{path}/{name}")
    if orphaned:
        pytest.fail(f"webhook configurations left pointing at a stopped server (removed now): {sorted(name for _, name in orphaned)}")
