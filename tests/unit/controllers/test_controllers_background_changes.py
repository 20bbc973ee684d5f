"""Background scans of single changed resources: Kyverno's background controller rescans a resource when it is
created or updated, reporting (PolicyReports, kyverno-scan Events) without waiting for the periodic full scan."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stockade.controllers.background import MAX_PENDING_CHANGES, BackgroundScanner
from stockade.controllers.reports import PROCESS_BACKGROUND
from stockade.policy.model import KyvernoPolicy
from stockade.webhook.admission import parse_review
from stockade.webhook.server import _notify_scanner
from tests.unit.controllers.fakecluster import FakeCluster

BACKGROUND_ONLY = {
    "apiVersion": "kyverno.io/v1",
    "kind": "ClusterPolicy",
    "metadata": {"name": "validate"},
    "spec": {
        "admission": False,
        "background": True,
        "rules": [{"name": "validate", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "validate": {"failureAction": "Enforce", "deny": {}}}],
    },
}


@dataclass
class Snapshot:
    policies: list[Any]
    evaluator: Any = None
    cel_policies: list[Any] = field(default_factory=list)
    document_keys: tuple[bytes, ...] = ()


class Store:
    def __init__(self, *policies: dict[str, Any]) -> None:
        self.snapshot = Snapshot([KyvernoPolicy(p) for p in policies])


class Recorder:
    def __init__(self) -> None:
        self.scanned: list[tuple[str, list[str]]] = []

    def record_scan(self, obj: dict[str, Any], responses: list[Any]) -> None:
        self.scanned.append((obj["metadata"]["name"], [f"{r.policy_name}/{rule.name}={rule.status}" for r in responses for rule in r.rules]))


class Reports:
    def __init__(self) -> None:
        self.submitted: list[tuple[str, str]] = []

    def submit(self, obj: dict[str, Any], responses: list[Any], **options: Any) -> None:
        self.submitted.append((obj["metadata"]["name"], options["process"]))


def test_a_changed_resource_is_scanned_on_its_own_with_events_and_report() -> None:
    cluster = FakeCluster()
    cluster.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pod", "namespace": "ns1"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
    events, reports = Recorder(), Reports()
    scanner = BackgroundScanner(None, Store(BACKGROUND_ONLY), reports, cluster_data=cluster, events=events)  # type: ignore[arg-type]
    summary = scanner.scan_resources([("v1", "Pod", "ns1", "pod"), ("v1", "Pod", "ns1", "gone")])
    assert summary.resources == 1 and summary.errors == []
    assert events.scanned == [("pod", ["validate/validate=fail"])]
    assert reports.submitted == [("pod", PROCESS_BACKGROUND)]


def test_admitted_objects_are_queued_once_and_subresources_are_not() -> None:
    scanner = BackgroundScanner(None, Store(), None, cluster_data=FakeCluster())  # type: ignore[arg-type]

    def review(operation: str, sub_resource: str = "") -> Any:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pod", "namespace": "ns1"}}
        request: dict[str, Any] = {
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ns1", "name": "pod", "operation": operation, "userInfo": {"username": "a"}, "object": pod,
        }
        if sub_resource:
            request["subResource"] = sub_resource
        return parse_review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})

    _notify_scanner(scanner, review("CREATE"))
    _notify_scanner(scanner, review("UPDATE"))
    _notify_scanner(scanner, review("UPDATE", "status"))
    assert list(scanner._changed) == [("v1", "Pod", "ns1", "pod")]
    for index in range(MAX_PENDING_CHANGES):
        scanner.notify("v1", "Pod", "ns1", f"p{index}")
    assert scanner.notify("v1", "Pod", "ns1", "overflow") is False


def test_a_policy_or_exception_change_rescans_existing_resources_without_waiting_for_the_interval() -> None:
    """Kyverno e2e validating-policies/report/with-exception: a resource created before its exception gets a skip
    result once the exception exists, because Kyverno's background controller rescans when policies change."""
    import time

    from stockade.controllers import background

    cluster = FakeCluster()
    cluster.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pod", "namespace": "ns1"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
    scans: list[float] = []
    scanner = BackgroundScanner(None, Store(BACKGROUND_ONLY), Reports(), interval=3600.0, cluster_data=cluster)  # type: ignore[arg-type]
    def count_scan() -> Any:
        scans.append(time.monotonic())

    scanner.scan_once = count_scan  # type: ignore[method-assign]
    settle, background.POLICY_SETTLE_SECONDS = background.POLICY_SETTLE_SECONDS, 0.05
    try:
        scanner.on_snapshot(Snapshot([], document_keys=(b"a",)))  # the policies loaded at start: the start-up scan covers them
        assert not scanner._policies_changed.is_set()
        scanner.start()
        scanner.on_snapshot(Snapshot([], document_keys=(b"a",)))
        assert not scanner._policies_changed.is_set()  # nothing changed
        scanner.on_snapshot(Snapshot([], document_keys=(b"a", b"exception")))
        deadline = time.monotonic() + 3
        while not scans and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(scans) == 1  # long before the 5 s start-up delay or the hourly interval
    finally:
        scanner.stop()
        background.POLICY_SETTLE_SECONDS = settle


