"""A real `stockade serve` with file policies: a review whose evaluation takes minutes is answered with its
failurePolicy within budget while probes and other reviews answer at once; SIGTERM during it exits promptly."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

POLICIES = """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: slow-nested-foreach
spec:
  validationFailureAction: Enforce
  webhookTimeoutSeconds: 3
  rules:
  - name: pairwise
    match:
      any:
      - resources:
          kinds: [Pod]
          names: ["big*"]
    validate:
      foreach:
      - list: "request.object.spec.containers"
        foreach:
        - list: "request.object.spec.containers"
          deny:
            conditions:
              any:
              - key: "{{ element.name }}"
                operator: Equals
                value: "never"
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: require-team-label
spec:
  validationFailureAction: Enforce
  rules:
  - name: check-team
    match:
      any:
      - resources:
          kinds: [Pod]
    validate:
      message: "a team label is required"
      pattern:
        metadata:
          labels:
            team: "?*"
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def review(name: str, containers: int = 1, labels: dict[str, str] | None = None) -> bytes:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {"containers": [{"name": f"c{i}", "image": "nginx:1.27"} for i in range(containers)]},
    }
    return json.dumps({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "default",
                    "name": name, "operation": "CREATE", "userInfo": {"username": "alice"}, "object": pod},
    }).encode()


class Server:
    """`stockade serve` with two workers from the start: while one runs a slow review the other answers at once
    (growing the pool on demand is tested in tests/unit/webhook/test_webhook_isolation.py)."""

    def __init__(self, tmp_path: Path) -> None:
        policies = tmp_path / "policies"
        policies.mkdir()
        (policies / "policies.yaml").write_text(POLICIES)
        self.port = free_port()
        self.cert_dir = tmp_path / "certs"
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from stockade.cli.main import main; main()", "serve", str(policies), "--host", "127.0.0.1",
             "--port", str(self.port), "--cert-dir", str(self.cert_dir), "--workers", "2", "--min-workers", "2", "--log-level", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.process.stderr.read() if self.process.stderr else ""
            if (self.cert_dir / "ca.crt").exists():
                try:
                    if self.call("GET", "/health/readiness")[0] == 200:
                        return
                except OSError:
                    pass
            time.sleep(0.2)
        raise AssertionError("server did not become ready")

    def call(self, method: str, path: str, body: bytes | None = None, timeout: float = 30) -> tuple[int, dict[str, Any]]:
        context = ssl.create_default_context(cafile=str(self.cert_dir / "ca.crt"))
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=timeout)
        try:
            connection.request(method, path, body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()


@pytest.fixture()
def server(tmp_path: Path) -> Any:
    running = Server(tmp_path)
    yield running
    running.stop()


def start_slow_review(server: Server, results: dict[str, Any]) -> threading.Thread:
    def send() -> None:
        started = time.monotonic()
        try:
            results["answer"] = server.call("POST", "/validate", review("big", containers=2000, labels={"team": "a"}))
        except OSError as exc:
            results["error"] = exc
        results["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def timed(action: Any) -> tuple[Any, float]:
    started = time.monotonic()
    result = action()
    return result, time.monotonic() - started


def test_slow_review_gets_failure_policy_answer_while_others_are_served(server: Server) -> None:
    results: dict[str, Any] = {}
    slow = start_slow_review(server, results)
    time.sleep(0.5)
    (status, body), seconds = timed(lambda: server.call("GET", "/health/liveness"))
    assert status == 200 and seconds < 1.0
    (status, body), seconds = timed(lambda: server.call("POST", "/validate", review("web")))
    assert status == 200 and seconds < 1.0 and body["response"]["allowed"] is False
    assert "a team label is required" in body["response"]["status"]["message"]
    slow.join(30)
    status, body = results["answer"]
    assert status == 200 and results["seconds"] < 3 + 2
    assert body["response"]["allowed"] is False
    message = " ".join(body["response"]["status"]["message"].split())  # the YAML block wraps long lines
    assert "policy slow-nested-foreach timed out: evaluation exceeded its 3s budget" in message
    # the killed worker was replaced: both workers answer again
    for _ in range(6):
        status, body = server.call("POST", "/validate", review("web", labels={"team": "a"}), timeout=5)
        assert status == 200 and body["response"]["allowed"] is True


def test_sigterm_during_slow_evaluation_exits_promptly(server: Server) -> None:
    results: dict[str, Any] = {}
    start_slow_review(server, results)
    time.sleep(1.0)
    server.process.send_signal(signal.SIGTERM)
    started = time.monotonic()
    assert server.process.wait(timeout=20) == 0
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("depth", [325, 3000])
def test_deeply_nested_objects_are_evaluated(server: Server, depth: int) -> None:
    shell = json.loads(review("deep"))
    shell["request"]["object"]["spec"]["deep"] = "@@DEEP@@"
    body = json.dumps(shell).replace('"@@DEEP@@"', '{"a":' * depth + "{}" + "}" * depth).encode()
    status, answer = server.call("POST", "/validate", body)
    assert status == 200 and answer["response"]["allowed"] is False
    assert "a team label is required" in answer["response"]["status"]["message"]
