"""Lease-based leader election and replica membership against a real kube-apiserver."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from stockade.controllers.leader import LeaderElector, LeaseTiming, ReplicaMembership, make_identity
from stockade.kube.client import KubeClient
from stockade.kube.connection import ApiConnection

FAST = LeaseTiming(lease_duration=2.0, renew_deadline=1.5, retry_period=0.25)
WAIT = 30.0  # generous upper bound for things that happen within a few retry periods


def wait_until(condition: Callable[[], bool], timeout: float = WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def leases_path(namespace: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


def read_lease(kube_client: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    lease: dict[str, Any] = kube_client.request("GET", f"{leases_path(namespace)}/{name}")
    return lease


class Recorder:
    """Collects callback invocations in order, from the election threads."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self._lock = threading.Lock()

    def callback(self, event: str) -> Callable[[], None]:
        def record() -> None:
            with self._lock:
                self.events.append(event)

        return record


@pytest.fixture()
def electors(api_client: ApiConnection, lease_namespace: str) -> Iterator[Callable[..., LeaderElector]]:
    made: list[LeaderElector] = []

    def make(identity: str, recorder: Recorder | None = None, lease_name: str = "stockade-leader") -> LeaderElector:
        elector = LeaderElector(
            api_client,
            lease_namespace,
            lease_name=lease_name,
            identity=identity,
            timing=FAST,
            on_started_leading=recorder.callback("started") if recorder else None,
            on_stopped_leading=recorder.callback("stopped") if recorder else None,
        )
        made.append(elector)
        return elector

    yield make
    for elector in made:
        elector.stop(release=False)


def test_exactly_one_of_two_electors_leads(electors: Callable[..., LeaderElector], kube_client: KubeClient, lease_namespace: str) -> None:
    first, second = electors("replica-a"), electors("replica-b")
    first.start()
    second.start()
    assert wait_until(lambda: first.is_leader or second.is_leader)
    # let both run several renew cycles: the follower must never take over a lease that is being renewed
    for _ in range(12):
        assert first.is_leader != second.is_leader
        time.sleep(FAST.retry_period)
    leader = first if first.is_leader else second
    lease = read_lease(kube_client, lease_namespace, "stockade-leader")
    assert lease["spec"]["holderIdentity"] == leader.identity
    assert lease["spec"]["leaseDurationSeconds"] == 2
    assert wait_until(lambda: (first if leader is second else second).leader_identity == leader.identity)


def test_successor_takes_over_when_the_leader_releases(electors: Callable[..., LeaderElector], api_client: ApiConnection, kube_client: KubeClient, lease_namespace: str) -> None:
    events_a, events_b = Recorder(), Recorder()
    first = electors("replica-a", events_a)
    first.start()
    assert first.wait_for_leadership(WAIT)
    # a long lease: only an explicit release lets the successor in before the test's wait runs out
    second = LeaderElector(
        api_client, lease_namespace, identity="replica-b", timing=LeaseTiming(lease_duration=600, renew_deadline=10, retry_period=0.25),
        on_started_leading=events_b.callback("started"), on_stopped_leading=events_b.callback("stopped"),
    )
    try:
        second.start()
        time.sleep(4 * FAST.retry_period)
        assert not second.is_leader
        first.stop()
        assert not first.is_leader
        assert events_a.events == ["started", "stopped"]
        assert second.wait_for_leadership(WAIT)
        lease = read_lease(kube_client, lease_namespace, "stockade-leader")
        assert lease["spec"]["holderIdentity"] == "replica-b"
        assert lease["spec"]["leaseTransitions"] == 1
        assert events_b.events == ["started"]
    finally:
        second.stop()
    assert events_b.events == ["started", "stopped"]
    released = read_lease(kube_client, lease_namespace, "stockade-leader")
    assert not released["spec"].get("holderIdentity")


def test_successor_takes_over_after_the_holder_stops_renewing(electors: Callable[..., LeaderElector], kube_client: KubeClient, lease_namespace: str) -> None:
    first, second = electors("replica-a"), electors("replica-b")
    first.start()
    assert first.wait_for_leadership(WAIT)
    second.start()
    time.sleep(4 * FAST.retry_period)
    assert not second.is_leader
    first.stop(release=False)  # a crash: the lease still names replica-a until it expires
    assert read_lease(kube_client, lease_namespace, "stockade-leader")["spec"]["holderIdentity"] == "replica-a"
    assert second.wait_for_leadership(WAIT)
    assert read_lease(kube_client, lease_namespace, "stockade-leader")["spec"]["holderIdentity"] == "replica-b"


