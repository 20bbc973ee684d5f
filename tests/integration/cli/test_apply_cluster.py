"""`stockade apply --cluster` on the real kube-apiserver: resources listed from the cluster for the kinds the policies
match, lookups (configMap context, CEL resource library, paramRef, clone sources, namespace labels) answered by it,
and Kyverno's CLI lines.  Every object is created in namespaces of the test's own and removed afterwards; policies
name their objects (names or resourceNames) so objects of other tests sharing the apiserver never count."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from stockade.testing.apiserver import ControlPlane

REPO = Path(__file__).resolve().parents[3]


def _create(plane: ControlPlane, path: str, body: dict[str, Any]) -> None:
    status, answer, _ = plane.request("POST", path, body)
    assert status == 201, answer


def _namespace(plane: ControlPlane, name: str, labels: dict[str, str] | None = None) -> None:
    _create(plane, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}})


def _configmap(plane: ControlPlane, namespace: str, name: str, data: dict[str, str], labels: dict[str, str] | None = None) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace, "labels": labels or {}}, "data": data}
    _create(plane, f"/api/v1/namespaces/{namespace}/configmaps", body)


@pytest.fixture
def suffix(control_plane: ControlPlane) -> Iterator[str]:
    """A name suffix; namespaces named ``*-<suffix>`` and cluster-scoped objects ending in it are removed after."""
    value = uuid.uuid4().hex[:8]
    yield value
    status, body, _ = control_plane.request("GET", "/api/v1/namespaces")
    for item in body.get("items") or []:
        name = item["metadata"]["name"]
        if name.endswith(value):
            control_plane.request("DELETE", f"/api/v1/namespaces/{name}")
    control_plane.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/crb-{value}")


def apply(plane: ControlPlane, tmp_path: Path, policies: str, *args: str) -> subprocess.CompletedProcess[str]:
    policy_file = tmp_path / "policies.yaml"
    policy_file.write_text(policies)
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "stockade", "apply", str(policy_file), "--cluster", "--kubeconfig", str(plane.kubeconfig), *args],
        capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path,
    )


def test_clusterpolicy_validates_listed_objects_with_configmap_context(control_plane: ControlPlane, suffix: str, tmp_path: Path) -> None:
    ns, other = f"a-{suffix}", f"b-{suffix}"
    _namespace(control_plane, ns)
    _namespace(control_plane, other)
    _configmap(control_plane, ns, "allowed", {"name": f"good-{suffix}"})
    for name in (f"good-{suffix}", f"bad-{suffix}"):
        _configmap(control_plane, ns, name, {})
    _configmap(control_plane, other, f"bad-{suffix}", {})  # another namespace: not listed with --namespace
    policy = f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {{name: name-from-configmap}}
spec:
  validationFailureAction: Enforce
  rules:
  - name: name-from-configmap
    match:
      any:
      - resources: {{kinds: [ConfigMap], names: [good-{suffix}, bad-{suffix}]}}
    context:
    - name: allowed
      configMap: {{name: allowed, namespace: "{{{{request.object.metadata.namespace}}}}"}}
    validate:
      message: "the name must be {{{{allowed.data.name}}}}"
      deny:
        conditions:
          any:
          - {{key: "{{{{request.object.metadata.name}}}}", operator: NotEquals, value: "{{{{allowed.data.name}}}}"}}
"""
    result = apply(control_plane, tmp_path, policy, "--namespace", ns)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.strip().splitlines() == [
        "Applying 1 policy rule(s) to 3 resource(s)...",
        f"policy name-from-configmap -> resource {ns}/ConfigMap/bad-{suffix} failed:",
        f"1 - name-from-configmap the name must be good-{suffix}",
        "",
        "pass: 1, fail: 1, warn: 0, error: 0, skip: 0",
    ]


