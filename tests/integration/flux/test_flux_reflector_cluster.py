"""ImageRepository / ImagePolicy reconciled in a real kube-apiserver against Debian's docker-registry."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from typing import Any

from conftest import Relay

from stockade.controllers.flux_image import ClusterObjects, ImageReflectorController
from stockade.images.reference import parse_reference
from stockade.images.registry import RegistryClient
from stockade.reflector.store import TagStore
from stockade.testing.apiserver import ControlPlane
from stockade.testing.registry import LocalRegistry

_names = itertools.count()
API = "/apis/image.toolkit.fluxcd.io/v1"


def namespace(plane: ControlPlane) -> str:
    name = f"flux-{os.getpid()}-{next(_names)}"
    plane.ensure_namespace(name)
    return name


def create(plane: ControlPlane, plural: str, ns: str, obj: dict[str, Any]) -> None:
    status, body, _ = plane.request("POST", f"{API}/namespaces/{ns}/{plural}", obj)
    assert status == 201, body


def get(plane: ControlPlane, plural: str, ns: str, name: str) -> dict[str, Any]:
    status, body, _ = plane.request("GET", f"{API}/namespaces/{ns}/{plural}/{name}")
    assert status == 200, body
    return body


def request_reconcile(plane: ControlPlane, plural: str, ns: str, name: str, token: str) -> None:
    obj = get(plane, plural, ns, name)
    obj["metadata"].setdefault("annotations", {})["reconcile.fluxcd.io/requestedAt"] = token
    status, body, _ = plane.request("PUT", f"{API}/namespaces/{ns}/{plural}/{name}", obj)
    assert status == 200, body


def ready(obj: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")


def repository(name: str, image: str, interval: str = "2s") -> dict[str, Any]:
    return {"apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImageRepository", "metadata": {"name": name},
            "spec": {"image": image, "interval": interval, "insecure": True}}


def policy(name: str, repo: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImagePolicy", "metadata": {"name": name},
            "spec": {"imageRepositoryRef": {"name": repo}, "policy": {"semver": {"range": ">=1.0.0"}}, **spec}}


class Pusher:
    def __init__(self, registry: LocalRegistry) -> None:
        self.options = registry.client_options()
        self.image = f"{registry.host}/flux/app-{os.getpid()}-{next(_names)}"

    def push(self, tag: str) -> str:
        with RegistryClient(**self.options) as client:  # closes its keep-alive connections
            return client.push_image(parse_reference(f"{self.image}:{tag}"), [os.urandom(32)])


def controller(api_client: Any, tmp_path: Path) -> ImageReflectorController:
    return ImageReflectorController(ClusterObjects(api_client), TagStore(tmp_path / "tags"))


def test_policy_picks_a_new_tag_after_it_is_pushed(flux_crds: ControlPlane, api_client: Any, registry: LocalRegistry, tmp_path: Path) -> None:
    plane, pusher = flux_crds, Pusher(registry)
    ns = namespace(plane)
    pusher.push("1.0.0")
    pusher.push("2025.07.03-not-semver.x")
    create(plane, "imagerepositories", ns, repository("app", pusher.image))
    create(plane, "imagepolicies", ns, policy("app", "app"))
    ctrl = controller(api_client, tmp_path)
    ctrl.run_once()
    repo = get(plane, "imagerepositories", ns, "app")
    assert ready(repo)["status"] == "True" and repo["status"]["lastScanResult"]["tagCount"] == 2
    assert repo["status"]["canonicalImageName"] == pusher.image and repo["status"]["observedGeneration"] == 1
    pol = get(plane, "imagepolicies", ns, "app")
    assert pol["status"]["latestRef"] == {"name": pusher.image, "tag": "1.0.0"}
    assert ready(pol)["message"] == f"Latest image tag for {pusher.image} resolved to 1.0.0"
    assert pol["status"]["observedGeneration"] == 1

    pusher.push("1.1.0")
    time.sleep(2.1)  # the repository's interval
    ctrl.run_once()
    repo = get(plane, "imagerepositories", ns, "app")
    assert repo["status"]["lastScanResult"]["tagCount"] == 3
    pol = get(plane, "imagepolicies", ns, "app")
    assert pol["status"]["latestRef"]["tag"] == "1.1.0"
    assert pol["status"]["observedPreviousRef"] == {"name": pusher.image, "tag": "1.0.0"}
    assert ready(pol)["message"].endswith(f"resolved to 1.1.0 (previously {pusher.image}:1.0.0)")


def test_digest_reflection_when_a_tag_is_repointed(flux_crds: ControlPlane, api_client: Any, registry: LocalRegistry, tmp_path: Path) -> None:
    plane, pusher = flux_crds, Pusher(registry)
    ns = namespace(plane)
    first = pusher.push("1.0.0")
    create(plane, "imagerepositories", ns, repository("app", pusher.image, interval="1h"))
    create(plane, "imagepolicies", ns, policy("always", "app", digestReflectionPolicy="Always", interval="1h"))
    create(plane, "imagepolicies", ns, policy("ifnotpresent", "app", digestReflectionPolicy="IfNotPresent"))
    create(plane, "imagepolicies", ns, policy("never", "app", digestReflectionPolicy="Never"))
    ctrl = controller(api_client, tmp_path)
    ctrl.run_once()
    for name in ("always", "ifnotpresent"):
        assert get(plane, "imagepolicies", ns, name)["status"]["latestRef"]["digest"] == first
    assert "digest" not in get(plane, "imagepolicies", ns, "never")["status"]["latestRef"]

    second = pusher.push("1.0.0")  # same tag, new image
    assert second != first
    for name in ("always", "ifnotpresent", "never"):
        request_reconcile(plane, "imagepolicies", ns, name, "t1")
    ctrl.run_once()
    always = get(plane, "imagepolicies", ns, "always")
    assert always["status"]["latestRef"]["digest"] == second
    assert always["status"]["observedPreviousRef"]["digest"] == first
    assert always["status"]["lastHandledReconcileAt"] == "t1"
    assert get(plane, "imagepolicies", ns, "ifnotpresent")["status"]["latestRef"]["digest"] == first
    assert "digest" not in get(plane, "imagepolicies", ns, "never")["status"]["latestRef"]


def test_registry_outage_is_not_ready_with_flux_reason_then_recovers(flux_crds: ControlPlane, api_client: Any, registry: LocalRegistry, relay: Relay, tmp_path: Path) -> None:
    plane, pusher = flux_crds, Pusher(registry)
    ns = namespace(plane)
    pusher.push("1.0.0")
    image = pusher.image.replace(registry.host, f"127.0.0.1:{relay.port}")
    create(plane, "imagerepositories", ns, repository("app", image))
    ctrl = controller(api_client, tmp_path)
    ctrl.run_once()
    assert ready(get(plane, "imagerepositories", ns, "app"))["status"] == "True"

    relay.down()
    time.sleep(2.1)
    ctrl.run_once()
    repo = get(plane, "imagerepositories", ns, "app")
    condition = ready(repo)
    assert condition["status"] == "False" and condition["reason"] == "ReadOperationFailed"
    assert condition["message"].startswith("scan failed: ")
    assert next(c for c in repo["status"]["conditions"] if c["type"] == "Reconciling")["status"] == "True"
    assert repo["status"]["lastScanResult"]["tagCount"] == 1  # the last good scan is kept

    relay.up()
    time.sleep(2.1)
    ctrl.run_once()
    repo = get(plane, "imagerepositories", ns, "app")
    assert ready(repo)["status"] == "True"
    assert not any(c["type"] in ("Reconciling", "Stalled") for c in repo["status"]["conditions"])


def test_crd_rejects_an_interval_without_always_with_flux_wording(flux_crds: ControlPlane) -> None:
    ns = namespace(flux_crds)
    status, body, _ = flux_crds.request("POST", f"{API}/namespaces/{ns}/imagepolicies", policy("bad", "app", interval="5m"))
    assert status == 422
    assert "spec.interval is only accepted when spec.digestReflectionPolicy is set to 'Always'" in body["message"]
    status, body, _ = flux_crds.request("POST", f"{API}/namespaces/{ns}/imagepolicies", policy("bad", "app", digestReflectionPolicy="Always"))
    assert status == 422 and "spec.interval must be set" in body["message"]
