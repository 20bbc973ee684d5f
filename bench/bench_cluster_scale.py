"""Background work at cluster scale: Stockade beside Kyverno 1.19.1's background and reports controllers.

Usage: .venv/bin/python bench/bench_cluster_scale.py [--namespaces 1000] [--pods 20000] [--generate-policies 13]
       [--engines stockade,kyverno] [--idle-seconds 60] [--timeout 1800] [--json OUT]

Each engine gets a fresh local control plane (etcd + kube-apiserver, stockade/testing/apiserver.py) with the API
server's audit log on, seeded identically: ``--namespaces`` Namespaces, ``--pods`` Pods spread over them (a third
of them violate one Pod Security control; Pods need no node to be reported on), and 30 ClusterPolicies with
``background: true``: Kyverno's 17 Pod Security policies (bench/policies/mix17) and ``--generate-policies`` generate
policies (``generateExisting``, ``synchronize``), each matching the Namespaces of one label value, so every
Namespace gets one generated ConfigMap.  Then the engine starts, with the policies already in place (as after an
install on a running cluster):

- Stockade: ``stockade serve --from-cluster --register-webhooks`` (background scans and generate, one process tree);
- Kyverno: its admission controller (``kyverno``, run as compare_kyverno.py runs it: URL webhooks to 127.0.0.1),
  ``background-controller`` and ``reports-controller``, out of cluster (bench/build-kyverno.sh builds them); Stockade's
  ``serve`` answers admission too, so both sets do the same jobs.  The peak of the two controllers alone (the
  comparison of earlier runs) stays a row of its own.

Measured, per engine:

- **reports**: seconds from the start until every Pod has a PolicyReport with a result for each of the 17 policies
  and every Namespace has its generated ConfigMap;
- **peak memory** of the engine's processes (sampled every 0.5 s over the whole run), four ways, as each answers a
  different question: RSS summed (counts a page shared by forked processes once per process), PSS summed (divides
  shared pages, also with unrelated processes mapping the same files), the distinct physical pages the processes map
  (from ``/proc/PID/pagemap``: anonymous and file pages, each once: what the engine holds in RAM), and the
  anonymous memory charged to the memory cgroup the engine runs in (heap and stacks only, each page once; a Go
  binary's text is file-backed and not in it); each process's RSS/PSS at the RSS peak (Stockade: serve, the
  forkserver, its evaluation workers), and CPU seconds until complete;
- **idle API requests per minute**: the audit log's requests by the engine over ``--idle-seconds`` after a settle
  period, by verb (a ``list`` at idle is a periodic relist);
- **one policy change**: the message of ``disallow-host-path`` changes; seconds until every failing result carries
  the new message, and the requests and CPU seconds that took, beside the initial scan's.

The Kyverno peers come from ``$STOCKADE_KYVERNO_BIN`` or ``.cache/bin`` and Kyverno's CRDs from the module copy that
build-kyverno.sh keeps; Stockade's run installs deploy/crds.  Nothing here asserts a figure: it prints them.
"""

from __future__ import annotations

import argparse
import calendar
import collections
import concurrent.futures
import copy
import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import yaml  # noqa: E402
from bench_admission import cpu_snapshot, descendants, free_port  # noqa: E402
from bench_engine import generate_pods  # noqa: E402
from procmem import MemoryCgroup, PeakRss, roled_pids  # noqa: E402
from compare_kyverno import BenchError, install_kyverno_prerequisites, kubectl, wait_crds_established  # noqa: E402
from compare_kyverno import start_kyverno as start_kyverno_admission  # noqa: E402

from stockade.testing.apiserver import ControlPlane, find_binary  # noqa: E402

PSS_POLICIES = HERE / "policies" / "mix17"
CHANGED_POLICY = "disallow-host-path"
GROUP_LABEL = "scale.bench/group"
GENERATED_LABEL = "scale.bench/generated"
BENCH_AGENT = "stockade-scale-bench"
# requests that are not the engine's: this script, kubectl, and the API server's own loopback client
FOREIGN_AGENTS = (BENCH_AGENT, "kubectl")
FOREIGN_USERS = ("system:apiserver",)
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
"""


class AuditedControlPlane(ControlPlane):
    """The test control plane with a JSON audit log of every request's metadata (user agent, verb, resource)."""

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    def apiserver_args(self) -> list[str]:
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        return [
            *super().apiserver_args(),
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-maxbackup=0",
            "--audit-log-maxsize=0",
            "--allow-privileged=true",  # a third of the Pods are privileged or use host namespaces on purpose
            "--max-requests-inflight=800",
            "--max-mutating-requests-inflight=400",
        ]


