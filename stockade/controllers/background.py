"""Background scans: evaluate the loaded policies against resources that already exist and report the results.

Admission only sees what changes; a scan catches what was there before a policy arrived (Kyverno's
``background: true``, the default).  For every eligible policy the scanner lists the kinds its rules match, runs
validate rules (patterns, deny, podSecurity, CEL) and ValidatingPolicies on each object, and writes one
PolicyReport per resource through ``ReportWriter`` (a ClusterPolicyReport for cluster-scoped resources).  Each
write replaces the results of the policies the scan evaluated and drops results of policies that no longer exist;
results of admission-only policies are left alone.

Like Kyverno, a policy is not scanned when it depends on the admission request beyond the object: variables
such as ``request.userInfo``, ``request.roles``, ``serviceAccountName``, or ``roles``/``clusterRoles``/``subjects``
in match/exclude (there is no requester in a background scan).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from stockade.controllers.clusterdata import ClusterData, describe_object
from stockade.controllers.downstreamwatch import DownstreamWatcher
from stockade.controllers.reports import PROCESS_BACKGROUND, report_policy_name
import stockade.celpolicy  # noqa: F401  (registers the engine's validate.cel handler)
from stockade.celpolicy.evaluator import CelPolicyEvaluator
from stockade.celpolicy.model import CelPolicy
from stockade.engine.engine import Engine, Request
from stockade.engine.match import ResourceKind
from stockade.engine.response import FAIL, PASS, STATUSES, EngineResponse, RuleResponse, report_result
from stockade.policy.model import KyvernoPolicy, Rule
from stockade.webhook.admission import VALIDATING_POLICY_KINDS
from stockade.kube.errors import KubeError

log = logging.getLogger("stockade.background")

# Kyverno's variables that only exist during admission (pkg/validation/policy/background.go, same meaning)
_REQUEST_ONLY_VARIABLES = (
    re.compile(r"[^.](serviceAccountName)\b"),
    re.compile(r"[^.](serviceAccountNamespace)\b"),
    re.compile(r"[^.](request\.userInfo)\b"),
    re.compile(r"[^.](request\.roles)\b"),
    re.compile(r"[^.](request\.clusterRoles)\b"),
)
_VARIABLE = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_USER_MATCH_FIELDS = ("roles", "clusterRoles", "subjects")
MAX_PENDING_CHANGES = 5000  # changed resources waiting for their own scan; beyond this the periodic scan covers them
CHANGE_SETTLE_SECONDS = 2.0
POLICY_SETTLE_SECONDS = 1.0


PolicyIdentity = tuple[str, str, str]  # (kind, namespace, name)
# kinds whose change rescans only the resources of that policy; a change of any other document (exceptions,
# admission policy bindings, global context) can affect every result, so it rescans everything
_TARGETED_KINDS = frozenset({"ClusterPolicy", "Policy", *VALIDATING_POLICY_KINDS, "MutatingPolicy", "NamespacedMutatingPolicy"})


def policy_identity(policy: Any) -> PolicyIdentity:
    return (str(getattr(policy, "kind", "") or ""), str(getattr(policy, "namespace", "") or ""), str(getattr(policy, "name", "") or ""))


def _document_identity(data: dict[str, Any]) -> PolicyIdentity:
    """As ``policy_identity`` names the loaded policy: a Policy without a namespace is in "default", cluster-wide
    kinds have none."""
    kind = str(data.get("kind") or "")
    raw_metadata = data.get("metadata")
    metadata: dict[str, Any] = raw_metadata if isinstance(raw_metadata, dict) else {}
    namespace = str(metadata.get("namespace") or "")
    if kind == "Policy":
        namespace = namespace or "default"
    elif not kind.startswith("Namespaced"):
        namespace = ""
    return kind, namespace, str(metadata.get("name") or "")


def document_fingerprints(snapshot: Any) -> dict[PolicyIdentity, bytes]:
    """Each targeted policy document's content key, and the other documents' keys under one entry (all keys there
    when the snapshot does not pair keys with documents: then any change rescans everything)."""
    documents = list(getattr(snapshot, "documents", ()) or ())
    keys = list(getattr(snapshot, "document_keys", ()) or ())
    if len(documents) != len(keys):
        return {("", "", ""): b"\0".join(keys)}
    fingerprints: dict[PolicyIdentity, bytes] = {}
    others: list[bytes] = []
    for document, key in zip(documents, keys):
        data = getattr(document, "data", None)
        if isinstance(data, dict) and data.get("kind") in _TARGETED_KINDS:
            fingerprints[_document_identity(data)] = key
        else:
            others.append(key)
    fingerprints[("", "", "")] = b"\0".join(sorted(others))
    return fingerprints


def changed_policies(before: dict[PolicyIdentity, bytes] | None, after: dict[PolicyIdentity, bytes] | None) -> set[PolicyIdentity] | None:
    """The policies added, changed or removed between two snapshots; None when everything must be rescanned (a
    change beyond the targeted policies, or fingerprints unknown)."""
    if before is None or after is None:
        return None
    if before.get(("", "", "")) != after.get(("", "", "")):
        return None
    return {identity for identity in set(before) | set(after) if before.get(identity) != after.get(identity)}


def background_blocker(policy: KyvernoPolicy) -> str:
    """Why a policy cannot be evaluated in the background ('' when it can)."""
    if not policy.background:
        return "spec.background is false"
    return requester_dependency(policy)


def requester_dependency(policy: KyvernoPolicy) -> str:
    """How a policy depends on the admission's requester, which a background pass does not have (Kyverno's
    ``ValidateVariables`` in background mode): roles/subjects in match/exclude, or (unless it mutates existing
    resources) a requester-only variable; '' when it does not."""
    for index, rule in enumerate(policy.rules):
        field_path = _user_match_field(rule)
        if field_path:
            return f"rule {rule.name} (spec/rules[{index}]) selects requesters with {field_path}"
    if any(rule.has_mutate_existing() for rule in policy.declared_rules):
        return ""
    for rule in policy.rules:
        for variable in _VARIABLE.findall(json.dumps(rule.raw)):
            text = " " + variable.strip()
            for pattern in _REQUEST_ONLY_VARIABLES:
                found = pattern.search(text)
                if found:
                    return f"rule {rule.name} uses {found.group(1)}, which only exists during admission"
    return ""


def _user_match_field(rule: Rule) -> str:
    blocks: list[tuple[str, dict[str, Any]]] = []
    for section_name, section in (("match", rule.match), ("exclude", rule.exclude)):
        blocks.append((section_name, section))
        for key in ("any", "all"):
            for index, entry in enumerate(section.get(key) or []):
                blocks.append((f"{section_name}/{key}[{index}]", entry or {}))
    for path, block in blocks:
        for name in _USER_MATCH_FIELDS:
            if block.get(name):
                return f"{path}/{name}"
    return ""


def scanned_rules_only(response: EngineResponse) -> EngineResponse:
    """Drop verifyImages-only results: their outcome needs this process's own verification of the admission."""
    policy = response.policy
    verify_only = {rule.name for rule in getattr(policy, "rules", []) if rule.has_verify_images() and not rule.has_validate()}
    if verify_only:
        response.rules = [r for r in response.rules if r.name not in verify_only]
    return response


