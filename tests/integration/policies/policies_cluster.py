"""Helpers of the policies-from-the-cluster tests: raw API calls, kubectl, and `stockade serve --from-cluster`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from stockade.testing.apiserver import REPO_ROOT, ControlPlane, free_port

KUBECTL = str(REPO_ROOT / ".cache" / "bin" / "kubectl")
CRDS = REPO_ROOT / "deploy" / "crds" / "policies.yaml"
MANAGED_WEBHOOKS = "?labelSelector=webhook.stockade.io%2Fmanaged-by%3Dstockade"
WEBHOOK_COLLECTIONS = (
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
)

T = TypeVar("T")


class Api:
    """Just enough of the Kubernetes REST API, keeping status codes and error messages."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        status, answer, _ = self.plane.request(method, path, body)
        return status, answer

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [KUBECTL, "--kubeconfig", str(self.plane.kubeconfig), *args], input=stdin, capture_output=True, text=True, timeout=120, check=False
        )

    def apply(self, manifest: str) -> None:
        result = self.kubectl("apply", "-f", "-", stdin=manifest)
        assert result.returncode == 0, result.stderr

    def create_namespace(self, name: str) -> None:
        status, body = self.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        assert status == 201, body

    def create_pod(self, namespace: str, name: str, labels: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]},
        }
        return self.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)

    def managed_webhooks(self) -> list[str]:
        names = []
        for collection in WEBHOOK_COLLECTIONS:
            status, body = self.request("GET", collection + MANAGED_WEBHOOKS)
            assert status == 200, body
            names += [item["metadata"]["name"] for item in body.get("items", [])]
        return names


def eventually(probe: Callable[[], T | None], what: str, timeout: float = 60.0, details: Callable[[], str] = lambda: "") -> T:
    """Poll until ``probe`` returns something truthy; the deadline only bounds a hang, it is not what is tested."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"{what} did not happen (last: {last!r})\n{details()}")


class Serve:
    """`stockade serve --from-cluster --register-webhooks` as a child process."""

    def __init__(self, plane: ControlPlane, workdir: Path, reload_interval: float = 0.5, extra_args: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.log_path = workdir / "serve.log"
        plane.ensure_namespace("stockade-system")  # leader election keeps its Leases there
        command = [
            sys.executable, "-c", "from stockade.cli.main import main; main()",
            "serve", "--from-cluster",
            "--register-webhooks", "--kubeconfig", str(plane.kubeconfig),
            "--host", "127.0.0.1", "--port", str(self.port),
            "--webhook-url", f"https://127.0.0.1:{self.port}",
            "--cert-dir", str(workdir / "certs"),
            "--namespace", "stockade-system",
            "--reload-interval", str(reload_interval),
            "--no-policy-reports",
            *extra_args,
        ]
        with open(self.log_path, "wb") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_serving(self) -> None:
        def serving() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"stockade serve exited early:\n{self.log()}")
            return "stockade webhook serving" in self.log()

        eventually(serving, "stockade serve start", details=self.log)

    def stop(self) -> int | None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            return self.process.wait(timeout=30)
        return self.process.returncode
