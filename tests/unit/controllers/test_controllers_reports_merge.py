"""Report merging for background scans: replaced policies, vanished policies, empty background reports."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from stockade.controllers.reports import PROCESS_BACKGROUND, build_report, merge_into, report_policy_name, stale_results_removed, summarise
from stockade.engine.response import EngineResponse, RuleResponse
from stockade.policy.model import KyvernoPolicy
from tests.unit.kubefake import Call, FakeKube

NOW = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u1"}}


def _policy(name: str, kind: str = "ClusterPolicy", namespace: str = "") -> KyvernoPolicy:
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": kind, "metadata": metadata, "spec": {}})


def _result(policy: str, result: str) -> dict:
    return {"policy": policy, "rule": "r", "result": result}


def _current(*results: dict) -> dict:
    return {"metadata": {"name": "u1", "resourceVersion": "7"}, "results": list(results)}


def test_background_report_marks_its_process_and_may_be_empty() -> None:
    response = EngineResponse(_policy("a"), POD, POD, rules=[RuleResponse("r", "Validation", "fail", "bad")])
    report = build_report(POD, [response], NOW, process=PROCESS_BACKGROUND)
    assert report is not None and report["results"][0]["properties"] == {"process": PROCESS_BACKGROUND}
    assert build_report(POD, [], NOW) is None
    empty = build_report(POD, [], NOW, allow_empty=True)
    assert empty is not None and empty["results"] == [] and empty["kind"] == "PolicyReport"


def test_merge_replaces_scanned_policies_keeps_admission_only_and_drops_vanished() -> None:
    report = build_report(POD, [EngineResponse(_policy("a"), POD, POD, rules=[RuleResponse("r", "Validation", "pass")])], NOW)
    assert report is not None
    current = _current(_result("a", "fail"), _result("b", "fail"), _result("admission-only", "pass"), _result("gone", "fail"))
    merge_into(report, current, replace={"a", "b"}, live={"a", "b", "admission-only"})
    assert sorted((r["policy"], r["result"]) for r in report["results"]) == [("a", "pass"), ("admission-only", "pass")]
    assert report["summary"]["pass"] == 2 and report["summary"]["fail"] == 0
    assert report["metadata"]["resourceVersion"] == "7"


def test_merge_without_sets_keeps_other_policies() -> None:
    report = build_report(POD, [EngineResponse(_policy("a"), POD, POD, rules=[RuleResponse("r", "Validation", "pass")])], NOW)
    assert report is not None
    merge_into(report, _current(_result("a", "fail"), _result("gone", "fail")))
    assert sorted(r["policy"] for r in report["results"]) == ["a", "gone"]


def test_prune_helpers_and_policy_names() -> None:
    results = [_result("a", "pass"), _result("ns/b", "fail"), _result("c", "warn")]
    kept = stale_results_removed(results, {"a", "ns/b"})
    assert [r["policy"] for r in kept] == ["a", "ns/b"]
    assert summarise(kept) == {"pass": 1, "fail": 1, "warn": 0, "error": 0, "skip": 0}
    assert report_policy_name(_policy("x")) == "x"
    assert report_policy_name(_policy("x", "Policy", "team")) == "team/x"


REPORTS = "/apis/wgpolicyk8s.io/v1alpha2"


def test_prune_covers_reports_labelled_as_kyverno_writes_them_and_older_stockade_ones() -> None:
    """Reports carry Kyverno's managed-by=kyverno label; pruning also finds those an older Stockade labelled itself."""
    from stockade.controllers.reports import ReportWriter

    writer = ReportWriter(None)
    stale = {"metadata": {"name": "u1", "namespace": "ns"}, "results": [_result("gone", "fail")]}
    kube = FakeKube({f"{REPORTS}/namespaces/ns/policyreports/u1": stale})
    kube.on("GET", f"{REPORTS}/policyreports", {"items": [stale]})  # every namespace
    kube.on("GET", f"{REPORTS}/clusterpolicyreports", {"items": []})
    writer.client = kube  # type: ignore[assignment]
    try:
        assert writer.prune(frozenset({"a"})) == 1
    finally:
        writer.close()
    assert [call.path for call in kube.sent("GET")] == [f"{REPORTS}/policyreports", f"{REPORTS}/clusterpolicyreports"]
    assert {call.query["labelSelector"] for call in kube.sent("GET")} == {"app.kubernetes.io/managed-by in (kyverno,stockade)"}
    assert [call.path for call in kube.sent("DELETE")] == [f"{REPORTS}/namespaces/ns/policyreports/u1"]
    assert kube.objects == {}


