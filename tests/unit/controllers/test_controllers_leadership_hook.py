"""A background component that runs on every replica but reacts to policies only while leading hears when leadership
starts: the generate controller's first look at the loaded policies (generateExisting) happened before the replica
led and was dropped, so generateExisting never ran after a restart (found by bench_cluster_scale)."""

from __future__ import annotations

from typing import Any

from stockade.controllers.manager import ClusterServices, LeadershipOptions


class Component:
    def __init__(self, services: list[ClusterServices]) -> None:
        self.services = services
        self.events: list[tuple[str, bool]] = []

    def start(self) -> None:
        self.events.append(("start", self.services[0].is_leader()))

    def stop(self) -> None:
        self.events.append(("stop", self.services[0].is_leader()))

    def leadership_gained(self) -> None:
        self.events.append(("leading", self.services[0].is_leader()))


class Plain:
    def __init__(self) -> None:
        self.started = 0

    def start(self) -> None:
        self.started += 1

    def stop(self) -> None:
        pass


def test_a_component_hears_leadership_after_it_started_and_while_leading() -> None:
    holder: list[ClusterServices] = []
    component, plain = Component(holder), Plain()
    services = ClusterServices(object(), LeadershipOptions(namespace="ns", leader_election=False), background=[component, plain])
    holder.append(services)
    services.start()
    try:
        # started on every replica (not yet leading), then told once leadership is there
        assert component.events == [("start", False), ("leading", True)]
        assert plain.started == 1
    finally:
        services.manager.stop()


def test_leadership_regained_is_heard_again() -> None:
    holder: list[ClusterServices] = []
    component = Component(holder)
    services = ClusterServices(object(), LeadershipOptions(namespace="ns", leader_election=False), background=[component])
    holder.append(services)
    services.start()
    try:
        services.manager.leadership_lost()
        services.manager.leadership_gained()
        assert [event for event, _ in component.events] == ["start", "leading", "leading"]
    finally:
        services.manager.stop()


def test_the_generate_controller_looks_at_the_policies_again_when_it_starts_leading() -> None:
    from stockade.controllers.generate import POLICIES_KEY, GenerateController

    leading = [False]
    store: Any = type("Store", (), {"listeners": [], "snapshot": None})()
    controller = GenerateController(None, store, is_leader=lambda: leading[0], resync_interval=0)
    seen: list[str] = []
    controller.reconcile_policies = lambda: seen.append("policies")  # type: ignore[method-assign]
    controller.controller.enqueue = lambda key: seen.append(f"queued {key}")  # type: ignore[method-assign]
    controller._started = True
    assert controller.reconcile(POLICIES_KEY) is None and seen == []  # not leading: nothing done, nothing kept
    leading[0] = True
    controller.leadership_gained()
    assert seen == [f"queued {POLICIES_KEY}"]
    controller.reconcile(POLICIES_KEY)
    assert seen[-1] == "policies"