def cel_background_enabled(policy: Any) -> bool:
    evaluation = policy.spec.get("evaluation") or {}
    background = evaluation.get("background") or {}
    return bool(background.get("enabled", True))


VALIDATING_POLICY_KINDS = ("ValidatingPolicy", "NamespacedValidatingPolicy")
MUTATING_POLICY_KINDS = ("MutatingPolicy", "NamespacedMutatingPolicy")
SCANNED_CEL_KINDS = VALIDATING_POLICY_KINDS + MUTATING_POLICY_KINDS
MUTATION_NOT_APPLIED = "mutation is not applied"
MUTATION_APPLIED = "mutation is successfully applied"
# Kubernetes' own admission policies are enforced by the API server; Kyverno's reports controller only reports on
# those that opt in with this label (and when its --validating/mutatingAdmissionPolicyReports is on)
REPORTS_LABEL = "reports.kyverno.io/enabled"


class ReportedAdmissionPolicy(CelPolicy):
    """A ValidatingAdmissionPolicy or MutatingAdmissionPolicy opted into reports, with the bindings naming it."""

    def __init__(self, data: dict[str, Any], origin: str, bindings: list[CelPolicy]) -> None:
        super().__init__(data, origin)
        self.bindings = bindings


def reported_admission_policies(documents: Any, kinds: frozenset[str]) -> list[ReportedAdmissionPolicy]:
    """The admission policies of ``kinds`` among ``documents`` that carry ``reports.kyverno.io/enabled: "true"``."""
    if not kinds:
        return []
    data = [getattr(d, "data", d) for d in documents or ()]
    found = []
    for policy in data:
        kind = policy.get("kind")
        labels = (policy.get("metadata") or {}).get("labels") or {}
        if kind not in kinds or str(labels.get(REPORTS_LABEL, "")).lower() != "true":
            continue
        name = (policy.get("metadata") or {}).get("name")
        bindings = [CelPolicy(b) for b in data if b.get("kind") == f"{kind}Binding" and (b.get("spec") or {}).get("policyName") == name]
        found.append(ReportedAdmissionPolicy(policy, "", sorted(bindings, key=lambda b: b.name)))
    return found


