"""PolicyReports (wgpolicyk8s.io/v1alpha2, or openreports.io/v1alpha1 Reports) for admitted and background-scanned
resources, written in the background.

One report per resource, named after its UID and owned by it (so garbage collection removes it with the resource),
as Kyverno's reports controller ends up doing.  Writing never delays an admission answer: results go into a
bounded queue drained by a thread; when the queue is full or the PolicyReport CRD is not installed, results are
dropped (and counted) rather than retried forever.

Admission and background scans write the same report: each write replaces the results of the policies it
evaluated and keeps the others, and a background write also drops results of policies that no longer exist.
"""

from __future__ import annotations

import datetime as dt
import heapq
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

from stockade.engine.response import STATUSES, EngineResponse, RuleResponse, report_result
from stockade.policy.model import RULE_TYPE_GENERATION, RULE_TYPE_IMAGE_VERIFY, RULE_TYPE_MUTATION, RULE_TYPE_VALIDATION, KyvernoPolicy
from stockade.kube.client import KubeClient
from stockade.kube.errors import AlreadyExists, Conflict, KubeError, NotFound
from stockade.kube.informer import RawListWatch

log = logging.getLogger("stockade.reports")



@dataclass(frozen=True)
class ReportApi:
    """Where reports are written: the API group/version and the namespaced and cluster-scoped kinds.  Kyverno writes
    wgpolicyk8s.io PolicyReports, or with ``openreportsEnabled`` the openreports.io Reports that succeed them (the
    same document shape under new names)."""

    group: str
    version: str
    kind: str
    plural: str
    cluster_kind: str
    cluster_plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def plural_for(self, namespace: str | None) -> str:
        return self.plural if namespace else self.cluster_plural


POLICY_REPORTS = ReportApi("wgpolicyk8s.io", "v1alpha2", "PolicyReport", "policyreports", "ClusterPolicyReport", "clusterpolicyreports")
OPEN_REPORTS = ReportApi("openreports.io", "v1alpha1", "Report", "reports", "ClusterReport", "clusterreports")
# Kyverno's reports carry managed-by=kyverno and the tools that read them (policy-reporter, Kyverno's own e2e
# suite) select on it, so Stockade's reports do too; reports written by earlier Stockade versions said "stockade"
# and are still ours to prune.
MANAGED_BY_KEY = "app.kubernetes.io/managed-by"
MANAGED_BY = {MANAGED_BY_KEY: "kyverno"}
OWNED_SELECTOR = f"{MANAGED_BY_KEY} in (kyverno,stockade)"
CRD_RETRY_SECONDS = 300.0
WAIT_SECONDS = 120.0  # how long a background scan waits for room in the queue before a report is dropped
# reports a background scan (or another waiting submitter) may have queued and not yet written: the scan blocks
# beyond it, so it holds this many built reports at most, not the whole queue's capacity
WAITING_BACKLOG = 64
PRUNE_PAGE_SIZE = 100  # reports read per request when pruning (each holds one result per policy)
PROCESS_ADMISSION = "admission review"
PROCESS_BACKGROUND = "background scan"


REPORT_KINDS = ("validate", "mutate", "mutateExisting", "imageVerify", "generate")
_RULE_TYPE_REPORT_KINDS = {
    RULE_TYPE_VALIDATION: "validate",
    RULE_TYPE_MUTATION: "mutate",
    RULE_TYPE_IMAGE_VERIFY: "imageVerify",
    RULE_TYPE_GENERATION: "generate",
}


