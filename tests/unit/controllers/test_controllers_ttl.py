"""The cleanup.kyverno.io/ttl label: Kyverno's value formats, the admission warning, and expiry on an in-memory
cluster with an injected clock."""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

import pytest

from stockade.controllers.ttl import TtlController, TtlError, deletion_time, parse_duration, propagation_policy, ttl_warning
from stockade.controllers.webhookconfig import ApiResource
from stockade.kube.controller import Result
from stockade.kube.errors import Forbidden
from tests.unit.controllers.fakecluster import RESOURCES, FakeCluster, IdleWatch

UTC = dt.timezone.utc
CREATED = dt.datetime(2024, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("text", "seconds"), [("1m", 60), ("90s", 90), ("1h30m", 5400), ("1.5h", 5400), ("3d", 259200), ("2 weeks", 1209600), ("1 hour 30 min", 5400)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == dt.timedelta(seconds=seconds)


def test_deletion_times_and_warning() -> None:
    assert deletion_time("1m", CREATED) == CREATED + dt.timedelta(minutes=1)
    assert deletion_time("2024-01-02T150405Z", None) == dt.datetime(2024, 1, 2, 15, 4, 5, tzinfo=UTC)
    assert deletion_time("2024-01-02", None) == dt.datetime(2024, 1, 2, tzinfo=UTC)
    with pytest.raises(TtlError, match="'tomorrow'"):
        deletion_time("tomorrow", CREATED)
    assert ttl_warning({"cleanup.kyverno.io/ttl": "tomorrow"}).startswith("cleanup.kyverno.io/ttl label value cannot be parsed as any recognizable format")
    assert ttl_warning({"cleanup.kyverno.io/ttl": "5m"}) is None and ttl_warning({}) is None
    assert propagation_policy({"cleanup.kyverno.io/propagation-policy": "Orphan"}) == "Orphan"
    assert propagation_policy({"cleanup.kyverno.io/propagation-policy": "Sometimes"}) == ""


class FakeListWatch:
    """Lists the fake cluster's labelled objects of one resource; its watch stays open (no events) until closed."""

    def __init__(self, cluster: FakeCluster, resource: ApiResource, selector: str, forbidden: bool = False) -> None:
        self.cluster, self.resource, self.selector, self.forbidden = cluster, resource, selector, forbidden
        self.lists = 0
        self.closed = threading.Event()

    def list(self) -> tuple[list[dict[str, Any]], str]:
        self.lists += 1
        if self.forbidden:
            raise Forbidden("forbidden", method="GET", path=self.resource.resource)
        return self.cluster.list_resource(self.resource, "", label_selector=self.selector), "1"

    def watch(self, resource_version: str, timeout_seconds: int) -> Any:
        return IdleWatch(self.closed)


def wait_until(condition: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not condition():
        time.sleep(0.01)
    return bool(condition())


def test_expired_objects_are_deleted_and_the_others_come_back_when_they_expire() -> None:
    cluster = FakeCluster()
    for name, ttl, annotations in (("short", "1m", {"cleanup.kyverno.io/propagation-policy": "Foreground"}), ("long", "1h", {}), ("past", "2023-12-31", {}), ("bad", "soon", {})):
        cluster.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns1", "labels": {"cleanup.kyverno.io/ttl": ttl}, "annotations": annotations, "creationTimestamp": "2024-01-01T00:00:00Z"}})
    cluster.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain", "namespace": "ns1"}})
    now = [CREATED + dt.timedelta(seconds=30)]
    watches: dict[str, FakeListWatch] = {}

    def list_watch(resource: ApiResource, selector: str) -> FakeListWatch:
        assert selector == "cleanup.kyverno.io/ttl"
        watches[resource.resource] = FakeListWatch(cluster, resource, selector, forbidden=resource.resource == "secrets")
        return watches[resource.resource]

    resources = [r for r in RESOURCES if r.resource in ("configmaps", "secrets")]
    controller = TtlController(None, cluster_data=cluster, clock=lambda: now[0], resources=lambda: resources, list_watch=list_watch)
    assert controller.needs_leadership
    controller.start()
    try:
        # the expired one goes at once; a resource we may not list is left out, not retried
        assert wait_until(lambda: cluster.find("ConfigMap", "ns1", "past") is None)
        # the forbidden resource is tried once (its informer starts beside the others, in no fixed order)
        assert wait_until(lambda: "secrets" in watches and watches["secrets"].lists == 1)
        assert controller.watched() == ["/v1/configmaps"] and watches["secrets"].lists == 1
        assert wait_until(lambda: controller.invalid == {"ConfigMap ns1/bad"})
        # the others come back when they expire: 30 s from now for "short"
        configmaps = next(r for r in resources if r.resource == "configmaps")
        short = cluster.find("ConfigMap", "ns1", "short")
        assert short is not None and controller.expire(configmaps, short, now[0]) == pytest.approx(30.5)
        assert controller.reconcile("/v1/configmaps|ns1/short") == Result(requeue_after=30.5)
        now[0] = CREATED + dt.timedelta(minutes=2)
        assert controller.reconcile("/v1/configmaps|ns1/short") is None and cluster.find("ConfigMap", "ns1", "short") is None
        assert cluster.deletes[-1][1] == {"propagationPolicy": "Foreground"}
        assert {name for name in ("long", "bad", "plain") if cluster.find("ConfigMap", "ns1", name)} == {"long", "bad", "plain"}
        # listed once (the permission check, then the informer), never again
        assert watches["configmaps"].lists == 2 and controller.deleted == 2
        # a resource that is no longer served loses its informer
        resources.pop(resources.index(configmaps))
        controller.sync_resources()
        assert controller.watched() == [] and watches["configmaps"].closed.is_set()
    finally:
        controller.stop()
