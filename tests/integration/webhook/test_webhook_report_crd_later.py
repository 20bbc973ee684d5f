"""The PolicyReport CRD installed after `stockade serve` started: the first report's 404 pauses reports of that kind
(for minutes: the CRD is missing), and the CRD watcher ends the pause as soon as the CRD appears, so the next admitted
resource gets its report at once (the serve wiring of CrdWatch to the report writer)."""

from __future__ import annotations

import time
from pathlib import Path

from webhook_cluster import POLICIES, Kube, Serve, install_policy_report_crd, pod

from stockade.testing.apiserver import ControlPlane


def _report(kube: Kube, uid: str, timeout: float) -> dict[str, object] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, report, _ = kube.request("GET", f"/apis/wgpolicyk8s.io/v1alpha2/namespaces/default/policyreports/{uid}")
        if status == 200:
            return dict(report)
        time.sleep(0.3)
    return None


def test_reports_resume_when_the_crd_is_installed_after_start(tmp_path: Path) -> None:
    plane = ControlPlane(workdir=tmp_path / "kube")
    plane.start()
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "policies.yaml").write_text(POLICIES)
    server = None
    try:
        kube = Kube(plane)
        server = Serve(plane, policies, tmp_path)
        server.wait_registered(kube)
        status, first, _ = kube.request("POST", "/api/v1/namespaces/default/pods", pod("before-crd", {"team": "a"}, "nginx:1.25"))
        assert status == 201, first
        time.sleep(2)  # its report is refused with 404: reports of that kind pause
        install_policy_report_crd(kube)
        status, second, _ = kube.request("POST", "/api/v1/namespaces/default/pods", pod("after-crd", {"team": "a"}, "nginx:1.25"))
        assert status == 201, second
        report = _report(kube, second["metadata"]["uid"], 30)
        assert report is not None, server.log()  # without the watcher the pause would last CRD_RETRY_SECONDS (300 s)
        assert "require-team-label" in {r["policy"] for r in report.get("results") or []}  # type: ignore[union-attr]
    finally:
        if server is not None:
            server.stop()
        plane.stop()