def test_cluster_scoped_objects_and_resource_names(control_plane: ControlPlane, suffix: str, tmp_path: Path) -> None:
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"crb-{suffix}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "forbidden-role"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "someone"}],
    }
    _create(control_plane, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
    policy = """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: no-forbidden-role}
spec:
  validationFailureAction: Enforce
  rules:
  - name: no-forbidden-role
    match:
      any:
      - resources: {kinds: [RoleBinding, ClusterRoleBinding]}
    validate:
      message: binding to forbidden-role
      pattern: {roleRef: {name: "!forbidden-role"}}
"""
    result = apply(control_plane, tmp_path, policy, "-r", f"crb-{suffix}")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Applying 1 policy rule(s) to 1 resource(s)..." in result.stdout
    assert f"policy no-forbidden-role -> resource /ClusterRoleBinding/crb-{suffix} failed:\n1 - no-forbidden-role validation error: binding to forbidden-role. rule no-forbidden-role failed at path /roleRef/name/\n" in result.stdout
    # every binding of the cluster (the bootstrap ones included) is listed without -r, and passes
    listed = apply(control_plane, tmp_path, policy)
    assert listed.returncode == 1
    summary = listed.stdout.strip().splitlines()[-1]
    assert summary.startswith("pass: ") and int(summary.split(",")[0].split()[1]) > 10 and "fail: 1," in summary
    missing = apply(control_plane, tmp_path, policy, "-r", f"nothing-{suffix}")
    assert missing.returncode == 1 and missing.stderr.strip() == f"Error: nothing-{suffix} not found in cluster"


def test_exception_namespace_selector_reads_live_namespace_labels(control_plane: ControlPlane, suffix: str, tmp_path: Path) -> None:
    exempt, strict = f"exempt-{suffix}", f"strict-{suffix}"
    _namespace(control_plane, exempt, {"policy.example/exempt": "true"})
    _namespace(control_plane, strict)
    for ns in (exempt, strict):
        _configmap(control_plane, ns, f"target-{suffix}", {})
    policy = f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {{name: need-owner}}
spec:
  validationFailureAction: Enforce
  rules:
  - name: need-owner
    match:
      any:
      - resources: {{kinds: [ConfigMap], names: [target-{suffix}]}}
    validate:
      message: an owner label is required
      pattern: {{metadata: {{labels: {{owner: "?*"}}}}}}
"""
    exception = """
apiVersion: kyverno.io/v2
kind: PolicyException
metadata: {name: exempt-namespaces}
spec:
  exceptions:
  - {policyName: need-owner, ruleNames: [need-owner]}
  match:
    any:
    - resources:
        kinds: [ConfigMap]
        namespaceSelector:
          matchLabels: {policy.example/exempt: "true"}
"""
    (tmp_path / "exception.yaml").write_text(exception)
    result = apply(control_plane, tmp_path, policy, "--exception", str(tmp_path / "exception.yaml"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "with 1 exception(s)..." in result.stdout.splitlines()[1]
    assert f"policy need-owner -> resource {strict}/ConfigMap/target-{suffix} failed:" in result.stdout
    assert f"resource {exempt}/ConfigMap" not in result.stdout
    assert result.stdout.strip().endswith("pass: 0, fail: 1, warn: 0, error: 0, skip: 1")


def test_cel_policies_read_the_cluster(control_plane: ControlPlane, suffix: str, tmp_path: Path) -> None:
    """ValidatingPolicy with resource.get, ValidatingAdmissionPolicy and MutatingAdmissionPolicy with paramRef: the
    policy-cm and params objects are read from the cluster, not from the listed resources."""
    ns = f"cel-{suffix}"
    _namespace(control_plane, ns)
    _configmap(control_plane, ns, f"policy-cm-{suffix}", {"name": f"good-{suffix}"})
    _configmap(control_plane, ns, f"params-{suffix}", {"banned": f"bad-{suffix}", "team": "blue"})
    for name in (f"good-{suffix}", f"bad-{suffix}"):
        _configmap(control_plane, ns, name, {})
    rules = f'[{{apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps], resourceNames: [good-{suffix}, bad-{suffix}]}}]'
    policies = f"""
apiVersion: policies.kyverno.io/v1beta1
kind: ValidatingPolicy
metadata: {{name: name-from-cm}}
spec:
  validationActions: [Deny]
  matchConstraints: {{resourceRules: {rules}}}
  variables:
  - name: cm
    expression: resource.get("v1", "configmaps", object.metadata.namespace, "policy-cm-{suffix}")
  validations:
  - expression: object.metadata.name == variables.cm.data.name
    message: not the configured name
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: not-banned}}
spec:
  paramKind: {{apiVersion: v1, kind: ConfigMap}}
  matchConstraints: {{resourceRules: {rules}}}
  validations:
  - expression: object.metadata.name != params.data.banned
    message: banned by the params
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: not-banned}}
spec:
  policyName: not-banned
  validationActions: [Deny]
  paramRef: {{name: params-{suffix}, namespace: {ns}, parameterNotFoundAction: Deny}}
