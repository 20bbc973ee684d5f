"""ClusterServices ordering: nothing registers before start, the last replica removes webhooks, others keep them."""

from types import SimpleNamespace
from typing import Any

from stockade.controllers.manager import ClusterServices, DeduplicatingSubmitter, LeadershipOptions


class FakeRegistration:
    def __init__(self) -> None:
        self.applied = 0
        self.removed = 0

    def apply(self) -> None:
        self.applied += 1

    def apply_if_leader(self) -> None:
        self.apply()

    def remove(self) -> int:
        self.removed += 1
        return 2


class FakeMembership:
    def __init__(self, others: bool) -> None:
        self.others = others
        self.stopped = False

    def stop(self, release: bool = True) -> None:
        self.stopped = True

    def others_alive(self) -> bool:
        assert self.stopped, "must stop our own membership before asking about the others"
        return self.others


class Component:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def start(self) -> None:
        self.log.append(f"start {self.name}")

    def stop(self) -> None:
        self.log.append(f"stop {self.name}")


def services(**kwargs: Any) -> ClusterServices:
    return ClusterServices(api_client=None, options=LeadershipOptions(namespace="stockade", leader_election=False), **kwargs)


def test_without_election_leads_only_after_start_and_removes_on_stop() -> None:
    log: list[str] = []
    registration = FakeRegistration()
    published: list[Any] = []
    store = SimpleNamespace(snapshot="snapshot-1")
    svc = services(registration=registration, status_publisher=SimpleNamespace(publish_status=published.append), store=store,
                   background=[Component(log, "generate"), Component(log, "scan")])
    assert not svc.is_leader()  # a snapshot loaded before the server listens must not register webhooks
    svc.publish_status_if_leader("early")
    assert published == []
    svc.start()
    assert svc.is_leader() and registration.applied == 1 and published == ["snapshot-1"]
    assert log == ["start generate", "start scan"]
    assert svc.stop() == 2 and registration.removed == 1
    assert log[2:] == ["stop scan", "stop generate"]


def test_a_stopping_replica_leaves_webhooks_when_others_are_alive() -> None:
    registration = FakeRegistration()
    svc = services(registration=registration)
    svc.start()
    svc.membership = FakeMembership(others=True)
    assert svc.stop() == 0 and registration.removed == 0
    last = services(registration=FakeRegistration())
    last.start()
    last.membership = FakeMembership(others=False)
    assert last.stop() == 2


class LeaderOnly(Component):
    needs_leadership = True


class FakeElector:
    def __init__(self, gained: Any, lost: Any) -> None:
        self.gained, self.lost = gained, lost

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self.lost()


def test_leader_only_components_follow_leadership_and_the_others_run_everywhere() -> None:
    log: list[str] = []
    svc = ClusterServices(api_client=None, options=LeadershipOptions(namespace="stockade"),
                          background=[Component(log, "generate"), LeaderOnly(log, "ttl")])
    electors: list[FakeElector] = []
    svc.manager.elector_factory = lambda gained, lost: electors.append(FakeElector(gained, lost)) or electors[-1]
    svc.check_namespace = lambda: None  # type: ignore[method-assign]
    svc.options.leader_election = False  # no membership Leases without an API server; the elector is the fake
    svc.start()
    assert log == ["start generate"] and not svc.is_leader()
    electors[0].gained()
    assert svc.is_leader() and log[-1] == "start ttl"
    electors[0].lost()
    assert not svc.is_leader() and log[-1] == "stop ttl"
    electors[0].gained()
    assert log[-1] == "start ttl"
    svc.stop()
    assert log[-2:] == ["stop ttl", "stop generate"]


def test_generator_sees_each_review_once_per_webhook() -> None:
    """A webhook called twice for one request hands its work on once; another webhook's call for the same request
    carries other policies' work and is handed on too."""
    seen: list[tuple[str, Any]] = []
    submitter = DeduplicatingSubmitter(SimpleNamespace(submit=lambda review, served, route: seen.append((review.uid, route))), memory=2)
    for uid in ["a", "a", "b", "a", "c", "a"]:
        submitter.submit(SimpleNamespace(uid=uid), route="validate-fail")
    assert [uid for uid, _ in seen] == ["a", "b", "c", "a"]  # "a" was forgotten once two newer reviews came in
    seen.clear()
    submitter.submit(SimpleNamespace(uid="d"), route="validate-fail")
    submitter.submit(SimpleNamespace(uid="d"), route="gpol/gen")
    submitter.submit(SimpleNamespace(uid="d"), route="gpol/gen")
    assert seen == [("d", "validate-fail"), ("d", "gpol/gen")]