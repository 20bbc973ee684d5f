"""The e2e cluster's identities as in Kyverno's CI (kind + Kyverno's Helm chart): the admin user's name and the RBAC of
Kyverno's controller accounts, which decides what the admission and cleanup paths may do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stockade.testing.e2ecluster import KYVERNO_ADMISSION_USER, KYVERNO_CLEANUP_USER, E2EControlPlane, _kyverno_admission_rbac, _kyverno_cleanup_rbac


def test_the_admin_token_authenticates_as_kinds_kubernetes_admin(tmp_path: Path) -> None:
    """kind's admin kubeconfig is user kubernetes-admin; the suite's User subjects name it (e2e filter/*/user)."""
    plane = E2EControlPlane(workdir=tmp_path)
    plane._write_credentials()
    first = (tmp_path / "tokens.csv").read_text().splitlines()[0].split(",")
    assert first[1] == "kubernetes-admin" and '"system:masters"' in first[3]


def _rules(manifests: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    role = next(m for m in manifests if m["kind"] == "ClusterRole" and m["metadata"]["name"] == name)
    return list(role["rules"])


def test_admission_account_reads_through_view_not_everything() -> None:
    """Kyverno 1.19's chart binds the admission controller to ``view`` instead of get/list on every resource, so an API
    call to a path outside it is refused (e2e globalcontext/apicall-failed); labelled ClusterRoles extend it."""
    manifests = _kyverno_admission_rbac()
    core = _rules(manifests, "kyverno:admission-controller:core")
    assert not any("*" in rule["resources"] for rule in core)
    bindings = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "ClusterRoleBinding"}
    assert bindings["kyverno:admission-controller:view"]["roleRef"]["name"] == "view"
    assert all(b["subjects"][0]["name"] == KYVERNO_ADMISSION_USER for b in bindings.values())
    aggregated = next(m for m in manifests if m["metadata"]["name"] == "kyverno:admission-controller")
    selectors = [s["matchLabels"] for s in aggregated["aggregationRule"]["clusterRoleSelectors"]]
    assert {"rbac.kyverno.io/aggregate-to-admission-controller": "true"} in selectors


def test_cleanup_account_may_delete_pods_but_not_configmaps() -> None:
    """The chart's cleanup controller reads ConfigMaps but may delete only Pods (CI values); tests grant the rest
    (e2e deleting-policies/rbac-missing)."""
    manifests = _kyverno_cleanup_rbac()
    rules = _rules(manifests, "kyverno:cleanup-controller:core") + _rules(manifests, "kyverno:cleanup-controller:additional")
    deletable = {resource for rule in rules if "delete" in rule["verbs"] and "" in rule["apiGroups"] for resource in rule["resources"]}
    assert deletable == {"pods"}
    binding = next(m for m in manifests if m["kind"] == "ClusterRoleBinding")
    assert binding["subjects"][0]["name"] == KYVERNO_CLEANUP_USER