@dataclass(frozen=True)
class ReportingConfig:
    """Which results reach reports: Kyverno's ``--enableReporting`` (per rule kind; results of mutate-existing
    rules count as ``mutateExisting``) and ``--allowedResults`` (per rule status, before an unscored failure
    becomes a warning)."""

    kinds: frozenset[str] = frozenset(REPORT_KINDS)
    results: frozenset[str] = frozenset(STATUSES)

    @classmethod
    def parse(cls, kinds: str | None = None, results: str | None = None) -> "ReportingConfig":
        """From the comma-separated flag values; a ValueError names an unknown entry and the accepted ones."""

        def entries(text: str | None, accepted: tuple[str, ...], what: str) -> frozenset[str]:
            if text is None:
                return frozenset(accepted)
            chosen = frozenset(item.strip() for item in text.split(",") if item.strip())
            unknown = sorted(chosen - set(accepted))
            if unknown:
                raise ValueError(f"unknown {what} {', '.join(unknown)} (accepted: {','.join(accepted)})")
            return chosen

        return cls(entries(kinds, REPORT_KINDS, "report kind"), entries(results, tuple(STATUSES), "result"))

    def admits(self, rule: RuleResponse, existing: bool = False) -> bool:
        kind = "mutateExisting" if existing and rule.rule_type == RULE_TYPE_MUTATION else _RULE_TYPE_REPORT_KINDS.get(rule.rule_type, "validate")
        if kind not in self.kinds:
            return False
        if kind == "generate" and not rule.generated_resources:
            return True  # Kyverno filters generate results by status only when they produced resources
        return rule.status in self.results


def report_policy_name(policy: Any) -> str:
    """How a report result names its policy: ``namespace/name`` for namespaced policies, else the name."""
    namespace = str(getattr(policy, "namespace", "") or "")
    name = str(getattr(policy, "name", "") or "")
    return f"{namespace}/{name}" if namespace else name


# Kyverno's report sources for the policies.kyverno.io kinds (its ClusterPolicies report "kyverno")
_CEL_SOURCES = {
    "ValidatingPolicy": "KyvernoValidatingPolicy",
    "ImageValidatingPolicy": "KyvernoImageValidatingPolicy",
    "MutatingPolicy": "KyvernoMutatingPolicy",
    "GeneratingPolicy": "KyvernoGeneratingPolicy",
}


def report_source(policy: Any) -> str:
    """A result's ``source``: ``kyverno`` for ClusterPolicy/Policy, Kyverno's name for the other kinds."""
    if isinstance(policy, KyvernoPolicy):
        return "kyverno"
    base = str(getattr(policy, "base_kind", "") or "kyverno")
    return _CEL_SOURCES.get(base, base)


def report_process(policy: Any, default: str) -> str:
    """The ``process`` property as Kyverno writes it: decided by the policy, not by the evaluation that produced the
    result ("background scan" when the policy has background processing on, else "admission review"; always
    "admission review" for GeneratingPolicies and "background scan" for admission policies)."""
    if isinstance(policy, KyvernoPolicy):
        background = policy.spec.get("background") is not False
        return PROCESS_BACKGROUND if background else PROCESS_ADMISSION
    base = str(getattr(policy, "base_kind", "") or "")
    if base == "GeneratingPolicy":
        return PROCESS_ADMISSION
    if base in ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"):
        return PROCESS_BACKGROUND
    if base in ("ValidatingPolicy", "MutatingPolicy", "ImageValidatingPolicy"):
        if getattr(policy, "background", True):
            return PROCESS_BACKGROUND
        return PROCESS_ADMISSION if getattr(policy, "admission", True) else ""
    return default


def gvk_string(api_version: str, kind: str) -> str:
    """Go's ``schema.GroupVersionKind.String()``: ``group/version, Kind=kind`` (``/v1, Kind=ConfigMap`` for core)."""
    group, _, version = api_version.rpartition("/")
    return f"{group}/{version}, Kind={kind}"


def resource_reference(obj: dict[str, Any]) -> str:
    """How Kyverno's report properties name a resource: ``/v1, Kind=Secret Name=x Namespace=y``."""
    metadata = obj.get("metadata") or {}
    reference = f"{gvk_string(str(obj.get('apiVersion') or ''), str(obj.get('kind') or ''))} Name={metadata.get('name', '')}"
    return reference + (f" Namespace={metadata['namespace']}" if metadata.get("namespace") else "")


