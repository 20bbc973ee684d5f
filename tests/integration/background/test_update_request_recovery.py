"""Generate work survives `stockade serve` being killed: admission records Kyverno's UpdateRequests before it answers,
and a restarted (or another) replica completes them, for ClusterPolicy rules and GeneratingPolicies alike.

A batch of Namespaces is admitted, the server is killed with SIGKILL as soon as the last admission returns, and
started again: every Namespace must get its generated ConfigMap, and no UpdateRequest is left behind."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from stockade.controllers.clusterdata import ClusterData
from stockade.kube.errors import AlreadyExists, KubeError
from stockade.testing.apiserver import REPO_ROOT, ControlPlane, free_port

T = TypeVar("T")
BATCH = 50
CRDS = REPO_ROOT / "deploy" / "crds" / "policies.yaml"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


def policy(suffix: str) -> str:
    return f"""\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {{name: ur-defaults-{suffix}}}
spec:
  rules:
  - name: defaults
    match: {{any: [{{resources: {{kinds: [Namespace], selector: {{matchLabels: {{stockade-ur/batch: "{suffix}"}}}}}}}}]}}
    # the test's client and the server share the control plane's admin identity
    skipBackgroundRequests: false
    generate:
      synchronize: false
      apiVersion: v1
      kind: ConfigMap
      name: defaults
      namespace: "{{{{ request.object.metadata.name }}}}"
      data:
        data: {{owner: "{{{{ request.object.metadata.name }}}}"}}
"""


def generating_policy(suffix: str) -> str:
    """The same work as a GeneratingPolicy: Kyverno records it as ``cel-generate`` UpdateRequests."""
    configmap = (
        '[{"kind": dyn("ConfigMap"), "apiVersion": dyn("v1"), '
        '"metadata": dyn({"name": "defaults", "namespace": string(object.metadata.name)}), '
        '"data": dyn({"owner": string(object.metadata.name)})}]'
    )
    return f"""\
apiVersion: policies.kyverno.io/v1beta1
kind: GeneratingPolicy
metadata: {{name: ur-defaults-{suffix}}}
spec:
  evaluation:
    synchronize: {{enabled: false}}
    skipBackgroundRequests: false
  matchConstraints:
    resourceRules:
    - {{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [namespaces]}}
    objectSelector: {{matchLabels: {{stockade-ur/batch: "{suffix}"}}}}
  generate:
  - expression: 'generator.Apply(object.metadata.name, {configmap})'
