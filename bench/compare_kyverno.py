"""Admission latency and throughput, Stockade beside Kyverno 1.19.1's admission controller, in one run.

Usage: .venv/bin/python bench/compare_kyverno.py [--rates 100,300,600] [--max-rates 750,1000,1500,2000,3000] [--closed 8]
       [--seconds 10] [--server-cores 0] [--client-cores 1] [--sets pss,pss-podsecurity] [--workers 1]
       [--scaling] [--e2e-seconds 10] [--memory-reviews 100000 [--memory-only]] [--json OUT]
Starts a local control plane (etcd + kube-apiserver, stockade/testing/apiserver.py) with Kyverno's CRDs, the
``kyverno`` namespace and ConfigMap; runs Kyverno's admission controller out of cluster (``--serverIP=127.0.0.1``,
URL webhooks, kubeconfig) and ``stockade serve`` with the same policy files, each pinned (taskset) to the same
server cores, and drives both with one open-loop generator pinned to the client cores: identical Pod CREATE
AdmissionReviews POSTed over HTTPS keep-alive straight to ``/validate/fail``, at fixed offered rates, then at
rising rates until a server no longer sustains the rate (achieved < 95 % of offered, errors, or p99 > 1 s).
Latency is measured from each request's scheduled send time, so queueing inside the client counts (no coordinated
omission).  CPU per 1,000 reviews is read from /proc for the server and all its descendants (Stockade's workers).
``--e2e-seconds`` also creates Pods through the apiserver (the path ``kubectl create`` takes) with each server
registered as the only validating webhook.  ``--scaling`` measures Stockade with ``--workers 1`` on one core
against ``--workers 2`` on two.  Binaries: ``$STOCKADE_KYVERNO`` or ``.cache/bin/kyverno`` (bench/build-kyverno.sh),
Kyverno's CRDs from ``$STOCKADE_KYVERNO_SRC`` or ``.cache/kyverno-src/v1.19.1``.
``--memory-reviews N`` first records each server's memory once it is ready (RSS and PSS of every process: Stockade's
server, forkserver, evaluation workers and resource tracker, Kyverno's one process), drives N reviews closed loop,
each a different Pod (own name, uid and label value), sampling every 0.5 s and every ``--memory-checkpoint`` reviews,
records the memory after the last answer, and prints both servers' tables side by side with the ratios of the
totals and the growth per 10,000 reviews; Kyverno is restarted for each set so each starts fresh.  RSS over-counts
pages a forked tree shares, PSS divides them, anonymous PSS is the heap part, which unrelated processes mapping the
same files do not change (bench/procmem.py).  ``--workers 0`` leaves Stockade's worker count
to ``serve`` (one per core it is pinned to).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import uuid
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, overload

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_admission import cpu_snapshot, descendants, free_port, percentile  # noqa: E402
from bench_engine import generate_pods, review_for  # noqa: E402
from procmem import MIB, PeakRss, Sample, roled_pids, sample_memory  # noqa: E402

from stockade.testing.apiserver import ControlPlane, find_binary  # noqa: E402
from stockade.testing.e2ecluster import KYVERNO_CONFIG_DATA  # noqa: E402

POLICY_SETS: dict[str, list[Path]] = {
    "pss": [HERE / "policies" / "pss-restricted.yaml"],
    "pss-podsecurity": [HERE / "policies" / "pss-podsecurity.yaml"],
    "mix17": [HERE / "policies" / "mix17"],
    "vpol": [HERE / "policies" / "vpol-restricted.yaml"],
}
# a CEL policy's reviews go to its own webhook (Kyverno's path layout, which Stockade serves too)
POLICY_SET_PATHS: dict[str, str] = {"vpol": "/vpol/vpol-restricted"}
BENCH_NAMESPACE = "bench"
MAX_TOLERATED_P99_S = 1.0


class BenchError(RuntimeError):
    """A peer failed to start or answer; the message names it and its log."""


@dataclass
class StepResult:
    server: str
    policy_set: str
    offered: float
    achieved: float
    count: int
    errors: int
    denied: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    cpu_s_per_1000: float
    runqueue_wait_ms_per_review: float
    cores: str
    note: str = ""

    def sustained(self) -> bool:
        return self.errors == 0 and self.achieved >= 0.95 * self.offered and self.p99_ms <= MAX_TOLERATED_P99_S * 1000


@dataclass
class Server:
    """One admission server under test: its process (pid = the server itself, taskset execs in place) and URL."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    ca_file: Path
    cores: str
    log: Path
    # the webhook path reviews are posted to: the ClusterPolicy webhook, or a CEL policy's own (set per policy set)
    path: str = "/validate/fail"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file.exists() else ssl.create_default_context()
        if not self.ca_file.exists():
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            context.check_hostname = False
        return context

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def pinned(cores: str, argv: list[str]) -> list[str]:
    return ["taskset", "-c", cores, *argv] if shutil.which("taskset") else argv


