"""Flux image controllers against an in-memory stand-in for the API: what is reconciled when, and the
ImageUpdateAutomation failures that stall versus retry."""

from __future__ import annotations

import copy
import datetime
from pathlib import Path
from typing import Any

import pytest

from stockade.controllers.flux_automation import AutomationSpecError, ImageUpdateAutomationController, _matches
from stockade.controllers.flux_image import ImageReflectorController
from stockade.images.reference import ImageReference
from stockade.reflector.models import ObjectKey, condition, object_key
from stockade.reflector.repository import RegistryAccess
from stockade.reflector.store import TagStore
from tests.unit.kubefake import FakeKube


class FakeObjects:
    def __init__(self) -> None:
        self.items: dict[str, list[dict[str, Any]]] = {}
        self.status_writes: list[tuple[str, str]] = []

    def list(self, plural: str, version: str = "v1", group: str = "") -> list[dict[str, Any]]:
        return copy.deepcopy(self.items.get(plural, []))

    def get(self, plural: str, key: ObjectKey, version: str = "v1", group: str = "") -> dict[str, Any] | None:
        return next((copy.deepcopy(o) for o in self.items.get(plural, []) if object_key(o) == key), None)

    def write_status(self, plural: str, obj: dict[str, Any], version: str = "v1", group: str = "") -> None:
        self.status_writes.append((plural, obj["metadata"]["name"]))
        for stored in self.items.get(plural, []):
            if object_key(stored) == object_key(obj):
                stored["status"] = copy.deepcopy(obj["status"])

    def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def service_account(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": namespace}


class Registry:
    def __init__(self) -> None:
        self.tags = ["1.0.0"]
        self.calls = 0

    def factory(self, access: RegistryAccess) -> "Registry":
        return self

    def list_tags(self, ref: ImageReference, page_size: int | None = None) -> list[str]:
        self.calls += 1
        return list(self.tags)

    def resolve_digest(self, ref: ImageReference) -> str:
        return "sha256:" + "0" * 64


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def meta(name: str, generation: int = 1) -> dict[str, Any]:
    return {"name": name, "namespace": "ns", "generation": generation}


def test_reflector_reconciles_new_changed_and_due_objects_only(tmp_path: Path) -> None:
    objects, registry, clock = FakeObjects(), Registry(), Clock()
    objects.items["imagerepositories"] = [{"apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImageRepository",
                                           "metadata": meta("app"), "spec": {"image": "ghcr.io/o/app", "interval": "1m"}}]
    objects.items["imagepolicies"] = [
        {"apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImagePolicy", "metadata": meta("app"),
         "spec": {"imageRepositoryRef": {"name": "app"}, "policy": {"semver": {"range": "*"}}}},
        {"apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImagePolicy", "metadata": meta("off"),
         "spec": {"imageRepositoryRef": {"name": "app"}, "policy": {"semver": {"range": "*"}}, "suspend": True}},
    ]
    controller = ImageReflectorController(objects, TagStore(tmp_path), client_factory=registry.factory, clock=clock)  # type: ignore[arg-type]
    start = datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc)
    controller.repositories.clock = lambda: start + datetime.timedelta(seconds=clock.now)
    assert controller.run_once() == 2  # the repository and the unsuspended policy
    assert objects.items["imagepolicies"][0]["status"]["latestRef"]["tag"] == "1.0.0"
    assert "status" not in objects.items["imagepolicies"][1]
    assert controller.run_once() == 0  # nothing due, nothing changed
    objects.items["imagepolicies"][0]["metadata"]["generation"] = 2
    objects.items["imagepolicies"][0]["spec"]["policy"] = {"semver": {"range": "<1.0.0"}}
    assert controller.run_once() == 1
    assert condition(objects.items["imagepolicies"][0], "Ready")["status"] == "False"
    registry.tags.append("2.0.0")
    objects.items["imagepolicies"][0]["spec"]["policy"] = {"semver": {"range": "*"}}
    objects.items["imagepolicies"][0]["metadata"]["generation"] = 3
    clock.now = 61  # the repository's interval: a rescan finds 2.0.0, and the policy follows its repository
    assert controller.run_once() == 2 and registry.calls == 2
    assert objects.items["imagepolicies"][0]["status"]["latestRef"]["tag"] == "2.0.0"


