"""The cleanup.kyverno.io/ttl label: Kyverno's value formats, the admission warning, and expiry on an in-memory
cluster with an injected clock."""

from __future__ import annotations

import datetime as dt

import pytest

from stockade.controllers.ttl import TtlController, TtlError, deletion_time, parse_duration, propagation_policy, ttl_warning
from tests.unit.controllers.fakecluster import RESOURCES, FakeCluster

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


def test_expired_objects_are_deleted_with_their_propagation_policy() -> None:
    cluster = FakeCluster()
    for name, ttl, annotations in (("short", "1m", {"cleanup.kyverno.io/propagation-policy": "Foreground"}), ("long", "1h", {}), ("past", "2023-12-31", {}), ("bad", "soon", {})):
        cluster.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns1", "labels": {"cleanup.kyverno.io/ttl": ttl}, "annotations": annotations, "creationTimestamp": "2024-01-01T00:00:00Z"}})
    cluster.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain", "namespace": "ns1"}})
    now = [CREATED + dt.timedelta(seconds=30)]
    controller = TtlController(None, cluster_data=cluster, clock=lambda: now[0], resources=lambda: list(RESOURCES))
    assert controller.scan() == 1 and cluster.find("ConfigMap", "ns1", "past") is None
    now[0] = CREATED + dt.timedelta(minutes=2)
    assert controller.scan() == 1 and cluster.find("ConfigMap", "ns1", "short") is None
    assert cluster.deletes[-1][1] == {"propagationPolicy": "Foreground"}
    assert {name for name in ("long", "bad", "plain") if cluster.find("ConfigMap", "ns1", name)} == {"long", "bad", "plain"}
    assert controller.invalid == {"ConfigMap ns1/bad"}