def kubectl(plane: ControlPlane, *args: str, stdin: str | None = None, timeout: float = 180) -> str:
    binary = find_binary("kubectl", "STOCKADE_KUBECTL")
    result = subprocess.run([binary, f"--kubeconfig={plane.kubeconfig}", *args], input=stdin, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise BenchError(f"kubectl {' '.join(args[:3])} failed: {result.stderr.strip()}")
    return result.stdout


def kyverno_source() -> Path:
    for candidate in (os.environ.get("STOCKADE_KYVERNO_SRC", ""), str(HERE.parent / ".cache" / "kyverno-src" / "v1.19.1")):
        if candidate and (Path(candidate) / "config" / "crds").is_dir():
            return Path(candidate)
    raise BenchError("Kyverno's module copy not found: run bench/build-kyverno.sh or set STOCKADE_KYVERNO_SRC")


def wait_crds_established(plane: ControlPlane, attempts: int = 10) -> None:
    """kubectl wait fails outright on a CRD whose status the API server has not written yet: try again."""
    for attempt in range(attempts):
        try:
            kubectl(plane, "wait", "--for=condition=Established", "crd", "--all", "--timeout=120s")
            return
        except BenchError:
            if attempt == attempts - 1:
                raise
            time.sleep(1)


def install_kyverno_prerequisites(plane: ControlPlane) -> None:
    """Kyverno's CRDs, its namespace and dynamic ConfigMap (as its chart installs them) and the bench namespace."""
    crds = kyverno_source() / "config" / "crds"
    for folder in sorted(path for path in crds.iterdir() if path.is_dir()):
        kubectl(plane, "apply", "--server-side", "-f", str(folder))
    wait_crds_established(plane)
    # Kyverno 1.19 reads `webhooks` as one object (the e2e cluster's list form is the older chart's)
    webhooks = json.loads(KYVERNO_CONFIG_DATA["webhooks"])
    kyverno_config = {**KYVERNO_CONFIG_DATA, "webhooks": json.dumps(webhooks[0] if isinstance(webhooks, list) else webhooks)}
    manifests = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kyverno"}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": BENCH_NAMESPACE}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kyverno", "namespace": "kyverno"}, "data": kyverno_config},
    ]
    kubectl(plane, "apply", "--server-side", "-f", "-", stdin="\n---\n".join(json.dumps(m) for m in manifests))