def submit_rule_result(
    reports: Any, policy: Any, trigger: dict[str, Any], rule: RuleResponse, process: str = PROCESS_ADMISSION, existing: bool = False
) -> None:
    """Put one rule's result into the trigger's report, as the generate and mutate-existing controllers do after
    acting; a failure is logged, never raised (reporting must not stop their work).  These controllers run in the
    background, so like scans they wait for room in the queue rather than drop the result."""
    response = EngineResponse(policy, trigger, trigger)
    response.rules.append(rule)
    submit_rule_results(reports, trigger, response, process=process, existing=existing)


def submit_rule_results(reports: Any, trigger: dict[str, Any], response: EngineResponse, process: str = PROCESS_ADMISSION, existing: bool = False) -> None:
    """`submit_rule_result` for several results of one policy at once (so they land in the report together, not
    each replacing the policy's previous ones)."""
    try:
        reports.submit(trigger, [response], process=process, wait=True, existing=existing)
    except Exception as exc:
        log.warning("reporting %s on %s/%s failed: %s", getattr(response.policy, "key", ""), trigger.get("kind", ""), (trigger.get("metadata") or {}).get("name", ""), exc)


def result_properties(rule: RuleResponse, process: str) -> dict[str, str]:
    """A result's properties as Kyverno fills them: the rule's own (audit annotations), the exceptions that
    applied, the resources a generate rule produced, and the process that evaluated it."""
    properties = {str(k): str(v) for k, v in (rule.properties or {}).items()}
    if rule.exceptions:
        properties["exceptions"] = ",".join(key.rpartition("/")[2] for key in rule.exceptions)  # names, as Kyverno
    if rule.rule_type == RULE_TYPE_GENERATION and rule.generated_resources:
        properties["generated-resources"] = "; ".join(resource_reference(generated) for generated in rule.generated_resources)
    properties["process"] = process
    return properties


REPORTS_DISABLED_LABEL = "reports.kyverno.io/disabled"


def reports_disabled(policy: Any) -> bool:
    """A policy labelled ``reports.kyverno.io/disabled: "true"`` never appears in reports (Kyverno's opt-out)."""
    labels = getattr(policy, "labels", None) or {}
    return str(labels.get(REPORTS_DISABLED_LABEL, "")).lower() == "true"


def build_report(
    resource: dict[str, Any],
    responses: list[EngineResponse],
    now: dt.datetime | None = None,
    *,
    process: str = PROCESS_ADMISSION,
    allow_empty: bool = False,
    api: ReportApi = POLICY_REPORTS,
    reporting: ReportingConfig = ReportingConfig(),
    existing: bool = False,
) -> dict[str, Any] | None:
    """The PolicyReport (or ClusterPolicyReport for cluster-scoped resources; the kinds of ``api``); None when nothing
    was evaluated (unless ``allow_empty``, which a background scan uses to clear results that no longer apply)."""
    metadata = resource.get("metadata") or {}
    uid = str(metadata.get("uid") or "")
    if not uid:
        return None
    now = now or dt.datetime.now(dt.timezone.utc)
    results = []
    summary = {status: 0 for status in STATUSES}
    for response in responses:
        policy = response.policy
        if reports_disabled(policy):
            continue
        annotations = getattr(policy, "annotations", {}) or {}
        for rule in response.rules:
            if not reporting.admits(rule, existing):
                continue
            result = report_result(response, rule)
            summary[result] += 1
            entry: dict[str, Any] = {
                "source": report_source(policy),
                "policy": report_policy_name(policy) or response.policy_name,
                "rule": rule.name,
                "result": result,
                "message": rule.message,
                "scored": str(annotations.get("policies.kyverno.io/scored", "")) != "false",
                "timestamp": {"seconds": int(now.timestamp()), "nanos": 0},
                "properties": result_properties(rule, report_process(policy, process)),
            }
            if annotations.get("policies.kyverno.io/severity"):
                entry["severity"] = annotations["policies.kyverno.io/severity"]
            if annotations.get("policies.kyverno.io/category"):
                entry["category"] = annotations["policies.kyverno.io/category"]
            results.append(entry)
    if not results and not allow_empty:
        return None
    sort_results(results)
    namespace = str(metadata.get("namespace") or "")
    api_version = str(resource.get("apiVersion", ""))
    scope = {"apiVersion": api_version, "kind": resource.get("kind", ""), "name": metadata.get("name", ""), "uid": uid}
    if namespace:
        scope["namespace"] = namespace
    report_metadata: dict[str, Any] = {
        "name": uid,
        "labels": dict(MANAGED_BY),
        "ownerReferences": [{"apiVersion": api_version, "kind": resource.get("kind", ""), "name": metadata.get("name", ""), "uid": uid}],
    }
    if namespace:
        report_metadata["namespace"] = namespace
    return {
        "apiVersion": api.api_version,
        "kind": api.kind if namespace else api.cluster_kind,
        "metadata": report_metadata,
        "scope": scope,
        "results": results,
        "summary": summary,
    }


