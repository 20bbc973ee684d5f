"""Kyverno refuses a namespaced Policy that matches or excludes a cluster-scoped kind (its ResourceDescription check
against discovery); checked here through the policy webhook's ClusterPolicyChecks on a real kube-apiserver."""

from __future__ import annotations

from typing import Any

from stockade.controllers.clusterdata import ClusterData
from stockade.controllers.policychecks import ClusterPolicyChecks
from stockade.kube.connection import load_api_client
from stockade.testing.apiserver import ControlPlane


def policy(kind: str, match: dict[str, Any]) -> dict[str, Any]:
    rule = {"name": "r", "match": match, "validate": {"message": "m", "pattern": {"metadata": {"labels": {"team": "?*"}}}}}
    metadata: dict[str, Any] = {"name": "scoped"}
    if kind == "Policy":
        metadata["namespace"] = "default"
    return {"apiVersion": "kyverno.io/v1", "kind": kind, "metadata": metadata, "spec": {"background": False, "rules": [rule]}}


def test_cluster_scoped_kinds_are_refused_in_namespaced_policies_only(control_plane: ControlPlane) -> None:
    checks = ClusterPolicyChecks(ClusterData(load_api_client(str(control_plane.kubeconfig)), ttl_seconds=0.0))
    crds = {"any": [{"resources": {"kinds": ["ConfigMap", "CustomResourceDefinition"]}}]}
    errors, _ = checks.check(policy("Policy", crds))
    assert errors == ["spec.rules[0].match.any[0].resources.kinds[1]: Forbidden: Cluster wide resource 'CustomResourceDefinition' not allowed in namespaced policy"]
    errors, _ = checks.check(policy("Policy", {"all": [{"resources": {"kinds": ["v1/Namespace"]}}]}))
    assert errors and "Cluster wide resource 'v1/Namespace'" in errors[0]
    assert checks.check(policy("Policy", {"any": [{"resources": {"kinds": ["ConfigMap", "Pod"]}}]})) == ([], [])
    assert checks.check(policy("ClusterPolicy", crds))[0] == []
