"""`stockade apply` evaluates the CEL kinds too: ValidatingPolicy, MutatingPolicy and ValidatingAdmissionPolicy."""

import os
import subprocess
import sys
from pathlib import Path

import yaml

POLICIES = """\
apiVersion: policies.kyverno.io/v1alpha1
kind: ValidatingPolicy
metadata: {name: need-team}
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}]
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: team label required
---
apiVersion: policies.kyverno.io/v1alpha1
kind: MutatingPolicy
metadata: {name: add-env}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}]
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{metadata: Object.metadata{labels: {'env': 'prod'}}}"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: no-latest}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}]
  validations:
  - expression: "object.spec.containers.all(c, !c.image.endsWith(':latest'))"
    message: no latest
"""
RESOURCES = """\
apiVersion: v1
kind: Pod
metadata: {name: good, namespace: default, labels: {team: a}}
spec: {containers: [{name: c, image: nginx:1.27}]}
---
apiVersion: v1
kind: Pod
metadata: {name: bad, namespace: default}
spec: {containers: [{name: c, image: "nginx:latest"}]}
"""


def test_apply_reports_cel_results_and_writes_mutations(tmp_path: Path) -> None:
    (tmp_path / "policies.yaml").write_text(POLICIES)
    (tmp_path / "resources.yaml").write_text(RESOURCES)
    out = tmp_path / "out"
    env = {**os.environ, "NO_COLOR": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "stockade", "apply", str(tmp_path / "policies.yaml"), "-r", str(tmp_path / "resources.yaml"), "-o", str(out)],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "policy need-team -> resource default/Pod/bad failed:\n1 - need-team team label required" in result.stdout
    assert "policy no-latest -> resource default/Pod/bad failed:\n1 - no-latest no latest" in result.stdout
    assert "pass: 4, fail: 2, warn: 0, error: 0, skip: 0" in result.stdout
    good = yaml.safe_load((out / "Pod-default-good.yaml").read_text())
    assert good["metadata"]["labels"] == {"team": "a", "env": "prod"}
