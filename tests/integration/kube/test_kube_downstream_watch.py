"""DownstreamWatcher (the generate and background watches of produced kinds) on a real kube-apiserver: objects that
existed before the watch are not events, later changes and deletions are, each only of the event types asked for,
restricted to the namespace asked for; and a kind whose CRD is installed after ``ensure`` is watched once served."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from kube_objects import CUSTOM_RESOURCE_DEFINITIONS, ConfigMaps
from stockade.controllers.clusterdata import ClusterData
from stockade.controllers.downstreamwatch import DownstreamWatcher
from stockade.kube.client import KubeClient
from stockade.kube.connection import ApiConnection
from stockade.testing.kubeobjects import temporary_namespace

WAIT = 30.0


def wait_until(condition: Callable[[], bool], timeout: float = WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, event_type: str, obj: dict[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        with self.lock:
            self.events.append((event_type, str(metadata.get("namespace") or ""), str(metadata.get("name") or "")))

    def seen(self) -> list[tuple[str, str, str]]:
        with self.lock:
            return list(self.events)


def test_changes_after_the_first_listing_reach_the_handler(api_client: ApiConnection, namespace: str, configmaps: ConfigMaps) -> None:
    configmaps.create({"metadata": {"name": "before"}, "data": {"v": "0"}})
    cluster = ClusterData(api_client, ttl_seconds=0.0)
    recorder = Recorder()
    watcher = DownstreamWatcher(cluster, recorder)  # MODIFIED and DELETED, every namespace
    watcher.ensure("v1", "ConfigMap")
    watcher.ensure("v1", "ConfigMap")
    try:
        assert watcher.watched() == [("v1", "ConfigMap")]
        assert wait_until(lambda: watcher.store("v1", "ConfigMap") is not None)
        store = watcher.store("v1", "ConfigMap")
        assert store is not None and store.get(f"{namespace}/before") is not None
        configmaps.create({"metadata": {"name": "after"}, "data": {"v": "0"}})
        configmaps.patch("before", {"data": {"v": "1"}})
        configmaps.delete("after")
        assert wait_until(lambda: ("DELETED", namespace, "after") in recorder.seen())
        mine = [event for event in recorder.seen() if event[1] == namespace]
        assert mine == [("MODIFIED", namespace, "before"), ("DELETED", namespace, "after")], "no ADDED: not asked for"
    finally:
        watcher.stop()


def test_a_namespaced_watch_sees_only_its_namespace(api_client: ApiConnection, kube_client: KubeClient, namespace: str, configmaps: ConfigMaps) -> None:
    with temporary_namespace(kube_client, "other") as other:
        recorder = Recorder()
        watcher = DownstreamWatcher(ClusterData(api_client, ttl_seconds=0.0), recorder, event_types=("ADDED", "MODIFIED"), namespace=namespace)
        watcher.ensure("v1", "ConfigMap")
        try:
            assert wait_until(lambda: watcher.store("v1", "ConfigMap") is not None)
            ConfigMaps(kube_client, other).create({"metadata": {"name": "elsewhere"}})
            configmaps.create({"metadata": {"name": "here"}})
            assert wait_until(lambda: ("ADDED", namespace, "here") in recorder.seen())
            assert all(event[1] == namespace for event in recorder.seen())
        finally:
            watcher.stop()


def test_a_kind_served_only_later_is_watched_once_its_crd_exists(api_client: ApiConnection, kube_client: KubeClient, namespace: str) -> None:
    group = f"g{uuid.uuid4().hex[:8]}.stockade.test"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }
    # discovery misses are looked up again at most every DISCOVERY_MISS_RETRY_SECONDS: a short discovery TTL here
    cluster = ClusterData(api_client, ttl_seconds=0.0, discovery_ttl_seconds=0.5)
    recorder = Recorder()
    watcher = DownstreamWatcher(cluster, recorder, event_types=("ADDED",))
    watcher.ensure(f"{group}/v1", "Widget")
    try:
        kube_client.request("POST", CUSTOM_RESOURCE_DEFINITIONS, crd)
        assert wait_until(lambda: watcher.store(f"{group}/v1", "Widget") is not None, timeout=60)
        widget = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w"}}
        kube_client.request("POST", f"/apis/{group}/v1/namespaces/{namespace}/widgets", widget)
        assert wait_until(lambda: ("ADDED", namespace, "w") in recorder.seen())
    finally:
        watcher.stop()
        kube_client.request("DELETE", f"{CUSTOM_RESOURCE_DEFINITIONS}/widgets.{group}")