@dataclass
class ReportUpdate:
    """One queued write: the new report plus which existing results it replaces.

    ``replace`` names the policies whose old results give way (default: the policies in ``report``); ``live``,
    when set, names every policy that still exists, so results of any other policy are dropped."""

    report: dict[str, Any]
    replace: frozenset[str] | None = None
    live: frozenset[str] | None = None
    waited: bool = False  # holds one of the writer's waiting-backlog slots until taken from the queue


@dataclass
class PendingReport:
    """Results for an object that has no uid yet: a CREATE seen by a mutating webhook, which runs before the API
    server stores the object and assigns its uid.  The writer reads the stored object's uid, then writes."""

    resource: dict[str, Any]
    responses: list[EngineResponse]
    process: str
    attempts: int = 0
    existing: bool = False
    waited: bool = False


STORED_LOOKUP_ATTEMPTS = 15  # the object is stored moments after the admission answer
STORED_LOOKUP_PAUSE_SECONDS = 0.2


class ReportWriter:
    """Background upserts of reports through `stockade.kube.client.KubeClient`."""

    def __init__(
        self,
        api_client: Any,
        capacity: int = 1000,
        report_api: ReportApi = POLICY_REPORTS,
        reporting: ReportingConfig = ReportingConfig(),
        waiting_backlog: int = WAITING_BACKLOG,
    ) -> None:
        self.client = KubeClient(api_client, timeout=None)
        self.report_api = report_api
        self.reporting = reporting
        self.api_client = api_client
        self._lookup: Any = None  # a ClusterData for reading stored objects, made on first use (writer thread only)
        self.queue: queue.Queue[ReportUpdate | PendingReport | None] = queue.Queue(maxsize=capacity)
        # waiting submitters share fewer places than the queue has: admission keeps the rest for its bursts
        self._waiting_slots = threading.BoundedSemaphore(max(1, min(waiting_backlog, capacity)))
        # pending objects waiting for their uid: (when to look again, tie-break, item); only the writer thread uses it
        self._waiting: list[tuple[float, int, PendingReport]] = []
        self._waiting_count = 0  # read by flush() from other threads
        self.dropped = 0
        self.written = 0
        self.deleted = 0
        # report plural -> until when it is known not to be served (its CRD missing): writes of it are dropped
        self._missing_until: dict[str, float] = {}
        self._thread = threading.Thread(target=self._run, name="policy-reports", daemon=True)
        self._thread.start()

    def crd_missing(self, namespace: str | None = None) -> bool:
        """Whether the report kind for an object of ``namespace`` ("" or None: cluster-scoped) is known not to be
        served; each kind pauses on its own, so a cluster with only one of the two CRDs keeps the other's reports."""
        return time.monotonic() < self._missing_until.get(self.report_api.plural_for(namespace), 0.0)

    def submit(
        self,
        resource: dict[str, Any],
        responses: list[EngineResponse],
        *,
        process: str = PROCESS_ADMISSION,
        replace_policies: set[str] | frozenset[str] | None = None,
        live_policies: set[str] | frozenset[str] | None = None,
        wait: bool = False,
        existing: bool = False,
    ) -> None:
        """Queue a report for ``resource``; with ``replace_policies`` an empty result list still clears those
        policies' old results (a background scan re-evaluated them and they no longer apply).

        ``wait``: block while the queue is full instead of dropping the report.  Background scans wait (a scan
        outruns the writer, and a dropped result would stay missing until the next full scan, an hour later);
        admission never does, so a slow API server cannot delay an answer."""
        if self.crd_missing(str((resource.get("metadata") or {}).get("namespace") or "")):
            return
        if wait:
            deadline = time.monotonic() + WAIT_SECONDS
            if not self._waiting_slots.acquire(timeout=WAIT_SECONDS):
                self._dropped()
                return
            queued = False
            try:
                queued = self._build_and_queue(resource, responses, process, replace_policies, live_policies, existing, deadline)
            finally:
                if not queued:  # the slot goes with a queued update, else back now
                    self._waiting_slots.release()
            return
        self._build_and_queue(resource, responses, process, replace_policies, live_policies, existing, None)

    def _build_and_queue(
        self,
        resource: dict[str, Any],
        responses: list[EngineResponse],
        process: str,
        replace_policies: set[str] | frozenset[str] | None,
        live_policies: set[str] | frozenset[str] | None,
        existing: bool,
        deadline: float | None,
    ) -> bool:
        """Build the update and queue it; True when queued.  ``deadline`` (monotonic) set: the caller holds a
        waiting slot, which travels with the update, and blocks until then for room in the queue."""
        waited = deadline is not None
        update: ReportUpdate | PendingReport
        if not str((resource.get("metadata") or {}).get("uid") or "") and (resource.get("metadata") or {}).get("name") and responses:
            update = PendingReport(resource, list(responses), process, existing=existing, waited=waited)
        else:
            report = build_report(
                resource, responses, process=process, allow_empty=replace_policies is not None, api=self.report_api, reporting=self.reporting, existing=existing
            )
            if report is None:
                return False
            update = ReportUpdate(
                report,
                frozenset(replace_policies) if replace_policies is not None else None,
                frozenset(live_policies) if live_policies is not None else None,
                waited=waited,
            )
        try:
            if deadline is not None:
                self.queue.put(update, timeout=max(0.0, deadline - time.monotonic()))
            else:
                self.queue.put_nowait(update)
        except queue.Full:
            self._dropped()
            return False
        return True

    def _dropped(self) -> None:
        self.dropped += 1
        if self.dropped == 1 or self.dropped % 1000 == 0:
            log.warning("report queue full: %d reports dropped so far (the next scan writes them)", self.dropped)

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything queued so far is written (or given up); False when ``timeout`` ran out first."""
        deadline = time.monotonic() + timeout
        while (self.queue.unfinished_tasks or self._waiting_count) and time.monotonic() < deadline:
            time.sleep(0.05)
        return not (self.queue.unfinished_tasks or self._waiting_count)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (bounded by ``timeout``), then stop the thread."""
        try:
            self.queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _run(self) -> None:
        sequence = 0
        while True:
            wait = max(0.0, self._waiting[0][0] - time.monotonic()) if self._waiting else None
            try:
                update = self.queue.get(timeout=wait) if wait is not None else self.queue.get()
            except queue.Empty:
                _, _, pending = heapq.heappop(self._waiting)
                self._waiting_count = len(self._waiting)
                self._try_pending(pending, sequence)
                sequence += 1
                continue
            if update is not None and update.waited:  # taken off the queue: a waiting submitter may queue another
                update.waited = False
                self._waiting_slots.release()
            try:
                if update is None:
                    return
                if isinstance(update, PendingReport):
                    self._try_pending(update, sequence)
                    sequence += 1
                    continue
                self._upsert(update)
            except Exception as exc:  # keep draining; one bad write must not stop reporting
                assert update is not None
                what = update.resource if isinstance(update, PendingReport) else update.report
                log.warning("writing the report of %s %s failed: %s", what.get("kind"), (what.get("metadata") or {}).get("name"), exc)
            finally:
                self.queue.task_done()

    def _try_pending(self, pending: PendingReport, sequence: int) -> None:
        """One look for the stored object; not there yet: look again a little later, without holding up the other
        writes (a request refused after the mutating webhook never stores its object)."""
        try:
            resolved = self._with_stored_uid(pending)
            if resolved is not None:
                self._upsert(resolved)
        except Exception as exc:  # the writer thread must keep running
            log.warning("writing the report of %s failed: %s", (pending.resource.get("metadata") or {}).get("name"), exc)
            resolved = None
            pending.attempts = STORED_LOOKUP_ATTEMPTS
        if resolved is None and pending.attempts + 1 < STORED_LOOKUP_ATTEMPTS:
            pending.attempts += 1
            heapq.heappush(self._waiting, (time.monotonic() + STORED_LOOKUP_PAUSE_SECONDS, sequence, pending))
        self._waiting_count = len(self._waiting)

    def _with_stored_uid(self, pending: PendingReport) -> ReportUpdate | None:
        """The report of a pending object if the API server has stored it by now, else None."""
        from stockade.controllers.clusterdata import ClusterData

        if self._lookup is None:
            self._lookup = ClusterData(self.api_client, ttl_seconds=0.0)
        metadata = pending.resource.get("metadata") or {}
        try:
            stored = self._lookup.get_object(
                str(pending.resource.get("apiVersion") or ""), str(pending.resource.get("kind") or ""),
                str(metadata.get("namespace") or ""), str(metadata.get("name") or ""), cached=False,
            )
        except KubeError:
            stored = None
        uid = str(((stored or {}).get("metadata") or {}).get("uid") or "")
        if not uid:
            return None
        resource = {**pending.resource, "metadata": {**metadata, "uid": uid}}
        report = build_report(resource, pending.responses, process=pending.process, api=self.report_api, reporting=self.reporting, existing=pending.existing)
        return ReportUpdate(report) if report is not None else None

    def crds_changed(self) -> None:
        """A CustomResourceDefinition appeared, changed or went (the CRD watcher): if ours was missing, it may be
        served now, so writing resumes at once instead of after the pause."""
        self._missing_until.clear()

    def _not_found(self, plural: str, namespace: str | None) -> None:
        """A create answered 404: either the report CRD is not served (that kind pauses) or the namespace is gone
        (only this report is dropped); discovery tells which."""
        if self._served(plural):
            log.debug("report for a resource in %s dropped: the namespace is gone", namespace)
            return
        self._missing_until[plural] = time.monotonic() + CRD_RETRY_SECONDS
        log.warning("%s (%s) are not served (is their CRD installed?); they are off for %ds", plural, self.report_api.api_version, CRD_RETRY_SECONDS)

    def _served(self, plural: str) -> bool:
        from stockade.controllers.registration import get_json

        try:
            listing = get_json(self.api_client, f"/apis/{self.report_api.group}/{self.report_api.version}")
        except Exception:  # the group itself is not served (404) or discovery failed: treat as missing
            return False
        return any(isinstance(r, dict) and r.get("name") == plural for r in listing.get("resources") or [])

    def _upsert(self, update: ReportUpdate | dict[str, Any]) -> None:
        if isinstance(update, dict):
            update = ReportUpdate(update)
        report = update.report
        name = report["metadata"]["name"]
        namespace = report["metadata"].get("namespace")
        plural = self.report_api.plural_for(namespace)
        if report["results"]:
            try:
                self.client.request("POST", self._path(plural, namespace), report)
                self.written += 1
                return
            except NotFound:
                self._not_found(plural, namespace)
                return
            except (AlreadyExists, Conflict):
                pass  # merged into the existing report below
        try:
            current = self.client.request("GET", self._path(plural, namespace, name))
        except NotFound:
            return  # nothing to clear (or the CRD is missing)
        if not isinstance(current, dict):
            return
        merge_into(report, current, replace=update.replace, live=update.live)
        if not report["results"]:
            self._delete(namespace, plural, name)
            return
        if _without_timestamps(report["results"]) == _without_timestamps(current.get("results") or []):
            return  # the same verdicts: rewriting only the times would bump the report's generation for nothing
        self.client.request("PUT", self._path(plural, namespace, name), report)
        self.written += 1

    def _path(self, plural: str, namespace: str | None, name: str = "") -> str:
        """The REST path of a report collection (of every namespace when ``namespace`` is empty) or of one report."""
        base = f"/apis/{self.report_api.group}/{self.report_api.version}"
        collection = f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"
        return f"{collection}/{name}" if name else collection

    def _delete(self, namespace: str | None, plural: str, name: str) -> None:
        try:
            self.client.request("DELETE", self._path(plural, namespace, name))
            self.deleted += 1
        except NotFound:
            pass

    def prune(self, live_policies: set[str] | frozenset[str]) -> int:
        """Drop results of policies that no longer exist from every report we manage (synchronously); reports left
        empty are deleted.  Returns how many reports changed."""
        changed = 0
        for plural in (self.report_api.plural, self.report_api.cluster_plural):
            # every namespace, a page at a time: a large cluster's reports together are far bigger than one page
            listing = RawListWatch(self.api_client, self._path(plural, None), label_selector=OWNED_SELECTOR, page_size=PRUNE_PAGE_SIZE, client=self.client)
            try:
                for current in listing.objects():
                    changed += self._prune_one(plural, current, live_policies)
            except NotFound:
                continue
        return changed

    def _prune_one(self, plural: str, current: dict[str, Any], live_policies: set[str] | frozenset[str]) -> int:
        """Drop the stale results of one listed report; 1 when it changed."""
        results = current.get("results") or []
        kept = stale_results_removed(results, live_policies)
        if len(kept) == len(results):
            return 0
        metadata = current.get("metadata") or {}
        namespace = metadata.get("namespace")
        try:
            if not kept:
                self._delete(namespace, plural, metadata["name"])
            else:
                current["results"] = kept
                current["summary"] = summarise(kept)
                self.client.request("PUT", self._path(plural, namespace, metadata["name"]), current)
        except (NotFound, Conflict):  # gone or changed meanwhile: the next scan prunes again
            return 0
        return 1


