"""`serve --workers N`: extra processes share the port and go away with the primary."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from webhook_helpers import WebhookClient, pod, review


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_workers_answer_and_exit_with_primary(policy_dir: Path, tmp_path: Path) -> None:
    port = free_port()
    cert_dir = tmp_path / "certs"
    primary = subprocess.Popen(
        [sys.executable, "-c", "from stockade.cli.main import main; main()", "serve", str(policy_dir),
         "--host", "127.0.0.1", "--port", str(port), "--cert-dir", str(cert_dir), "--workers", "2", "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while time.monotonic() < deadline and not (workers and (cert_dir / "ca.crt").exists()):
            assert primary.poll() is None, primary.stderr.read() if primary.stderr else ""
            workers = children_of(primary.pid)
            time.sleep(0.2)
        assert len(workers) == 1
        ca = (cert_dir / "ca.crt").read_bytes()
        answered = 0
        while time.monotonic() < deadline and answered < 20:
            try:
                client = WebhookClient(port, ca)  # a new connection each time, spread by the kernel
                status, body = client.request("POST", "/validate", json.dumps(review(pod())).encode())
                client.close()
            except OSError:
                time.sleep(0.2)  # the worker may still be importing
                continue
            assert status == 200 and json.loads(body)["response"]["allowed"] is False
            answered += 1
        assert answered == 20
        primary.send_signal(signal.SIGTERM)
        assert primary.wait(timeout=30) == 0
        for worker in workers:
            assert not Path(f"/proc/{worker}").exists() or "Z" in Path(f"/proc/{worker}/stat").read_text().split(")")[1][:3]
    finally:
        if primary.poll() is None:
            primary.kill()
            primary.wait()