def test_background_only_validating_policies_are_scanned() -> None:
    """Kyverno e2e validating-policies/report/with-exception: a ValidatingPolicy with evaluation.admission.enabled
    false is left out of admission but is exactly what background scans apply."""
    from stockade.celpolicy import CelPolicy
    from stockade.controllers.background import ScanSummary

    background_only = CelPolicy(
        {
            "apiVersion": "policies.kyverno.io/v1beta1",
            "kind": "ValidatingPolicy",
            "metadata": {"name": "vpol"},
            "spec": {"evaluation": {"admission": {"enabled": False}, "background": {"enabled": True}}, "validations": [{"expression": "true"}]},
        }
    )

    class Evaluator:
        cel_evaluator = object()
        cel_policies: list[Any] = []  # what admission serves

    scanner = BackgroundScanner(None, Store(), Reports(), cluster_data=FakeCluster())  # type: ignore[arg-type]
    snapshot = Snapshot([], evaluator=Evaluator(), cel_policies=[background_only])
    _, cel_policies, _, _, scanned = scanner._eligible(snapshot, ScanSummary())
    assert cel_policies == [background_only] and "vpol" in scanned


ADMITTED = {
    "apiVersion": "kyverno.io/v1",
    "kind": "ClusterPolicy",
    "metadata": {"name": "admitted"},
    "spec": {
        "background": True,
        "rules": [{"name": "validate", "match": {"any": [{"resources": {"kinds": ["ConfigMap"]}}]}, "validate": {"failureAction": "Audit", "deny": {}}}],
    },
}


class Watches:
    def __init__(self) -> None:
        self.ensured: list[tuple[str, str]] = []

    def ensure(self, api_version: str, kind: str) -> None:
        self.ensured.append((api_version, kind))

    def stop(self) -> None:
        pass


def test_kinds_only_background_only_policies_match_are_watched_and_their_changes_rescanned() -> None:
    """Kyverno's reports controller watches the kinds background policies match and rescans a created or changed
    object; a policy with admission disabled has no webhook to report those changes, so its kinds are watched."""
    cluster = FakeCluster()
    scanner = BackgroundScanner(None, Store(BACKGROUND_ONLY, ADMITTED), Reports(), cluster_data=cluster)  # type: ignore[arg-type]
    scanner._thread = object()  # type: ignore[assignment]  # as if started
    watches = Watches()
    scanner._watcher = watches  # type: ignore[assignment]
    scanner.scan_once()
    assert watches.ensured == [("v1", "Pod")]  # not ConfigMap: the admitted policy's webhook reports those
    scanner._on_watched("ADDED", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "new", "namespace": "ns1"}})
    assert list(scanner._changed) == [("v1", "Pod", "ns1", "new")]


def test_an_unstarted_scanner_watches_nothing() -> None:
    scanner = BackgroundScanner(None, Store(BACKGROUND_ONLY), Reports(), cluster_data=FakeCluster())  # type: ignore[arg-type]
    scanner.scan_once()
    assert scanner._watcher is None


def _document(data: dict[str, Any]) -> Any:
    from stockade.policy.loader import Document

    return Document(data, "cluster", 0)


def _with_message(policy: dict[str, Any], message: str) -> dict[str, Any]:
    import copy

    changed = copy.deepcopy(policy)
    changed["spec"]["rules"][0]["validate"]["message"] = message
    return changed


OTHER = {**BACKGROUND_ONLY, "metadata": {"name": "other"}}
EXCEPTION = {"apiVersion": "kyverno.io/v2", "kind": "PolicyException", "metadata": {"name": "e", "namespace": "ns1"}, "spec": {}}


def _snapshot(*documents: dict[str, Any]) -> Snapshot:
    import json

    snapshot = Snapshot([KyvernoPolicy(d) for d in documents if d["kind"] == "ClusterPolicy"], document_keys=tuple(json.dumps(d, sort_keys=True).encode() for d in documents))
    snapshot.documents = [_document(d) for d in documents]  # type: ignore[attr-defined]
    return snapshot