def wait_healthy(server: Server, path: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise BenchError(f"{server.name} exited with {server.process.returncode}; see {server.log}")
        try:
            with urllib.request.urlopen(server.url + path, context=server.context(), timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise BenchError(f"{server.name} not healthy after {timeout:.0f}s; see {server.log}")


def start_kyverno(plane: ControlPlane, scratch: Path, cores: str, wrap: Callable[[list[str]], list[str]] | None = None) -> Server:
    """``wrap``: how to start the command (e.g. inside a memory cgroup, procmem.MemoryCgroup.wrap)."""
    binary = find_binary("kyverno", "STOCKADE_KYVERNO")
    port = free_port()
    log = scratch / "kyverno.log"
    env = {
        **os.environ,
        "KYVERNO_NAMESPACE": "kyverno",
        "KYVERNO_SERVICEACCOUNT_NAME": "kyverno-admission-controller",
        "KYVERNO_DEPLOYMENT": "kyverno-admission-controller",
        "KYVERNO_POD_NAME": "kyverno-admission-controller-bench",
        "KYVERNO_SVC": "kyverno-svc",
        "INIT_CONFIG": "kyverno",
        "METRICS_CONFIG": "kyverno-metrics",
    }
    argv = [
        binary,
        f"--kubeconfig={plane.kubeconfig}",
        f"--serverIP=127.0.0.1:{port}",  # Kyverno builds the webhook URL as https://<serverIP><path>
        "--webhookServerHost=127.0.0.1",
        f"--webhookServerPort={port}",
        f"--servicePort={port}",
        "--metricsHost=127.0.0.1",
        f"--metricsPort={free_port()}",
        "--controllerRuntimeMetricsAddress=0",
        "--admissionReports=false",
        "--autoMemLimitEnabled=false",
        "--caSecretName=kyverno-svc.kyverno.svc.kyverno-tls-ca",
        "--tlsSecretName=kyverno-svc.kyverno.svc.kyverno-tls-pair",
        "--disableLogColor",
        "--v=1",
    ]
    with log.open("wb") as out:
        command = pinned(cores, argv)
        process = subprocess.Popen(wrap(command) if wrap is not None else command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = Server("kyverno", process, port, Path("/nonexistent"), cores, log)
    wait_healthy(server, "/health/liveness")
    return server


def start_stockade(policy_files: list[Path], scratch: Path, cores: str, workers: int, tag: str = "") -> Server:
    port = free_port()
    cert_dir = scratch / f"stockade-certs{tag}"
    log = scratch / f"stockade{tag}.log"
    argv = [
        sys.executable, "-m", "stockade", "serve", *map(str, policy_files),
        "--host", "127.0.0.1", "--port", str(port), "--cert-dir", str(cert_dir),
        "--log-level", "warning", *(["--workers", str(workers)] if workers > 0 else []),
    ]
    env = {**os.environ, "PYTHONPATH": str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with log.open("wb") as out:
        process = subprocess.Popen(pinned(cores, argv), stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=HERE.parent)
    server = Server(f"stockade(w{workers})", process, port, cert_dir / "ca.crt", cores, log)
    deadline = time.monotonic() + 60
    while not server.ca_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    wait_healthy(server, "/health/readiness")
    if workers <= 0:  # serve's default: one per usable core (the cores it is pinned to)
        server.name = f"stockade(w{sum(1 for role, _ in server_processes(server) if role == 'worker')})"
    return server


def policy_documents(policy_files: list[Path]) -> str:
    texts: list[str] = []
    for path in policy_files:
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        texts.extend(file.read_text() for file in files)
    return "\n---\n".join(texts)


def apply_policies_to_kyverno(plane: ControlPlane, policy_files: list[Path]) -> None:
    """Replace Kyverno's policies with the set's; ClusterPolicies are waited for (Ready), a ValidatingPolicy set by
    the verdict check that follows (it posts until Kyverno's answers match Stockade's)."""
    kubectl(plane, "delete", "clusterpolicy,validatingpolicy", "--all", "--wait=true")
    documents = policy_documents(policy_files)
    kubectl(plane, "apply", "-f", "-", stdin=documents)
    if "kind: ClusterPolicy" in documents:
        kubectl(plane, "wait", "--for=condition=Ready", "clusterpolicy", "--all", "--timeout=180s")


async def expect_verdicts(server: Server, bodies: list[bytes], expected: list[bool] | None, timeout: float = 120) -> list[bool]:
    """Post every body once; until the answers match ``expected`` (Kyverno's policy cache fills asynchronously)."""
    import aiohttp

    deadline = time.monotonic() + timeout
    connector = aiohttp.TCPConnector(limit=8, ssl=server.context())
    async with aiohttp.ClientSession(connector=connector) as session:
        while True:
            verdicts = []
            for body in bodies:
                async with session.post(server.url + server.path, data=body, headers={"Content-Type": "application/json"}) as response:
                    payload = await response.read()
                    if response.status != 200:
                        raise BenchError(f"{server.name} answered HTTP {response.status}: {payload[:300]!r}")
                    verdicts.append(bool(json.loads(payload)["response"]["allowed"]))
            if expected is None or verdicts == expected or time.monotonic() > deadline:
                return verdicts
            await asyncio.sleep(1)


@dataclass
class Tally:
    """What one load step's reviews came back with: latencies (seconds), failed posts, denials."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    denied: int = 0

    async def post(self, session: Any, server: Server, body: bytes, since: float) -> None:
        """POST one review; its latency counts from ``since`` (the scheduled or the actual send time)."""
        import aiohttp

        try:
            async with session.post(server.url + server.path, data=body, headers={"Content-Type": "application/json"}) as response:
                payload = await response.read()
                if response.status != 200:
                    self.errors += 1
                    return
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            self.errors += 1
            return
        self.latencies.append(time.perf_counter() - since)
        if b'"allowed":false' in payload.replace(b" ", b""):
            self.denied += 1


def session_for(server: Server, connections: int) -> Any:
    import aiohttp

    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections, ssl=server.context()), timeout=aiohttp.ClientTimeout(total=10))


async def open_loop(server: Server, bodies: list[bytes], rate: float, seconds: float, connections: int) -> tuple[list[float], int, int, float]:
    """Send at ``rate``/s on a fixed schedule regardless of answers; latency counts from the scheduled send time."""
    tally = Tally()
    async with session_for(server, connections) as session:
        tasks: list[asyncio.Task[None]] = []
        started = time.perf_counter()
        for index in range(int(rate * seconds)):
            scheduled = started + index / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(tally.post(session, server, bodies[index % len(bodies)], scheduled)))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - started
    return tally.latencies, tally.errors, tally.denied, elapsed


async def closed_loop(
    server: Server, bodies: Sequence[bytes], seconds: float, connections: int, limit: int | None = None,
    every: tuple[int, Callable[[int], None]] | None = None,
) -> tuple[list[float], int, int, float]:
    """``connections`` clients, each sending its next review as soon as the answer to the last one arrived: the
    server's throughput at saturation (latency from each send).  With ``limit``, the loop ends after that many reviews
    (or ``seconds``, whichever comes first); ``every`` = (n, callback) calls back with the count after each n answers."""
    tally = Tally()
    async with session_for(server, connections) as session:
        started = time.perf_counter()
        stop_at = started + seconds
        done = 0

        async def client(offset: int) -> None:
            nonlocal done
            index = offset
            while time.perf_counter() < stop_at and (limit is None or index < limit):
                body = bodies[index % len(bodies)]
                index += connections
                await tally.post(session, server, body, time.perf_counter())
                done += 1
                if every is not None and done % every[0] == 0:
                    every[1](done)

        await asyncio.gather(*(client(offset) for offset in range(connections)))
        elapsed = time.perf_counter() - started
    return tally.latencies, tally.errors, tally.denied, elapsed


def runqueue_wait_seconds(pid: int) -> float:
    """Time the server's threads (and its descendants') spent runnable but not running: CPU contention, from
    /proc/<pid>/task/<tid>/schedstat (field 2, ns); on a shared machine this is the part of latency others cause."""
    total = 0
    for process in [pid, *descendants(pid)]:
        try:
            tasks = list(Path(f"/proc/{process}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                total += int((task / "schedstat").read_text().split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return total / 1e9


def measure(server: Server, policy_set: str, bodies: list[bytes], rate: float, seconds: float, connections: int, closed: bool = False) -> StepResult:
    """One step: open loop at ``rate``, or (``closed``) ``connections`` clients back to back (offered 0)."""
    before = sum(cpu_snapshot(server.process.pid))
    waited_before = runqueue_wait_seconds(server.process.pid)
    driver = closed_loop(server, bodies, seconds, connections) if closed else open_loop(server, bodies, rate, seconds, connections)
    latencies, errors, denied, elapsed = asyncio.run(driver)
    after = sum(cpu_snapshot(server.process.pid))
    waited = runqueue_wait_seconds(server.process.pid) - waited_before
    count = len(latencies)
    answered = max(1, count)
    ms = [value * 1000 for value in latencies] or [float("nan")]
    return StepResult(
        server=server.name, policy_set=policy_set, offered=rate, achieved=count / elapsed, count=count, errors=errors,
        denied=denied, p50_ms=percentile(ms, 0.50), p95_ms=percentile(ms, 0.95), p99_ms=percentile(ms, 0.99),
        cpu_s_per_1000=(after - before) / answered * 1000, runqueue_wait_ms_per_review=waited / answered * 1000, cores=server.cores,
    )


def sweep(server: Server, policy_set: str, bodies: list[bytes], args: argparse.Namespace, note: str = "") -> list[StepResult]:
    """The fixed rates, then the highest sustained rate: up the ladder from the highest fixed rate while sustained,
    or down it while not."""
    results: list[StepResult] = []

    def step(rate: float, label: str) -> StepResult:
        result = measure(server, policy_set, bodies, rate, args.seconds, args.connections)
        result.note = label
        results.append(result)
        print(format_row(result), flush=True)
        return result

    measure(server, policy_set, bodies, 200, 3, args.connections)  # warm-up (connections, lazily built caches), not reported
    last: StepResult | None = None
    for rate in args.rates:
        last = step(rate, note or "fixed")
    top = max(args.rates)
    if last is not None and last.sustained():
        for rate in sorted(r for r in args.max_rates if r > top):
            if not step(rate, note or "max sweep").sustained():
                break
    else:
        for rate in sorted((r for r in args.down_rates if r < top and r not in args.rates), reverse=True):
            if step(rate, note or "max sweep").sustained():
                break
    if args.closed > 0:
        closed = measure(server, policy_set, bodies, 0, args.seconds, args.closed, closed=True)
        closed.note = note or f"closed {args.closed}"
        results.append(closed)
        print(format_row(closed), flush=True)
    return results


# --- memory after many reviews -----------------------------------------------------------------------------------


class VariedReviews(Sequence[bytes]):
    """``count`` Pod CREATE reviews built when asked for: the generated Pods in turn, each review with its own uid,
    Pod name and a label value, so no two bodies are alike and anything keyed on a review's content meets new keys."""

    def __init__(self, pods: list[dict[str, Any]], count: int) -> None:
        self.pods, self.total = pods, count

    def __len__(self) -> int:
        return self.total

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[bytes]: ...

    def __getitem__(self, index: int | slice) -> bytes | Sequence[bytes]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.total))]
        pod = self.pods[index % len(self.pods)]
        metadata = pod["metadata"]
        labels = {**metadata.get("labels", {}), "revision": str(index)}
        return review_for({**pod, "metadata": {**metadata, "name": f"{metadata['name']}-{index}", "uid": str(uuid.uuid4()), "labels": labels}})


