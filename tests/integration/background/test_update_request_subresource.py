"""Generate work triggered by a subresource request survives `stockade serve` being killed: an eviction (a CREATE of
pods/eviction, whose Eviction object is never stored) is recorded as an UpdateRequest carrying the admission request
before it is answered, and the restarted server generates from that recorded request.

A batch of Pods is evicted, the server is SIGKILLed as soon as the last eviction returns and started again: every
evicted Pod must get its ConfigMap, and no UpdateRequest is left behind."""

from __future__ import annotations

import concurrent.futures
import itertools
from pathlib import Path
from typing import Callable

from stockade.controllers.clusterdata import ClusterData
from stockade.kube.errors import KubeError
from stockade.testing.apiserver import ControlPlane, free_port
from tests.integration.background.test_update_request_recovery import Server, batch_namespaces, eventually, own_webhooks, update_request_crd, update_requests

__all__ = ["batch_namespaces", "update_request_crd"]  # fixtures shared with the recovery test

BATCH = 30


def policy(suffix: str, namespace: str) -> str:
    return f"""\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {{name: ur-evicted-{suffix}}}
spec:
  background: false
  rules:
  - name: note-eviction
    match: {{any: [{{resources: {{kinds: [Pod/eviction], namespaces: [{namespace}]}}}}]}}
    skipBackgroundRequests: false
    generate:
      synchronize: false
      apiVersion: v1
      kind: ConfigMap
      name: "evicted-{{{{ request.name }}}}"
      namespace: "{{{{ request.namespace }}}}"
      data:
        data: {{pod: "{{{{ request.name }}}}", kind: "{{{{ request.object.kind }}}}"}}
"""


def create_pod(cluster: ClusterData, namespace: str, name: str) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)


def evict(cluster: ClusterData, namespace: str, name: str) -> None:
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", eviction)


def noted(cluster: ClusterData, namespace: str, pod: str) -> bool:
    return cluster.get_object("v1", "ConfigMap", namespace, f"evicted-{pod}", cached=False) is not None


def evict_kill_restart(
    control_plane: ControlPlane,
    cluster: ClusterData,
    tmp_path: Path,
    batch_namespaces: list[str],
    names: tuple[str, str],
    policy_text: str,
    *,
    prepare: Callable[[str], None],
    done: Callable[[str], bool],
    request_type: str,
    batch: int,
    evictors: int,
    at_kill: Callable[[list[str]], None] = lambda _pods: None,
) -> list[str]:
    """The scenario both tests share: serve ``policy_text``, warm the path up, evict a batch of prepared Pods, SIGKILL
    the server as the last eviction returns, check what was recorded, start a second server and wait until ``done``
    holds for every Pod and no UpdateRequest is left.  Returns the batch's Pod names."""
    system, workload = names
    for namespace in names:
        control_plane.ensure_namespace(namespace)
        batch_namespaces.append(namespace)
    policy_dir = tmp_path / "policies"
    policy_dir.mkdir()
    (policy_dir / "policy.yaml").write_text(policy_text)
    port = free_port()
    first = Server(control_plane, policy_dir, tmp_path, system, port, "first", ("--no-leader-election",))
    second: Server | None = None
    try:
        eventually(lambda: own_webhooks(cluster, port), "webhook registration", details=first.log)
        # the path works before the crash: evict warm-up Pods until one is done (the API server calls a newly
        # registered webhook only once its own watch of webhook configurations has it)
        attempts = itertools.count()

        def warmed() -> bool:
            name = f"warm-{next(attempts)}"
            prepare(name)
            evict(cluster, workload, name)
            try:
                eventually(lambda: done(name), "warm-up eviction done", timeout=10)
                return True
            except AssertionError:
                return False

        eventually(warmed, "a warm-up eviction's work", details=first.log)

        pods = [f"pod-{index:02d}" for index in range(batch)]
        for name in pods:
            prepare(name)
        with concurrent.futures.ThreadPoolExecutor(max_workers=evictors) as pool:
            list(pool.map(lambda name: evict(cluster, workload, name), pods))
        first.kill()
        missing_at_kill = [name for name in pods if not done(name)]
        recorded = update_requests(cluster, system)
        print(f"at SIGKILL: {len(missing_at_kill)} of {batch} evicted Pods not done, {len(recorded)} UpdateRequests stored")
        for request in recorded:
            admission = request["spec"]["context"]["admissionRequestInfo"]["admissionRequest"]
            assert (request["spec"]["requestType"], admission["subResource"], admission["object"]["kind"]) == (request_type, "eviction", "Eviction")
        at_kill(pods)

        second = Server(control_plane, policy_dir, tmp_path, system, port, "second", ("--no-leader-election",))
        eventually(
            lambda: all(done(name) for name in pods),
            f"the work of all {batch} evicted Pods",
            details=lambda: f"not done: {[n for n in pods if not done(n)]}\n{second.log() if second else ''}",
        )
        eventually(lambda: not update_requests(cluster, system), "completed UpdateRequests deleted", details=lambda: str([(u["metadata"]["name"], u.get("status")) for u in update_requests(cluster, system)]))
        print(f"after restart: {batch} of {batch} evicted Pods done")
        return pods
    finally:
        if first.process.poll() is None:
            first.kill()
        if second is not None:
            second.stop()