def test_which_policies_a_snapshot_change_concerns() -> None:
    from stockade.controllers.background import changed_policies, document_fingerprints

    before = document_fingerprints(_snapshot(BACKGROUND_ONLY, OTHER, EXCEPTION))
    changed = document_fingerprints(_snapshot(_with_message(BACKGROUND_ONLY, "new"), OTHER, EXCEPTION))
    assert changed_policies(before, changed) == {("ClusterPolicy", "", "validate")}
    removed = document_fingerprints(_snapshot(BACKGROUND_ONLY, EXCEPTION))
    assert changed_policies(before, removed) == {("ClusterPolicy", "", "other")}
    assert changed_policies(before, document_fingerprints(_snapshot(BACKGROUND_ONLY, OTHER, EXCEPTION))) == set()
    # an exception (or any document beyond the scanned policy kinds) can change every result: everything
    assert changed_policies(before, document_fingerprints(_snapshot(BACKGROUND_ONLY, OTHER))) is None
    assert changed_policies(None, before) is None
    policy = {**BACKGROUND_ONLY, "kind": "Policy", "metadata": {"name": "p"}}
    assert set(document_fingerprints(_snapshot(policy)) or {}) == {("Policy", "default", "p"), ("", "", "")}  # as KyvernoPolicy names it


def test_a_policy_change_rescans_with_that_policy_alone_even_when_the_store_loaded_before_the_scanner_listened() -> None:
    """Kyverno's reports controller re-evaluates resources only for policies whose hash changed.  The store's first
    snapshot is loaded before serve registers the listener: the first change seen must still count."""
    import time

    from stockade.controllers import background

    store = Store()
    store.snapshot = _snapshot(BACKGROUND_ONLY, OTHER, EXCEPTION)
    scanner = BackgroundScanner(None, store, Reports(), interval=3600.0, cluster_data=FakeCluster())  # type: ignore[arg-type]
    full: list[float] = []
    targeted: list[set[Any]] = []
    scanner.scan_once = lambda: full.append(time.monotonic())  # type: ignore[method-assign, assignment, return-value]
    scanner.scan_policies = lambda policies: targeted.append(set(policies))  # type: ignore[method-assign, assignment, return-value]
    settle, background.POLICY_SETTLE_SECONDS = background.POLICY_SETTLE_SECONDS, 0.05
    try:
        scanner.start()
        scanner.on_snapshot(_snapshot(_with_message(BACKGROUND_ONLY, "new"), OTHER, EXCEPTION))
        deadline = time.monotonic() + 3
        while not targeted and time.monotonic() < deadline:
            time.sleep(0.02)
        assert targeted == [{("ClusterPolicy", "", "validate")}] and full == []
        scanner.on_snapshot(_snapshot(_with_message(BACKGROUND_ONLY, "new"), OTHER))  # the exception went
        deadline = time.monotonic() + 3
        while not full and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(full) == 1 and len(targeted) == 1
    finally:
        scanner.stop()


def test_a_targeted_scan_evaluates_and_replaces_only_the_changed_policy() -> None:
    class Writer:
        def __init__(self) -> None:
            self.writes: list[tuple[str, list[str], frozenset[str]]] = []
            self.pruned = 0

        def submit(self, obj: dict[str, Any], responses: list[Any], **options: Any) -> None:
            self.writes.append((obj["metadata"]["name"], sorted(r.policy_name for r in responses), options["replace_policies"]))

        def flush(self) -> None:
            pass

        def prune(self, live: set[str]) -> int:
            self.pruned += 1
            return 0

    cluster = FakeCluster()
    cluster.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pod", "namespace": "ns1", "uid": "u1"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
    store, writer = Store(), Writer()
    store.snapshot = _snapshot(BACKGROUND_ONLY, OTHER)
    scanner = BackgroundScanner(None, store, writer, cluster_data=cluster)  # type: ignore[arg-type]
    summary = scanner.scan_policies({("ClusterPolicy", "", "other")})
    assert summary.policies == 1 and summary.errors == []
    assert writer.writes == [("pod", ["other"], frozenset({"other"}))]
    assert writer.pruned == 0  # nothing was removed: no report is read back
    scanner.scan_policies({("ClusterPolicy", "", "removed")})
    assert writer.pruned == 1  # a removed policy's results are dropped from every report
    scanner.scan_once()
    assert writer.writes[-1] == ("pod", ["other", "validate"], frozenset({"other", "validate"}))
