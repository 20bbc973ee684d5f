"""Reconcile result handling, controllers driven by a scripted informer, the indexed store, relist diffs, and the
manager's leader-only runnables."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from stockade.kube.controller import Controller, FunctionReconciler, Manager, Outcome, Result, TerminalError
from stockade.kube.errors import Gone, NotFound
from stockade.kube.informer import Informer, LabelSelector, Store, object_key, split_key
from stockade.kube.workqueue import DefaultRateLimiter, ItemExponentialBackoff, WorkQueue

WAIT = 30.0


def wait_until(condition: Callable[[], bool], timeout: float = WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def cm(name: str, rv: str, namespace: str = "default", **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv, "labels": labels}}


class ScriptedEvents:
    def __init__(self, events: list[dict[str, Any]], then: threading.Event | None = None) -> None:
        self.events = events
        self.then = then  # block after the events until set (like an open watch) instead of ending
        self.closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self.events
        if self.then is not None:
            self.then.wait(WAIT)

    def close(self) -> None:
        self.closed = True
        if self.then is not None:
            self.then.set()


class ScriptedListWatch:
    """Listings and watches handed out in order; records the resourceVersions watches started from."""

    def __init__(self, listings: list[tuple[list[dict[str, Any]], str]], watches: list[ScriptedEvents]) -> None:
        self.listings = listings
        self.watches = watches
        self.watched_from: list[str] = []
        self.idle = threading.Event()

    def list(self) -> tuple[list[dict[str, Any]], str]:
        return self.listings.pop(0)

    def watch(self, resource_version: str, timeout_seconds: int) -> ScriptedEvents:
        self.watched_from.append(resource_version)
        if self.watches:
            return self.watches.pop(0)
        return ScriptedEvents([], then=self.idle)  # nothing more to say: stay open until stopped


def recorder(informer: Informer) -> list[tuple[str, str, str]]:
    seen: list[tuple[str, str, str]] = []
    informer.add_handlers(
        on_add=lambda obj: seen.append(("add", object_key(obj), obj["metadata"]["resourceVersion"])),
        on_update=lambda old, new: seen.append(("update", object_key(new), new["metadata"]["resourceVersion"])),
        on_delete=lambda obj: seen.append(("delete", object_key(obj), obj["metadata"]["resourceVersion"])),
    )
    return seen


# -- reconcile results --------------------------------------------------------------------------------------------
def queue() -> WorkQueue[str]:
    return WorkQueue(DefaultRateLimiter(ItemExponentialBackoff(base=0.01, cap=0.04)))


def test_results_decide_what_happens_to_the_key() -> None:
    controller = Controller("t", FunctionReconciler(lambda key: None), queue_factory=queue)
    q = controller.queue
    q.add_rate_limited("k")  # one earlier failure on record
    assert q.get(timeout=WAIT) == "k"
    q.done("k")
    assert controller.handle("k", None, None) == Outcome.DONE
    assert q.num_requeues("k") == 0 and q.waiting() == 0

    assert controller.handle("k", Result(requeue_after=3600), None) == Outcome.REQUEUED_AFTER
    assert q.waiting() == 1 and q.num_requeues("k") == 0

    assert controller.handle("r", Result(requeue=True), None) == Outcome.RATE_LIMITED
    assert q.num_requeues("r") == 1

    assert controller.handle("e", None, RuntimeError("flaky")) == Outcome.RATE_LIMITED
    assert controller.handle("e", None, NotFound("later")) == Outcome.RATE_LIMITED
    assert q.num_requeues("e") == 2

    assert controller.handle("e", None, TerminalError("bad spec")) == Outcome.TERMINAL
    assert q.num_requeues("e") == 0


def test_max_retries_gives_up_after_that_many() -> None:
    controller = Controller("t", FunctionReconciler(lambda key: None), max_retries=2, queue_factory=queue)
    outcomes = [controller.handle("k", None, RuntimeError("x")) for _ in range(3)]
    assert outcomes == [Outcome.RATE_LIMITED, Outcome.RATE_LIMITED, Outcome.DROPPED]


def test_process_maps_returns_and_raises() -> None:
    def reconcile(key: str) -> Result | None:
        if key == "terminal":
            raise TerminalError("never")
        if key == "fail":
            raise ValueError("again")
        return Result(requeue_after=60) if key == "later" else None

    controller = Controller("t", FunctionReconciler(reconcile), queue_factory=queue)
    assert [controller.process(k) for k in ("ok", "later", "terminal", "fail")] == [
        Outcome.DONE,
        Outcome.REQUEUED_AFTER,
        Outcome.TERMINAL,
        Outcome.RATE_LIMITED,
    ]


def test_a_failing_key_is_retried_with_backoff_until_it_succeeds() -> None:
    attempts: list[str] = []
    succeeded = threading.Event()

    def reconcile(key: str) -> None:
        attempts.append(key)
        if len(attempts) < 4:
            raise RuntimeError("not yet")
        succeeded.set()

    listing = ScriptedListWatch([([cm("a", "1")], "1")], [])
    informer = Informer(listing, name="cms")
    controller = Controller("retry", FunctionReconciler(reconcile), queue_factory=queue)
    controller.watch(informer)
    informer.start()
    controller.start()
    try:
        assert succeeded.wait(WAIT)
        assert attempts == ["default/a"] * 4
        assert wait_until(lambda: controller.queue.num_requeues("default/a") == 0)  # forgotten after success
    finally:
        controller.stop()
        assert informer.stop()


# -- informer behaviour without a server --------------------------------------------------------------------------
def test_watch_resumes_from_the_last_version_and_bookmarks_advance_it() -> None:
    first = ScriptedEvents(
        [
            {"type": "ADDED", "object": cm("b", "11")},
            {"type": "MODIFIED", "object": cm("a", "12")},
            {"type": "BOOKMARK", "object": {"kind": "ConfigMap", "metadata": {"resourceVersion": "15"}}},
        ]
    )
    second = ScriptedEvents([{"type": "DELETED", "object": cm("b", "16")}])
    list_watch = ScriptedListWatch([([cm("a", "1")], "10")], [first, second])
    informer = Informer(list_watch, name="cms")
    seen = recorder(informer)
    informer.start()
    try:
        assert wait_until(lambda: len(list_watch.watched_from) == 3)
    finally:
        assert informer.stop()
    assert list_watch.watched_from == ["10", "15", "16"]
    assert seen == [("add", "default/a", "1"), ("add", "default/b", "11"), ("update", "default/a", "12"), ("delete", "default/b", "16")]
    assert informer.relists == 1 and informer.has_synced()


def test_gone_relists_and_the_diff_delivers_what_the_watch_missed() -> None:
    gone = ScriptedEvents([{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}])
    listings = [
        ([cm("a", "1"), cm("b", "2"), cm("same", "3")], "10"),
        ([cm("a", "20"), cm("c", "21"), cm("same", "3")], "30"),  # a changed, b deleted, c added, same untouched
    ]
    list_watch = ScriptedListWatch(listings, [gone])
    informer = Informer(list_watch, name="cms")
    seen = recorder(informer)
    informer.start()
    try:
        assert wait_until(lambda: len(list_watch.watched_from) == 2)
    finally:
        assert informer.stop()
    assert list_watch.watched_from == ["10", "30"]
    assert informer.relists == 2
    assert seen[3:] == [("update", "default/a", "20"), ("add", "default/c", "21"), ("delete", "default/b", "2")]
    assert sorted(informer.store.keys()) == ["default/a", "default/c", "default/same"]


def test_a_watch_that_raises_gone_relists_and_other_failures_resume() -> None:
    class Failing(ScriptedListWatch):
        def watch(self, resource_version: str, timeout_seconds: int) -> ScriptedEvents:
            self.watched_from.append(resource_version)
            if len(self.watched_from) == 1:
                raise RuntimeError("connection reset")  # resumes from the same version
            if len(self.watched_from) == 2:
                raise Gone("expired")
            return ScriptedEvents([], then=self.idle)

    from stockade.kube.errors import Backoff

    list_watch = Failing([([cm("a", "1")], "10"), ([cm("a", "1")], "40")], [])
    informer = Informer(list_watch, name="cms", backoff=Backoff(initial=0.01, jitter=0))
    informer.start()
    try:
        assert wait_until(lambda: len(list_watch.watched_from) == 3)
    finally:
        assert informer.stop()
    assert list_watch.watched_from == ["10", "10", "40"]


def test_resync_redelivers_every_object_as_an_update() -> None:
    list_watch = ScriptedListWatch([([cm("a", "1"), cm("b", "2")], "10")], [])
    informer = Informer(list_watch, name="cms", resync_period=0.05)
    seen = recorder(informer)
    informer.start()
    try:
        assert wait_until(lambda: {("update", "default/a", "1"), ("update", "default/b", "2")} <= set(seen))
    finally:
        assert informer.stop()


def test_handlers_added_late_get_the_stored_objects_as_adds() -> None:
    informer = Informer(ScriptedListWatch([], []), name="cms")
    informer.apply_listing([cm("a", "1")])
    seen = recorder(informer)
    assert seen == [("add", "default/a", "1")]


def test_a_failing_handler_does_not_stop_the_others() -> None:
    informer = Informer(ScriptedListWatch([], []), name="cms")

    def broken(obj: dict[str, Any]) -> None:
        raise RuntimeError("handler bug")

    informer.add_handlers(on_add=broken)
    seen = recorder(informer)
    informer.apply_event({"type": "ADDED", "object": cm("a", "1")})
    assert seen == [("add", "default/a", "1")]


# -- the store and selectors ----------------------------------------------------------------------------------------
def test_store_lists_by_namespace_and_selector() -> None:
    store = Store()
    store.upsert(cm("a", "1", "ns1", app="web", tier="front"))
    store.upsert(cm("b", "1", "ns1", app="db"))
    store.upsert(cm("c", "1", "ns2", app="web"))
    store.upsert({"metadata": {"name": "cluster-wide", "labels": {"app": "web"}}})

    def names(objs: list[dict[str, Any]]) -> list[str]:
        return sorted(obj["metadata"]["name"] for obj in objs)

    assert names(store.list(namespace="ns1")) == ["a", "b"]
    assert names(store.list(selector="app=web")) == ["a", "c", "cluster-wide"]
    assert names(store.list(namespace="ns1", selector={"app": "web"})) == ["a"]
    assert names(store.list(selector="app in (web,db),tier!=front")) == ["b", "c", "cluster-wide"]
    assert names(store.list(selector="!tier")) == ["b", "c", "cluster-wide"]
    assert names(store.list(selector={"matchExpressions": [{"key": "tier", "operator": "Exists"}]})) == ["a"]
    assert names(store.list(namespace="")) == ["cluster-wide"]
    store.upsert(cm("a", "2", "ns1", app="db"))  # relabelled: the index follows
    assert names(store.list(selector="app=web")) == ["c", "cluster-wide"]
    store.delete("ns1/b")
    assert names(store.list(namespace="ns1", selector="app=db")) == ["a"]
    assert store.get("ns1/a") is not None and store.get_by_name("", "cluster-wide") is not None
    assert split_key("ns1/a") == ("ns1", "a") and split_key("cluster-wide") == ("", "cluster-wide")


def test_selector_parsing_rejects_nonsense() -> None:
    from stockade.kube.informer import InvalidSelector

    assert LabelSelector.parse("").matches({"any": "thing"})
    for bad in ("a=(b", "!a=b", "a notin"):
        with pytest.raises(InvalidSelector):
            LabelSelector.parse(bad)


# -- the manager --------------------------------------------------------------------------------------------------
class Probe:
    def __init__(self, name: str, needs_leadership: bool, log: list[str]) -> None:
        self._name = name
        self._needs_leadership = needs_leadership
        self.log = log

    @property
    def name(self) -> str:
        return self._name

    @property
    def needs_leadership(self) -> bool:
        return self._needs_leadership

    def start(self) -> None:
        self.log.append(f"start {self._name}")

    def stop(self) -> None:
        self.log.append(f"stop {self._name}")


class FakeElector:
    def __init__(self, gained: Callable[[], None], lost: Callable[[], None], log: list[str]) -> None:
        self.gained = gained
        self.lost = lost
        self.log = log

    def start(self) -> None:
        self.log.append("elector start")

    def stop(self) -> None:
        self.log.append("elector stop")


def test_manager_runs_leader_only_runnables_while_leading() -> None:
    log: list[str] = []
    electors: list[FakeElector] = []

    def factory(gained: Callable[[], None], lost: Callable[[], None]) -> FakeElector:
        electors.append(FakeElector(gained, lost, log))
        return electors[-1]

    manager = Manager(factory)
    manager.add(Probe("cache", False, log))
    manager.add(Probe("reconciler", True, log))
    manager.start()
    assert log == ["start cache", "elector start"] and not manager.is_leader()
    electors[0].gained()
    assert log[-1] == "start reconciler" and manager.is_leader()
    manager.add(Probe("late", True, log))  # added while leading: starts at once
    assert log[-1] == "start late"
    electors[0].lost()
    assert log[-2:] == ["stop late", "stop reconciler"] and manager.running() == ["cache"]
    electors[0].gained()
    manager.stop()
    assert log[-6:] == ["start reconciler", "start late", "stop late", "stop reconciler", "elector stop", "stop cache"]
    assert manager.running() == []


def test_manager_without_election_leads_from_the_start() -> None:
    log: list[str] = []
    manager = Manager()
    manager.add(Probe("reconciler", True, log))
    manager.start()
    assert manager.is_leader() and log == ["start reconciler"]
    manager.stop()
    assert log == ["start reconciler", "stop reconciler"]


def test_a_restarted_controller_looks_at_every_stored_object_again() -> None:
    reconciled: list[str] = []
    informer = Informer(ScriptedListWatch([], []), name="cms")
    informer.apply_listing([cm("a", "1")])
    informer._synced.set()
    controller = Controller("t", FunctionReconciler(lambda key: reconciled.append(key)), queue_factory=queue)
    controller.watch(informer)
    controller.start()
    assert wait_until(lambda: reconciled == ["default/a"])
    controller.stop()
    controller.start()  # leadership regained
    try:
        assert wait_until(lambda: reconciled == ["default/a", "default/a"])
    finally:
        controller.stop()