class Api:
    """A keep-alive HTTPS client per thread, as the bench's own user agent (kept out of the engine's counts)."""

    def __init__(self, plane: ControlPlane) -> None:
        self.host, self.port = "127.0.0.1", plane.apiserver_port
        self.token = plane.token
        self.context = ssl.create_default_context(cafile=str(plane.ca_file))
        self.local = threading.local()

    def _connection(self) -> http.client.HTTPSConnection:
        connection = getattr(self.local, "connection", None)
        if connection is None:
            connection = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=120)
            self.local.connection = connection
        return connection

    def request(self, method: str, path: str, body: Any = None, accept: str = "application/json") -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": accept, "User-Agent": BENCH_AGENT, "Content-Type": "application/json"}
        payload = json.dumps(body).encode() if body is not None else None
        for attempt in range(3):
            connection = self._connection()
            try:
                connection.request(method, path, body=payload, headers=headers)
                response = connection.getresponse()
                data = response.read()
                return response.status, json.loads(data) if data else {}
            except (http.client.HTTPException, OSError):
                connection.close()
                self.local.connection = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def list_all(self, path: str, metadata_only: bool = False, page: int = 2000) -> list[dict[str, Any]]:
        accept = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1" if metadata_only else "application/json"
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            separator = "&" if "?" in path else "?"
            status, body = self.request("GET", f"{path}{separator}limit={page}" + (f"&continue={token}" if token else ""), accept=accept)
            if status != 200:
                raise BenchError(f"listing {path} answered {status}: {str(body)[:300]}")
            items.extend(body.get("items") or [])
            token = (body.get("metadata") or {}).get("continue") or ""
            if not token:
                return items


# --- the cluster's contents ----------------------------------------------------------------------------------------


def generate_policies(count: int) -> list[dict[str, Any]]:
    """``count`` generate policies; policy i matches the Namespaces labelled group=i and gives each a ConfigMap."""
    policies = []
    for index in range(count):
        policies.append(
            {
                "apiVersion": "kyverno.io/v1",
                "kind": "ClusterPolicy",
                "metadata": {"name": f"scale-generate-{index}"},
                "spec": {
                    "background": True,
                    "generateExisting": True,
                    "rules": [
                        {
                            "name": "team-config",
                            "match": {"any": [{"resources": {"kinds": ["Namespace"], "selector": {"matchLabels": {GROUP_LABEL: str(index)}}}}]},
                            "generate": {
                                "synchronize": True,
                                "apiVersion": "v1",
                                "kind": "ConfigMap",
                                "name": f"team-config-{index}",
                                "namespace": "{{request.object.metadata.name}}",
                                "data": {"metadata": {"labels": {GENERATED_LABEL: "true"}}, "data": {"policy": f"scale-generate-{index}"}},
                            },
                        }
                    ],
                },
            }
        )
    return policies