def totals(sample: Sample) -> tuple[int, int, int]:
    """A sample's total RSS, PSS and anonymous PSS over the processes."""
    return sum(item[2] for item in sample), sum(item[3] for item in sample), sum(item[4] for item in sample)


@dataclass
class MemoryResult:
    """One server's memory over ``reviews`` closed-loop reviews: every process's (role, pid, RSS, PSS, anonymous PSS)
    when ready and after the last answer, the peaks sampled in between, and the totals every ``checkpoint`` reviews."""

    server: str
    policy_set: str
    reviews: int
    errors: int
    denied: int
    seconds: float
    start: Sample
    end: Sample
    peak: tuple[int, int, int]  # total RSS, PSS, anonymous PSS: each its own peak
    per_process_peak: dict[int, tuple[str, int, int, int]]
    checkpoints: list[tuple[int, int, int, int]] = field(default_factory=list)  # (reviews answered, total RSS, PSS, anonymous PSS)

    def growth_per_10k(self, skip: float = 0.2) -> tuple[float, float, float]:
        """Least-squares slope of total RSS, PSS and anonymous PSS (MiB per 10,000 reviews) over the checkpoints past
        the first ``skip`` of the run (the warm-up, when caches and allocator arenas fill)."""
        points = [c for c in self.checkpoints if c[0] >= skip * self.reviews]
        if len(points) < 2:
            return float("nan"), float("nan"), float("nan")
        mean_x = sum(c[0] for c in points) / len(points)
        spread = sum((c[0] - mean_x) ** 2 for c in points)

        def slope(column: int) -> float:
            mean_y = sum(c[column] for c in points) / len(points)
            return sum((c[0] - mean_x) * (c[column] - mean_y) for c in points) / spread * 10_000 / MIB

        return slope(1), slope(2), slope(3)


