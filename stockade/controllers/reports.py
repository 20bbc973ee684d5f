"""PolicyReports (wgpolicyk8s.io/v1alpha2) for admitted resources, written in the background.

One report per resource, named after its UID and owned by it (so garbage collection removes it with the resource),
as Kyverno's reports controller ends up doing.  Writing never delays an admission answer: results go into a
bounded queue drained by a thread; when the queue is full or the PolicyReport CRD is not installed, results are
dropped (and counted) rather than retried forever.
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import threading
import time
from typing import Any

from stockade.engine.response import STATUSES, EngineResponse, report_result
from stockade.policy.model import KyvernoPolicy

log = logging.getLogger("stockade.reports")

GROUP = "wgpolicyk8s.io"
VERSION = "v1alpha2"
MANAGED_BY = {"app.kubernetes.io/managed-by": "stockade"}
CRD_RETRY_SECONDS = 300.0


def build_report(resource: dict[str, Any], responses: list[EngineResponse], now: dt.datetime | None = None) -> dict[str, Any] | None:
    """The PolicyReport (or ClusterPolicyReport for cluster-scoped resources); None when nothing was evaluated."""
    metadata = resource.get("metadata") or {}
    uid = str(metadata.get("uid") or "")
    if not uid:
        return None
    now = now or dt.datetime.now(dt.timezone.utc)
    results = []
    summary = {status: 0 for status in STATUSES}
    for response in responses:
        policy = response.policy
        annotations = getattr(policy, "annotations", {}) or {}
        for rule in response.rules:
            result = report_result(response, rule)
            summary[result] += 1
            entry: dict[str, Any] = {
                "source": "kyverno" if isinstance(policy, KyvernoPolicy) else str(getattr(policy, "base_kind", "kyverno")),
                "policy": f"{policy.namespace}/{policy.name}" if getattr(policy, "namespace", "") else response.policy_name,
                "rule": rule.name,
                "result": result,
                "message": rule.message,
                "scored": str(annotations.get("policies.kyverno.io/scored", "")) != "false",
                "timestamp": {"seconds": int(now.timestamp()), "nanos": 0},
                "properties": {"process": "admission review"},
            }
            if annotations.get("policies.kyverno.io/severity"):
                entry["severity"] = annotations["policies.kyverno.io/severity"]
            if annotations.get("policies.kyverno.io/category"):
                entry["category"] = annotations["policies.kyverno.io/category"]
            results.append(entry)
    if not results:
        return None
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
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PolicyReport" if namespace else "ClusterPolicyReport",
        "metadata": report_metadata,
        "scope": scope,
        "results": results,
        "summary": summary,
    }


class ReportWriter:
    """Background upserts of reports through the kubernetes client."""

    def __init__(self, api_client: Any, capacity: int = 1000) -> None:
        from kubernetes import client

        self.api = client.CustomObjectsApi(api_client)
        self.queue: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=capacity)
        self.dropped = 0
        self.written = 0
        self._crd_missing_until = 0.0
        self._thread = threading.Thread(target=self._run, name="policy-reports", daemon=True)
        self._thread.start()

    def submit(self, resource: dict[str, Any], responses: list[EngineResponse]) -> None:
        if time.monotonic() < self._crd_missing_until:
            return
        report = build_report(resource, responses)
        if report is None:
            return
        try:
            self.queue.put_nowait(report)
        except queue.Full:
            self.dropped += 1

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (bounded by ``timeout``), then stop the thread."""
        try:
            self.queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            report = self.queue.get()
            if report is None:
                return
            try:
                self._upsert(report)
                self.written += 1
            except Exception as exc:  # keep draining; one bad write must not stop reporting
                log.warning("writing %s %s failed: %s", report["kind"], report["metadata"]["name"], exc)

    def _upsert(self, report: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        name = report["metadata"]["name"]
        namespace = report["metadata"].get("namespace")
        plural = "policyreports" if namespace else "clusterpolicyreports"
        try:
            if namespace:
                self.api.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, report)
            else:
                self.api.create_cluster_custom_object(GROUP, VERSION, plural, report)
            return
        except ApiException as exc:
            if exc.status == 404:
                self._crd_missing_until = time.monotonic() + CRD_RETRY_SECONDS
                log.warning("PolicyReport CRD (%s/%s) is not installed; reports are off for %ds", GROUP, VERSION, CRD_RETRY_SECONDS)
                return
            if exc.status != 409:
                raise
        if namespace:
            current = self.api.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
            merge_into(report, current)
            self.api.replace_namespaced_custom_object(GROUP, VERSION, namespace, plural, name, report)
        else:
            current = self.api.get_cluster_custom_object(GROUP, VERSION, plural, name)
            merge_into(report, current)
            self.api.replace_cluster_custom_object(GROUP, VERSION, plural, name, report)


def merge_into(report: dict[str, Any], current: dict[str, Any]) -> None:
    """Keep results of policies this admission did not evaluate (the fail and ignore webhooks each see only their
    own policies); results of re-evaluated policies are replaced."""
    fresh = {r["policy"] for r in report["results"]}
    kept = [r for r in current.get("results") or [] if r.get("policy") not in fresh]
    report["results"] = kept + report["results"]
    summary = {status: 0 for status in STATUSES}
    for result in report["results"]:
        if result.get("result") in summary:
            summary[result["result"]] += 1
    report["summary"] = summary
    report["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