def stale_results_removed(results: list[dict[str, Any]], live_policies: set[str] | frozenset[str]) -> list[dict[str, Any]]:
    return [r for r in results if r.get("policy") in live_policies]


def _without_timestamps(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "timestamp"} for r in results if isinstance(r, dict)]


def sort_results(results: list[dict[str, Any]]) -> None:
    """Kyverno's order of report results: by policy, then rule, then source (readers and its e2e suite compare the
    lists in order)."""
    results.sort(key=lambda r: (str(r.get("policy") or ""), str(r.get("rule") or ""), str(r.get("source") or "")))


def summarise(results: list[dict[str, Any]]) -> dict[str, int]:
    summary = {status: 0 for status in STATUSES}
    for result in results:
        if result.get("result") in summary:
            summary[result["result"]] += 1
    return summary


def merge_into(
    report: dict[str, Any],
    current: dict[str, Any],
    *,
    replace: set[str] | frozenset[str] | None = None,
    live: set[str] | frozenset[str] | None = None,
) -> None:
    """Keep results of policies this evaluation did not cover (the fail and ignore webhooks each see only their
    own policies; admission-only policies are not background-scanned); results of re-evaluated policies
    (``replace``, default: those in ``report``) are replaced, and with ``live`` results of vanished policies go."""
    fresh = set(replace) if replace is not None else set()
    fresh |= {r["policy"] for r in report["results"]}
    kept = [r for r in current.get("results") or [] if r.get("policy") not in fresh and (live is None or r.get("policy") in live)]
    report["results"] = kept + report["results"]
    sort_results(report["results"])
    report["summary"] = summarise(report["results"])
    report["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
