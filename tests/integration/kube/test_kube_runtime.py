"""The controller runtime against a real kube-apiserver: informers see ConfigMap changes, a real 410 Gone relists
without losing the changes made while no watch was open, retry_on_conflict survives real resourceVersion clashes,
and a controller reconciles what the informer reports."""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass
import urllib.request
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kube_objects import ConfigMaps
from stockade.kube.client import KubeClient
from stockade.kube.connection import ApiConnection, load_api_client
from stockade.kube.controller import Controller, FunctionReconciler, Result
from stockade.kube.errors import AlreadyExists, Conflict, NotFound, retry_on_conflict
from stockade.kube.informer import Informer, RawListWatch, WatchEvents, object_key
from stockade.testing.apiserver import ControlPlane

WAIT = 30.0


def wait_until(condition: Callable[[], bool], timeout: float = WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def record(informer: Informer) -> list[tuple[str, str, dict[str, str]]]:
    seen: list[tuple[str, str, dict[str, str]]] = []
    informer.add_handlers(
        on_add=lambda obj: seen.append(("add", obj["metadata"]["name"], dict(obj.get("data") or {}))),
        on_update=lambda old, new: seen.append(("update", new["metadata"]["name"], dict(new.get("data") or {}))),
        on_delete=lambda obj: seen.append(("delete", obj["metadata"]["name"], dict(obj.get("data") or {}))),
    )
    return seen


@pytest.fixture()
def informer_for() -> Iterator[Callable[..., Informer]]:
    started: list[Informer] = []

    def make(list_watch: Any, **options: Any) -> Informer:
        informer = Informer(list_watch, name="configmaps", watch_timeout=10, **options)
        started.append(informer)
        return informer

    yield make
    for informer in started:
        assert informer.stop(), "informer threads did not end"


def test_informer_sees_adds_updates_and_deletes(api_client: ApiConnection, namespace: str, configmaps: ConfigMaps, informer_for: Callable[..., Informer]) -> None:
    configmaps.create({"metadata": {"name": "before", "labels": {"app": "x"}}, "data": {"v": "0"}})
    informer = informer_for(RawListWatch.for_resource(api_client, "v1", "configmaps", namespace))
    seen = record(informer)
    informer.start()
    assert informer.wait_for_sync(WAIT)
    assert seen == [("add", "before", {"v": "0"})]
    configmaps.create({"metadata": {"name": "cm", "labels": {"app": "y"}}, "data": {"v": "1"}})
    configmaps.patch("cm", {"data": {"v": "2"}})
    configmaps.delete("before")
    assert wait_until(lambda: len(seen) == 4)
    assert seen[1:] == [("add", "cm", {"v": "1"}), ("update", "cm", {"v": "2"}), ("delete", "before", {"v": "0"})]
    assert [obj["metadata"]["name"] for obj in informer.store.list(namespace=namespace, selector="app=y")] == ["cm"]
    assert informer.store.get(f"{namespace}/before") is None
    assert informer.store.get(f"{namespace}/cm")["kind"] == "ConfigMap"  # type: ignore[index]


@dataclass
class UncachedControlPlane(ControlPlane):
    """An API server without its watch cache: watches are served from etcd's own history, so a watch from a
    resourceVersion etcd has compacted away is answered 410 Gone by the server, as after a long disconnect.  (With
    the watch cache, kube-apiserver 1.36 serves a watch from any version since the cache's initial list, which
    on a fresh server is its first one.)"""

    def apiserver_args(self) -> list[str]:
        return [*super().apiserver_args(), "--watch-cache=false"]


@pytest.fixture(scope="module")
def uncached_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[UncachedControlPlane, ApiConnection]]:
    plane = UncachedControlPlane(workdir=tmp_path_factory.mktemp("uncached"))
    plane.start()
    try:
        yield plane, load_api_client(str(plane.kubeconfig))
    finally:
        plane.stop()


def compact_etcd(plane: ControlPlane) -> None:
    """Compact etcd's history up to its current revision (through etcd's JSON gateway), as the API server's periodic
    compaction does."""
    base = f"http://127.0.0.1:{plane.etcd_port}/v3/kv"

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    revision = int(post("/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"])
    post("/compaction", {"revision": str(revision), "physical": True})


class GoneOnFirstWatch:
    """A real list/watch whose first watch starts from a compacted resourceVersion, so the server itself answers
    410 Gone, after ``meanwhile()`` changed the cluster while no watch was open."""

    def __init__(self, inner: RawListWatch, meanwhile: Callable[[], None]) -> None:
        self.inner = inner
        self.meanwhile = meanwhile
        self.watched_from: list[str] = []
        self.lists = 0

    def list(self) -> tuple[list[dict[str, Any]], str]:
        self.lists += 1
        return self.inner.list()

    def watch(self, resource_version: str, timeout_seconds: int) -> WatchEvents:
        self.watched_from.append(resource_version)
        if len(self.watched_from) == 1:
            self.meanwhile()
            return self.inner.watch("1", timeout_seconds)  # expired long ago: the server sends a 410 ERROR event
        return self.inner.watch(resource_version, timeout_seconds)