def server_processes(server: Server) -> list[tuple[str, int]]:
    return roled_pids([("kyverno" if server.name == "kyverno" else "serve", server.process.pid)])


def memory_step(server: Server, policy_set: str, pods: list[dict[str, Any]], reviews: int, connections: int, checkpoint: int) -> MemoryResult:
    """Memory when ready, then ``reviews`` varied reviews closed loop (sampled every 0.5 s and every ``checkpoint``
    answers), then memory after the last answer."""
    sampler = PeakRss(lambda: server_processes(server), interval=0.5)
    start = sampler.take()
    checkpoints = [(0, *totals(start))]

    def at(count: int) -> None:
        checkpoints.append((count, *totals(sampler.take())))
        rss, pss, anon = (value / MIB for value in checkpoints[-1][1:])
        print(f"  {server.name} {policy_set}: {count:>7,} reviews, RSS {rss:7.1f} MiB, PSS {pss:7.1f} MiB, anon PSS {anon:7.1f} MiB", flush=True)

    sampler.start()
    try:
        driver = closed_loop(server, VariedReviews(pods, reviews), 24 * 3600, connections, limit=reviews, every=(checkpoint, at))
        latencies, errors, denied, elapsed = asyncio.run(driver)
    finally:
        sampler.stopped.set()
        sampler.join()
    end = sampler.take()
    answered = len(latencies) + errors
    if checkpoints[-1][0] != answered:
        checkpoints.append((answered, *totals(end)))
    return MemoryResult(
        server=server.name, policy_set=policy_set, reviews=answered, errors=errors, denied=denied, seconds=elapsed, start=start, end=end,
        peak=(sampler.peak, sampler.peak_pss, sampler.peak_anon), per_process_peak=dict(sampler.per_process), checkpoints=checkpoints,
    )


MEMORY_COLUMNS = ("RSS", "PSS", "anon")


def memory_rows(result: MemoryResult) -> list[tuple[str, tuple[float | None, ...]]]:
    """(process, (RSS, PSS, anonymous PSS when ready, the same at their peaks, the same after) in MiB) per process,
    then the total; workers are numbered in pid order (a replaced worker is a row of its own, with no figure after)."""
    start = {pid: tuple(figures) for _, pid, *figures in result.start}
    end = {pid: tuple(figures) for _, pid, *figures in result.end}
    roles = {pid: role for role, pid, *_ in [*result.start, *result.end]}
    roles.update({pid: peak[0] for pid, peak in result.per_process_peak.items()})
    order = {"serve": 0, "kyverno": 0, "forkserver": 1, "worker": 2, "resource_tracker": 3}
    absent = (None,) * len(MEMORY_COLUMNS)
    rows: list[tuple[str, tuple[float | None, ...]]] = []
    workers = 0
    for pid in sorted(roles, key=lambda pid: (order.get(roles[pid], 4), pid)):
        role = roles[pid]
        if role == "worker":
            workers += 1
            role = f"worker-{workers}"
        peak = result.per_process_peak.get(pid, (role, 0, 0, 0))[1:]
        figures = (*start.get(pid, absent), *peak, *end.get(pid, absent))
        rows.append((role, tuple(None if value is None else value / MIB for value in figures)))
    rows.append(("total", tuple(value / MIB for value in (*totals(result.start), *result.peak, *totals(result.end)))))
    return rows


def print_memory_table(results: list[MemoryResult]) -> None:
    """Per policy set: every process's RSS, PSS and anonymous PSS (MiB) when ready, at its peak and after the reviews,
    the totals, the ratios Stockade / Kyverno of the totals, and the growth per 10,000 reviews."""
    for policy_set in sorted({r.policy_set for r in results}):
        rows = [r for r in results if r.policy_set == policy_set]
        print(f"\nmemory, {policy_set}: MiB when ready, at the peak during the reviews and after them (closed loop, varied Pods)")
        heads = " | ".join(f"{when} {column}" for when in ("start", "peak", "after") for column in MEMORY_COLUMNS)
        print(f"| server | process | {heads} |")
        print("|---|---|" + "---|" * 3 * len(MEMORY_COLUMNS))
        for result in rows:
            for role, figures in memory_rows(result):
                cells = " | ".join("-" if value is None else f"{value:.1f}" for value in figures)
                label = f"**{role}**" if role == "total" else role
                print(f"| {result.server} | {label} | {cells} |")
        theirs = next((r for r in rows if r.server == "kyverno"), None)
        for ours in (r for r in rows if r.server.startswith("stockade")):
            if theirs is None:
                break
            a, b = memory_rows(ours)[-1][1], memory_rows(theirs)[-1][1]
            ratios = " | ".join(f"{x / y:.2f}" if x is not None and y else "-" for x, y in zip(a, b))
            print(f"| {ours.server} / kyverno | ratio of totals | {ratios} |")
        for result in rows:
            rss, pss, anon = result.growth_per_10k()
            series = ", ".join(f"{c[0] / 1000:g}k {c[1] / MIB:.0f}/{c[2] / MIB:.0f}/{c[3] / MIB:.0f}" for c in result.checkpoints)
            print(
                f"  {result.server:<13} {result.reviews:,} reviews in {result.seconds:.0f} s ({result.reviews / max(result.seconds, 1e-9):.0f}/s), "
                f"errors {result.errors}, denied {result.denied}; growth per 10k reviews past the first fifth: "
                f"RSS {rss:+.2f} MiB, PSS {pss:+.2f} MiB, anon PSS {anon:+.2f} MiB"
            )
            print(f"    total RSS/PSS/anon MiB by reviews: {series}")


