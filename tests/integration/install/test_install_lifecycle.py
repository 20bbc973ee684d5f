"""Install and uninstall for real on the apiserver (objects are stored, nothing runs): nothing may be left behind."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import yaml
from install_tools import CHART, INSTALL_YAML, Tools, documents


def listable_resources(tools: Tools, namespaced: bool) -> str:
    names = tools.kubectl("api-resources", "--verbs=list", f"--namespaced={str(namespaced).lower()}", "-o", "name").stdout.split()
    return ",".join(name for name in names if name not in {"componentstatuses", "events", "events.events.k8s.io"})


def leftovers(tools: Tools, selector: str) -> list[str]:
    """Every object, namespaced or cluster-scoped, of any kind the apiserver serves, matching ``selector``."""
    found = tools.kubectl("get", listable_resources(tools, True), "-A", "-l", selector, "-o", "name").stdout.split()
    found += tools.kubectl("get", listable_resources(tools, False), "-l", selector, "-o", "name").stdout.split()
    return found


def finalize_namespace(tools: Tools, namespace: str) -> None:
    """What kube-controller-manager's namespace controller does once a deleted namespace is empty (this test
    apiserver runs no controllers, so a deleted namespace would stay Terminating forever)."""
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}, "spec": {"finalizers": []}}
    tools.kubectl("replace", "--raw", f"/api/v1/namespaces/{namespace}/finalize", "-f", "-", stdin=json.dumps(body))
    tools.kubectl("wait", "--for=delete", f"namespace/{namespace}", "--timeout=60s")


def test_install_yaml_applies_and_deletes_without_leftovers(tools: Tools, tmp_path: Path) -> None:
    docs = documents(INSTALL_YAML.read_text())
    # CRDs are shared with the other tests on this apiserver: only take over (and later delete) the missing ones
    existing_crds = set(tools.kubectl("get", "customresourcedefinitions", "-o", "jsonpath={.items[*].metadata.name}").stdout.split())
    ours = [doc for doc in docs if not (doc["kind"] == "CustomResourceDefinition" and doc["metadata"]["name"] in existing_crds)]
    created_crds = [doc["metadata"]["name"] for doc in ours if doc["kind"] == "CustomResourceDefinition"]
    manifest = tmp_path / "install.yaml"
    manifest.write_text(yaml.safe_dump_all(ours))

    tools.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(manifest))
    stored = tools.kubectl("get", "-f", str(manifest), "-o", "name").stdout.split()
    assert len(stored) == len(ours)
    deployment = json.loads(tools.kubectl("get", "deployment", "stockade", "-n", "stockade", "-o", "json").stdout)
    assert deployment["spec"]["replicas"] == 2
    assert leftovers(tools, "app.kubernetes.io/instance=stockade,app.kubernetes.io/part-of=stockade")

    tools.kubectl("delete", "-f", str(manifest), "--wait=false")
    finalize_namespace(tools, "stockade")
    for name in created_crds:
        tools.kubectl("wait", "--for=delete", f"customresourcedefinition/{name}", "--timeout=60s")
    assert tools.kubectl("get", "-f", str(manifest), "--ignore-not-found", "-o", "name").stdout.strip() == ""
    assert leftovers(tools, "app.kubernetes.io/instance=stockade,app.kubernetes.io/part-of=stockade") == []
    # the CRDs other tests installed before us are untouched
    still = set(tools.kubectl("get", "customresourcedefinitions", "-o", "jsonpath={.items[*].metadata.name}").stdout.split())
    assert existing_crds <= still


def test_helm_install_and_uninstall_leave_nothing_but_the_crds(tools: Tools) -> None:
    namespace = f"stockade-helm-{uuid.uuid4().hex[:6]}"
    release = "stockade-ha"
    selector = f"app.kubernetes.io/instance={release}"
    # hooks need a kubelet to run their Job; CRDs are shared with other tests (and helm never deletes them)
    tools.helm("install", release, str(CHART), "--namespace", namespace, "--create-namespace", "--no-hooks", "--skip-crds",
               "--set-json", 'generate.kinds=[{"apiGroups":[""],"resources":["configmaps"]}]')
    try:
        installed = leftovers(tools, selector)
        for expected in ("deployment.apps/stockade", "poddisruptionbudget.policy/stockade", "lease.coordination.k8s.io/stockade-leader",
                         "secret/stockade-tls", f"clusterrole.rbac.authorization.k8s.io/stockade-{namespace}-background"):
            assert expected in installed
        status = json.loads(tools.helm("status", release, "--namespace", namespace, "-o", "json").stdout)
        assert status["info"]["status"] == "deployed"
        tools.helm("uninstall", release, "--namespace", namespace, "--no-hooks")
        assert leftovers(tools, selector) == []
        # helm's own release records are gone too: the namespace is empty
        remaining = tools.kubectl("get", listable_resources(tools, True), "-n", namespace, "-o", "name").stdout.split()
        assert remaining == []
    finally:
        tools.helm("uninstall", release, "--namespace", namespace, "--no-hooks", "--ignore-not-found")
        tools.kubectl("delete", "namespace", namespace, "--wait=false")
        finalize_namespace(tools, namespace)
