"""Static checks of the committed deployment files: the chart's CRD copy and install.yaml's RBAC against the CRDs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
CRD_SOURCE = REPO_ROOT / "deploy" / "crds"
CHART_CRDS = REPO_ROOT / "deploy" / "helm" / "stockade" / "crds"
INSTALL_YAML = REPO_ROOT / "deploy" / "install.yaml"
POLICY_GROUPS = {"kyverno.io", "policies.kyverno.io"}


def load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def source_crds() -> list[dict[str, Any]]:
    return [doc for path in sorted(CRD_SOURCE.glob("*.yaml")) for doc in load_all(path)]


def install_docs() -> list[dict[str, Any]]:
    return load_all(INSTALL_YAML)


def allows(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    for rule in rules:
        if rule.get("resourceNames"):
            continue
        if (group in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", [])) and (
            resource in rule.get("resources", []) or "*" in rule.get("resources", [])
        ) and (verb in rule.get("verbs", []) or "*" in rule.get("verbs", [])):
            return True
    return False


def core_cluster_role() -> list[dict[str, Any]]:
    return next(doc for doc in install_docs() if doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == "stockade-stockade")["rules"]


def test_chart_crds_are_an_exact_copy_of_deploy_crds() -> None:
    """Helm installs CRDs only from the chart's own crds/ directory: hack/sync-crds.sh keeps that copy."""
    sources = sorted(path.name for path in CRD_SOURCE.glob("*.yaml"))
    assert sources, "deploy/crds/ holds no CRDs"
    assert sorted(path.name for path in CHART_CRDS.glob("*.yaml")) == sources, "run hack/sync-crds.sh"
    for name in sources:
        assert (CHART_CRDS / name).read_bytes() == (CRD_SOURCE / name).read_bytes(), f"{name} drifted: run hack/sync-crds.sh"


def test_install_yaml_carries_every_crd() -> None:
    installed = {doc["metadata"]["name"] for doc in install_docs() if doc["kind"] == "CustomResourceDefinition"}
    assert installed == {doc["metadata"]["name"] for doc in source_crds()}, "run hack/render-install.sh"


# UpdateRequests are background work items, not policies
@pytest.mark.parametrize(
    "crd", [doc for doc in source_crds() if doc["spec"]["group"] in POLICY_GROUPS and doc["spec"]["names"]["plural"] != "updaterequests"], ids=lambda doc: doc["metadata"]["name"]
)
def test_every_policy_kind_is_watchable(crd: dict[str, Any]) -> None:
    rules = core_cluster_role()
    group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
    for verb in ("get", "list", "watch"):
        assert allows(rules, group, plural, verb), f"the ClusterRole cannot {verb} {plural}.{group}"
    if plural != "policyexceptions":  # exceptions are only read
        for verb in ("update", "patch"):
            assert allows(rules, group, f"{plural}/status", verb), f"the ClusterRole cannot {verb} {plural}/status"
    assert not allows(rules, group, plural, "create"), "policies are the users' to write"


def test_reports_are_writable() -> None:
    rules = core_cluster_role()
    for plural in ("policyreports", "clusterpolicyreports"):
        for verb in ("create", "get", "list", "update", "patch", "delete"):
            assert allows(rules, "wgpolicyk8s.io", plural, verb)


def test_install_yaml_namespace_enforces_restricted_pod_security() -> None:
    namespace = next(doc for doc in install_docs() if doc["kind"] == "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    namespaced = [doc for doc in install_docs() if doc["kind"] not in {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}]
    assert {doc["metadata"].get("namespace") for doc in namespaced} == {"stockade"}


def test_no_pre_delete_hook_in_install_yaml() -> None:
    """kubectl does not know Helm hooks: it would run the cleanup Job right at install time."""
    assert not any("helm.sh/hook" in (doc["metadata"].get("annotations") or {}) for doc in install_docs())


def test_chart_flux_image_crds_are_an_exact_copy_of_deploy_flux_crds() -> None:
    """The optional Flux image CRDs (imageAutomation.installCRDs) ship as a chart file, outside crds/."""
    source = REPO_ROOT / "deploy" / "flux" / "crds.yaml"
    chart_copy = REPO_ROOT / "deploy" / "helm" / "stockade" / "files" / "flux-image-crds.yaml"
    assert chart_copy.read_bytes() == source.read_bytes(), "copy deploy/flux/crds.yaml into the chart's files/"
    kinds = {doc["spec"]["names"]["kind"] for doc in yaml.safe_load_all(source.read_text())}
    assert kinds == {"ImageRepository", "ImagePolicy", "ImageUpdateAutomation", "GitRepository"}
