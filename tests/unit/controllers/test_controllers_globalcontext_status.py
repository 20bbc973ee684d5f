"""Kyverno's admission controller writes a Ready condition on apiCall GlobalContextEntries after each load (every
refreshInterval); kubernetesResource entries get none."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from typing import Any

from stockade.controllers.clusterdata import ClusterData
from stockade.controllers.globalcontextstatus import GlobalContextStatusController, ready_status, refresh_seconds
from stockade.controllers.webhookconfig import ApiResource
from stockade.kube.controller import Result
from stockade.kube.informer import Informer
from tests.unit.controllers.test_controllers_clusterdata import FakeApiClient, _Response
from tests.unit.controllers.fakecluster import IdleWatch

GCE = "/apis/kyverno.io/v2beta1/globalcontextentries"
RESOURCES = [ApiResource("kyverno.io", "v2beta1", "globalcontextentries", "GlobalContextEntry", namespaced=False)]


class PatchingClient(FakeApiClient):
    def __init__(self, objects: dict[str, Any]) -> None:
        super().__init__(objects)
        self.patches: dict[str, Any] = {}

    def answer(self, method: str, url: str, header_params: Any = None, body: Any = None) -> _Response:
        if method == "PATCH":
            self.patches[url] = json.loads(body) if isinstance(body, (str, bytes)) else body
            return _Response(200, {})
        return super().answer(method, url, header_params, body)


def entry(name: str, spec: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "generation": generation}, "spec": spec}


class ListedOnce:
    """A list/watch whose first listing is ``items`` and whose watch stays open until closed; counts listings."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.lists = 0
        self.closed = threading.Event()

    def list(self) -> tuple[list[dict[str, Any]], str]:
        self.lists += 1
        return [dict(item, apiVersion="kyverno.io/v2beta1", kind="GlobalContextEntry") for item in self.items], "1"

    def watch(self, resource_version: str, timeout_seconds: int) -> Any:
        return IdleWatch(self.closed)


def test_api_call_entries_get_a_ready_condition_and_resource_entries_none() -> None:
    items = [
        entry("ok", {"apiCall": {"urlPath": "/api/v1/namespaces", "refreshInterval": "1h"}}),
        entry("failing", {"apiCall": {"urlPath": "/apis/apps/v1/namespaces/default/unknown"}}),
        entry("resources", {"kubernetesResource": {"group": "apps", "version": "v1", "resource": "deployments"}}),
    ]
    client = PatchingClient({"/api/v1/namespaces": {"items": []}})
    now = [100.0]
    clock = lambda: dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)  # noqa: E731
    listing = ListedOnce(items)
    controller = GlobalContextStatusController(
        client, cluster_data=ClusterData(client, ttl_seconds=0.0, resources=RESOURCES), clock=clock, monotonic=lambda: now[0], list_watch=listing
    )
    controller.informer = Informer(listing)
    controller.informer.apply_listing(listing.list()[0])
    # an entry is loaded when it first appears and comes back after its refreshInterval (1h; the default 10m)
    assert controller.reconcile("ok") == Result(requeue_after=3600)
    assert controller.reconcile("failing") == Result(requeue_after=600)
    assert controller.reconcile("resources") is None and controller.loads == ["ok", "failing"]
    ok = client.patches[f"{GCE}/ok/status"]["status"]
    assert ok["conditions"] == [{"type": "Ready", "status": "True", "reason": "Succeeded", "message": "Ready", "lastTransitionTime": "2026-01-02T03:04:05Z"}]
    assert ok["lastRefreshTime"] == "2026-01-02T03:04:05Z"
    failing = client.patches[f"{GCE}/failing/status"]["status"]
    assert failing["conditions"][0]["status"] == "False" and failing["conditions"][0]["reason"] == "Failed"
    assert "/apis/apps/v1/namespaces/default/unknown" in failing["conditions"][0]["message"] and "lastRefreshTime" not in failing
    # the status write comes back as an update event: nothing is loaded, the key waits for the rest of its interval
    now[0] += 100
    assert controller.reconcile("ok") == Result(requeue_after=3500) and controller.loads == ["ok", "failing"]
    now[0] += 501
    assert controller.reconcile("failing") == Result(requeue_after=600) and controller.loads == ["ok", "failing", "failing"]
    # a new generation is loaded at once, whatever the interval
    changed = entry("ok", {"apiCall": {"urlPath": "/api/v1/namespaces", "refreshInterval": "1h"}}, generation=2)
    controller.informer.apply_listing([dict(i, apiVersion="kyverno.io/v2beta1", kind="GlobalContextEntry") for i in (changed, items[1], items[2])])
    assert controller.reconcile("ok") == Result(requeue_after=3600) and controller.loads[-1] == "ok"
    # a deleted entry is forgotten
    controller.informer.apply_listing([])
    assert controller.reconcile("ok") is None


def test_the_running_controller_lists_once_and_loads_from_the_watch() -> None:
    items = [entry("ok", {"apiCall": {"urlPath": "/api/v1/namespaces"}})]
    client = PatchingClient({"/api/v1/namespaces": {"items": []}})
    listing = ListedOnce(items)
    controller = GlobalContextStatusController(client, cluster_data=ClusterData(client, ttl_seconds=0.0, resources=RESOURCES), list_watch=listing)
    assert controller.needs_leadership
    controller.start()
    try:
        deadline = time.monotonic() + 30
        while not controller.loads and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        assert controller.loads == ["ok"] and f"{GCE}/ok/status" in client.patches
        assert listing.lists == 1  # watched, not listed again
    finally:
        controller.stop()


def test_ready_status_keeps_the_transition_time_while_unchanged() -> None:
    first = ready_status(None, True, "Ready", dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
    again = ready_status(first, True, "Ready", dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc))
    assert again["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z" and again["lastRefreshTime"] == "2026-01-02T00:00:00Z"
    failed = ready_status(again, False, "boom", dt.datetime(2026, 1, 3, tzinfo=dt.timezone.utc))
    assert failed["conditions"][0]["lastTransitionTime"] == "2026-01-03T00:00:00Z"
    assert refresh_seconds({"refreshInterval": "1h"}) == 3600 and refresh_seconds({}) == 600 and refresh_seconds({"refreshInterval": "x"}) == 600
