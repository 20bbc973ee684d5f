"""Which Kubernetes client library: list and watch throughput, and memory per cached object, on a real API server.

Usage: .venv/bin/python bench/bench_kube_clients.py [--configmaps 5000] [--pods 2000] [--rounds 2] [--json OUT]

Issue 24 asks the controller runtime to stand on a well-kept client library chosen by measurement.  This starts a
local control plane (etcd + kube-apiserver, stockade/testing/apiserver.py), seeds one namespace with ``--configmaps``
ConfigMaps (1 KiB of data each) and ``--pods`` Pods (bench_engine's realistic Pod specs), then measures each
candidate in a fresh child process (so import and cache memory are its own):

- ``stockade-raw``: what `stockade.kube` does: `RawListWatch` (paginated raw REST over our own authenticated urllib3
  connection, `stockade.kube.connection`) decoding into plain dicts, held in the informer's `Store`;
- ``kubernetes-typed``: the official client's generated API (``CoreV1Api.list_namespaced_*``, ``watch.Watch``),
  objects as its model classes;
- ``lightkube``: lightkube's ``Client.list`` / ``Client.watch`` (httpx), objects as its dataclass models;
- ``kr8s``: kr8s's ``Api.get`` / ``Api.watch`` (httpx), objects as ``APIObject`` wrappers around dicts.

Per candidate and kind: RSS after importing the library and building a client; seconds to list every object; the RSS
the listed objects add, per object, while they are held; seconds for a watch from resourceVersion 0 to deliver every
object as an ADDED event.  Medians over ``--rounds`` child processes.  The official ``kubernetes`` package is the
project's ``bench`` extra (``pip install -e '.[bench]'``), not a dependency of Stockade itself; lightkube and kr8s are
installed into ``.cache/bench-clients`` (a venv made on first use, versions pinned below).
Nothing here asserts a figure: it prints them.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VENV = ROOT / ".cache" / "bench-clients"
PINNED = ["lightkube==1.0.1", "kr8s==0.20.15", "orjson"]
NAMESPACE = "bench"
CANDIDATES = ("stockade-raw", "kubernetes-typed", "lightkube", "kr8s")
KINDS = ("configmaps", "pods")


# -- the child: one candidate, one kind ---------------------------------------------------------------------------------
def rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def settled_rss() -> int:
    gc.collect()
    return rss_bytes()


def child(candidate: str, kind: str, kubeconfig: str, expected: int) -> dict[str, Any]:
    """Measure one candidate; prints nothing but its result."""
    base = settled_rss()
    if candidate == "stockade-raw":
        from stockade.kube.connection import load_api_client
        from stockade.kube.informer import RawListWatch, Store, _RawWatch

        api_client = load_api_client(kubeconfig)
        list_watch = RawListWatch.for_resource(api_client, "v1", kind, NAMESPACE)

        def do_list() -> Any:
            store = Store()
            for obj in list_watch.list()[0]:
                store.upsert(obj)
            return store

        def do_watch() -> int:
            # the informer watches from its listing's resourceVersion with bookmarks; from "0" this API server (whose
            # etcd lacks RequestWatchProgress) refuses bookmarks, so the stream is opened the way the others open it
            seen = 0
            query = list_watch._query({"watch": "true", "resourceVersion": "0", "timeoutSeconds": "120"})
            events = _RawWatch(list_watch._call(query, (10.0, 150.0), watch=True), list_watch.path)
            try:
                for event in events:
                    if event.get("type") == "ADDED":
                        seen += 1
                        if seen >= expected:
                            break
            finally:
                events.close()
            return seen

    elif candidate == "kubernetes-typed":
        from kubernetes import client, config, watch

        api = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
        lister = api.list_namespaced_config_map if kind == "configmaps" else api.list_namespaced_pod

        def do_list() -> Any:
            items, token = [], None
            while True:
                page = lister(NAMESPACE, limit=500, _continue=token) if token else lister(NAMESPACE, limit=500)
                items.extend(page.items)
                token = page.metadata._continue
                if not token:
                    return items

        def do_watch() -> int:
            seen = 0
            stream = watch.Watch()
            for event in stream.stream(lister, NAMESPACE, resource_version="0", timeout_seconds=120):
                if event["type"] == "ADDED":
                    seen += 1
                    if seen >= expected:
                        stream.stop()
                        break
            return seen

    elif candidate == "lightkube":
        from lightkube import Client, KubeConfig
        from lightkube.resources.core_v1 import ConfigMap, Pod

        resource = ConfigMap if kind == "configmaps" else Pod
        light = Client(KubeConfig.from_file(kubeconfig))

        def do_list() -> Any:
            return list(light.list(resource, namespace=NAMESPACE, chunk_size=500))

        def do_watch() -> int:
            seen = 0
            for event_type, _obj in light.watch(resource, namespace=NAMESPACE, resource_version="0", server_timeout=120):
                if event_type == "ADDED":
                    seen += 1
                    if seen >= expected:
                        break
            return seen

    elif candidate == "kr8s":
        import kr8s

        api = kr8s.api(kubeconfig=kubeconfig)

        def do_list() -> Any:
            return list(api.get(kind, namespace=NAMESPACE))

        def do_watch() -> int:
            seen = 0
            for event_type, _obj in api.watch(kind, namespace=NAMESPACE, since="0"):
                if event_type == "ADDED":
                    seen += 1
                    if seen >= expected:
                        break
            return seen

    else:
        raise SystemExit(f"unknown candidate {candidate}")
    imported = settled_rss()
    started = time.perf_counter()
    held = do_list()
    list_seconds = time.perf_counter() - started
    count = len(held)
    with_objects = settled_rss()
    del held
    started = time.perf_counter()
    watched = do_watch()
    watch_seconds = time.perf_counter() - started
    return {
        "candidate": candidate,
        "kind": kind,
        "objects": count,
        "watched": watched,
        "import_mib": (imported - base) / 2**20,
        "list_seconds": list_seconds,
        "bytes_per_object": (with_objects - imported) / max(count, 1),
        "watch_seconds": watch_seconds,
    }


# -- the parent: control plane, seeding, children, table ------------------------------------------------------------
def ensure_venv() -> Path:
    python = VENV / "bin" / "python"
    stamp = VENV / "pinned.txt"
    wanted = " ".join(PINNED)
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(VENV)], check=True)
    # the project's own dependencies (urllib3; kubernetes, from the bench extra) come from its venv's site-packages
    # via a .pth file
    site = next((VENV / "lib").glob("python3*/site-packages"))
    project_site = next((Path(sys.prefix) / "lib").glob("python3*/site-packages"))
    (site / "stockade-project.pth").write_text(f"{project_site}\n{ROOT}\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", *PINNED], check=True)
    stamp.write_text(wanted)
    return python


def seed(kubeconfig: Path, configmaps: int, pods: int) -> None:
    sys.path.insert(0, str(HERE))
    from bench_engine import generate_pods

    from stockade.controllers.clusterdata import ClusterData
    from stockade.kube.connection import load_api_client

    cluster = ClusterData(load_api_client(str(kubeconfig)), ttl_seconds=0.0)
    cluster.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    payload = "x" * 1024
    bodies: list[tuple[str, dict[str, Any]]] = [
        (f"/api/v1/namespaces/{NAMESPACE}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}", "labels": {"app": f"a{i % 10}"}}, "data": {"payload": payload}})
        for i in range(configmaps)
    ]
    for pod in generate_pods(pods):
        pod = json.loads(json.dumps(pod))
        pod["metadata"]["namespace"] = NAMESPACE
        for container in pod["spec"]["containers"]:
            (container.get("securityContext") or {}).pop("privileged", None)  # this API server refuses privileged Pods
        bodies.append((f"/api/v1/namespaces/{NAMESPACE}/pods", pod))
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda item: cluster.request("POST", item[0], item[1]), bodies))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configmaps", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", nargs=4, metavar=("CANDIDATE", "KIND", "KUBECONFIG", "EXPECTED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        candidate, kind, kubeconfig, expected = args.child
        print(json.dumps(child(candidate, kind, kubeconfig, int(expected))))
        return
    sys.path.insert(0, str(ROOT))
    from stockade.testing.apiserver import ControlPlane

    python = ensure_venv()
    results: list[dict[str, Any]] = []
    with ControlPlane() as plane:
        started = time.perf_counter()
        seed(plane.kubeconfig, args.configmaps, args.pods)
        print(f"seeded {args.configmaps} ConfigMaps and {args.pods} Pods in {time.perf_counter() - started:.1f}s; load {os.getloadavg()[0]:.2f}", flush=True)
        counts = {"configmaps": args.configmaps, "pods": args.pods}
        for kind in KINDS:
            for candidate in CANDIDATES:
                rounds = []
                for _ in range(args.rounds):
                    done = subprocess.run(
                        [str(python), str(Path(__file__).resolve()), "--child", candidate, kind, str(plane.kubeconfig), str(counts[kind])],
                        capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT)},
                    )
                    if done.returncode != 0:
                        raise SystemExit(f"{candidate} on {kind} failed:\n{done.stderr[-3000:]}")
                    rounds.append(json.loads(done.stdout.strip().splitlines()[-1]))
                merged = {key: statistics.median(r[key] for r in rounds) if isinstance(rounds[0][key], float) else rounds[0][key] for key in rounds[0]}
                results.append(merged)
                print(f"  {candidate:17s} {kind:10s} done", flush=True)
    print(f"\n{args.configmaps} ConfigMaps (1 KiB data) and {args.pods} Pods; medians of {args.rounds} child processes; load {os.getloadavg()[0]:.2f}")
    print("| candidate | kind | import + client (MiB) | list (s) | objects/s listed | held bytes/object | watch from 0 (s) | events/s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['candidate']} | {r['kind']} | {r['import_mib']:.1f} | {r['list_seconds']:.2f} | {r['objects'] / r['list_seconds']:,.0f} | "
            f"{r['bytes_per_object']:,.0f} | {r['watch_seconds']:.2f} | {r['watched'] / r['watch_seconds']:,.0f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