def format_header() -> str:
    return (
        f"{'server':<13} {'set':<16} {'cores':<5} {'offered':>7} {'achieved':>8} {'p50 ms':>8} {'p95 ms':>8} "
        f"{'p99 ms':>8} {'errors':>6} {'denied':>6} {'cpu s/1k':>8} {'rq ms/rv':>8}  sustained"
    )


def format_row(result: StepResult) -> str:
    return (
        f"{result.server:<13} {result.policy_set:<16} {result.cores:<5} {result.offered:>7.0f} {result.achieved:>8.0f} "
        f"{result.p50_ms:>8.2f} {result.p95_ms:>8.2f} {result.p99_ms:>8.2f} {result.errors:>6} {result.denied:>6} "
        f"{result.cpu_s_per_1000:>8.3f} {result.runqueue_wait_ms_per_review:>8.2f}  {'yes' if result.sustained() else 'no'}"
    )


def cores_of(result: StepResult) -> int:
    return len([core for core in result.cores.split(",") if core.strip()]) or 1


def print_ratio_table(results: list[StepResult]) -> None:
    """Issue 26's table per policy set: p99 and CPU per 1,000 reviews of both servers at each open-loop rate both
    were offered, and the closed loop's throughput per core; ratios Stockade / Kyverno (goals: p99 <= 0.25,
    throughput per core >= 4)."""
    plain = [r for r in results if not r.note.startswith("scaling")]
    for policy_set in sorted({r.policy_set for r in plain}):
        rows = [r for r in plain if r.policy_set == policy_set]
        ours = {r.offered: r for r in rows if r.server.startswith("stockade")}
        theirs = {r.offered: r for r in rows if r.server == "kyverno"}
        print(f"\n{policy_set}: stockade / kyverno")
        print("| load | Stockade p99 | Kyverno p99 | ratio | Stockade CPU s/1k | Kyverno CPU s/1k | Kyverno sustained |")
        print("|---|---|---|---|---|---|---|")
        for rate in sorted(set(ours) & set(theirs)):
            a, b = ours[rate], theirs[rate]
            if rate == 0:
                per_core_a, per_core_b = a.achieved / cores_of(a), b.achieved / cores_of(b)
                load = f"closed, {a.note.split()[-1]} connections: {a.achieved:,.0f} vs {b.achieved:,.0f} req/s ({per_core_a / per_core_b:.2f}x per core)"
            else:
                load = f"open {rate:.0f}/s"
            print(
                f"| {load} | {a.p99_ms:.2f} ms | {b.p99_ms:.2f} ms | {a.p99_ms / b.p99_ms:.3f} | {a.cpu_s_per_1000:.2f} | "
                f"{b.cpu_s_per_1000:.2f} | {'yes' if b.sustained() else 'no'} |"
            )


def print_summary(results: list[StepResult]) -> None:
    print("\nsummary (highest sustained rate; p99 at 500/s offered; median CPU per 1,000 reviews over the steps):")
    groups: dict[tuple[str, str, str, str], list[StepResult]] = {}
    for result in results:
        label = result.note if result.note.startswith("scaling") else ""
        groups.setdefault((result.policy_set, label, result.server, result.cores), []).append(result)
    p99_at_500: dict[tuple[str, str, str], float] = {}
    for (policy_set, label, server_name, cores), rows in sorted(groups.items()):
        sustained = [r.offered for r in rows if r.sustained()]
        at500 = [r.p99_ms for r in rows if r.offered == 500]
        if at500:
            p99_at_500[(policy_set, label, server_name.split("(")[0])] = at500[0]
        cpu = statistics.median(r.cpu_s_per_1000 for r in rows)
        print(
            f"  {policy_set:<16} {label:<11} {server_name:<13} cores {cores:<4} max sustained {max(sustained, default=0):>5.0f}/s  "
            f"p99@500 {at500[0] if at500 else float('nan'):>9.2f} ms  cpu {cpu:.3f} s/1k"
        )
    for (policy_set, label, name), p99 in sorted(p99_at_500.items()):
        if name == "stockade" and not label and (policy_set, "", "kyverno") in p99_at_500:
            theirs = p99_at_500[(policy_set, "", "kyverno")]
            print(f"  {policy_set}: p99 at 500/s, stockade / kyverno = {p99 / theirs:.3f} (goal <= 0.25)")


def register_webhook(plane: ControlPlane, server: Server) -> None:
    """Make ``server`` the only validating webhook for Pods in the bench namespace (the e2e phase)."""
    ca_bundle = base64.b64encode(server.ca_file.read_bytes()).decode()
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "bench-stockade"},
        "webhooks": [
            {
                "name": "validate.stockade.bench",
                "clientConfig": {"url": server.url + server.path, "caBundle": ca_bundle},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": BENCH_NAMESPACE}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 10,
            }
        ],
    }
    kubectl(plane, "apply", "-f", "-", stdin=json.dumps(config))


