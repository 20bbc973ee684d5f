"""The least CPU a Python admission webhook can spend per review: a floor for issue 26's per-core goals.

Usage: .venv/bin/python bench/bench_python_floor.py [--seconds 10] [--connections 8] [--rates 100,300,600]
       [--policies bench/policies/pss-restricted.yaml]
Starts, pinned to CPU 0, a server that does only what any webhook must: TLS (uvloop, the same `ssl` settings as
`stockade serve`), HTTP/1.1 parsing (httptools), decoding the AdmissionReview (orjson) and answering ``allowed``
with the request's uid; no policy, no worker, no logging, no metrics.  Then, pinned to CPU 1, the same load
generator and Pod CREATE reviews as `bench_admission.py` drive it closed-loop, and the server's CPU time per review
is read from /proc.  ``1 / CPU per review`` is the most reviews per second one core can answer in Python on this
machine whatever the policy engine does; then `stockade serve` runs the same way with ``--policies`` for
comparison.  ``--rates``: open-loop steps after the closed loop, with `compare_kyverno.py`'s generator (latency from
the scheduled send time), so the floor's p99 at each rate is the least latency that harness can show.  Compare
with Kyverno's figures in `bench/compare_kyverno.py`'s output.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_admission import drive, free_port, process_cpu_seconds, start_server, wait_ready  # noqa: E402
from bench_engine import generate_pods, review_for  # noqa: E402


def serve_floor(port: int, cert: str, key: str) -> None:
    """The minimal webhook (runs in the child process)."""
    import httptools
    import orjson
    import uvloop

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)

    class Webhook(asyncio.Protocol):
        def __init__(self) -> None:
            self.parser = httptools.HttpRequestParser(self)
            self.body: list[bytes] = []
            self.transport: asyncio.Transport | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport  # type: ignore[assignment]  # uvloop's SSL transport is not an asyncio.Transport subclass

        def data_received(self, data: bytes) -> None:
            self.parser.feed_data(data)

        def on_body(self, body: bytes) -> None:
            self.body.append(body)

        def on_message_complete(self) -> None:
            assert self.transport is not None
            if not self.body:  # the readiness probe
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                return
            review = orjson.loads(b"".join(self.body))
            self.body.clear()
            answer = orjson.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": review["request"]["uid"], "allowed": True}}
            )
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Webhook, "127.0.0.1", port, ssl=context, backlog=128)
        async with server:
            await server.serve_forever()

    uvloop.run(main())


def measure(port: int, process: subprocess.Popen[bytes], client: ssl.SSLContext, bodies: list[bytes], connections: int, seconds: float) -> tuple[float, float]:
    """(reviews per second, server CPU milliseconds per review) over a closed loop of ``seconds``."""
    asyncio.run(wait_ready(port, client, process))
    asyncio.run(drive(port, client, bodies[:500], connections, 5.0, "/validate/fail"))  # warm up
    before = process_cpu_seconds(process.pid) + sum(process_cpu_seconds(pid) for pid in _children(process.pid))
    latencies, _, errors, elapsed = asyncio.run(drive(port, client, bodies, connections, seconds, "/validate/fail"))
    after = process_cpu_seconds(process.pid) + sum(process_cpu_seconds(pid) for pid in _children(process.pid))
    if errors:
        raise SystemExit(f"{errors} reviews failed")
    return len(latencies) / elapsed, (after - before) * 1000 / len(latencies)


def open_loop_steps(name: str, port: int, process: subprocess.Popen[bytes], ca_file: Path, bodies: list[bytes], rates: list[float], seconds: float, connections: int) -> list[tuple[str, float, float, float, float]]:
    """(server, offered rate, achieved rate, p50 ms, p99 ms) per open-loop step."""
    from compare_kyverno import Server, measure

    server = Server(name=name, process=process, port=port, ca_file=ca_file, cores="0", log=Path(os.devnull))
    return [(name, rate, step.achieved, step.p50_ms, step.p99_ms) for rate in rates for step in [measure(server, "floor", bodies, rate, seconds, connections)]]


def _children(pid: int) -> list[int]:
    from bench_admission import descendants

    return descendants(pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--policies", default=str(HERE / "policies" / "pss-restricted.yaml"))
    parser.add_argument("--rates", default="100,300,600", help="open-loop steps (reviews/s, comma-separated; empty: none)")
    parser.add_argument("--serve", nargs=3, metavar=("PORT", "CERT", "KEY"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.serve:
        serve_floor(int(options.serve[0]), options.serve[1], options.serve[2])
        return
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {1})
    bodies = [review_for(pod) for pod in generate_pods(200_000)]
    with tempfile.TemporaryDirectory(prefix="stockade-floor-") as scratch:
        cert_dir = Path(scratch) / "floor"
        cert_dir.mkdir()
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(cert_dir / "tls.key"), "-out", str(cert_dir / "tls.crt")],
            check=True, capture_output=True,
        )  # fmt: skip
        client = ssl.create_default_context(cafile=str(cert_dir / "tls.crt"))
        rows = []
        steps: list[tuple[str, float, float, float, float]] = []
        rates = [float(rate) for rate in options.rates.split(",") if rate.strip()]
        port = free_port()
        pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
        floor = subprocess.Popen([*pin, sys.executable, __file__, "--serve", str(port), str(cert_dir / "tls.crt"), str(cert_dir / "tls.key")])
        try:
            rows.append(("floor: TLS + HTTP + decode + answer", *measure(port, floor, client, bodies, options.connections, options.seconds)))
            steps += open_loop_steps("floor", port, floor, cert_dir / "tls.crt", bodies, rates, options.seconds, options.connections)
        finally:
            floor.terminate()
            floor.wait(10)
        port = free_port()
        serve_dir = Path(scratch) / "serve"
        server = start_server(options.policies, port, serve_dir, 1)
        try:
            deadline = time.monotonic() + 60
            while not (serve_dir / "ca.crt").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            client = ssl.create_default_context(cafile=str(serve_dir / "ca.crt"))
            rows.append((f"stockade serve --workers 1, {Path(options.policies).name}", *measure(port, server, client, bodies, options.connections, options.seconds)))
            steps += open_loop_steps("stockade", port, server, serve_dir / "ca.crt", bodies, rates, options.seconds, options.connections)
        finally:
            server.terminate()
            server.wait(30)
    load = os.getloadavg()
    print(f"closed loop, {options.connections} connections, {options.seconds:.0f} s, server on CPU 0, client on CPU 1; load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'server':55} {'reviews/s':>10} {'CPU ms/review':>14} {'max reviews/s per core':>23}")
    for name, rate, cpu in rows:
        print(f"{name:55} {rate:10.0f} {cpu:14.3f} {1000 / cpu:23.0f}")
    if steps:
        print(f"open loop: {'server':10} {'offered/s':>10} {'achieved/s':>11} {'p50 ms':>8} {'p99 ms':>8}")
        for name, offered, achieved, p50, p99 in steps:
            print(f"           {name:10} {offered:10.0f} {achieved:11.0f} {p50:8.2f} {p99:8.2f}")


if __name__ == "__main__":
    main()
