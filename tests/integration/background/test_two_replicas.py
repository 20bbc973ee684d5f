"""Two `stockade serve` replicas with leader election: the leader registers the webhooks (its own URL) and so admits
the generate work; it is SIGKILLed as soon as the batch is admitted, and the other replica, once the Lease expires,
takes over leadership and completes every downstream object from the UpdateRequests the dead leader stored."""

from __future__ import annotations

from pathlib import Path

from stockade.controllers.clusterdata import ClusterData
from stockade.testing.apiserver import ControlPlane, free_port
from tests.integration.background.test_update_request_recovery import (
    admit_batch,
    Server,
    batch_namespaces,
    configmap,
    eventually,
    own_webhooks,
    policy,
    update_request_crd,
    update_requests,
    warm_up,
)

__all__ = ["batch_namespaces", "update_request_crd"]  # fixtures shared with the single-replica recovery test

BATCH = 30


def lease_holder(cluster: ClusterData, namespace: str) -> str:
    try:
        lease = cluster.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/stockade-leader")
    except Exception:
        return ""
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def test_the_standby_replica_completes_what_the_killed_leader_admitted(
    control_plane: ControlPlane, cluster: ClusterData, update_request_crd: None, suffix: str, tmp_path: Path, batch_namespaces: list[str]
) -> None:
    system = f"ur2-sys-{suffix}"
    control_plane.ensure_namespace(system)
    batch_namespaces.append(system)
    policy_dir = tmp_path / "policies"
    policy_dir.mkdir()
    (policy_dir / "policy.yaml").write_text(policy(suffix))
    replicas: list[Server] = []
    for name in ("a", "b"):
        workdir = tmp_path / name
        workdir.mkdir()
        replicas.append(Server(control_plane, policy_dir, workdir, system, free_port(), name))
    try:
        # one of them leads: its URL is in the webhook configuration, so it admits everything below
        leader = eventually(
            lambda: next((r for r in replicas if own_webhooks(cluster, r.port)), None),
            "webhook registration by the leader", details=lambda: "\n".join(r.log() for r in replicas),
        )
        standby = next(r for r in replicas if r is not leader)
        holder = lease_holder(cluster, system)
        assert holder, "the leader holds the Lease"
        assert not own_webhooks(cluster, standby.port)

        labels = {"stockade-ur/batch": suffix}
        warm_up(cluster, f"ur2-warm-{suffix}", labels, batch_namespaces, details=leader.log)

        names = [f"ur2-{suffix}-{index:02d}" for index in range(BATCH)]
        batch_namespaces.extend(names)

        admit_batch(cluster, names, labels)
        leader.kill()
        missing_at_kill = [name for name in names if configmap(cluster, name) is None]
        print(f"at SIGKILL of the leader: {len(missing_at_kill)} of {BATCH} Namespaces without their ConfigMap, "
              f"{len(update_requests(cluster, system))} UpdateRequests stored")

        # the standby takes the Lease once it expires, registers its own URL and replays the stored requests
        eventually(lambda: lease_holder(cluster, system) not in ("", holder), "the standby taking the Lease", details=standby.log)
        eventually(lambda: own_webhooks(cluster, standby.port), "the new leader's webhook registration", details=standby.log)
        eventually(
            lambda: all(configmap(cluster, name) is not None for name in names),
            f"a ConfigMap in each of the {BATCH} Namespaces",
            details=lambda: f"missing: {[n for n in names if configmap(cluster, n) is None]}\n{standby.log()}",
        )
        for name in names:
            generated = configmap(cluster, name) or {}
            assert generated.get("data") == {"owner": name}
        eventually(lambda: not update_requests(cluster, system), "completed UpdateRequests deleted", details=standby.log)
    finally:
        for replica in replicas:
            if replica.process.poll() is None:
                replica.stop()
