"""Cron schedules and the scheduled deletion of DeletingPolicy / CleanupPolicy matches, on an in-memory cluster
with an injected clock."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from stockade.controllers.cleanup import ScheduledDeletionController, cleanup_kinds, scheduled_policies
from stockade.controllers.schedule import ScheduleError, parse_schedule
from tests.unit.controllers.fakecluster import FakeCluster
from tests.unit.controllers.test_controllers_generating_policy import Store

UTC = dt.timezone.utc
CREATED = "2024-01-01T00:00:00Z"


def at(minute: int, second: int = 0) -> dt.datetime:
    return dt.datetime(2024, 1, 1, 0, minute, second, tzinfo=UTC)


def test_schedule_next_after() -> None:
    moment = dt.datetime(2024, 1, 31, 23, 59, 30, tzinfo=UTC)
    assert parse_schedule("* * * * *").next_after(moment) == dt.datetime(2024, 2, 1, 0, 0, tzinfo=UTC)
    assert parse_schedule("*/15 * * * *").next_after(dt.datetime(2024, 1, 1, 0, 15, tzinfo=UTC)) == dt.datetime(2024, 1, 1, 0, 30, tzinfo=UTC)
    assert parse_schedule("0 9 * * mon-fri").next_after(dt.datetime(2024, 2, 2, 10, 0, tzinfo=UTC)) == dt.datetime(2024, 2, 5, 9, 0, tzinfo=UTC)
    assert parse_schedule("0 0 29 2 *").next_after(moment) == dt.datetime(2024, 2, 29, tzinfo=UTC)
    # both day fields restricted: either matches (Feb 1 2024 is a Thursday)
    assert parse_schedule("30 4 15 * 4").next_after(moment) == dt.datetime(2024, 2, 1, 4, 30, tzinfo=UTC)
    assert parse_schedule("@hourly").next_after(moment) == dt.datetime(2024, 2, 1, 0, 0, tzinfo=UTC)
    assert parse_schedule("0 0 * * 7").next_after(moment) == dt.datetime(2024, 2, 4, tzinfo=UTC)  # 7 is Sunday


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("* * * *", "5 fields"), ("61 * * * *", "minute: 61 is outside 0-59"), ("* * * foo *", "month: 'foo'"), ("*/0 * * * *", "step"), ("5-1 * * * *", "backwards")],
)
def test_schedule_errors_name_the_field(text: str, fragment: str) -> None:
    with pytest.raises(ScheduleError, match=fragment.replace("*", r"\*")):
        parse_schedule(text)


def dpol(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policies.kyverno.io/v1beta1",
        "kind": "DeletingPolicy",
        "metadata": {"name": "del", "uid": "pol-uid", "creationTimestamp": CREATED},
        "spec": {
            "schedule": "*/1 * * * *",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]},
            "conditions": [{"name": "ns", "expression": 'object.metadata.namespace == "ns1"'}, {"name": "label", "expression": "has(object.metadata.labels) && object.metadata.labels.expire == 'yes'"}],
            **spec,
        },
    }


def cleanpol(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kyverno.io/v2",
        "kind": "ClusterCleanupPolicy",
        "metadata": {"name": "clean", "creationTimestamp": CREATED},
        "spec": {
            "schedule": "*/1 * * * *",
            "context": [{"name": "wanted", "variable": {"value": "example"}}],
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "exclude": {"any": [{"resources": {"namespaces": ["kept"]}}]},
            "conditions": {"all": [{"key": "{{ target.metadata.name }}", "operator": "Equals", "value": "{{ wanted }}"}]},
            **spec,
        },
    }


class Events:
    def __init__(self) -> None:
        self.specs: list[Any] = []

    def submit(self, spec: Any) -> None:
        self.specs.append(spec)


def pod(cluster: FakeCluster, name: str, namespace: str, labels: dict[str, str] | None = None) -> None:
    cluster.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels or {}}})


def make(cluster: FakeCluster, store: Store, now: list[dt.datetime], events: Events) -> ScheduledDeletionController:
    return ScheduledDeletionController(None, store, cluster_data=cluster, events=events, clock=lambda: now[0], write_status=False)  # type: ignore[arg-type]


def test_deleting_policy_runs_on_schedule_and_deletes_matches() -> None:
    cluster = FakeCluster()
    pod(cluster, "old", "ns1", {"expire": "yes"})
    pod(cluster, "young", "ns1", {"expire": "no"})
    pod(cluster, "elsewhere", "ns2", {"expire": "yes"})
    now = [at(0, 30)]
    events = Events()
    controller = make(cluster, Store(dpol(deletionPropagationPolicy="Foreground")), now, events)
    assert controller.run_due() == []  # first firing is 00:01
    assert cluster.find("Pod", "ns1", "old") is not None
    now[0] = at(1, 1)
    assert controller.run_due() == ["DeletingPolicy//del"]
    assert cluster.find("Pod", "ns1", "old") is None
    assert cluster.find("Pod", "ns1", "young") is not None and cluster.find("Pod", "ns2", "elsewhere") is not None
    assert cluster.deletes[-1][1] == {"propagationPolicy": "Foreground"}
    [event] = events.specs
    assert event.reason == "PolicyApplied" and event.type == "Normal" and event.namespace == "default"
    assert event.message == "successfully deleted the target resource Pod/ns1/old"
    assert dict(event.regarding)["kind"] == "DeletingPolicy"
    assert controller.run_due() == []  # not again within the same minute


def test_namespaced_deleting_policy_only_sees_its_namespace() -> None:
    cluster = FakeCluster()
    pod(cluster, "a", "ns1", {"expire": "yes"})
    pod(cluster, "b", "ns2", {"expire": "yes"})
    policy = dpol(conditions=[])
    policy["kind"] = "NamespacedDeletingPolicy"
    policy["metadata"]["namespace"] = "ns2"
    now = [at(5)]
    make(cluster, Store(policy), now, Events()).run_due()
    assert cluster.find("Pod", "ns1", "a") is not None and cluster.find("Pod", "ns2", "b") is None


def test_cleanup_policy_match_exclude_context_conditions() -> None:
    cluster = FakeCluster()
    pod(cluster, "example", "ns1")
    pod(cluster, "example", "kept")
    pod(cluster, "other", "ns1")
    now = [at(3)]
    events = Events()
    controller = make(cluster, Store(cleanpol()), now, events)
    assert controller.run_due() == ["ClusterCleanupPolicy//clean"]
    assert cluster.find("Pod", "ns1", "example") is None
    assert cluster.find("Pod", "kept", "example") is not None and cluster.find("Pod", "ns1", "other") is not None
    assert events.specs[0].message == "successfully cleaned up the target resource Pod/ns1/example"
    assert dict(events.specs[0].regarding)["apiVersion"] == "kyverno.io/v2"
    assert cleanup_kinds(cleanpol()["spec"]) == ["Pod"]


def test_last_execution_time_defers_the_next_run_and_bad_schedules_are_skipped() -> None:
    cluster = FakeCluster()
    pod(cluster, "example", "ns1")
    policy = cleanpol()
    policy["status"] = {"lastExecutionTime": "2024-01-01T00:10:00Z"}
    broken = cleanpol(schedule="every minute")
    broken["metadata"]["name"] = "broken"
    now = [at(10, 30)]
    controller = make(cluster, Store(policy, broken), now, Events())
    assert controller.run_due() == []
    assert controller.stats.skipped == ["ClusterCleanupPolicy//broken"]
    now[0] = at(11)
    assert controller.run_due() == ["ClusterCleanupPolicy//clean"]


def test_only_policies_of_the_right_groups_are_scheduled() -> None:
    stray = {**cleanpol(), "apiVersion": "example.com/v1"}
    assert [p.key for p in scheduled_policies(Store(cleanpol(), stray, dpol()).snapshot)] == ["ClusterCleanupPolicy//clean", "DeletingPolicy//del"]


def test_deleting_policy_conditions_can_read_global_context_entries() -> None:
    """Kyverno's DeletingPolicy conditions have the globalContext library (e2e deleting-policies/cel-lib/globalcontext-lib)."""
    from stockade.controllers.webhookconfig import ApiResource

    cluster = FakeCluster()
    cluster.resources.append(ApiResource("kyverno.io", "v2alpha1", "globalcontextentries", "GlobalContextEntry", False))
    cluster.resources.append(ApiResource("apps", "v1", "deployments", "Deployment"))
    cluster.add({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "ns2"}})
    cluster.add(
        {
            "apiVersion": "kyverno.io/v2alpha1",
            "kind": "GlobalContextEntry",
            "metadata": {"name": "deployments"},
            "spec": {"kubernetesResource": {"group": "apps", "version": "v1", "resource": "deployments", "namespace": "ns2"}, "projections": [{"name": "names", "jmesPath": "[].metadata.name"}]},
        }
    )
    pod(cluster, "doomed", "ns1")
    conditions = [
        {"name": "whole", "expression": 'size(globalContext.Get("deployments", "")) == 1'},
        {"name": "projected", "expression": '"web" in globalContext.Get("deployments", "names")'},
    ]
    now = [at(1, 1)]
    controller = make(cluster, Store(dpol(conditions=conditions)), now, Events())
    controller._last_run["DeletingPolicy//del"] = at(0, 30)
    assert controller.run_due() == ["DeletingPolicy//del"]
    assert cluster.find("Pod", "ns1", "doomed") is None
    assert controller.stats.failures == 0


def test_deleting_policy_conditions_can_call_http() -> None:
    """Kyverno's http library in DeletingPolicy conditions: a JSON object body comes back with statusCode added
    (e2e deleting-policies/cel-lib/http-lib)."""
    import http.server
    import json
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = json.dumps({"metadata": {"labels": {"app": "test"}}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        cluster = FakeCluster()
        pod(cluster, "doomed", "ns1")
        conditions = [{"name": "http", "expression": f'http.Get("{url}").metadata.labels.app == "test" && http.Get("{url}").statusCode == 200'}]
        controller = make(cluster, Store(dpol(conditions=conditions)), [at(1, 1)], Events())
        controller._last_run["DeletingPolicy//del"] = at(0, 30)
        assert controller.run_due() == ["DeletingPolicy//del"]
        assert cluster.find("Pod", "ns1", "doomed") is None
    finally:
        server.shutdown()
        server.server_close()