def admission_policy_scan(evaluator: Any, policy: ReportedAdmissionPolicy, request: Any, obj: dict[str, Any]) -> EngineResponse | None:
    """One admission policy on one stored object, as Kyverno's reports controller judges it: a result per binding
    that selects the object (properties ``binding`` / ``mapBinding``), or one for the policy alone when it has no
    binding.  A MutatingAdmissionPolicy passes when its mutation would change nothing ("mutation is successfully
    applied": the API server applied it on admission) and fails when it would ("mutation is not applied")."""
    mutating = policy.kind == "MutatingAdmissionPolicy"
    combined: EngineResponse | None = None
    choices: list[CelPolicy | None] = list(policy.bindings) or [None]
    for binding in choices:
        bindings = [binding] if binding is not None else []
        if mutating:
            response = evaluator.mutate_admission(policy, bindings, request)
        else:
            response = evaluator.validate_admission(policy, bindings, request)
        if response is None or not response.rules:
            continue
        for rule in response.rules:
            if mutating and rule.status == PASS:
                applied = same_object(obj, response.patched_resource)
                rule.status, rule.message = (PASS, MUTATION_APPLIED) if applied else (FAIL, MUTATION_NOT_APPLIED)
            if binding is not None:
                rule.properties = {**(rule.properties or {}), ("mapBinding" if mutating else "binding"): binding.name}
        if combined is None:
            combined = response
        else:
            combined.rules.extend(response.rules)
    return combined


def mutation_scan(cel_evaluator: Any, policy: Any, request: Any, obj: dict[str, Any]) -> EngineResponse | None:
    """A MutatingPolicy in a background scan, as Kyverno's reports scanner judges it: the policy runs as on a CREATE
    of the stored object; a mutation that would change it fails ("mutation is not applied"), one that changes
    nothing passes; skips (match conditions) and exception results are kept as they are."""
    response: EngineResponse | None = cel_evaluator.mutate(policy, request)
    if response is None:
        return None
    patched = response.patched_resource
    for index, rule in enumerate(response.rules):
        if rule.status == PASS and not rule.exceptions and not same_object(obj, patched):
            response.rules[index] = RuleResponse(rule.name, rule.rule_type, FAIL, MUTATION_NOT_APPLIED)
    return response