def clear_kyverno_webhooks(plane: ControlPlane, timeout: float = 120) -> None:
    """Remove Kyverno's policies and wait until none of its validating webhooks selects Pods: a Kyverno still holding
    the previous set would be called beside Stockade in Stockade's e2e step and add its own latency to Stockade's."""
    kubectl(plane, "delete", "clusterpolicy,validatingpolicy", "--all", "--wait=true")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listing = json.loads(kubectl(plane, "get", "validatingwebhookconfigurations", "-o", "json"))
        selecting = [
            item["metadata"]["name"]
            for item in listing.get("items") or []
            if "kyverno" in item["metadata"]["name"]
            and any("pods" in (rule.get("resources") or []) or "*" in (rule.get("resources") or []) for webhook in item.get("webhooks") or [] for rule in webhook.get("rules") or [])
        ]
        if not selecting:
            return
        time.sleep(1)
    raise BenchError(f"Kyverno's webhooks still select Pods after {timeout:.0f}s: {selecting}")


def kyverno_webhooks(plane: ControlPlane) -> list[str]:
    out = kubectl(plane, "get", "validatingwebhookconfigurations", "-o", "name")
    return [line for line in out.split() if "kyverno" in line]


async def create_through_apiserver(plane: ControlPlane, pods: list[dict[str, Any]], seconds: float, connections: int) -> tuple[list[float], int, int]:
    """Closed loop: ``connections`` clients create Pods (dry run, so etcd does not grow) for ``seconds``."""
    import aiohttp

    context = ssl.create_default_context(cafile=str(plane.ca_file))
    headers = {"Authorization": f"Bearer {plane.token}", "Content-Type": "application/json"}
    url = f"{plane.url}/api/v1/namespaces/{BENCH_NAMESPACE}/pods?dryRun=All"
    latencies: list[float] = []
    denied = 0
    errors = 0
    deadline = time.monotonic() + seconds
    counter = 0
    error_statuses: dict[int, int] = {}
    invalid = 0
    connector = aiohttp.TCPConnector(limit=connections, ssl=context)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:

        async def client() -> None:
            nonlocal denied, errors, counter, invalid
            while time.monotonic() < deadline:
                pod = json.loads(json.dumps(pods[counter % len(pods)]))
                counter += 1
                pod["metadata"] = {"name": f"bench-{counter}", "namespace": BENCH_NAMESPACE}
                started = time.perf_counter()
                async with session.post(url, data=json.dumps(pod)) as response:
                    await response.read()
                latencies.append(time.perf_counter() - started)
                if response.status == 400 or response.status == 403:
                    denied += 1
                elif response.status == 422:
                    invalid += 1  # the apiserver's own validation refused it before any validating webhook
                elif response.status != 201:
                    errors += 1
                    error_statuses[response.status] = error_statuses.get(response.status, 0) + 1

        await asyncio.gather(*(client() for _ in range(connections)))
    if error_statuses or invalid:
        print(f"  apiserver: {invalid} invalid Pods (422, excluded from the webhook's work), other errors {error_statuses}", flush=True)
    return latencies, denied, errors


