"""`serve --webhook-names kyverno` against a real kube-apiserver: Kyverno's five configurations are accepted and
called, ``Pod/*`` registers the pod subresources the apiserver serves, and a clean stop removes all five."""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from pathlib import Path

from webhook_cluster import MUTATING, VALIDATING, Kube, Serve

from stockade.testing.apiserver import REPO_ROOT, ControlPlane, find_binary

LABEL = "webhook.kyverno.io%2Fmanaged-by%3Dkyverno"
POD_ALL_SUBRESOURCES = """\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: pod-subresources
  annotations: {pod-policies.kyverno.io/autogen-controllers: none}
spec:
  background: false  # Kyverno refuses background scans of subresources
  rules:
  - name: team
    match: {any: [{resources: {kinds: ["Pod/*"]}}]}
    validate:
      failureAction: Audit
      message: team label
      pattern: {metadata: {labels: {team: "?*"}}}
"""


def kyverno_named(kube: Kube, collection: str) -> dict[str, dict[str, object]]:
    status, body, _ = kube.request("GET", f"{collection}?labelSelector={LABEL}")
    assert status == 200, body
    return {item["metadata"]["name"]: item for item in body.get("items", [])}


def test_kyverno_naming_registers_kyvernos_set_and_removes_it(control_plane: ControlPlane, kube: Kube, tmp_path: Path) -> None:
    policy_dir = tmp_path / "policies"
    policy_dir.mkdir()
    (policy_dir / "policy.yaml").write_text(POD_ALL_SUBRESOURCES)
    server = Serve(control_plane, policy_dir, tmp_path, ("--webhook-names", "kyverno"))
    try:
        deadline = time.monotonic() + 60
        while len(kyverno_named(kube, MUTATING)) < 3 or len(kyverno_named(kube, VALIDATING)) < 2:
            assert server.process.poll() is None and time.monotonic() < deadline, server.log()
            time.sleep(0.3)
        assert sorted(kyverno_named(kube, MUTATING)) == [
            "kyverno-policy-mutating-webhook-cfg",
            "kyverno-resource-mutating-webhook-cfg",
            "kyverno-verify-mutating-webhook-cfg",
        ]
        validating = kyverno_named(kube, VALIDATING)["kyverno-resource-validating-webhook-cfg"]
        (webhook,) = validating["webhooks"]  # type: ignore[misc]
        (rule,) = webhook["rules"]
        served = {"attach", "binding", "ephemeralcontainers", "eviction", "exec", "log", "portforward", "proxy", "status"}
        assert {f"pods/{sub}" for sub in served} <= set(rule["resources"]) and "pods" not in rule["resources"], rule
        assert rule["scope"] == "Namespaced" and rule["operations"] == ["CONNECT", "CREATE", "DELETE", "UPDATE"]

        # the policy mutating webhook fails closed: creating a ClusterPolicy succeeds only because /policymutate answers
        kubectl = [find_binary("kubectl", "STOCKADE_KUBECTL"), "--kubeconfig", str(control_plane.kubeconfig)]
        crds = subprocess.run([*kubectl, "apply", "-f", str(REPO_ROOT / "deploy" / "crds" / "policies.yaml")], capture_output=True, text=True, timeout=120)
        assert crds.returncode == 0, crds.stderr
        waited = subprocess.run([*kubectl, "wait", "--for=condition=Established", "--timeout=60s", "crd/clusterpolicies.kyverno.io"], capture_output=True, text=True, timeout=90)
        assert waited.returncode == 0, waited.stderr
        name = f"through-policymutate-{uuid.uuid4().hex[:6]}"
        created = subprocess.run([*kubectl, "create", "-f", "-"], input=POD_ALL_SUBRESOURCES.replace("pod-subresources", name), capture_output=True, text=True, timeout=60)
        assert created.returncode == 0, created.stderr + server.log()[-3000:]
        subprocess.run([*kubectl, "delete", "clusterpolicy", name, "--wait=false"], capture_output=True, text=True, timeout=60)

        assert server.signal(signal.SIGTERM) == 0, server.log()
        assert kyverno_named(kube, MUTATING) == {} and kyverno_named(kube, VALIDATING) == {}
    finally:
        server.stop()
