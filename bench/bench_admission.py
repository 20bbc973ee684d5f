"""Admission webhook throughput: Pod CREATE reviews against the Pod Security restricted set over HTTPS keep-alive.

Usage: .venv/bin/python bench/bench_admission.py [--requests 5000] [--connections 8] [--max-seconds 60]
       [--policies bench/policies/pss-restricted.yaml] [--endpoint /validate/fail] [--workers 1]
       [--tracing-sampling-ratio 0.1]   (spans go to an OTLP/HTTP sink in this process; default: tracing off)
Starts `stockade serve` on 127.0.0.1 (a free port) as a child process pinned to CPU 0 when taskset exists, drives it
from this process (pinned to CPU 1) with a bounded number of requests, prints p50/p99 latency, requests/s and the CPU
time per request of the server and of its evaluation workers (from /proc), and
stops the server.  Traffic never leaves the loopback interface.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_engine import generate_pods, review_for  # noqa: E402


class SpanSink:
    """An OTLP/HTTP receiver on 127.0.0.1 that counts export requests and bytes and discards them (tracing runs)."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        sink = self
        self.exports = 0
        self.bytes = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                size = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(size)
                sink.exports += 1
                sink.bytes += size
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(policies: str, port: int, cert_dir: Path, workers: int, tracing: list[str] | None = None) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-c", "from stockade.cli.main import main; main()", "serve", policies, "--host", "127.0.0.1", "--port", str(port), "--cert-dir", str(cert_dir), "--log-level", "warning", "--workers", str(workers), *(tracing or [])]
    if workers == 1 and shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        command = ["taskset", "-c", "0", *command]
        os.sched_setaffinity(0, {1})
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def wait_ready(port: int, context: ssl.SSLContext, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    import aiohttp

    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise SystemExit(f"server exited: {process.stderr.read().decode() if process.stderr else ''}")
            try:
                async with session.get(f"https://127.0.0.1:{port}/health/readiness", ssl=context) as response:
                    if response.status == 200:
                        return
            except (aiohttp.ClientError, OSError):
                pass
            await asyncio.sleep(0.2)
    raise SystemExit("server did not become ready")


async def drive(port: int, context: ssl.SSLContext, bodies: list[bytes], connections: int, max_seconds: float, endpoint: str) -> tuple[list[float], int, int, float]:
    import aiohttp

    latencies: list[float] = []
    denied = 0
    errors = 0
    next_index = 0
    deadline = time.monotonic() + max_seconds
    connector = aiohttp.TCPConnector(limit=connections, ssl=context, force_close=False)
    url = f"https://127.0.0.1:{port}{endpoint}"

    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal next_index, denied, errors
            while next_index < len(bodies) and time.monotonic() < deadline:
                body = bodies[next_index]
                next_index += 1
                started = time.perf_counter()
                async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
                    payload = await response.read()
                latencies.append(time.perf_counter() - started)
                if response.status != 200:
                    errors += 1
                elif not json.loads(payload)["response"]["allowed"]:
                    denied += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        elapsed = time.perf_counter() - started
    return latencies, denied, errors, elapsed


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process, from /proc (Linux)."""
    return sum(process_counters(pid)[:2])


def process_counters(pid: int) -> tuple[float, float, int]:
    """(user CPU seconds, system CPU seconds, context switches of all its threads) of one process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    switches = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    switches += int(line.split()[1])
        except OSError:  # the thread exited meanwhile
            pass
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks, switches


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (the evaluation workers and multiprocessing's helpers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, pending = [], [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def cpu_snapshot(pid: int) -> tuple[float, float]:
    """(server process, its descendants) CPU seconds so far."""
    server, below = counter_snapshot(pid)
    return sum(server[:2]), sum(below[:2])


def counter_snapshot(pid: int) -> tuple[tuple[float, float, int], tuple[float, float, int]]:
    """(server process, its descendants summed) as (user CPU seconds, system CPU seconds, context switches) so far."""
    below = (0.0, 0.0, 0)
    for child in descendants(pid):
        try:
            counters = process_counters(child)
        except OSError:  # exited meanwhile
            continue
        below = (below[0] + counters[0], below[1] + counters[1], below[2] + counters[2])
    return process_counters(pid), below


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--max-seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--policies", default=str(HERE / "policies" / "pss-restricted.yaml"))
    parser.add_argument("--endpoint", default="/validate/fail")
    parser.add_argument("--workers", type=int, default=1, help="server processes (>1: not pinned, shares cores with the client)")
    parser.add_argument("--tracing-sampling-ratio", type=float, default=None, help="trace to a local OTLP/HTTP sink at this ratio (default: tracing off)")
    args = parser.parse_args()
    sink = SpanSink() if args.tracing_sampling_ratio is not None else None
    tracing = ["--tracing-endpoint", sink.url, "--tracing-sampling-ratio", str(args.tracing_sampling_ratio)] if sink else []

    pods = generate_pods(args.requests + args.warmup)
    bodies = [review_for(p) for p in pods]
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="stockade-bench-") as scratch:
        cert_dir = Path(scratch)
        process = start_server(args.policies, port, cert_dir, args.workers, tracing)
        try:
            deadline = time.monotonic() + 30
            while not (cert_dir / "ca.crt").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
            asyncio.run(wait_ready(port, context, process))
            asyncio.run(drive(port, context, bodies[: args.warmup], args.connections, args.max_seconds, args.endpoint))
            cpu_before = counter_snapshot(process.pid)  # taskset execs the server in place: same pid
            latencies, denied, errors, elapsed = asyncio.run(
                drive(port, context, bodies[args.warmup :], args.connections, args.max_seconds, args.endpoint)
            )
            cpu_after = counter_snapshot(process.pid)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
    count = len(latencies)
    print(f"policies: {args.policies}")
    print("tracing: off" if sink is None else f"tracing: sampling ratio {args.tracing_sampling_ratio}, {sink.exports} OTLP exports, {sink.bytes} bytes")
    print(f"requests: {count} over {args.connections} keep-alive connections in {elapsed:.2f}s ({denied} denied, {errors} errors)")
    print(f"throughput: {count / elapsed:.0f} req/s")
    print(
        f"latency: p50 {percentile(latencies, 0.50) * 1000:.2f} ms, p99 {percentile(latencies, 0.99) * 1000:.2f} ms, "
        f"mean {statistics.fmean(latencies) * 1000:.2f} ms"
    )
    per_request = [[(after - before) / max(1, count) for before, after in zip(role_before, role_after)] for role_before, role_after in zip(cpu_before, cpu_after)]
    (server_user, server_system, server_switches), (workers_user, workers_system, workers_switches) = per_request
    server_ms, workers_ms = (server_user + server_system) * 1000, (workers_user + workers_system) * 1000
    print(f"cpu per request: server {server_ms:.3f} ms, evaluation workers {workers_ms:.3f} ms, total {server_ms + workers_ms:.3f} ms")
    print(
        f"  of which system: server {server_system * 1000:.3f} ms, workers {workers_system * 1000:.3f} ms; "
        f"context switches per request: server {server_switches:.2f}, workers {workers_switches:.2f}"
    )


if __name__ == "__main__":
    main()