def same_object(first: Any, second: Any) -> bool:
    """Kubernetes' semantic equality of two JSON objects (an empty map or list equals an absent one)."""
    return bool(_normalised(first) == _normalised(second))


def _normalised(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _normalised(v) for k, v in value.items() if v not in ({}, [], None)}
    if isinstance(value, list):
        return [_normalised(v) for v in value]
    return value


@dataclass
class ScanSummary:
    """What one scan did; ``as_metrics()`` flattens it for gauges."""

    started: float = 0.0
    duration_seconds: float = 0.0
    policies: int = 0
    skipped_policies: dict[str, str] = field(default_factory=dict)
    resources: int = 0
    reports_submitted: int = 0
    results: dict[str, int] = field(default_factory=lambda: {status: 0 for status in STATUSES})
    errors: list[str] = field(default_factory=list)
    pruned_reports: int = 0

    def as_metrics(self) -> dict[str, float]:
        metrics: dict[str, float] = {
            "duration_seconds": self.duration_seconds,
            "policies": float(self.policies),
            "skipped_policies": float(len(self.skipped_policies)),
            "resources": float(self.resources),
            "reports_submitted": float(self.reports_submitted),
            "errors": float(len(self.errors)),
            "pruned_reports": float(self.pruned_reports),
        }
        for status, count in self.results.items():
            metrics[f"results_{status}"] = float(count)
        return metrics


