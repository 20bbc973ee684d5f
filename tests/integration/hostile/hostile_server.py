"""A real `stockade serve` subprocess for the hostile-input suite, and the checks every hostile case makes while its
input is in flight (the issue's acceptance criteria):

- unrelated reviews and ``/health/liveness`` answer within 1 s (``Probe``);
- the hostile review gets a valid AdmissionReview answer within its budget + 2 s (``HostileCall``);
- the RSS of the server and its worker processes stays below the chart's memory limit (``Probe``);
- SIGTERM ends the server within 10 s with exit code 0 (``ServeProcess.sigterm_during``).

Problems are collected in a ``Findings`` list rather than asserted one by one, so a failing case reports every
criterion it breaks (and still stops its server) instead of only the first.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "webhook"))

from webhook_helpers import WebhookClient, pod, review  # noqa: E402  (the unit tests' client and builders)

from stockade.testing.apiserver import free_port  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
ANSWER_SECONDS = 1.0  # unrelated reviews and liveness, while hostile input is in flight
GRACE_SECONDS = 2.0  # a hostile review is answered within its policy budget plus this
SIGTERM_SECONDS = 10.0
STARTUP_SECONDS = 60.0
HOSTILE_BUDGET = 3  # webhookTimeoutSeconds of the hostile-case policies, to keep the suite quick

__all__ = ["HostileCall", "Probe", "ServeProcess", "WebhookClient", "memory_limit_bytes", "pod", "review"]


def memory_limit_bytes() -> int:
    """resources.limits.memory of the Helm chart: the ceiling a pod of stockade would be OOM-killed at."""
    values = yaml.safe_load((REPO / "deploy" / "helm" / "stockade" / "values.yaml").read_text())
    text = str(values["resources"]["limits"]["memory"])
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi)?", text)
    assert match, f"unexpected memory limit {text!r}"
    return int(match.group(1)) * {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}[match.group(2)]


def _process_tree(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(parents.get(pid, []))
    return tree


def tree_rss_bytes(root: int) -> int:
    """VmRSS of a process and all its descendants (the worker processes), summed."""
    total = 0
    for pid in _process_tree(root):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
        total += int(match.group(1)) * 1024 if match else 0
    return total


@dataclass
class Findings:
    """Broken acceptance criteria of one case, asserted together at its end."""

    problems: list[str] = field(default_factory=list)

    def add(self, problem: str) -> None:
        self.problems.append(problem)

    def check(self, condition: bool, problem: str) -> None:
        if not condition:
            self.add(problem)

    def assert_none(self, log: str = "") -> None:
        assert not self.problems, "\n".join(self.problems) + (f"\n--- server log (tail) ---\n{log[-3000:]}" if log else "")


class ServeProcess:
    """`stockade serve POLICY_DIR` on 127.0.0.1 with its self-signed certificates, /metrics on a second port."""

    def __init__(self, workdir: Path, policies: dict[str, str], extra_args: tuple[str, ...] = (), wait: bool = True) -> None:
        self.workdir = workdir
        self.policy_dir = workdir / "policies"
        self.policy_dir.mkdir(parents=True, exist_ok=True)
        for name, text in policies.items():
            (self.policy_dir / name).write_text(text)
        self.cert_dir = workdir / "certs"
        self.port = free_port()
        self.metrics_port = free_port()
        self.log_path = workdir / "serve.log"
        self.started = time.monotonic()
        command = [
            sys.executable, "-c", "from stockade.cli.main import main; main()", "serve", str(self.policy_dir),
            "--host", "127.0.0.1", "--port", str(self.port), "--metrics-port", str(self.metrics_port),
            "--cert-dir", str(self.cert_dir), "--reload-interval", "0.5", "--log-level", "warning", *extra_args,
        ]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, cwd=REPO)
        self.ca_pem = b""
        if wait:
            self.wait_ready()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"stockade serve exited early ({self.process.returncode}):\n{self.log()}")
            if (self.cert_dir / "ca.crt").exists():
                self.ca_pem = (self.cert_dir / "ca.crt").read_bytes()
                try:
                    status, _ = self.get("/health/readiness", timeout=2.0)
                    if status == 200:
                        return
                except OSError:
                    pass
            time.sleep(0.1)
        raise AssertionError(f"stockade serve not ready in {STARTUP_SECONDS}s:\n{self.log()}")

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca_pem.decode())

    def client(self, timeout: float = 10.0) -> WebhookClient:
        """A keep-alive client (the unit tests' WebhookClient) with its own timeout."""
        client = WebhookClient(self.port, self.ca_pem)
        client.connection.timeout = timeout
        return client

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None, timeout: float = 10.0) -> tuple[int, bytes]:
        """One request on a fresh connection (as a new apiserver connection would be), within ``timeout`` seconds
        for connect + handshake + answer."""
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ssl_context(), timeout=timeout)
        try:
            connection.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})} if body is not None else (headers or {}))
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
        return self.request("GET", path, timeout=timeout)

    def post_review(self, path: str, body: dict[str, Any] | bytes, timeout: float = 10.0) -> tuple[int, bytes]:
        return self.request("POST", path, body if isinstance(body, bytes) else json.dumps(body).encode(), timeout=timeout)

    def metrics(self, timeout: float = 10.0) -> bytes:
        connection = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=timeout)
        try:
            connection.request("GET", "/metrics")
            response = connection.getresponse()
            assert response.status == 200
            return response.read()
        finally:
            connection.close()

    def rss_bytes(self) -> int:
        return tree_rss_bytes(self.process.pid)

    def sigterm_during(self, findings: Findings, hostile: Callable[[], object] | None = None) -> None:
        """Start ``hostile`` (in a thread, if given), SIGTERM the server while it is in flight, and check it exits
        within 10 s with code 0."""
        if hostile is not None:
            threading.Thread(target=_quietly(hostile), daemon=True).start()
            time.sleep(0.5)
        sent = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=SIGTERM_SECONDS)
        except subprocess.TimeoutExpired:
            findings.add(f"SIGTERM: still running {SIGTERM_SECONDS:g}s after the signal")
            self.kill()
            return
        findings.check(code == 0, f"SIGTERM: exit code {code}, expected 0 (after {time.monotonic() - sent:.1f}s)")

    def kill(self) -> None:
        if self.process.poll() is None:
            for pid in _process_tree(self.process.pid)[1:]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.process.kill()
            self.process.wait(timeout=10)


