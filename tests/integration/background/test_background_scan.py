"""BackgroundScanner against a real kube-apiserver: existing Pods get PolicyReports; vanished policies are pruned."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stockade.controllers.background import BackgroundScanner
from stockade.controllers.clusterdata import ClusterData
from stockade.kube.errors import KubeError
from stockade.controllers.reports import ReportWriter


def policies(suffix: str) -> str:
    return f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: bg-labels-{suffix}
spec:
  validationFailureAction: Audit
  rules:
  - name: require-app
    match:
      any:
      - resources:
          kinds: [Pod]
          namespaces: [bg-scan-{suffix}]
    validate:
      message: "label app is required"
      pattern:
        metadata:
          labels:
            app: "?*"
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: bg-user-{suffix}
spec:
  rules:
  - name: by-user
    match:
      any:
      - resources:
          kinds: [Pod]
    validate:
      message: "admins only"
      deny:
        conditions:
          any:
          - key: "{{{{request.userInfo.username}}}}"
            operator: NotEquals
            value: admin
"""


def pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }


def reports_in(cluster: ClusterData, namespace: str) -> dict[str, dict[str, Any]]:
    listing = cluster.request("GET", f"/apis/wgpolicyk8s.io/v1alpha2/namespaces/{namespace}/policyreports")
    return {item["scope"]["name"]: item for item in listing.get("items") or []}


def test_background_scan_reports_existing_pods_and_prunes_removed_policies(
    api_client: Any, cluster: ClusterData, namespaces: Callable[..., dict[str, Any]], policy_store: Any, suffix: str, policy_report_crds: None
) -> None:
    namespace = f"bg-scan-{suffix}"
    namespaces(namespace)
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod("good", {"app": "web"}))
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod("bad", {}))
    store = policy_store(policies(suffix))
    writer = ReportWriter(api_client)
    try:
        scanner = BackgroundScanner(api_client, store, writer, interval=0)
        summary = scanner.scan_once()
        assert writer.flush()
        # Kyverno rejects a background policy that reads the requester; the store leaves it out with that reason
        rejected = [problem for identity, problem in store.snapshot.errors.items() if f"bg-user-{suffix}" in identity]
        assert rejected and "request.userInfo" in rejected[0] and "background mode" in rejected[0], store.snapshot.errors

        reports = reports_in(cluster, namespace)
        assert set(reports) == {"good", "bad"}
        good = [r for r in reports["good"]["results"] if r["policy"] == f"bg-labels-{suffix}"]
        bad = [r for r in reports["bad"]["results"] if r["policy"] == f"bg-labels-{suffix}"]
        assert [(r["rule"], r["result"]) for r in good] == [("require-app", "pass")]
        assert [(r["rule"], r["result"]) for r in bad] == [("require-app", "fail")]
        assert bad[0]["properties"]["process"] == "background scan"
        assert "label app is required" in bad[0]["message"]
        assert reports["bad"]["summary"]["fail"] == 1
        assert not any(r["policy"] == f"bg-user-{suffix}" for r in reports["bad"]["results"])
        assert summary.as_metrics()["results_fail"] >= 1

        # the policy disappears: its results go, and reports left empty are deleted
        for path in store.paths:
            for file in __import__("pathlib").Path(path).glob("*.yaml"):
                file.write_text("")
        store.load()
        scanner.scan_once()
        assert writer.flush()
        assert reports_in(cluster, namespace) == {}
    finally:
        writer.close()
        for name in ("good", "bad"):
            try:
                cluster.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}")
            except KubeError:
                pass