"""


POLICIES = {"ClusterPolicy": policy, "GeneratingPolicy": generating_policy}


def eventually(probe: Callable[[], T | None], what: str, timeout: float = 120.0, details: Callable[[], str] = lambda: "") -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:.0f}s\n{details()}")
        time.sleep(0.3)


class Server:
    """`stockade serve` on a fixed port and certificate directory, so a restart takes over the registered webhooks."""

    def __init__(self, plane: ControlPlane, policy_dir: Path, workdir: Path, namespace: str, port: int, name: str, extra: tuple[str, ...] = ()) -> None:
        self.log_path = workdir / f"serve-{name}.log"
        self.port = port
        command = [
            sys.executable, "-c", "from stockade.cli.main import main; main()",
            "serve", str(policy_dir),
            "--host", "127.0.0.1", "--port", str(port),
            "--register-webhooks", "--kubeconfig", str(plane.kubeconfig),
            "--webhook-url", f"https://127.0.0.1:{port}",
            "--cert-dir", str(workdir / "certs"),
            "--namespace", namespace,
            "--no-policy-reports", "--no-events", "--background-scan-interval", "0",
            "--metrics-port", str(free_port()),
            *extra,
        ]
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def update_request_crd(cluster: ClusterData) -> None:
    crd = next(d for d in yaml.safe_load_all(CRDS.read_text()) if d and d["metadata"]["name"] == "updaterequests.kyverno.io")
    try:
        cluster.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    except AlreadyExists:
        pass

    def served() -> bool:
        try:
            cluster.request("GET", "/apis/kyverno.io/v2/updaterequests")
            return True
        except KubeError:
            return False

    eventually(served, "UpdateRequest CRD served", timeout=60)


@pytest.fixture()
def batch_namespaces(cluster: ClusterData) -> Iterator[list[str]]:
    created: list[str] = []
    yield created
    for name in created:
        try:
            cluster.request("DELETE", f"/api/v1/namespaces/{name}")
        except KubeError:
            pass


def admit_batch(cluster: ClusterData, names: list[str], labels: dict[str, str]) -> None:
    """Create the trigger Namespaces ten at a time, as parallel `kubectl create`s would."""

    def create(name: str) -> None:
        cluster.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})

    with concurrent.futures.ThreadPoolExecutor(max_workers=10) as pool:
        list(pool.map(create, names))


def configmap(cluster: ClusterData, namespace: str) -> dict[str, Any] | None:
    return cluster.get_object("v1", "ConfigMap", namespace, "defaults", cached=False)


def update_requests(cluster: ClusterData, namespace: str) -> list[dict[str, Any]]:
    return list((cluster.request("GET", f"/apis/kyverno.io/v2/namespaces/{namespace}/updaterequests") or {}).get("items") or [])


def own_webhooks(cluster: ClusterData, port: int) -> bool:
    items = (cluster.request("GET", VALIDATING) or {}).get("items") or []
    return any(f"127.0.0.1:{port}" in str((hook.get("clientConfig") or {}).get("url") or "") for item in items for hook in item.get("webhooks") or [])


def warm_up(cluster: ClusterData, base: str, labels: dict[str, str], created: list[str], timeout: float = 120.0, details: Callable[[], str] = lambda: "") -> None:
    """Admit warm-up Namespaces until one gets its generated ConfigMap.  The API server starts calling a newly
    registered webhook only once its own watch of webhook configurations has seen it, so a Namespace created right
    after registration may be admitted without us; a later one is not."""
    deadline = time.monotonic() + timeout
    attempt = 0
    while True:
        name = f"{base}-{attempt}"
        created.append(name)
        try:
            cluster.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
        except AlreadyExists:
            pass
        until = min(deadline, time.monotonic() + 10.0)
        while time.monotonic() < until:
            if configmap(cluster, name) is not None:
                return
            time.sleep(0.3)
        if time.monotonic() >= deadline:
            raise AssertionError(f"no warm-up Namespace got its ConfigMap within {timeout:.0f}s\n{details()}")
        attempt += 1


@pytest.mark.parametrize("kind", sorted(POLICIES))
def test_killed_server_completes_admitted_generate_work_after_restart(
    control_plane: ControlPlane, cluster: ClusterData, update_request_crd: None, suffix: str, tmp_path: Path, batch_namespaces: list[str], kind: str
) -> None:
    system = f"ur-sys-{suffix}"
    control_plane.ensure_namespace(system)
    batch_namespaces.append(system)
    policy_dir = tmp_path / "policies"
    policy_dir.mkdir()
    (policy_dir / "policy.yaml").write_text(POLICIES[kind](suffix))
    port = free_port()
    labels = {"stockade-ur/batch": suffix}
    first = Server(control_plane, policy_dir, tmp_path, system, port, "first", ("--no-leader-election",))
    second: Server | None = None
    try:
        eventually(lambda: own_webhooks(cluster, port), "webhook registration", details=first.log)
        # the generate path works before the crash: a warm-up Namespace gets its ConfigMap
        warm_up(cluster, f"ur-warm-{suffix}", labels, batch_namespaces, details=first.log)

        names = [f"ur-{suffix}-{index:02d}" for index in range(BATCH)]
        batch_namespaces.extend(names)

        admit_batch(cluster, names, labels)
        first.kill()
        missing_at_kill = [name for name in names if configmap(cluster, name) is None]
        recorded_at_kill = len(update_requests(cluster, system))
        print(f"at SIGKILL: {len(missing_at_kill)} of {BATCH} Namespaces without their ConfigMap, {recorded_at_kill} UpdateRequests stored")

        second = Server(control_plane, policy_dir, tmp_path, system, port, "second", ("--no-leader-election",))
        eventually(
            lambda: all(configmap(cluster, name) is not None for name in names),
            f"a ConfigMap in each of the {BATCH} Namespaces",
            details=lambda: f"missing: {[n for n in names if configmap(cluster, n) is None]}\n{second.log() if second else ''}",
        )
        for name in names:
            generated = configmap(cluster, name) or {}
            assert generated.get("data") == {"owner": name}
            assert (generated.get("metadata") or {}).get("labels", {}).get("generate.kyverno.io/policy-name") == f"ur-defaults-{suffix}"
        eventually(lambda: not update_requests(cluster, system), "completed UpdateRequests deleted", details=lambda: str([(u["metadata"]["name"], u.get("status")) for u in update_requests(cluster, system)]))
        print(f"after restart: {BATCH} of {BATCH} Namespaces have their ConfigMap")
    finally:
        if first.process.poll() is None:
            first.kill()
        if second is not None:
            second.stop()


def test_hand_written_request_for_a_replaced_trigger_fails(
    control_plane: ControlPlane, cluster: ClusterData, update_request_crd: None, suffix: str, tmp_path: Path, batch_namespaces: list[str]
) -> None:
    """Kyverno's e2e cpol-data-nosync-rejected-create: an UpdateRequest whose trigger uid is not the stored
    Namespace's (the create was refused) is marked Failed and generates nothing."""
    system = f"ur-sys-{suffix}"
    control_plane.ensure_namespace(system)
    batch_namespaces.append(system)
    live = f"ur-live-{suffix}"
    cluster.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": live, "labels": {"layer": "operational"}}})
    batch_namespaces.append(live)
    policy_dir = tmp_path / "policies"
    policy_dir.mkdir()
    (policy_dir / "policy.yaml").write_text(policy(suffix))
    port = free_port()
    server = Server(control_plane, policy_dir, tmp_path, system, port, "phantom", ("--no-leader-election",))
    try:
        eventually(lambda: own_webhooks(cluster, port), "webhook registration", details=server.log)
        phantom = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": live, "uid": "phantom-uid-111", "labels": {"stockade-ur/batch": suffix}}}
        body = {
            "apiVersion": "kyverno.io/v2",
            "kind": "UpdateRequest",
            "metadata": {"name": "ur-phantom", "namespace": system},
            "spec": {
                "policy": f"ur-defaults-{suffix}",
                "rule": "defaults",
                "requestType": "generate",
                "deleteDownstream": False,
                "resource": {"apiVersion": "v1", "kind": "Namespace", "name": live, "uid": "live-uid-999"},
                "ruleContext": [{"rule": "defaults", "deleteDownstream": False, "trigger": {"apiVersion": "v1", "kind": "Namespace", "name": live, "uid": "phantom-uid-111"}}],
                "context": {
                    "admissionRequestInfo": {
                        "operation": "CREATE",
                        "admissionRequest": {
                            "uid": "",
                            "kind": {"group": "", "version": "v1", "kind": "Namespace"},
                            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
                            "operation": "CREATE",
                            "object": phantom,
                            "oldObject": {},
                            "dryRun": False,
                        },
                    }
                },
            },
        }
        cluster.request("POST", f"/apis/kyverno.io/v2/namespaces/{system}/updaterequests", body)

        def failed() -> dict[str, Any] | None:
            found = cluster.request("GET", f"/apis/kyverno.io/v2/namespaces/{system}/updaterequests/ur-phantom")
            return found if (found.get("status") or {}).get("state") == "Failed" else None

        result = eventually(failed, "the UpdateRequest marked Failed", details=server.log)
        assert "phantom-uid-111" in result["status"]["message"]
        assert configmap(cluster, live) is None
    finally:
        server.stop()