def test_prune_reads_the_reports_a_page_at_a_time() -> None:
    """A large cluster's reports are listed in pages (limit and continue), and every page's stale results go."""
    from stockade.controllers.reports import PRUNE_PAGE_SIZE, ReportWriter

    def report(name: str, *results: dict) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "ns", "uid": name}, "results": list(results)}

    pages = {
        "": {"items": [report("u1", _result("gone", "fail")), report("u2", _result("a", "pass"))], "metadata": {"continue": "t1"}},
        "t1": {"items": [report("u3", _result("a", "fail"), _result("gone", "pass"))], "metadata": {"continue": ""}},
    }
    kube = FakeKube({f"{REPORTS}/namespaces/ns/policyreports/{name}": report(name) for name in ("u1", "u2", "u3")})
    kube.on("GET", f"{REPORTS}/policyreports", lambda call: pages[call.query.get("continue", "")])
    kube.on("GET", f"{REPORTS}/clusterpolicyreports", {"items": []})
    writer = ReportWriter(None)
    writer.client = kube  # type: ignore[assignment]
    try:
        assert writer.prune(frozenset({"a"})) == 2
    finally:
        writer.close()
    listings = kube.sent("GET", f"{REPORTS}/policyreports")
    assert [call.query.get("continue", "") for call in listings] == ["", "t1"]
    assert {call.query["limit"] for call in listings} == {str(PRUNE_PAGE_SIZE)}
    assert [call.path for call in kube.sent("DELETE")] == [f"{REPORTS}/namespaces/ns/policyreports/u1"]
    (put,) = kube.sent("PUT")
    assert put.path == f"{REPORTS}/namespaces/ns/policyreports/u3" and [r["policy"] for r in put.body["results"]] == ["a"]


def test_a_rewrite_with_the_same_verdicts_at_a_later_time_is_not_written() -> None:
    """Kyverno e2e reports/background/mutate-existing asserts the report's generation is 1: re-evaluating a resource
    with unchanged verdicts must not rewrite the report only because the timestamps moved."""
    from stockade.controllers.reports import ReportWriter

    def report_at(when: dt.datetime, result: str = "pass") -> dict:
        built = build_report(POD, [EngineResponse(_policy("a"), POD, POD, rules=[RuleResponse("r", "Validation", result)])], when)
        assert built is not None
        return built

    stored = report_at(NOW)
    stored["metadata"]["resourceVersion"] = "7"
    path = f"{REPORTS}/namespaces/ns/policyreports/{stored['metadata']['name']}"
    kube = FakeKube({path: stored})  # the create answers AlreadyExists
    writer = ReportWriter(None)
    writer.client = kube  # type: ignore[assignment]
    try:
        writer._upsert(report_at(NOW + dt.timedelta(minutes=5)))
        assert kube.sent("PUT") == [] and len(kube.sent("POST")) == 1
        writer._upsert(report_at(NOW + dt.timedelta(minutes=5), "fail"))
        (replaced,) = kube.sent("PUT")
        assert replaced.path == path and [r["result"] for r in replaced.body["results"]] == ["fail"]
        assert replaced.body["metadata"]["resourceVersion"] == "7"
    finally:
        writer.close()


def test_policies_labelled_reports_disabled_stay_out_of_reports() -> None:
    """Kyverno e2e reports/background/test-reporting-exclusion: reports.kyverno.io/disabled=true opts a policy out."""
    quiet = KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "q", "labels": {"reports.kyverno.io/disabled": "true"}}, "spec": {}})
    fail = [RuleResponse("r", "Validation", "fail", "bad")]
    assert build_report(POD, [EngineResponse(quiet, POD, POD, rules=list(fail))], NOW) is None
    both = build_report(POD, [EngineResponse(quiet, POD, POD, rules=list(fail)), EngineResponse(_policy("a"), POD, POD, rules=list(fail))], NOW)
    assert both is not None and [r["policy"] for r in both["results"]] == ["a"]