class BackgroundScanner:
    """Periodic (leader-only) background scans writing PolicyReports."""

    def __init__(
        self,
        api_client: Any,
        store: Any,
        report_writer: Any,
        interval: float = 3600.0,
        is_leader: Callable[[], bool] = lambda: True,
        *,
        cluster_data: ClusterData | None = None,
        events: Any = None,
        admission_policy_kinds: tuple[str, ...] = (),
    ) -> None:
        self.api_client = api_client
        # ValidatingAdmissionPolicy / MutatingAdmissionPolicy kinds reported on (Kyverno's reports controller flags)
        self.admission_policy_kinds = frozenset(admission_policy_kinds)
        # Kubernetes' admission policies need no Kyverno library: one plain evaluator keeps their compiled programs
        self._admission_evaluator = CelPolicyEvaluator()
        self.events = events  # an EventRecorder: Kyverno's scan reports violations as Events too
        self.store = store
        self.reports = report_writer
        self.interval = interval
        self.is_leader = is_leader
        self.cluster = cluster_data or ClusterData(api_client, ttl_seconds=30.0)
        self.last_summary: ScanSummary | None = None
        self.scans = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # resources admitted since the last per-resource pass: Kyverno's background controller rescans a resource
        # when it changes, not only on the periodic full scan
        self._changed: dict[tuple[str, str, str, str], None] = {}
        self._changed_lock = threading.Lock()
        self._wake = threading.Event()
        self._scan_lock = threading.Lock()
        self._changes_thread: threading.Thread | None = None
        # a policy or exception change asks for a scan soon, as Kyverno's reports controller rescans existing
        # resources when policies or exceptions change (not only on its periodic schedule).  Like Kyverno, which
        # re-evaluates a resource only for policies whose hash changed, a change of some policies rescans with those
        # policies alone (the other results stay); any other change (exceptions, bindings) rescans everything.
        self._policies_changed = threading.Event()
        self._fingerprints: dict[PolicyIdentity, bytes] | None = None
        self._seen_snapshot = False
        self._pending_policies: set[PolicyIdentity] = set()
        self._pending_full = False
        # watches of the kinds background-only policies match (no webhook reports their changes); started by a scan
        self._watcher: DownstreamWatcher | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Scan shortly after start, then every ``interval`` seconds (0 disables)."""
        if self.interval <= 0 or self._thread is not None:
            return
        snapshot = getattr(self.store, "snapshot", None)
        if snapshot is not None and not self._seen_snapshot:  # loaded before we listen: the first scan covers it
            self._seen_snapshot, self._fingerprints = True, document_fingerprints(snapshot)
        self._thread = threading.Thread(target=self._run, name="background-scan", daemon=True)
        self._thread.start()
        self._changes_thread = threading.Thread(target=self._run_changes, name="background-scan-changes", daemon=True)
        self._changes_thread.start()

    def on_snapshot(self, snapshot: Any) -> None:
        """Store listener: schedules a scan of the policies that changed since the last snapshot seen (of all of
        them for other changes).  The first snapshot is covered by the scan shortly after start."""
        fingerprints = document_fingerprints(snapshot)
        with self._changed_lock:
            before, first = self._fingerprints, not self._seen_snapshot
            self._seen_snapshot, self._fingerprints = True, fingerprints
            if first:
                return
            changed = changed_policies(before, fingerprints)
            if changed is None:
                self._pending_full = True
            elif changed:
                self._pending_policies |= changed
            else:
                return
        self._policies_changed.set()

    def _take_pending(self) -> tuple[bool, set[PolicyIdentity]]:
        with self._changed_lock:
            full, policies = self._pending_full, self._pending_policies
            self._pending_full, self._pending_policies = False, set()
        return full, policies

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.stop()
        self._wake.set()
        self._policies_changed.set()
        for thread in (self._thread, self._changes_thread):
            if thread is not None:
                thread.join(timeout)
        self._thread = self._changes_thread = None

    def notify(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Queue one changed resource for a scan of its own (False when the queue is full: the periodic scan covers it)."""
        with self._changed_lock:
            if len(self._changed) >= MAX_PENDING_CHANGES:
                return False
            self._changed[(api_version, kind, namespace, name)] = None
        self._wake.set()
        return True

    def watch_unadmitted(self, resources: list[tuple[str, str]]) -> None:
        """Watch these (apiVersion, kind): the kinds a background-only policy or a reported-on Kubernetes admission
        policy matches.  Kyverno's reports controller watches every kind background policies match and rescans an
        object when it changes; for kinds some policy's webhook sees, admitted requests already queue that rescan
        (``notify``), but these policies have no webhook of ours, so a new or changed object would wait for the
        periodic scan."""
        if not resources or self._stop.is_set() or self._thread is None:
            return
        if self._watcher is None:
            self._watcher = DownstreamWatcher(self.cluster, self._on_watched, event_types=("ADDED", "MODIFIED"))
        for api_version, kind in resources:
            self._watcher.ensure(api_version, kind)

    def _on_watched(self, _event_type: str, obj: dict[str, Any]) -> None:
        metadata = obj.get("metadata")
        if not isinstance(metadata, dict):
            return
        name = str(metadata.get("name") or "")
        if name and obj.get("apiVersion") and obj.get("kind"):
            self.notify(str(obj["apiVersion"]), str(obj["kind"]), str(metadata.get("namespace") or ""), name)

    def _run_changes(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            if self._stop.wait(CHANGE_SETTLE_SECONDS):  # let the object be stored (and its uid known)
                return
            self._wake.clear()
            with self._changed_lock:
                changed, self._changed = list(self._changed), {}
            try:
                if changed and self.is_leader():
                    self.scan_resources(changed)
            except Exception:  # a failed pass must not end the worker
                log.exception("background scan of changed resources failed")

    def _run(self) -> None:
        delay = 5.0  # let policies load and the lease settle
        periodic = True  # the first pass and each one after ``interval`` scan everything
        while True:
            if self._policies_changed.wait(delay):
                self._policies_changed.clear()
                # let the policy's webhooks and status settle, and fold a burst of changes into one scan
                if self._stop.wait(POLICY_SETTLE_SECONDS):
                    return
                self._policies_changed.clear()
                periodic = False
            if self._stop.is_set():
                return
            full, changed = self._take_pending()
            try:
                if self.is_leader():
                    if periodic or full:
                        self.scan_once()
                    elif changed:
                        self.scan_policies(changed)
            except Exception:  # a failed scan must not end the schedule
                log.exception("background scan failed")
            delay, periodic = self.interval, True

    # -- scanning --------------------------------------------------------------------------------------------------
    def scan_resources(self, references: list[tuple[str, str, str, str]]) -> ScanSummary:
        """Scan the named resources (apiVersion, kind, namespace, name) as the periodic scan would: reports and
        Events for the background policies; resources gone since are skipped."""
        with self._scan_lock:
            summary = ScanSummary(started=time.time())
            began = time.monotonic()
            snapshot = self.store.snapshot
            if snapshot is None:
                summary.errors.append("policies are not loaded")
                return summary
            policies, cel_policies, cel_evaluator, live, scanned = self._eligible(snapshot, summary)
            summary.policies = len(policies) + len(cel_policies)
            if not policies and not cel_policies:
                return summary
            exceptions = list(getattr(getattr(snapshot.evaluator, "engine", None), "exceptions", []) or [])
            engine = Engine(providers=self.cluster.providers(), exceptions=exceptions, resource_lookup=self.cluster.lookup)
            for api_version, kind, namespace, name in references:
                try:
                    obj = self.cluster.get_object(api_version, kind, namespace, name, cached=False)
                except KubeError as exc:
                    summary.errors.append(f"reading {kind} {namespace}/{name}: {exc}")
                    continue
                if obj is None:
                    continue
                summary.resources += 1
                responses = self._evaluate(engine, obj, policies, cel_policies, cel_evaluator, summary)
                self._publish(obj, responses, summary, scanned, live)
            summary.duration_seconds = time.monotonic() - began
            return summary

    def _publish(self, obj: dict[str, Any], responses: list[EngineResponse], summary: ScanSummary, scanned: frozenset[str], live: set[str]) -> None:
        for response in responses:
            for rule in response.rules:
                summary.results[report_result(response, rule)] += 1
        if self.events is not None:
            self.events.record_scan(obj, responses)
        if self.reports is not None and (obj.get("metadata") or {}).get("uid"):
            self.reports.submit(obj, responses, process=PROCESS_BACKGROUND, replace_policies=scanned, live_policies=live, wait=True)
            summary.reports_submitted += 1

    def _eligible(self, snapshot: Any, summary: ScanSummary) -> tuple[list[KyvernoPolicy], list[Any], Any, set[str], frozenset[str]]:
        """The policies a scan evaluates (skipped ones noted in ``summary``), the CEL evaluator, the live and scanned
        report policy names."""
        policies: list[KyvernoPolicy] = []
        for policy in snapshot.policies:
            if not policy.has_validate():
                continue
            reason = background_blocker(policy)
            if reason:
                summary.skipped_policies[policy.key] = reason
                continue
            policies.append(policy)
        cel_evaluator = getattr(snapshot.evaluator, "cel_evaluator", None)
        # Validating and MutatingPolicies with background processing on, from the snapshot, not the admission
        # evaluator: that one leaves out background-only policies (evaluation.admission.enabled false)
        cel_policies = [p for p in getattr(snapshot, "cel_policies", []) or [] if p.kind in SCANNED_CEL_KINDS and cel_background_enabled(p)] if cel_evaluator else []
        admission_policies = reported_admission_policies(getattr(snapshot, "documents", ()), self.admission_policy_kinds)
        cel_policies += admission_policies
        live = {report_policy_name(p) for p in snapshot.policies} | {report_policy_name(p) for p in getattr(snapshot, "cel_policies", []) or []}
        live |= {report_policy_name(p) for p in admission_policies}
        scanned = frozenset(report_policy_name(p) for p in policies + cel_policies)
        return policies, cel_policies, cel_evaluator, live, scanned

    def scan_once(self) -> ScanSummary:
        with self._scan_lock:
            return self._scan_all()

    def scan_policies(self, policies: set[PolicyIdentity]) -> ScanSummary:
        """Rescan with these policies alone (added or changed ones are evaluated on what they match; results of
        removed ones are dropped from every report); other policies' results are kept as they are."""
        with self._scan_lock:
            return self._scan_all(only=policies)

    def _scan_all(self, only: set[PolicyIdentity] | None = None) -> ScanSummary:
        summary = ScanSummary(started=time.time())
        began = time.monotonic()
        snapshot = self.store.snapshot
        if snapshot is None:
            summary.errors.append("policies are not loaded")
            return self._finish(summary, began)
        self.cluster.invalidate()
        policies, cel_policies, cel_evaluator, live, scanned = self._eligible(snapshot, summary)
        if only is not None:
            policies = [p for p in policies if policy_identity(p) in only]
            cel_policies = [p for p in cel_policies if policy_identity(p) in only]
            scanned = frozenset(report_policy_name(p) for p in policies + cel_policies)
        summary.policies = len(policies) + len(cel_policies)

        targets = self._targets(policies, cel_policies, summary)
        exceptions = list(getattr(getattr(snapshot.evaluator, "engine", None), "exceptions", []) or [])
        engine = Engine(providers=self.cluster.providers(), exceptions=exceptions, resource_lookup=self.cluster.lookup)
        for resource_objects, kyverno_policies, cel_for_kind in targets:
            for obj in resource_objects:
                summary.resources += 1
                responses = self._evaluate(engine, obj, kyverno_policies, cel_for_kind, cel_evaluator, summary)
                self._publish(obj, responses, summary, scanned, live)
        removed = only is not None and not only <= {policy_identity(p) for p in [*snapshot.policies, *(getattr(snapshot, "cel_policies", []) or [])]}
        if self.reports is not None and hasattr(self.reports, "prune") and (only is None or removed):
            if hasattr(self.reports, "flush"):
                self.reports.flush()
            try:
                summary.pruned_reports = self.reports.prune(live)
            except Exception as exc:
                summary.errors.append(f"pruning reports failed: {exc}")
        return self._finish(summary, began)

    def _finish(self, summary: ScanSummary, began: float) -> ScanSummary:
        summary.duration_seconds = time.monotonic() - began
        self.last_summary = summary
        self.scans += 1
        log.info(
            "background scan: %d policies, %d resources, results %s, %d errors in %.1fs",
            summary.policies, summary.resources, summary.results, len(summary.errors), summary.duration_seconds,
        )
        return summary

    def _targets(self, policies: list[KyvernoPolicy], cel_policies: list[Any], summary: ScanSummary) -> list[tuple[Iterator[dict[str, Any]], list[KyvernoPolicy], list[Any]]]:
        """Objects to scan grouped by listed resource, each with the policies that may match it."""
        from stockade.controllers.webhookconfig import cel_resource_rules, rule_kinds

        by_resource: dict[tuple[str, str, str], tuple[Any, list[KyvernoPolicy], list[Any], set[str]]] = {}
        unadmitted: dict[tuple[str, str], None] = {}

        def add(resource: Any, namespace: str, policy: Any, cel: bool) -> None:
            key = (resource.group, resource.version, resource.resource)
            # no webhook of ours sees these policies' resources change: background-only policies, and Kubernetes'
            # admission policies (the API server enforces them)
            unseen = isinstance(policy, ReportedAdmissionPolicy) or not getattr(policy, "admission", True)
            if unseen and "/" not in resource.resource:
                unadmitted[(f"{resource.group}/{resource.version}" if resource.group else resource.version, resource.kind)] = None
            entry = by_resource.setdefault(key, (resource, [], [], set()))
            bucket = entry[2] if cel else entry[1]
            if all(p is not policy for p in bucket):
                bucket.append(policy)
            entry[3].add(namespace)

        for policy in policies:
            for rule in policy.rules:
                if not rule.has_validate():
                    continue
                for selector in rule_kinds(rule):
                    if selector.split("/")[-1] == "*":
                        summary.errors.append(f"policy {policy.key} rule {rule.name}: wildcard kind {selector!r} is not scanned")
                        continue
                    try:
                        for resource in self.cluster.resources_for_selector(selector):
                            add(resource, policy.namespace, policy, False)
                    except KubeError as exc:
                        summary.errors.append(f"discovery for {selector}: {exc}")
        for policy in cel_policies:
            for group, version, plural, _operations in cel_resource_rules(policy):
                if "/" in plural or plural == "*":
                    continue
                for resource in self.cluster.api_resources():
                    if (group in ("*", resource.group)) and (version in ("*", resource.version)) and resource.resource == plural:
                        add(resource, str(getattr(policy, "namespace", "") or ""), policy, True)
                        break

        targets = []
        for resource, kyverno_policies, cel_for_kind, namespaces in by_resource.values():
            # one cluster-wide listing unless every interested policy is namespaced
            listing_namespaces = [""] if "" in namespaces or not resource.namespaced else sorted(namespaces)
            targets.append((self._listed(resource, listing_namespaces, summary), kyverno_policies, cel_for_kind))
        self.watch_unadmitted(list(unadmitted))
        return targets

    def _listed(self, resource: Any, namespaces: list[str], summary: ScanSummary) -> Iterator[dict[str, Any]]:
        """The objects of ``resource`` in ``namespaces``, read a page at a time as the scan evaluates them (a
        cluster's Pods are never all in memory at once); a failed listing is noted in ``summary``."""
        for namespace in namespaces:
            try:
                yield from self.cluster.iter_resource(resource, namespace)
            except KubeError as exc:
                summary.errors.append(f"listing {resource.resource}: {exc}")

    def _evaluate(
        self,
        engine: Engine,
        obj: dict[str, Any],
        policies: list[KyvernoPolicy],
        cel_policies: list[Any],
        cel_evaluator: Any,
        summary: ScanSummary,
    ) -> list[EngineResponse]:
        metadata = obj.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "")
        labels = self.cluster.namespace_labels(namespace) if namespace and obj.get("kind") != "Namespace" else {}
        responses: list[EngineResponse] = []
        for policy in policies:
            if policy.namespace and policy.namespace != namespace:
                continue
            try:
                request = Request(resource=obj, operation="CREATE", namespace_labels=labels, gvk=ResourceKind.of(obj))
                response = scanned_rules_only(engine.validate(engine.policy_context(policy, request)))
            except Exception as exc:  # one broken evaluation must not end the scan
                summary.errors.append(f"policy {policy.key} on {describe_object(obj)}: {exc}")
                continue
            if response.rules:
                responses.append(response)
        if cel_policies:
            from stockade.celpolicy import AdmissionInput

            cel_input = AdmissionInput(object=obj, operation="CREATE", namespace_labels=labels)
            for policy in cel_policies:
                policy_namespace = str(getattr(policy, "namespace", "") or "")
                if policy_namespace and policy_namespace != namespace:
                    continue
                try:
                    if isinstance(policy, ReportedAdmissionPolicy):
                        cel_response = admission_policy_scan(self._admission_evaluator, policy, cel_input, obj)
                    elif cel_evaluator is None:
                        continue
                    elif policy.kind in MUTATING_POLICY_KINDS:
                        cel_response = mutation_scan(cel_evaluator, policy, cel_input, obj)
                    else:
                        cel_response = cel_evaluator.validate(policy, cel_input)
                except Exception as exc:
                    summary.errors.append(f"policy {getattr(policy, 'name', '')} on {describe_object(obj)}: {exc}")
                    continue
                if cel_response is not None and cel_response.rules:
                    responses.append(cel_response)
        return responses
