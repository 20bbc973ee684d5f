"""Background generate work is matched with the requester's roles, as the admission was: Kyverno's
cpol-data-trigger-not-present.  A synchronized rule that excludes ``clusterRoles: [cluster-admin]`` generates for a
trigger created by an ordinary user; when a cluster admin (group system:masters, bound to cluster-admin) deletes the
trigger, the rule does not apply to the DELETE, so the generated ClusterRole stays (it went when the background work
was matched without the requester's roles)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from stockade.controllers.clusterdata import ClusterData
from stockade.kube.connection import load_api_client
from stockade.testing.apiserver import ControlPlane, free_port
from tests.integration.background.test_update_request_recovery import Server, batch_namespaces, eventually, own_webhooks, update_request_crd

__all__ = ["batch_namespaces", "update_request_crd"]


def policy(suffix: str) -> str:
    return f"""\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {{name: owner-role-{suffix}}}
spec:
  background: false
  rules:
  - name: owner-role
    match:
      any:
      - resources: {{kinds: [ConfigMap], names: ["owned-{suffix}"]}}
    exclude:
      clusterRoles: [cluster-admin]
    # the test's admin client and the server share the control plane's admin identity
    skipBackgroundRequests: false
    generate:
      synchronize: true
      apiVersion: rbac.authorization.k8s.io/v1
      kind: ClusterRole
      name: "ns-admin-{{{{request.object.metadata.name}}}}"
      data:
        rules:
        - apiGroups: [""]
          resources: [configmaps]
          verbs: [get]
          resourceNames: ["{{{{request.object.metadata.name}}}}"]
"""


def cluster_role(cluster: ClusterData, name: str) -> dict[str, Any] | None:
    return cluster.get_object("rbac.authorization.k8s.io/v1", "ClusterRole", "", name, cached=False)


def test_a_trigger_deleted_by_an_excluded_cluster_admin_keeps_its_downstream(
    control_plane: ControlPlane, cluster: ClusterData, update_request_crd: None, suffix: str, tmp_path: Path, batch_namespaces: list[str]
) -> None:
    system = f"roles-sys-{suffix}"
    control_plane.ensure_namespace(system)
    batch_namespaces.append(system)
    triggers = f"roles-ns-{suffix}"  # not the server's own namespace, which its webhooks leave out
    control_plane.ensure_namespace(triggers)
    batch_namespaces.append(triggers)
    user = f"nancy-{suffix}"
    grant = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get"]}
    cluster.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", {"metadata": {"name": f"ns-creator-{suffix}"}, "rules": [grant]})
    cluster.request(
        "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {"metadata": {"name": f"ns-creator-{suffix}"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"ns-creator-{suffix}"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]},
    )
    policy_dir = tmp_path / "policies"
    policy_dir.mkdir()
    (policy_dir / "policy.yaml").write_text(policy(suffix))
    port = free_port()
    server = Server(control_plane, policy_dir, tmp_path, system, port, "roles", ("--no-leader-election",))
    target = f"owned-{suffix}"
    downstream = f"ns-admin-{target}"
    try:
        eventually(lambda: own_webhooks(cluster, port), "webhook registration", details=server.log)
        as_user = ClusterData(load_api_client(str(control_plane.kubeconfig)), ttl_seconds=0.0)
        as_user.impersonate = user
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": target, "namespace": triggers}}

        def created_and_generated() -> bool:
            if cluster.get_object("v1", "ConfigMap", triggers, target, cached=False) is None:
                as_user.request("POST", f"/api/v1/namespaces/{triggers}/configmaps", body)
            return cluster_role(cluster, downstream) is not None

        eventually(created_and_generated, "the ClusterRole generated for the user's ConfigMap", details=server.log)
        cluster.request("DELETE", f"/api/v1/namespaces/{triggers}/configmaps/{target}")  # as the admin: excluded by clusterRoles
        time.sleep(5)  # a cleanup, if the DELETE were not excluded, happens within a second of it
        assert cluster_role(cluster, downstream) is not None, server.log()
    finally:
        server.stop()
        for path in (f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{downstream}", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/ns-creator-{suffix}",
                     f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/ns-creator-{suffix}"):
            try:
                cluster.request("DELETE", path)
            except Exception:
                pass