def test_leader_steps_down_when_it_cannot_renew(electors: Callable[..., LeaderElector], kube_client: KubeClient, lease_namespace: str) -> None:
    """Another writer grabbing the lease (e.g. after a network partition) makes every renewal fail."""
    events = Recorder()
    first = electors("replica-a", events)
    first.start()
    assert first.wait_for_leadership(WAIT)
    lease = read_lease(kube_client, lease_namespace, "stockade-leader")
    lease["spec"]["holderIdentity"] = "intruder"
    lease["spec"]["leaseDurationSeconds"] = 600
    kube_client.request("PUT", f"{leases_path(lease_namespace)}/stockade-leader", lease)
    assert wait_until(lambda: not first.is_leader)
    assert events.events == ["started", "stopped"]


def test_electors_on_different_leases_both_lead(electors: Callable[..., LeaderElector]) -> None:
    first, second = electors("replica-a", lease_name="lease-one"), electors("replica-b", lease_name="lease-two")
    first.start()
    second.start()
    assert first.wait_for_leadership(WAIT)
    assert second.wait_for_leadership(WAIT)


def test_timing_must_leave_room_for_renewals() -> None:
    with pytest.raises(ValueError):
        LeaseTiming(lease_duration=10, renew_deadline=10, retry_period=2)
    with pytest.raises(ValueError):
        LeaseTiming(lease_duration=15, renew_deadline=2, retry_period=2)


def test_identity_is_pod_name_plus_random_suffix() -> None:
    first, second = make_identity("stockade-7d9f-abcde"), make_identity("stockade-7d9f-abcde")
    assert first.startswith("stockade-7d9f-abcde-")
    assert second.startswith("stockade-7d9f-abcde-")
    assert first != second


def test_membership_sees_live_peers_and_forgets_stopped_ones(api_client: ApiConnection, kube_client: KubeClient, lease_namespace: str) -> None:
    first = ReplicaMembership(api_client, lease_namespace, identity="pod-a-1", lease_duration=3, renew_interval=0.5)
    second = ReplicaMembership(api_client, lease_namespace, identity="pod-b-1", lease_duration=3, renew_interval=0.5)
    first.start()
    try:
        assert not first.others_alive()  # alone
        second.start()
        assert first.others_alive()
        assert second.others_alive()
        assert first.live_peers() == ["pod-b-1"]
        second.stop()  # graceful: its lease is deleted at once
        assert not first.others_alive()
    finally:
        first.stop()
        second.stop()
    assert kube_client.request("GET", leases_path(lease_namespace))["items"] == []


def test_membership_of_a_crashed_replica_expires(api_client: ApiConnection, kube_client: KubeClient, lease_namespace: str) -> None:
    survivor = ReplicaMembership(api_client, lease_namespace, identity="pod-a-1", lease_duration=3, renew_interval=0.5)
    crashed = ReplicaMembership(api_client, lease_namespace, identity="pod-b-1", lease_duration=2, renew_interval=0.5)
    survivor.start()
    crashed.start()
    try:
        assert survivor.others_alive()
        crashed.stop(release=False)  # stops renewing without deleting its lease, as a killed process would
        assert wait_until(lambda: not survivor.others_alive())
        lease = read_lease(kube_client, lease_namespace, crashed.lease_name)
        assert lease["spec"]["holderIdentity"] == "pod-b-1"
    finally:
        survivor.stop()


def test_membership_ignores_the_leader_lease(api_client: ApiConnection, lease_namespace: str, electors: Callable[..., LeaderElector]) -> None:
    leader = electors("pod-b-1")
    leader.start()
    assert leader.wait_for_leadership(WAIT)
    member = ReplicaMembership(api_client, lease_namespace, identity="pod-a-1", lease_duration=3, renew_interval=0.5)
    member.start()
    try:
        assert not member.others_alive()
    finally:
        member.stop()


def test_member_lease_is_owned_by_its_pod(api_client: ApiConnection, kube_client: KubeClient, lease_namespace: str) -> None:
    member = ReplicaMembership(api_client, lease_namespace, identity="stockade-x-1", lease_duration=3, renew_interval=0.5, pod_name="stockade-x", pod_uid="0b7c4d55-1111-4222-8333-944445555666")
    member.start()
    try:
        lease = read_lease(kube_client, lease_namespace, member.lease_name)
        assert [(ref["kind"], ref["name"], ref["uid"]) for ref in lease["metadata"]["ownerReferences"]] == [("Pod", "stockade-x", "0b7c4d55-1111-4222-8333-944445555666")]
        assert lease["metadata"]["labels"]["app.kubernetes.io/part-of"] == "stockade"
    finally:
        member.stop()