def seed(api: Api, namespaces: int, pods: int, groups: int) -> list[str]:
    """Create the Namespaces and Pods (16 threads of keep-alive POSTs); returns the Namespace names."""
    names = [f"scale-{index:04d}" for index in range(namespaces)]
    manifests = generate_pods(pods)

    def post(path: str, body: dict[str, Any]) -> None:
        status, answer = api.request("POST", path, body)
        if status not in (201, 409):
            raise BenchError(f"POST {path} answered {status}: {str(answer)[:300]}")

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(
            pool.map(
                lambda item: post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": item[1], "labels": {GROUP_LABEL: str(item[0] % groups)}}}),
                enumerate(names),
            )
        )
        placed = []
        for index, pod in enumerate(manifests):
            pod = copy.deepcopy(pod)
            pod["metadata"]["namespace"] = names[index % namespaces]
            for container in pod["spec"]["containers"]:
                context = container.get("securityContext") or {}
                if context.get("privileged"):  # the API server refuses privileged with allowPrivilegeEscalation false
                    context.pop("allowPrivilegeEscalation", None)
            placed.append(pod)
        list(pool.map(lambda pod: post(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", pod), placed))
    return names


def pss_policy_names() -> list[str]:
    return sorted(yaml.safe_load(path.read_text())["metadata"]["name"] for path in PSS_POLICIES.glob("*.yaml"))


def apply_policies(plane: ControlPlane, generate_count: int) -> None:
    documents = [path.read_text() for path in sorted(PSS_POLICIES.glob("*.yaml"))]
    documents += [json.dumps(policy) for policy in generate_policies(generate_count)]
    kubectl(plane, "apply", "-f", "-", stdin="\n---\n".join(documents), timeout=300)


def changed_policy_document(message: str) -> str:
    document = yaml.safe_load((PSS_POLICIES / f"{CHANGED_POLICY}.yaml").read_text())
    for rule in document["spec"]["rules"]:
        if "validate" in rule:
            rule["validate"]["message"] = message
    return json.dumps(document)


# --- progress --------------------------------------------------------------------------------------------------------


@dataclass
class Coverage:
    pods_reported: int = 0
    configmaps: int = 0


def coverage(api: Api, policies: list[str], pod_count: int) -> Coverage:
    """How many Pods have a complete report, and how many Namespaces their generated ConfigMap.  The full report list is
    read only once the metadata-only count says every Pod could have one (the reports are large)."""
    configmaps = len(api.list_all(f"/api/v1/configmaps?labelSelector={GENERATED_LABEL}%3Dtrue", metadata_only=True))
    count = len(api.list_all("/apis/wgpolicyk8s.io/v1alpha2/policyreports", metadata_only=True))
    if count < pod_count:
        return Coverage(0, configmaps)
    wanted = set(policies)
    complete = 0
    for report in api.list_all("/apis/wgpolicyk8s.io/v1alpha2/policyreports", page=500):
        if (report.get("scope") or {}).get("kind") != "Pod":
            continue
        if wanted <= {str(result.get("policy") or "") for result in report.get("results") or []}:
            complete += 1
    return Coverage(complete, configmaps)


def changed_results(api: Api, message: str) -> tuple[int, int]:
    """(failing results of the changed policy, how many carry ``message``)."""
    failing = carrying = 0
    for report in api.list_all("/apis/wgpolicyk8s.io/v1alpha2/policyreports", page=500):
        for result in report.get("results") or []:
            if result.get("policy") == CHANGED_POLICY and result.get("result") == "fail":
                failing += 1
                carrying += message in str(result.get("message") or "")
    return failing, carrying


def wait_until(probe: Any, timeout: float, what: str, interval: float = 5.0) -> float:
    start = time.monotonic()
    while True:
        if probe():
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise BenchError(f"{what}: not reached within {timeout:.0f}s")
        time.sleep(interval)


# --- engines ----------------------------------------------------------------------------------------------------------


@dataclass
class Engine:
    name: str
    processes: list[subprocess.Popen[bytes]]
    logs: list[Path]
    roles: list[str] = field(default_factory=list)  # a name per process in ``processes`` (Kyverno's binaries)
    cgroup: MemoryCgroup | None = None  # the memory cgroup all of the engine's processes run in, when one can be made

    def pids(self) -> list[int]:
        found: list[int] = []
        for process in self.processes:
            if process.poll() is None:
                found += [process.pid, *descendants(process.pid)]
        return found

    def roled_pids(self) -> list[tuple[str, int]]:
        """(role, pid) for every live process of the engine: a named top process and what runs below it (procmem)."""
        return roled_pids(
            (self.roles[index] if index < len(self.roles) else self.name, process.pid)
            for index, process in enumerate(self.processes)
            if process.poll() is None
        )

    def cpu_seconds(self) -> float:
        return sum(sum(cpu_snapshot(process.pid)) for process in self.processes if process.poll() is None)

    def check_alive(self) -> None:
        for process, log in zip(self.processes, self.logs):
            if process.poll() is not None:
                raise BenchError(f"{self.name}: a process exited with {process.returncode}; see {log}")

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


# Kyverno's controllers without its admission controller: the comparison set of the earlier runs, still reported
WITHOUT_ADMISSION = ("background-controller", "reports-controller")


def start_stockade(plane: ControlPlane, scratch: Path, cgroup: MemoryCgroup | None = None) -> Engine:
    port = free_port()
    log = scratch / "stockade.log"
    argv = [
        sys.executable, "-m", "stockade", "serve", "--from-cluster", "--register-webhooks",
        f"--kubeconfig={plane.kubeconfig}", "--namespace=kyverno", "--no-leader-election",
        "--host=127.0.0.1", f"--port={port}", f"--webhook-url=https://127.0.0.1:{port}",
        f"--cert-dir={scratch / 'stockade-certs'}", f"--log-level={os.environ.get('STOCKADE_BENCH_LOG_LEVEL', 'warning')}",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with log.open("wb") as out:
        process = subprocess.Popen(cgroup.wrap(argv) if cgroup else argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=ROOT)
    return Engine("stockade", [process], [log], cgroup=cgroup)


def kyverno_binary(name: str) -> str:
    folder = os.environ.get("STOCKADE_KYVERNO_BIN") or str(ROOT / ".cache" / "bin")
    path = Path(folder) / name
    if not path.exists():
        raise BenchError(f"{path} not found: run bench/build-kyverno.sh background-controller reports-controller")
    return str(path)


def start_kyverno(plane: ControlPlane, scratch: Path, cgroup: MemoryCgroup | None = None) -> Engine:
    """Kyverno's admission controller (as compare_kyverno.py runs it: URL webhooks to 127.0.0.1, its own
    certificates; Stockade's ``serve`` answers admission too, so both sets do the same jobs) and its background and
    reports controllers, all out of cluster."""
    processes, logs, roles = [], [], []
    os.environ.setdefault("STOCKADE_KYVERNO", kyverno_binary("kyverno"))
    cores = ",".join(str(core) for core in sorted(os.sched_getaffinity(0)))
    admission = start_kyverno_admission(plane, scratch, cores, wrap=cgroup.wrap if cgroup else None)
    processes.append(admission.process)
    logs.append(admission.log)
    roles.append("admission-controller")
    for name in WITHOUT_ADMISSION:
        env = {
            **os.environ,
            "KYVERNO_NAMESPACE": "kyverno",
            "KYVERNO_SERVICEACCOUNT_NAME": f"kyverno-{name}",
            "KYVERNO_DEPLOYMENT": f"kyverno-{name}",
            "KYVERNO_POD_NAME": f"kyverno-{name}-bench",
            "INIT_CONFIG": "kyverno",
            "METRICS_CONFIG": "kyverno-metrics",
        }
        argv = [kyverno_binary(name), f"--kubeconfig={plane.kubeconfig}", "--metricsHost=127.0.0.1", f"--metricsPort={free_port()}", "--disableLogColor", "--v=1"]
        if name == "background-controller":
            argv.append("--controllerRuntimeMetricsAddress=0")
        log = scratch / f"{name}.log"
        with log.open("wb") as out:
            processes.append(subprocess.Popen(cgroup.wrap(argv) if cgroup else argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        logs.append(log)
        roles.append(name)
    return Engine("kyverno", processes, logs, roles, cgroup=cgroup)


# --- the audit log ----------------------------------------------------------------------------------------------------


def engine_requests(audit_log: Path) -> list[tuple[float, str]]:
    """The engine's requests from the audit log: (wall-clock time, "verb resource"), read once per run."""
    requests: list[tuple[float, str]] = []
    with audit_log.open() as lines:
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            agent = str(event.get("userAgent") or "")
            if agent.startswith(FOREIGN_AGENTS) or (event.get("user") or {}).get("username") in FOREIGN_USERS:
                continue
            stamp = event.get("requestReceivedTimestamp") or ""
            try:
                when = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + stamp[19:].rstrip("Z"))
            except ValueError:
                continue
            ref = event.get("objectRef") or {}
            requests.append((when, f"{event.get('verb')} {ref.get('resource', '')}"))
    return requests


def in_window(requests: list[tuple[float, str]], since: float, until: float) -> collections.Counter[str]:
    """The requests between two wall-clock times, counted by verb and resource."""
    return collections.Counter(key for when, key in requests if since <= when < until)


# --- one engine's run ---------------------------------------------------------------------------------------------------


@dataclass
class Result:
    engine: str
    reports_seconds: float = 0.0
    cpu_seconds_to_reports: float = 0.0
    peak_rss_mib: float = 0.0
    peak_pss_mib: float = 0.0
    peak_rss_without_admission_mib: float = 0.0  # Kyverno's background + reports controllers alone
    peak_unique_mib: float = 0.0  # the peak of the distinct physical pages the engine's processes map, file and anonymous
    peak_cgroup_anon_mib: float = 0.0  # the peak anonymous memory charged to the engine's cgroup (each page once)
    cgroup_peak_mib: float = 0.0  # the kernel's peak charge of that cgroup, page cache included
    at_peak: list[tuple[str, float, float]] = field(default_factory=list)  # (process, RSS MiB, PSS MiB) at the RSS peak
    requests_to_reports: int = 0
    idle_requests_per_minute: float = 0.0
    idle_requests: dict[str, int] = field(default_factory=dict)
    change_seconds: float = 0.0
    change_cpu_seconds: float = 0.0
    change_requests: int = 0
    changed_failing_results: int = 0


def run_engine(name: str, args: argparse.Namespace, scratch: Path) -> Result:
    shutil.rmtree(scratch, ignore_errors=True)  # a fresh etcd: nothing of an earlier run may count
    scratch.mkdir(parents=True)
    plane = AuditedControlPlane(workdir=scratch / "plane")
    plane.workdir.mkdir(parents=True, exist_ok=True)
    plane.start()
    engine: Engine | None = None
    sampler: PeakRss | None = None
    try:
        if name == "kyverno":
            install_kyverno_prerequisites(plane)
        else:
            for path in sorted((ROOT / "deploy" / "crds").glob("*.yaml")):
                kubectl(plane, "apply", "--server-side", "-f", str(path), timeout=300)
            wait_crds_established(plane)
            plane.ensure_namespace("kyverno")
        api = Api(plane)
        started = time.monotonic()
        seed(api, args.namespaces, args.pods, args.generate_policies)
        print(f"{name}: seeded {args.namespaces} namespaces and {args.pods} pods in {time.monotonic() - started:.0f}s", flush=True)
        apply_policies(plane, args.generate_policies)
        policies = pss_policy_names()

        cgroup = MemoryCgroup.create(f"bench-{name}")
        if cgroup is None:
            print(f"{name}: no memory cgroup could be made here: the cgroup rows stay empty", flush=True)
        engine = start_kyverno(plane, scratch, cgroup) if name == "kyverno" else start_stockade(plane, scratch, cgroup)
        sampler = PeakRss(engine.roled_pids, group=WITHOUT_ADMISSION, cgroup=cgroup)
        sampler.start()
        wall_start, start = time.time(), time.monotonic()

        def complete() -> bool:
            assert engine is not None
            engine.check_alive()
            done = coverage(api, policies, args.pods)
            print(f"{name}: {time.monotonic() - start:6.0f}s  pods reported {done.pods_reported}/{args.pods}  generated {done.configmaps}/{args.namespaces}", flush=True)
            return bool(done.pods_reported >= args.pods and done.configmaps >= args.namespaces)

        result = Result(name)
        result.reports_seconds = wait_until(complete, args.timeout, f"{name}: reports and generated objects")
        result.cpu_seconds_to_reports = engine.cpu_seconds()
        wall_done = time.time()
        if name == "stockade" and os.environ.get("STOCKADE_HEAP_REPORT"):  # serve appends a heap report (heapreport.py)
            os.kill(engine.processes[0].pid, signal.SIGUSR2)

        time.sleep(args.settle_seconds)
        idle_from = time.time()
        time.sleep(args.idle_seconds)
        idle_until = time.time()

        message = f"hostPath volumes are forbidden (changed {int(idle_until)})"
        cpu_before, change_start, wall_change = engine.cpu_seconds(), time.monotonic(), time.time()
        kubectl(plane, "apply", "-f", "-", stdin=changed_policy_document(message))

        def changed() -> bool:
            assert engine is not None
            engine.check_alive()
            failing, carrying = changed_results(api, message)
            print(f"{name}: change {time.monotonic() - change_start:5.0f}s  {carrying}/{failing} failing results carry the new message", flush=True)
            result.changed_failing_results = failing
            return failing > 0 and carrying == failing

        result.change_seconds = wait_until(changed, args.timeout, f"{name}: the policy change", interval=2.0)
        result.change_cpu_seconds = engine.cpu_seconds() - cpu_before
        if name == "stockade" and os.environ.get("STOCKADE_HEAP_REPORT"):
            os.kill(engine.processes[0].pid, signal.SIGUSR2)
        wall_changed = time.time()
        sampler.stopped.set()
        result.peak_rss_mib = sampler.peak / 2**20
        result.peak_pss_mib = sampler.peak_pss / 2**20
        result.peak_rss_without_admission_mib = sampler.peak_group / 2**20
        result.peak_unique_mib = sampler.peak_unique / 2**20
        result.peak_cgroup_anon_mib = sampler.peak_cgroup_anon / 2**20
        result.cgroup_peak_mib = engine.cgroup.peak() / 2**20 if engine.cgroup is not None else 0.0
        result.at_peak = [(role, rss / 2**20, pss / 2**20) for role, _, rss, pss, _ in sampler.at_peak]

        time.sleep(2)  # the audit log is written asynchronously
        requests = engine_requests(plane.audit_log)
        result.requests_to_reports = sum(in_window(requests, wall_start, wall_done).values())
        idle = in_window(requests, idle_from, idle_until)
        result.idle_requests = dict(idle.most_common())
        result.idle_requests_per_minute = sum(idle.values()) * 60.0 / max(idle_until - idle_from, 1e-9)
        result.change_requests = sum(in_window(requests, wall_change, wall_changed).values())
        return result
    finally:
        if sampler is not None:
            sampler.stopped.set()
        if engine is not None:
            engine.stop()
            if engine.cgroup is not None:
                engine.cgroup.remove()
        plane.stop()


def table(results: list[Result]) -> str:
    rows = [
        ("reports + generated complete (s)", "reports_seconds", "{:.1f}"),
        ("CPU seconds until complete", "cpu_seconds_to_reports", "{:.1f}"),
        ("API requests until complete", "requests_to_reports", "{:d}"),
        ("peak RSS (MiB)", "peak_rss_mib", "{:.0f}"),
        ("peak PSS (MiB)", "peak_pss_mib", "{:.0f}"),
        ("peak resident memory, each physical page once: anonymous and file pages (MiB)", "peak_unique_mib", "{:.0f}"),
        ("peak anonymous memory of the engine's cgroup, each page once (MiB)", "peak_cgroup_anon_mib", "{:.0f}"),
        ("the cgroup's peak charge, page cache included (MiB)", "cgroup_peak_mib", "{:.0f}"),
        ("peak RSS beside Kyverno's background + reports controllers only (MiB)", "peak_rss_without_admission_mib", "{:.0f}"),
        ("API requests/min at idle", "idle_requests_per_minute", "{:.1f}"),
        ("one policy change: seconds", "change_seconds", "{:.1f}"),
        ("one policy change: CPU seconds", "change_cpu_seconds", "{:.1f}"),
        ("one policy change: API requests", "change_requests", "{:d}"),
    ]
    header = "| measure | " + " | ".join(result.engine for result in results) + (" | ratio |" if len(results) == 2 else " |")
    lines = [header, "|---" * (len(results) + 1 + (len(results) == 2)) + "|"]
    for label, attribute, style in rows:
        # an engine without a separate admission process (Stockade) shows its whole peak on the two-controller row
        values = [getattr(result, attribute) or (result.peak_rss_mib if attribute == "peak_rss_without_admission_mib" else 0) for result in results]
        cells = [style.format(value) for value in values]
        ratio = f" | {values[0] / values[1]:.2f}" if len(values) == 2 and values[1] else (" | -" if len(values) == 2 else "")
        lines.append(f"| {label} | " + " | ".join(cells) + ratio + " |")
    for result in results:
        lines.append(f"\n{result.engine} at idle: {result.idle_requests or 'no requests'}")
    for result in results:
        processes = ", ".join(f"{role} {rss:.0f}/{pss:.0f}" for role, rss, pss in result.at_peak)
        lines.append(f"{result.engine} at the RSS peak, RSS/PSS MiB per process: {processes}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespaces", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--generate-policies", type=int, default=13)
    parser.add_argument("--engines", default="stockade,kyverno")
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--settle-seconds", type=float, default=30.0)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/stockade-cluster-scale"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    find_binary("kube-apiserver", "STOCKADE_KUBE_APISERVER")
    results = []
    for name in [engine.strip() for engine in args.engines.split(",") if engine.strip()]:
        if name not in ("stockade", "kyverno"):
            raise BenchError(f"unknown engine {name!r} (stockade, kyverno)")
        results.append(run_engine(name, args, args.scratch / name))
        if args.json:  # after each engine, so a later failure keeps what was measured
            args.json.write_text(json.dumps([asdict(result) for result in results], indent=2))
    load = os.getloadavg()
    print(f"\n{args.namespaces} namespaces, {args.pods} pods, {17 + args.generate_policies} policies; load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} cores")
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps([asdict(result) for result in results], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
