"""ImageRepository `spec.proxySecretRef` against Debian's docker-registry (TLS) behind a real HTTP CONNECT proxy on
127.0.0.1: the scan tunnels through the proxy, and wrong proxy credentials leave the repository not-Ready with
Flux's ReadOperationFailed."""

from __future__ import annotations

import base64
import datetime
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stockade.images.reference import parse_reference
from stockade.images.registry import RegistryClient
from stockade.reflector.models import condition
from stockade.reflector.repository import ImageRepositoryReconciler
from stockade.reflector.store import TagStore
from stockade.testing.registry import LocalRegistry

from conftest import CountingConnectProxy


@pytest.fixture(scope="module")
def tls_registry() -> Iterator[LocalRegistry]:
    with LocalRegistry("anonymous", tls=True) as local:
        client = RegistryClient(**local.client_options())
        for tag in ("1.0.0", "1.1.0"):
            client.push_image(parse_reference(f"{local.host}/team/app:{tag}"), [os.urandom(32)])
        yield local


def _secret(**data: str) -> dict[str, Any]:
    return {"metadata": {"name": "x"}, "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def _scan(registry: LocalRegistry, store_dir: Path, proxy_secret: dict[str, Any]) -> dict[str, Any]:
    assert registry.ca_file is not None
    secrets = {"proxy": proxy_secret, "ca": _secret(**{"ca.crt": Path(registry.ca_file).read_text()})}
    repository = {
        "apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImageRepository",
        "metadata": {"name": "app", "namespace": "flux-system", "generation": 1},
        "spec": {"image": f"{registry.host}/team/app", "interval": "5m", "timeout": "15s",
                 "proxySecretRef": {"name": "proxy"}, "certSecretRef": {"name": "ca"}},
    }
    reconciler = ImageRepositoryReconciler(TagStore(store_dir), secrets=lambda ns, name: secrets.get(name),
                                           clock=lambda: datetime.datetime.now(datetime.timezone.utc))
    return reconciler.reconcile(repository).object


def test_scan_goes_through_the_proxy_of_proxy_secret_ref(tls_registry: LocalRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Secret's proxy wins over the environment's (here a port nothing listens on, and NO_PROXY would exempt
    the registry): Flux sets the transport's proxy from the Secret alone."""
    for name in ("HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with CountingConnectProxy() as proxy:
        scanned = _scan(tls_registry, tmp_path / "store", _secret(address=f"http://127.0.0.1:{proxy.port}"))
    ready = condition(scanned, "Ready")
    assert ready is not None and ready["status"] == "True", ready
    assert scanned["status"]["lastScanResult"]["tagCount"] == 2
    assert proxy.tunnels > 0


def test_proxy_basic_auth_from_the_secret(tls_registry: LocalRegistry, tmp_path: Path) -> None:
    with CountingConnectProxy(("squid", "pa:ss")) as proxy:
        scanned = _scan(tls_registry, tmp_path / "store",
                        _secret(address=f"http://127.0.0.1:{proxy.port}", username="squid", password="pa:ss"))
    ready = condition(scanned, "Ready")
    assert ready is not None and ready["status"] == "True", ready
    assert proxy.tunnels > 0 and proxy.refused == 0


def test_wrong_proxy_credentials_leave_the_repository_not_ready(tls_registry: LocalRegistry, tmp_path: Path) -> None:
    with CountingConnectProxy(("squid", "right")) as proxy:
        scanned = _scan(tls_registry, tmp_path / "store",
                        _secret(address=f"http://127.0.0.1:{proxy.port}", username="squid", password="wrong"))
    ready = condition(scanned, "Ready")
    assert ready is not None and ready["status"] == "False" and ready["reason"] == "ReadOperationFailed", ready
    assert ready["message"].startswith("scan failed: ") and "407" in ready["message"]
    assert "wrong" not in ready["message"]
    assert proxy.refused > 0 and proxy.tunnels == 0


def test_cluster_repository_scans_through_its_proxy_secret_and_reports_as_flux(
    flux_crds: Any, api_client: Any, tls_registry: LocalRegistry, tmp_path: Path
) -> None:
    """Against the real kube-apiserver: the proxy and CA Secrets are read from the cluster, the status is Ready,
    and the Event about it names Flux's image-reflector-controller."""
    from stockade.controllers.events import EventRecorder
    from stockade.controllers.flux_image import ClusterObjects, ImageReflectorController

    plane = flux_crds
    ns = f"flux-proxy-{os.getpid()}"
    plane.ensure_namespace(ns)
    assert tls_registry.ca_file is not None
    with CountingConnectProxy(("squid", "pw")) as proxy:
        for name, data in (("proxy", {"address": f"http://127.0.0.1:{proxy.port}", "username": "squid", "password": "pw"}),
                           ("ca", {"ca.crt": Path(tls_registry.ca_file).read_text()})):
            status, body, _ = plane.request("POST", f"/api/v1/namespaces/{ns}/secrets",
                                            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": data})
            assert status == 201, body
        repository = {"apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImageRepository", "metadata": {"name": "app"},
                      "spec": {"image": f"{tls_registry.host}/team/app", "interval": "5m",
                               "proxySecretRef": {"name": "proxy"}, "certSecretRef": {"name": "ca"}}}
        status, body, _ = plane.request("POST", f"/apis/image.toolkit.fluxcd.io/v1/namespaces/{ns}/imagerepositories", repository)
        assert status == 201, body
        recorder = EventRecorder(api_client, "flux")
        controller = ImageReflectorController(ClusterObjects(api_client), TagStore(tmp_path / "tags"), recorder=recorder)
        controller.run_once()
        recorder.close()
    status, stored, _ = plane.request("GET", f"/apis/image.toolkit.fluxcd.io/v1/namespaces/{ns}/imagerepositories/app")
    ready = condition(stored, "Ready")
    assert ready is not None and ready["status"] == "True", ready
    assert stored["status"]["lastScanResult"]["tagCount"] == 2 and proxy.tunnels > 0
    status, events, _ = plane.request("GET", f"/api/v1/namespaces/{ns}/events")
    mine = [e for e in events["items"] if e["involvedObject"].get("name") == "app"]
    assert mine and all(e["source"]["component"] == "image-reflector-controller" for e in mine)
    assert all(e["reportingComponent"] == "image-reflector-controller" for e in mine)