---
apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicy
metadata: {{name: team-label}}
spec:
  paramKind: {{apiVersion: v1, kind: ConfigMap}}
  matchConstraints: {{resourceRules: {rules}}}
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{{metadata: Object.metadata{{labels: {{"team": params.data.team}}}}}}'
---
apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicyBinding
metadata: {{name: team-label}}
spec:
  policyName: team-label
  paramRef: {{name: params-{suffix}, namespace: {ns}, parameterNotFoundAction: Deny}}
"""
    result = apply(control_plane, tmp_path, policies, "--namespace", ns)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Applying 3 policy rule(s) to 4 resource(s)..." in result.stdout  # bindings are not policies
    assert f"policy name-from-cm -> resource {ns}/ConfigMap/bad-{suffix} failed:\n1 - name-from-cm not the configured name" in result.stdout
    assert f"policy not-banned -> resource {ns}/ConfigMap/bad-{suffix} failed:\n1 - not-banned banned by the params" in result.stdout
    assert f"policy team-label applied to {ns}/ConfigMap/good-{suffix}:" in result.stdout
    assert "\n\nMutation:\nMutation has been applied successfully." in result.stdout
    assert result.stdout.strip().endswith("pass: 4, fail: 2, warn: 0, error: 0, skip: 0")
    written = apply(control_plane, tmp_path, policies, "--namespace", ns, "-o", "-")
    mutated = {d["metadata"]["name"]: d for d in yaml.safe_load_all(written.stdout)}
    assert mutated[f"good-{suffix}"]["metadata"]["labels"] == {"team": "blue"}


def test_generation_clones_from_the_cluster(control_plane: ControlPlane, suffix: str, tmp_path: Path) -> None:
    source, target = f"src-{suffix}", f"dst-{suffix}"
    _namespace(control_plane, source)
    _namespace(control_plane, target)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "shared", "namespace": source}, "data": {"token": "c2VjcmV0"}}
    _create(control_plane, f"/api/v1/namespaces/{source}/secrets", secret)
    policies = f"""
apiVersion: policies.kyverno.io/v1beta1
kind: GeneratingPolicy
metadata: {{name: copy-secrets}}
spec:
  matchConstraints:
    resourceRules: [{{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [namespaces], resourceNames: [{target}]}}]
  variables:
  - {{name: sources, expression: 'resource.List("v1", "secrets", "{source}")'}}
  generate:
  - expression: generator.Apply(object.metadata.name, [variables.sources])
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {{name: clone-secret}}
spec:
  rules:
  - name: clone-secret
    match:
      any:
      - resources: {{kinds: [Namespace], names: [{target}]}}
    generate:
      apiVersion: v1
      kind: Secret
      name: cloned
      namespace: "{{{{request.object.metadata.name}}}}"
      clone: {{namespace: {source}, name: shared}}
"""
    result = apply(control_plane, tmp_path, policies)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("\n\nGenerate:\nGeneration completed successfully.") == 2
    assert f"policy copy-secrets applied to /Namespace/{target}:" in result.stdout
    written = apply(control_plane, tmp_path, policies, "-o", "-")
    generated = [d for d in yaml.safe_load_all(written.stdout) if d]
    by_name = {d["metadata"]["name"]: d for d in generated}
    assert set(by_name) == {"shared", "cloned"}
    for item in generated:
        assert item["kind"] == "Secret" and item["metadata"]["namespace"] == target and item["data"] == {"token": "c2VjcmV0"}
