"""Reports in the openreports.io API (Kyverno's openreportsEnabled): the same results, merge and prune semantics as
PolicyReports, written as Reports (namespaced resources) and ClusterReports (cluster-scoped ones) into the CRDs that
deploy/crds ships; nothing goes to wgpolicyk8s.io."""

from __future__ import annotations

from typing import Any, Callable

from stockade.controllers.clusterdata import ClusterData
from stockade.controllers.reports import OPEN_REPORTS, ReportWriter
from stockade.engine.response import EngineResponse, RuleResponse
from stockade.kube.errors import NotFound
from stockade.policy.model import KyvernoPolicy

import pytest

BASE = "/apis/openreports.io/v1alpha1"


def policy(name: str) -> KyvernoPolicy:
    return KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": name}, "spec": {"rules": []}})


def response(name: str, resource: dict[str, Any], status: str, message: str) -> EngineResponse:
    return EngineResponse(policy(name), resource, resource, [RuleResponse(name, "Validation", status, message)])


def test_reports_and_cluster_reports_are_written_merged_and_pruned(
    api_client: Any,
    cluster: ClusterData,
    namespaces: Callable[..., dict[str, Any]],
    suffix: str,
    open_report_crds: None,
    policy_report_crds: None,
) -> None:
    namespace = f"openreports-{suffix}"
    namespace_object = namespaces(namespace)
    stored = cluster.request(
        "POST", f"/api/v1/namespaces/{namespace}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {}}
    )
    uid = stored["metadata"]["uid"]
    writer = ReportWriter(api_client, report_api=OPEN_REPORTS)
    try:
        writer.submit(stored, [response("require-labels", stored, "fail", "label 'team' is required")])
        writer.submit(stored, [response("add-labels", stored, "pass", f"mutated ConfigMap/cm in namespace {namespace}")])
        writer.submit(namespace_object, [response("require-ns-labels", namespace_object, "pass", "validation rule passed")])
        assert writer.flush(timeout=30)
        report = cluster.request("GET", f"{BASE}/namespaces/{namespace}/reports/{uid}")
        assert (report["apiVersion"], report["kind"]) == ("openreports.io/v1alpha1", "Report")
        assert report["scope"] == {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "namespace": namespace, "uid": uid}
        assert [(r["policy"], r["result"], r["message"]) for r in report["results"]] == [
            ("add-labels", "pass", f"mutated ConfigMap/cm in namespace {namespace}"),
            ("require-labels", "fail", "label 'team' is required"),
        ]
        assert report["summary"] == {"pass": 1, "fail": 1, "warn": 0, "error": 0, "skip": 0}
        assert report["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kyverno"
        namespace_uid = namespace_object["metadata"]["uid"]
        cluster_report = cluster.request("GET", f"{BASE}/clusterreports/{namespace_uid}")
        assert cluster_report["kind"] == "ClusterReport" and cluster_report["scope"]["name"] == namespace
        with pytest.raises(NotFound):
            cluster.request("GET", f"/apis/wgpolicyk8s.io/v1alpha2/namespaces/{namespace}/policyreports/{uid}")

        assert writer.prune({"add-labels", "require-ns-labels"}) >= 1
        report = cluster.request("GET", f"{BASE}/namespaces/{namespace}/reports/{uid}")
        assert [r["policy"] for r in report["results"]] == ["add-labels"]
        writer.prune({"require-ns-labels"})
        with pytest.raises(NotFound):
            cluster.request("GET", f"{BASE}/namespaces/{namespace}/reports/{uid}")
        writer.prune(set())
        with pytest.raises(NotFound):
            cluster.request("GET", f"{BASE}/clusterreports/{namespace_uid}")
    finally:
        writer.close()