def test_background_reports_wait_for_the_writer_and_admission_reports_never_do() -> None:
    """A scan outruns the writer: its reports must wait for room (dropped ones stay missing until the next full
    scan, an hour later); admission must never wait on the API server, so it drops instead."""
    import threading
    import time
    from typing import Any

    from stockade.controllers.reports import ReportWriter

    class SlowApi:
        """Report creations wait at a gate."""

        def __init__(self) -> None:
            self.created: list[str] = []
            self.gate = threading.Event()
            self.kube = FakeKube()
            self.kube.on("POST", f"{REPORTS}/namespaces/ns/policyreports", self.create)

        def create(self, call: Call) -> dict[str, Any]:
            self.gate.wait(5)
            self.created.append(call.body["metadata"]["name"])
            return dict(call.body)

    def pod(index: int) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{index}", "namespace": "ns", "uid": f"u{index}"}}

    def responses(obj: dict[str, Any]) -> list[EngineResponse]:
        return [EngineResponse(_policy("a"), obj, obj, rules=[RuleResponse("r", "Validation", "pass")])]

    writer = ReportWriter(None, capacity=2)
    api = SlowApi()
    writer.client = api.kube  # type: ignore[assignment]
    try:
        for index in range(6):  # admission: the writer is stuck, the queue holds 2 and the rest are dropped at once
            started = time.monotonic()
            writer.submit(pod(index), responses(pod(index)))
            assert time.monotonic() - started < 1.0
        assert writer.dropped >= 3
        dropped = writer.dropped
        api.gate.set()
        writer.flush(10)
        api.created.clear()
        api.gate.clear()
        threading.Timer(0.3, api.gate.set).start()
        for index in range(10, 30):  # background: every report is written, none dropped
            writer.submit(pod(index), responses(pod(index)), process=PROCESS_BACKGROUND, replace_policies={"a"}, wait=True)
        assert writer.flush(10)
        assert writer.dropped == dropped
        assert sorted(api.created) == sorted(f"u{index}" for index in range(10, 30))
    finally:
        api.gate.set()
        writer.close()


def test_a_scan_holds_only_the_waiting_backlog_and_leaves_the_rest_of_the_queue_to_admission() -> None:
    """A scan that outruns the writer blocks once ``waiting_backlog`` of its reports are queued (it does not fill
    the queue with built reports); admission reports still find room beside them, and every scan report is
    written once the writer moves on."""
    import threading
    import time

    from stockade.controllers.reports import ReportWriter

    gate = threading.Event()
    created: list[str] = []

    def create(call: Call) -> dict[str, Any]:
        gate.wait(10)
        created.append(call.body["metadata"]["name"])
        return dict(call.body)

    def pod(index: int) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{index}", "namespace": "ns", "uid": f"u{index}"}}

    def responses(obj: dict[str, Any]) -> list[EngineResponse]:
        return [EngineResponse(_policy("a"), obj, obj, rules=[RuleResponse("r", "Validation", "fail")])]

    kube = FakeKube()
    kube.on("POST", f"{REPORTS}/namespaces/ns/policyreports", create)
    writer = ReportWriter(None, capacity=100, waiting_backlog=3)
    writer.client = kube  # type: ignore[assignment]
    submitted: list[int] = []

    def scan() -> None:
        for index in range(10):
            writer.submit(pod(index), responses(pod(index)), process=PROCESS_BACKGROUND, replace_policies={"a"}, wait=True)
            submitted.append(index)

    scanner = threading.Thread(target=scan, daemon=True)
    try:
        scanner.start()
        deadline = time.monotonic() + 5
        while len(submitted) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)  # the scan is blocked now: one report at the writer, three queued
        assert len(submitted) == 4 and writer.queue.qsize() == 3
        for index in range(100, 110):  # admission: never blocked, queued beside the scan's backlog
            writer.submit(pod(index), responses(pod(index)))
        assert writer.dropped == 0 and writer.queue.qsize() == 13
        gate.set()
        scanner.join(10)
        assert writer.flush(10)
        assert sorted(created) == sorted(f"u{index}" for index in [*range(10), *range(100, 110)])
    finally:
        gate.set()
        writer.close()


