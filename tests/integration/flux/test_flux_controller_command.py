"""`stockade images controller` as a process: leader Lease, status written, Events recorded, suspend, SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from test_flux_reflector_cluster import Pusher, create, get, namespace, policy, repository

from stockade.testing.apiserver import ControlPlane
from stockade.testing.registry import LocalRegistry


def wait_for(what: str, check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_controller_command_leads_writes_status_and_events_and_stops_on_sigterm(flux_crds: ControlPlane, registry: LocalRegistry, tmp_path: Path) -> None:
    plane, pusher = flux_crds, Pusher(registry)
    ns = namespace(plane)
    pusher.push("1.0.0")
    create(plane, "imagerepositories", ns, repository("app", pusher.image))
    create(plane, "imagepolicies", ns, policy("app", "app"))
    paused = policy("paused", "app")
    paused["spec"]["suspend"] = True
    create(plane, "imagepolicies", ns, paused)
    with open(tmp_path / "controller.log", "wb") as log:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [sys.executable, "-m", "stockade", "images", "controller", "--kubeconfig", str(plane.kubeconfig),
             "--namespace", ns, "--resync", "0.5", "--store", str(tmp_path / "tags")],
            stdout=subprocess.DEVNULL, stderr=log,
        )
    try:
        def latest() -> Any:
            return (get(plane, "imagepolicies", ns, "app").get("status") or {}).get("latestRef")

        assert wait_for("the policy's latestRef", latest) == {"name": pusher.image, "tag": "1.0.0"}
        lease = plane.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/stockade-image-automation")[1]
        assert lease["spec"]["holderIdentity"]

        def ready_event() -> Any:
            events = plane.request("GET", f"/api/v1/namespaces/{ns}/events")[1]["items"]
            # the policy may be reconciled before its repository's first scan (a DependencyNotReady Warning, as in
            # Flux); the repository's scan then brings it back through the watch and it resolves
            return [e for e in events if e["involvedObject"].get("kind") == "ImagePolicy" and e["involvedObject"]["name"] == "app"
                    and e["type"] == "Normal"]

        event = wait_for("a Normal Event about the policy", ready_event)[0]
        assert event["type"] == "Normal" and event["reason"] == "Succeeded"
        assert event["message"] == f"Latest image tag for {pusher.image} resolved to 1.0.0"
        # a suspended policy is left alone
        assert "latestRef" not in (get(plane, "imagepolicies", ns, "paused").get("status") or {})
        # Flux's finalizer on the objects it reconciles
        assert "finalizers.fluxcd.io" in get(plane, "imagerepositories", ns, "app")["metadata"]["finalizers"]
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    assert code == 0, (tmp_path / "controller.log").read_text()[-2000:]


def test_a_standby_takes_over_when_the_leader_dies(flux_crds: ControlPlane, registry: LocalRegistry, tmp_path: Path) -> None:
    plane, pusher = flux_crds, Pusher(registry)
    ns = namespace(plane)
    pusher.push("1.0.0")
    create(plane, "imagerepositories", ns, repository("app", pusher.image))
    processes: dict[str, subprocess.Popen[bytes]] = {}
    for name in ("ctrl-a", "ctrl-b"):
        with open(tmp_path / f"{name}.log", "wb") as log:  # the child keeps its own descriptor
            processes[name] = subprocess.Popen(
                [sys.executable, "-m", "stockade", "images", "controller", "--kubeconfig", str(plane.kubeconfig),
                 "--namespace", ns, "--resync", "0.5", "--no-automation"],
                stdout=subprocess.DEVNULL, stderr=log, env={**os.environ, "POD_NAME": name},
            )
    try:
        def holder() -> str:
            status, lease, _ = plane.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/stockade-image-automation")
            return str(lease.get("spec", {}).get("holderIdentity") or "") if status == 200 else ""

        leader = wait_for("a leader", holder).rsplit("-", 1)[0]
        assert leader in processes
        create(plane, "imagepolicies", ns, policy("first", "app"))
        wait_for("the first policy", lambda: (get(plane, "imagepolicies", ns, "first").get("status") or {}).get("latestRef"))

        processes[leader].kill()  # a crash: the lease is not released and must expire
        processes[leader].wait(timeout=10)
        create(plane, "imagepolicies", ns, policy("second", "app"))
        standby = next(name for name in processes if name != leader)
        wait_for("the standby to lead", lambda: holder().startswith(standby + "-"), timeout=60)
        ref = wait_for("the second policy", lambda: (get(plane, "imagepolicies", ns, "second").get("status") or {}).get("latestRef"))
        assert ref["tag"] == "1.0.0"
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