def test_killed_server_completes_the_generate_work_of_evictions_after_restart(
    control_plane: ControlPlane, cluster: ClusterData, update_request_crd: None, suffix: str, tmp_path: Path, batch_namespaces: list[str]
) -> None:
    workload = f"ur-evict-{suffix}"

    def gone(pods: list[str]) -> None:
        for name in pods:  # the Pods are gone: only the recorded admission requests can bring their ConfigMaps
            try:
                assert cluster.get_object("v1", "Pod", workload, name, cached=False) is None
            except KubeError:
                pass

    pods = evict_kill_restart(
        control_plane, cluster, tmp_path, batch_namespaces, (f"ur-sys-{suffix}", workload), policy(suffix, workload),
        prepare=lambda name: create_pod(cluster, workload, name), done=lambda name: noted(cluster, workload, name),
        request_type="generate", batch=BATCH, evictors=10, at_kill=gone,
    )
    for name in pods:
        generated = cluster.get_object("v1", "ConfigMap", workload, f"evicted-{name}", cached=False) or {}
        assert generated.get("data") == {"pod": name, "kind": "Eviction"}


# -- a MutatingPolicy with mutateExisting triggered by the same evictions ----------------------------------------------
MPOL_BATCH = 12


def mutating_policy(suffix: str, namespace: str) -> str:
    """Labels the ConfigMap ``note-<pod>`` of each evicted Pod (a target expression reading the recorded request).
    The server writes as the admin the test evicts as, whose requests are therefore background requests: the policy
    opts in to them, as the generate rule above does."""
    return f"""\
apiVersion: policies.kyverno.io/v1beta1
kind: MutatingPolicy
metadata: {{name: ur-evicted-mpol-{suffix}}}
spec:
  evaluation:
    mutateExisting: {{enabled: true}}
    skipBackgroundRequests: false
  matchConstraints:
    namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {namespace}}}}}
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [pods/eviction]
  targetMatchConstraints:
    expression: resource.Get("v1", "configmaps", request.namespace, "note-" + request.name)
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{{metadata: Object.metadata{{labels: Object.metadata.labels{{evicted: "true", via: request.subResource}}}}}}
"""


def pod_with_note(cluster: ClusterData, namespace: str, name: str) -> None:
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"note-{name}", "namespace": namespace}})
    create_pod(cluster, namespace, name)


def labelled(cluster: ClusterData, namespace: str, pod: str) -> bool:
    note = cluster.get_object("v1", "ConfigMap", namespace, f"note-{pod}", cached=False) or {}
    return ((note.get("metadata") or {}).get("labels") or {}) == {"evicted": "true", "via": "eviction"}


def test_killed_server_completes_the_mutate_existing_work_of_evictions_after_restart(
    control_plane: ControlPlane, cluster: ClusterData, update_request_crd: None, suffix: str, tmp_path: Path, batch_namespaces: list[str]
) -> None:
    """Kyverno's mpol webhook records a ``cel-mutate`` request for an eviction its policy's matchConstraints name;
    the restarted server replays each from the recorded admission request (the Eviction and the Pod's name)."""
    workload = f"ur-mevict-{suffix}"
    evict_kill_restart(
        control_plane, cluster, tmp_path, batch_namespaces, (f"ur-msys-{suffix}", workload), mutating_policy(suffix, workload),
        prepare=lambda name: pod_with_note(cluster, workload, name), done=lambda name: labelled(cluster, workload, name),
        request_type="cel-mutate", batch=MPOL_BATCH, evictors=6,
    )