def test_generate_and_mutate_existing_results_wait_for_the_writer_like_scans() -> None:
    from typing import Any

    from stockade.controllers.reports import submit_rule_result

    class Recorder:
        def __init__(self) -> None:
            self.options: list[dict[str, Any]] = []

        def submit(self, resource: dict[str, Any], responses: list[Any], **options: Any) -> None:
            self.options.append(options)

    recorder = Recorder()
    submit_rule_result(recorder, _policy("gen"), POD, RuleResponse("r", "Generation", "pass"), process=PROCESS_BACKGROUND)
    assert recorder.options == [{"process": PROCESS_BACKGROUND, "wait": True, "existing": False}]


def _rule(rule_type: str, status: str, generated: list[dict[str, Any]] | None = None) -> RuleResponse:
    rule = RuleResponse(f"{rule_type.lower()}-{status}", rule_type, status, "message")
    rule.generated_resources = generated or []
    return rule


def test_reporting_config_follows_kyvernos_enable_reporting_and_allowed_results() -> None:
    """--allowedResults keeps rule results by their status; --enableReporting by rule kind, with mutate-existing
    results counted apart from admission mutations; generate results are filtered by status only when the rule
    generated something (pkg/utils/report/results.go)."""
    from stockade.controllers.reports import ReportingConfig

    only_fail = ReportingConfig.parse(results="fail")
    assert only_fail.admits(_rule("Validation", "fail")) and not only_fail.admits(_rule("Validation", "pass"))
    assert not only_fail.admits(_rule("Generation", "pass", [{"kind": "ConfigMap"}]))
    assert only_fail.admits(_rule("Generation", "pass"))
    no_existing = ReportingConfig.parse(kinds="validate,mutate")
    assert no_existing.admits(_rule("Mutation", "pass")) and not no_existing.admits(_rule("Mutation", "pass"), existing=True)
    assert not no_existing.admits(_rule("ImageVerify", "pass"))
    with pytest.raises(ValueError, match="unknown result passed"):
        ReportingConfig.parse(results="fail,passed")


def test_a_report_holds_only_admitted_results_and_its_summary_counts_them() -> None:
    from stockade.controllers.reports import ReportingConfig, build_report

    resource = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "myns", "uid": "u1"}}
    policy = KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "Policy", "metadata": {"name": "p", "namespace": "myns"}, "spec": {"rules": []}})
    good = EngineResponse(policy, resource, resource, [_rule("Validation", "pass")])
    assert build_report(resource, [good], reporting=ReportingConfig.parse(results="fail")) is None
    bad = EngineResponse(policy, resource, resource, [_rule("Validation", "fail"), _rule("Validation", "pass")])
    report = build_report(resource, [bad], reporting=ReportingConfig.parse(results="fail"))
    assert report is not None and [r["result"] for r in report["results"]] == ["fail"]
    assert report["summary"]["pass"] == 0 and report["summary"]["fail"] == 1


def test_a_missing_report_crd_pauses_only_its_kind_until_crds_change() -> None:
    """Reports of a kind pause when its CRD is not served (each write would fail), the other kind goes on; a 404
    because a namespace was deleted pauses nothing; the CRD watcher's news that CRDs changed resumes at once."""
    from stockade.controllers.reports import ReportWriter

    writer = ReportWriter(object())
    writer._served = lambda plural: plural == "policyreports"  # type: ignore[method-assign]
    try:
        writer._not_found("clusterpolicyreports", None)  # no ClusterPolicyReport CRD
        assert writer.crd_missing(None) and not writer.crd_missing("team")  # namespaced reports go on
        writer._not_found("policyreports", "gone")  # served: the namespace was gone, nothing pauses
        assert not writer.crd_missing("team")
        writer.crds_changed()
        assert not writer.crd_missing(None)
    finally:
        writer.close()
