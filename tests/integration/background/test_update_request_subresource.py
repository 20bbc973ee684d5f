"""Generate work triggered by a subresource request survives `stockade serve` being killed: an eviction (a CREATE of
pods/eviction, whose Eviction object is never stored) is recorded as an UpdateRequest carrying the admission request
before it is answered, and the restarted server generates from that recorded request.

A batch of Pods is evicted, the server is SIGKILLed as soon as the last eviction returns and started again: every
evicted Pod must get its ConfigMap, and no UpdateRequest is left behind."""

from __future__ import annotations

import concurrent.futures
import itertools
from pathlib import Path

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


def test_killed_server_completes_the_generate_work_of_evictions_after_restart(
    control_plane: ControlPlane, cluster: ClusterData, update_request_crd: None, suffix: str, tmp_path: Path, batch_namespaces: list[str]
) -> None:
    system, workload = f"ur-sys-{suffix}", f"ur-evict-{suffix}"
    for namespace in (system, workload):
        control_plane.ensure_namespace(namespace)
        batch_namespaces.append(namespace)
    policy_dir = tmp_path / "policies"
    policy_dir.mkdir()
    (policy_dir / "policy.yaml").write_text(policy(suffix, workload))
    port = free_port()
    first = Server(control_plane, policy_dir, tmp_path, system, port, "first", ("--no-leader-election",))
    second: Server | None = None
    try:
        eventually(lambda: own_webhooks(cluster, port), "webhook registration", details=first.log)
        # the path works before the crash: evict warm-up Pods until one gets its ConfigMap (the API server calls a
        # newly registered webhook only once its own watch of webhook configurations has it)
        attempts = itertools.count()

        def warmed() -> bool:
            name = f"warm-{next(attempts)}"
            create_pod(cluster, workload, name)
            evict(cluster, workload, name)
            try:
                eventually(lambda: noted(cluster, workload, name), "warm-up ConfigMap", timeout=10)
                return True
            except AssertionError:
                return False

        eventually(warmed, "a warm-up eviction's ConfigMap", details=first.log)

        pods = [f"pod-{index:02d}" for index in range(BATCH)]
        for name in pods:
            create_pod(cluster, workload, name)
        with concurrent.futures.ThreadPoolExecutor(max_workers=10) as pool:
            list(pool.map(lambda name: evict(cluster, workload, name), pods))
        first.kill()
        missing_at_kill = [name for name in pods if not noted(cluster, workload, name)]
        recorded = update_requests(cluster, system)
        print(f"at SIGKILL: {len(missing_at_kill)} of {BATCH} evicted Pods without their ConfigMap, {len(recorded)} UpdateRequests stored")
        for request in recorded:
            admission = request["spec"]["context"]["admissionRequestInfo"]["admissionRequest"]
            assert (admission["subResource"], admission["object"]["kind"]) == ("eviction", "Eviction")
        for name in pods:  # the Pods are gone: only the recorded admission requests can bring their ConfigMaps
            try:
                assert cluster.get_object("v1", "Pod", workload, name, cached=False) is None
            except KubeError:
                pass

        second = Server(control_plane, policy_dir, tmp_path, system, port, "second", ("--no-leader-election",))
        eventually(
            lambda: all(noted(cluster, workload, name) for name in pods),
            f"a ConfigMap for each of the {BATCH} evicted Pods",
            details=lambda: f"missing: {[n for n in pods if not noted(cluster, workload, n)]}\n{second.log() if second else ''}",
        )
        for name in pods:
            generated = cluster.get_object("v1", "ConfigMap", workload, f"evicted-{name}", cached=False) or {}
            assert generated.get("data") == {"pod": name, "kind": "Eviction"}
        eventually(lambda: not update_requests(cluster, system), "completed UpdateRequests deleted", details=lambda: str([(u["metadata"]["name"], u.get("status")) for u in update_requests(cluster, system)]))
        print(f"after restart: {BATCH} of {BATCH} evicted Pods have their ConfigMap")
    finally:
        if first.process.poll() is None:
            first.kill()
        if second is not None:
            second.stop()


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
    system, workload = f"ur-msys-{suffix}", f"ur-mevict-{suffix}"
    for namespace in (system, workload):
        control_plane.ensure_namespace(namespace)
        batch_namespaces.append(namespace)
    policy_dir = tmp_path / "policies"
    policy_dir.mkdir()
    (policy_dir / "policy.yaml").write_text(mutating_policy(suffix, workload))
    port = free_port()
    first = Server(control_plane, policy_dir, tmp_path, system, port, "first", ("--no-leader-election",))
    second: Server | None = None
    try:
        eventually(lambda: own_webhooks(cluster, port), "webhook registration", details=first.log)
        attempts = itertools.count()

        def warmed() -> bool:
            name = f"warm-{next(attempts)}"
            pod_with_note(cluster, workload, name)
            evict(cluster, workload, name)
            try:
                eventually(lambda: labelled(cluster, workload, name), "warm-up label", timeout=10)
                return True
            except AssertionError:
                return False

        eventually(warmed, "a warm-up eviction's label", details=first.log)

        pods = [f"pod-{index:02d}" for index in range(MPOL_BATCH)]
        for name in pods:
            pod_with_note(cluster, workload, name)
        with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
            list(pool.map(lambda name: evict(cluster, workload, name), pods))
        first.kill()
        missing_at_kill = [name for name in pods if not labelled(cluster, workload, name)]
        recorded = update_requests(cluster, system)
        print(f"at SIGKILL: {len(missing_at_kill)} of {MPOL_BATCH} notes of evicted Pods unlabelled, {len(recorded)} UpdateRequests stored")
        for request in recorded:
            admission = request["spec"]["context"]["admissionRequestInfo"]["admissionRequest"]
            assert (request["spec"]["requestType"], admission["subResource"], admission["object"]["kind"]) == ("cel-mutate", "eviction", "Eviction")

        second = Server(control_plane, policy_dir, tmp_path, system, port, "second", ("--no-leader-election",))
        eventually(
            lambda: all(labelled(cluster, workload, name) for name in pods),
            f"the notes of all {MPOL_BATCH} evicted Pods labelled",
            details=lambda: f"unlabelled: {[n for n in pods if not labelled(cluster, workload, n)]}\n{second.log() if second else ''}",
        )
        eventually(lambda: not update_requests(cluster, system), "completed UpdateRequests deleted", details=lambda: str([(u["metadata"]["name"], u.get("status")) for u in update_requests(cluster, system)]))
        print(f"after restart: {MPOL_BATCH} of {MPOL_BATCH} notes labelled")
    finally:
        if first.process.poll() is None:
            first.kill()
        if second is not None:
            second.stop()