def _quietly(action: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        try:
            action()
        except Exception:  # the server may go away under it: that is the point
            pass

    return run


def check_answer(findings: Findings, what: str, status: int, body: bytes, uid: str) -> dict[str, Any] | None:
    """A 200 carrying an AdmissionReview whose response echoes ``uid`` and has a boolean ``allowed``."""
    if status != 200:
        findings.add(f"{what}: HTTP {status}: {body[:300]!r}")
        return None
    try:
        answer = json.loads(body)
    except ValueError:
        findings.add(f"{what}: not JSON: {body[:300]!r}")
        return None
    response = answer.get("response") if isinstance(answer, dict) else None
    if not (isinstance(answer, dict) and answer.get("kind") == "AdmissionReview" and isinstance(response, dict)):
        findings.add(f"{what}: not an AdmissionReview: {body[:300]!r}")
        return None
    findings.check(response.get("uid") == uid, f"{what}: uid {response.get('uid')!r} not echoed")
    findings.check(isinstance(response.get("allowed"), bool), f"{what}: allowed is not a boolean: {response.get('allowed')!r}")
    return response


def _first_uid(body: bytes) -> str:
    """request.uid of a review given as text (too deep for json.loads): the first "uid" member in it."""
    match = re.search(rb'"uid":\s*"([^"]*)"', body)
    return match.group(1).decode() if match else ""


class HostileCall:
    """One hostile review sent in a background thread, and its answer checked against budget + 2 s."""

    def __init__(self, server: ServeProcess, body: dict[str, Any] | bytes, path: str = "/validate", budget: float = HOSTILE_BUDGET) -> None:
        self.server = server
        self.body = body
        self.path = path
        self.budget = budget
        self.uid = body["request"]["uid"] if isinstance(body, dict) else _first_uid(body)
        self.status = 0
        self.answer = b""
        self.error: BaseException | None = None
        self.elapsed = 0.0
        self.thread = threading.Thread(target=self._send, daemon=True)

    def _send(self) -> None:
        started = time.monotonic()
        try:
            self.status, self.answer = self.server.post_review(self.path, self.body, timeout=self.budget + GRACE_SECONDS)
        except Exception as exc:  # noqa: BLE001 - recorded and reported by result()
            self.error = exc
        self.elapsed = time.monotonic() - started

    def start(self) -> HostileCall:
        self.thread.start()
        return self

    def result(self, findings: Findings) -> dict[str, Any] | None:
        """The AdmissionReview response, or None with the reason recorded."""
        self.thread.join(self.budget + GRACE_SECONDS + 5)
        limit = self.budget + GRACE_SECONDS
        if self.error is not None or self.thread.is_alive():
            findings.add(f"hostile review: no answer within {limit:g}s ({self.error!r})")
            return None
        findings.check(self.elapsed <= limit, f"hostile review: answered after {self.elapsed:.1f}s, budget {limit:g}s")
        return check_answer(findings, "hostile review", self.status, self.answer, self.uid)


class Probe:
    """While hostile input is in flight: liveness and an unrelated review each answer within 1 s (fresh
    connections), and the process tree's RSS stays below the chart's memory limit."""

    def __init__(self, server: ServeProcess, findings: Findings, unrelated: Callable[[], dict[str, Any]] | None = None, interval: float = 0.25) -> None:
        self.server = server
        self.findings = findings
        self.unrelated = unrelated or (lambda: review(pod("unrelated", labels={"team": "a"})))
        self.interval = interval
        self.limit = memory_limit_bytes()
        self.peak_rss = 0
        self.rounds = 0
        self.completed = 0
        self.slow: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _timed(self, what: str, action: Callable[[], tuple[int, bytes]], uid: str = "") -> None:
        started = time.monotonic()
        try:
            status, body = action()
        except (OSError, http.client.HTTPException) as exc:
            self.slow.append(f"{what}: {type(exc).__name__} {exc} after {time.monotonic() - started:.1f}s")
            return
        elapsed = time.monotonic() - started
        if elapsed > ANSWER_SECONDS:
            self.slow.append(f"{what}: answered after {elapsed:.2f}s")
        if uid:
            check_answer(self.findings, what, status, body, uid)
        elif status != 200:
            self.slow.append(f"{what}: HTTP {status}")

    def _run(self) -> None:
        while not self._stop.is_set():
            self.rounds += 1
            self.peak_rss = max(self.peak_rss, self.server.rss_bytes())
            self._timed("liveness", lambda: self.server.get("/health/liveness", timeout=ANSWER_SECONDS))
            body = self.unrelated()
            self._timed("unrelated review", lambda: self.server.post_review("/validate", body, timeout=ANSWER_SECONDS), body["request"]["uid"])
            self.peak_rss = max(self.peak_rss, self.server.rss_bytes())
            self.completed += 1
            self._stop.wait(self.interval)

    def wait_rounds(self, count: int, limit: float = 20.0) -> None:
        """Until ``count`` probe rounds have completed (or ``limit`` seconds passed: the probe reports its own stalls)."""
        deadline = time.monotonic() + limit
        while self.completed < count and time.monotonic() < deadline:
            time.sleep(0.05)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(2 * ANSWER_SECONDS + 5)
        if self.slow:
            self.findings.add(f"while hostile input was in flight ({self.rounds} probe rounds): " + "; ".join(dict.fromkeys(self.slow)))
        self.findings.check(self.rounds > 0, "the probe never ran")
        self.findings.check(
            self.peak_rss < self.limit,
            f"RSS of the server and its workers reached {self.peak_rss >> 20} MiB, chart limit {self.limit >> 20} MiB",
        )


@contextmanager
def serving(workdir: Path, policies: dict[str, str], extra_args: tuple[str, ...] = ()) -> Iterator[ServeProcess]:
    """A server that is always stopped (killed if SIGTERM did not do it) when the case ends."""
    server = ServeProcess(workdir, policies, extra_args)
    try:
        yield server
    finally:
        server.kill()


def run_case(
    server: ServeProcess,
    make_body: Callable[[], dict[str, Any] | bytes],
    path: str = "/validate",
    expect_allowed: bool | None = None,
    budget: float = HOSTILE_BUDGET,
) -> dict[str, Any] | None:
    """The common shape of a hostile case: the hostile review under the Probe, then SIGTERM while a second copy of it
    is in flight; every broken criterion is reported together."""
    findings = Findings()
    with Probe(server, findings):
        response = HostileCall(server, make_body(), path, budget).start().result(findings)
    if response is not None and expect_allowed is not None:
        findings.check(response["allowed"] is expect_allowed, f"hostile review: allowed={response['allowed']}, expected {expect_allowed}: {response}")
    server.sigterm_during(findings, lambda: server.post_review(path, make_body(), timeout=60))
    findings.assert_none(server.log())
    return response


def cluster_policy(name: str, rule: str, failure_policy: str = "Fail", budget: int = HOSTILE_BUDGET) -> str:
    """A ClusterPolicy on Pods with one rule (``rule`` is the YAML of the rule body below its name and match)."""
    indented = "\n".join("    " + line if line else line for line in rule.strip("\n").splitlines())
    return f"""apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: {name}
spec:
  validationFailureAction: Enforce
  failurePolicy: {failure_policy}
  webhookTimeoutSeconds: {budget}
  rules:
  - name: {name}-rule
    match:
      any:
      - resources:
          kinds: [Pod]
{indented}
"""