def test_gone_during_a_watch_relists_and_loses_no_change(uncached_api: tuple[UncachedControlPlane, ApiConnection], informer_for: Callable[..., Informer]) -> None:
    control_plane, api_client = uncached_api
    namespace = "gone"
    kube_client = KubeClient(api_client)
    kube_client.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    configmaps = ConfigMaps(kube_client, namespace)
    for name in ("keep", "change", "remove"):
        configmaps.create({"metadata": {"name": name}, "data": {"v": "0"}})

    def meanwhile() -> None:
        configmaps.patch("change", {"data": {"v": "1"}})
        configmaps.delete("remove")
        configmaps.create({"metadata": {"name": "new"}, "data": {"v": "1"}})
        compact_etcd(control_plane)

    # two items a page: the listings are paginated with continue tokens
    list_watch = GoneOnFirstWatch(RawListWatch.for_resource(api_client, "v1", "configmaps", namespace, page_size=2), meanwhile)
    informer = informer_for(list_watch)
    seen = record(informer)
    informer.start()
    assert wait_until(lambda: len(list_watch.watched_from) >= 2)
    assert list_watch.lists == 2 and informer.relists == 2
    assert sorted(seen[:3]) == [("add", "change", {"v": "0"}), ("add", "keep", {"v": "0"}), ("add", "remove", {"v": "0"})]
    assert sorted(seen[3:]) == [("add", "new", {"v": "1"}), ("delete", "remove", {"v": "0"}), ("update", "change", {"v": "1"})]
    assert sorted(key.split("/")[1] for key in informer.store.keys()) == ["change", "keep", "new"]
    # and the watch opened after the relist carries on
    configmaps.patch("keep", {"data": {"v": "2"}})
    assert wait_until(lambda: ("update", "keep", {"v": "2"}) in seen)


def test_retry_on_conflict_survives_real_resource_version_clashes(configmaps: ConfigMaps) -> None:
    configmaps.create({"metadata": {"name": "counter"}, "data": {"n": "0"}})
    attempts: list[str] = []

    def increment() -> None:
        current = configmaps.read("counter")
        attempts.append(current["metadata"]["resourceVersion"])
        if len(attempts) == 1:  # someone else writes between our read and our write
            configmaps.patch("counter", {"data": {"other": "yes"}})
        data = current.get("data") or {}
        body = {
            "metadata": {"name": "counter", "resourceVersion": current["metadata"]["resourceVersion"]},
            "data": {**data, "n": str(int(data["n"]) + 1)},
        }
        configmaps.replace("counter", body)

    retry_on_conflict(increment, attempts=5)
    assert len(attempts) == 2 and attempts[0] != attempts[1]
    assert configmaps.read("counter")["data"] == {"n": "1", "other": "yes"}

    def always_stale() -> None:
        stale = {"metadata": {"name": "counter", "resourceVersion": attempts[0]}, "data": {}}
        configmaps.replace("counter", stale)

    with pytest.raises(Conflict):
        retry_on_conflict(always_stale, attempts=2)


def test_typed_errors_from_the_real_server(configmaps: ConfigMaps) -> None:
    with pytest.raises(NotFound):
        configmaps.read("missing")
    configmaps.create({"metadata": {"name": "twice"}})
    with pytest.raises(AlreadyExists):
        configmaps.create({"metadata": {"name": "twice"}})


def test_a_controller_reconciles_what_its_informer_reports(api_client: ApiConnection, namespace: str, configmaps: ConfigMaps, informer_for: Callable[..., Informer]) -> None:
    """A reconciler that copies ``data.want`` into an annotation, with the write retried on conflicts."""
    done = threading.Event()
    informer = informer_for(RawListWatch.for_resource(api_client, "v1", "configmaps", namespace))

    def reconcile(key: str) -> Result | None:
        obj = informer.store.get(key)
        if obj is None:
            return None  # deleted: nothing to do
        want = (obj.get("data") or {}).get("want")
        if want is None or (obj["metadata"].get("annotations") or {}).get("seen") == want:
            return None
        owning, name = ConfigMaps(configmaps.client, obj["metadata"]["namespace"]), obj["metadata"]["name"]

        def write() -> str:
            current = owning.read(name)
            seen = (current.get("data") or {}).get("want", "")
            current["metadata"]["annotations"] = {**(current["metadata"].get("annotations") or {}), "seen": seen}
            owning.replace(name, current)
            return str(seen)

        # the write copies what the server holds, which may already be newer than the store's copy
        if retry_on_conflict(write) == "3":
            done.set()
        return None

    controller = Controller("annotate", FunctionReconciler(reconcile), workers=2)
    controller.watch(informer)
    informer.start()
    controller.start()
    try:
        configmaps.create({"metadata": {"name": "target"}, "data": {"want": "1"}})
        for value in ("2", "3"):
            configmaps.patch("target", {"data": {"want": value}})
        assert done.wait(WAIT)
        assert wait_until(lambda: (configmaps.read("target")["metadata"].get("annotations") or {}).get("seen") == "3")
        assert object_key(informer.store.list(namespace=namespace)[0]) == f"{namespace}/target"
    finally:
        controller.stop()