def print_e2e(name: str, latencies: list[float], denied: int, errors: int, seconds: float) -> dict[str, Any]:
    ms = [value * 1000 for value in latencies] or [float("nan")]
    row = {
        "server": name, "creates": len(latencies), "per_s": len(latencies) / seconds, "p50_ms": percentile(ms, 0.5),
        "p95_ms": percentile(ms, 0.95), "p99_ms": percentile(ms, 0.99), "denied": denied, "errors": errors,
    }
    print(
        f"e2e {name:<13} creates {row['creates']:>6} ({row['per_s']:.0f}/s)  p50 {row['p50_ms']:.2f} ms  "
        f"p95 {row['p95_ms']:.2f} ms  p99 {row['p99_ms']:.2f} ms  denied {denied}  errors {errors}",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rates", type=lambda text: [float(v) for v in text.split(",") if v], default=[100.0, 300.0, 600.0])
    parser.add_argument("--max-rates", type=lambda text: [float(v) for v in text.split(",") if v], default=[750.0, 1000.0, 1500.0, 2000.0, 3000.0])
    parser.add_argument("--down-rates", type=lambda text: [float(v) for v in text.split(",") if v], default=[50.0, 100.0, 200.0, 300.0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--closed", type=int, default=8, help="clients of the closed-loop step (0: none)")
    parser.add_argument("--server-cores", default="0")
    parser.add_argument("--client-cores", default="1")
    parser.add_argument("--sets", default="pss,pss-podsecurity,mix17")
    parser.add_argument("--workers", type=int, default=1, help="Stockade's evaluation workers (0: serve's default, one per server core)")
    parser.add_argument("--scaling", action="store_true", help="also Stockade --workers 1 on one core vs 2 on two")
    parser.add_argument("--e2e-seconds", type=float, default=0.0)
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--memory-reviews", type=int, default=0, help="memory step: RSS/PSS per process before, during and after this many varied reviews (0: none)")
    parser.add_argument("--memory-connections", type=int, default=8, help="clients of the memory step's closed loop")
    parser.add_argument("--memory-checkpoint", type=int, default=10_000, help="sample the totals every this many reviews")
    parser.add_argument("--no-kyverno", action="store_true", help="Stockade alone (e.g. a second --workers count beside an earlier run)")
    parser.add_argument("--memory-only", action="store_true", help="only the memory step (no latency/throughput sweep)")
    args = parser.parse_args()

    if shutil.which("taskset"):
        os.sched_setaffinity(0, {int(core) for core in args.client_cores.split(",")})
    pods = generate_pods(args.pods)
    for pod in pods:
        pod["metadata"]["namespace"] = BENCH_NAMESPACE
    bodies = [review_for(pod) for pod in pods]
    check_bodies = bodies[:30]
    results: list[StepResult] = []
    memory_results: list[MemoryResult] = []
    e2e_rows: list[dict[str, Any]] = []
    plane = ControlPlane()
    scratch = Path(tempfile.mkdtemp(prefix="stockade-compare-"))
    servers: list[Server] = []
    print(f"scratch: {scratch}; server cores {args.server_cores}, client cores {args.client_cores}", flush=True)
    try:
        plane.start()
        install_kyverno_prerequisites(plane)
        for policy_set in [name.strip() for name in args.sets.split(",") if name.strip()]:
            files = POLICY_SETS[policy_set]
            stockade = start_stockade(files, scratch, args.server_cores, args.workers, tag=f"-{policy_set}")
            stockade.path = POLICY_SET_PATHS.get(policy_set, "/validate/fail")
            servers.append(stockade)
            expected = asyncio.run(expect_verdicts(stockade, check_bodies, None))
            if args.memory_reviews > 0:
                memory_results.append(memory_step(stockade, policy_set, pods, args.memory_reviews, args.memory_connections, args.memory_checkpoint))
            if args.e2e_seconds > 0:
                if any(server.name == "kyverno" for server in servers):
                    clear_kyverno_webhooks(plane)  # Stockade alone in the API server's path
                register_webhook(plane, stockade)
                latencies, denied, errors = asyncio.run(create_through_apiserver(plane, pods, args.e2e_seconds, 8))
                e2e_rows.append({"set": policy_set, **print_e2e(stockade.name, latencies, denied, errors, args.e2e_seconds)})
                kubectl(plane, "delete", "validatingwebhookconfiguration", "bench-stockade")
            kyverno: Server | None = None
            if not args.no_kyverno:
                kyverno = next((server for server in servers if server.name == "kyverno"), None)
                if kyverno is None:
                    kyverno = start_kyverno(plane, scratch, args.server_cores)
                    servers.append(kyverno)
                kyverno.path = POLICY_SET_PATHS.get(policy_set, "/validate/fail")
                apply_policies_to_kyverno(plane, files)
                verdicts = asyncio.run(expect_verdicts(kyverno, check_bodies, expected))
                disagreements = sum(1 for ours, theirs in zip(expected, verdicts) if ours != theirs)
                print(f"{policy_set}: verdicts on {len(check_bodies)} reviews, {expected.count(False)} denied, {disagreements} disagreements", flush=True)
                if args.memory_reviews > 0:
                    memory_results.append(memory_step(kyverno, policy_set, pods, args.memory_reviews, args.memory_connections, args.memory_checkpoint))
                if args.e2e_seconds > 0:
                    deadline = time.monotonic() + 60
                    while not kyverno_webhooks(plane) and time.monotonic() < deadline:
                        time.sleep(1)
                    latencies, denied, errors = asyncio.run(create_through_apiserver(plane, pods, args.e2e_seconds, 8))
                    e2e_rows.append({"set": policy_set, **print_e2e("kyverno", latencies, denied, errors, args.e2e_seconds)})
            if not args.memory_only:
                print(format_header(), flush=True)
                for server in [stockade, *([kyverno] if kyverno is not None else [])]:
                    results.extend(sweep(server, policy_set, bodies, args))
            stockade.stop()
            servers.remove(stockade)
            if args.memory_reviews > 0 and kyverno is not None:  # each set's memory from a fresh Kyverno too
                kyverno.stop()
                servers.remove(kyverno)
        if args.scaling:
            print("stockade --workers scaling (pss):", flush=True)
            print(format_header(), flush=True)
            for workers, cores in ((1, args.server_cores), (2, "0,1")):
                server = start_stockade(POLICY_SETS["pss"], scratch, cores, workers, tag=f"-scaling{workers}")
                servers.append(server)
                asyncio.run(expect_verdicts(server, check_bodies, None))
                results.extend(sweep(server, "pss", bodies, args, note=f"scaling w{workers}"))
                server.stop()
                servers.remove(server)
    finally:
        for server in servers:
            server.stop()
        plane.stop()
    if results:
        print_summary(results)
        print_ratio_table(results)
    if memory_results:
        print_memory_table(memory_results)
    print(f"load average at the end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if args.json:
        memory = [{**r.__dict__, "rows": memory_rows(r), "growth_per_10k_mib": r.growth_per_10k()} for r in memory_results]
        args.json.write_text(json.dumps({"steps": [r.__dict__ for r in results], "e2e": e2e_rows, "memory": memory}, indent=2))


if __name__ == "__main__":
    main()