def automation(**spec: Any) -> dict[str, Any]:
    base = {"interval": "1m", "sourceRef": {"kind": "GitRepository", "name": "fleet"},
            "git": {"commit": {"author": {"email": "bot@example.com"}}}}
    base.update(spec)
    return {"apiVersion": "image.toolkit.fluxcd.io/v1beta2", "kind": "ImageUpdateAutomation", "metadata": meta("auto"), "spec": base}


@pytest.mark.parametrize(
    "spec, reason, stalled",
    [
        ({"sourceRef": {"kind": "Bucket", "name": "x"}}, "InvalidSourceConfiguration", True),
        ({"git": None}, "InvalidSourceConfiguration", True),
        ({"git": {"commit": {"author": {"name": "no email"}}}}, "InvalidSourceConfiguration", True),
        ({}, "SourceManagerFailed", False),
    ],
)
def test_automation_spec_and_source_failures(spec: dict[str, Any], reason: str, stalled: bool) -> None:
    objects = FakeObjects()
    objects.items["imageupdateautomations"] = [automation(**spec)]
    controller = ImageUpdateAutomationController(objects, clock=lambda: datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc))  # type: ignore[arg-type]
    controller.run_once()
    result = objects.items["imageupdateautomations"][0]
    assert condition(result, "Ready")["reason"] == reason
    assert (condition(result, "Stalled") is not None) is stalled
    assert controller.run_once() == 0  # a stall waits for a spec change; a retry waits for its delay


def test_policy_selector_matches_labels_and_expressions() -> None:
    labels = {"team": "a", "tier": "web"}
    assert _matches(None, labels) and _matches({}, labels)
    assert _matches({"matchLabels": {"team": "a"}}, labels)
    assert not _matches({"matchLabels": {"team": "b"}}, labels)
    assert _matches({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "api"]}]}, labels)
    assert not _matches({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["web"]}]}, labels)
    assert _matches({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}, labels)
    assert not _matches({"matchExpressions": [{"key": "x", "operator": "Exists"}]}, labels)
    with pytest.raises(AutomationSpecError):
        _matches({"matchExpressions": [{"key": "x", "operator": "Like"}]}, labels)


@pytest.mark.parametrize("style, component", [("flux", "image-reflector-controller"), ("stockade", "stockade"),
                                              ("kyverno", "image-reflector-controller")])
def test_reflector_events_name_flux_component_under_flux_style(tmp_path: Path, style: str, component: str) -> None:
    """Flux's controllers record Events with source.component and reportingController set to their controller name;
    `--event-components stockade` reports them as "stockade" like every other Event."""
    from stockade.controllers.events import EventRecorder

    objects, registry, kube = FakeObjects(), Registry(), FakeKube()
    objects.items["imagerepositories"] = [{"apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImageRepository",
                                           "metadata": meta("app"), "spec": {"image": "ghcr.io/o/app", "interval": "1m"}}]
    recorder = EventRecorder(None, style, client=kube, start=False, instance="pod-1")
    controller = ImageReflectorController(objects, TagStore(tmp_path), client_factory=registry.factory, recorder=recorder)  # type: ignore[arg-type]
    assert controller.run_once() == 1
    recorder.close()
    created = [call.body for call in kube.sent("POST", "/api/v1/namespaces/")]
    assert created, "a first successful scan is a Normal Event in Flux"
    for body in created:
        assert body["source"] == {"component": component} and body["reportingComponent"] == component
        assert body["reportingInstance"] == f"{component}-pod-1"
        assert body["involvedObject"]["kind"] == "ImageRepository"


def test_automation_events_use_the_automation_controller_name() -> None:
    from stockade.controllers.events import reporting_component
    from stockade.controllers.flux_automation import EVENT_SOURCE

    assert reporting_component("flux", EVENT_SOURCE) == "image-automation-controller"
    assert reporting_component("stockade", EVENT_SOURCE) == "stockade"
    assert reporting_component("flux", "admission") == "stockade"  # Kyverno-side Events have no Flux name
