"""Reports of a mutating admission (Kyverno's reports/admission/mutation): the mutating webhook sees a CREATE before
the API server stores the object and gives it a uid, so the writer waits for the stored object and names the report
after its uid; a request refused after the mutating webhook leaves no report."""

from __future__ import annotations

import threading
from typing import Any, Callable

from stockade.controllers.clusterdata import ClusterData
from stockade.controllers.reports import ReportWriter
from stockade.engine.response import EngineResponse, RuleResponse
from stockade.policy.model import KyvernoPolicy

POLICY = KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "add-labels"}, "spec": {"rules": []}})


def config_map(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": {"a": "b"}}


def test_a_report_for_an_object_without_uid_waits_until_it_is_stored(
    api_client: Any, cluster: ClusterData, namespaces: Callable[..., dict[str, Any]], suffix: str, policy_report_crds: None
) -> None:
    namespace = f"mut-report-{suffix}"
    namespaces(namespace)
    admitted = config_map(namespace, "mutated")  # as the mutating webhook saw it: no uid yet
    responses = [EngineResponse(POLICY, admitted, admitted, [RuleResponse("add-labels", "Mutation", "pass", f"mutated ConfigMap/mutated in namespace {namespace}")])]
    writer = ReportWriter(api_client)
    try:
        later = threading.Timer(0.5, lambda: cluster.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", admitted))
        later.start()
        writer.submit(admitted, responses)
        writer.submit(config_map(namespace, "refused-later"), responses)  # never stored
        assert writer.flush(timeout=30)
        later.join()
        stored = cluster.get_object("v1", "ConfigMap", namespace, "mutated", cached=False)
        assert stored is not None
        uid = stored["metadata"]["uid"]
        report = cluster.request("GET", f"/apis/wgpolicyk8s.io/v1alpha2/namespaces/{namespace}/policyreports/{uid}")
        assert report["scope"]["uid"] == uid and report["scope"]["name"] == "mutated"
        assert [(r["policy"], r["rule"], r["result"]) for r in report["results"]] == [("add-labels", "add-labels", "pass")]
        listing = cluster.request("GET", f"/apis/wgpolicyk8s.io/v1alpha2/namespaces/{namespace}/policyreports")
        assert [item["metadata"]["name"] for item in listing["items"]] == [uid]
    finally:
        writer.close()
