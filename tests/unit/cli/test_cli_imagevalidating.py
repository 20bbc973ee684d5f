"""`stockade test` judges ImageValidatingPolicy results like ValidatingPolicy ones (rule name = policy name)."""

import os
import subprocess
import sys
from pathlib import Path

POLICY = """\
apiVersion: policies.kyverno.io/v1beta1
kind: ImageValidatingPolicy
metadata:
  name: no-latest
spec:
  validationActions: [Deny]
  validationConfigurations:
    verifyDigest: false
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [pods]
  matchImageReferences:
  - glob: "ghcr.io/*"
  attestors:
  - name: none
    cosign:
      key: {data: unused}
  validations:
  - expression: "images.containers.all(i, image(i).tag() != 'latest')"
    message: latest tag not allowed
"""

RESOURCES = """\
apiVersion: v1
kind: Pod
metadata: {name: good, namespace: default}
spec:
  containers: [{name: a, image: "ghcr.io/acme/app:1.0"}, {name: b, image: "docker.io/nginx:latest"}]
---
apiVersion: v1
kind: Pod
metadata: {name: bad, namespace: default}
spec:
  containers: [{name: a, image: "ghcr.io/acme/app:latest"}]
"""


def _test_file(good: str, bad: str) -> str:
    return f"""\
apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {{name: ivpol}}
policies: [policy.yaml]
resources: [resources.yaml]
results:
- {{policy: no-latest, kind: Pod, resources: [good], result: {good}, isImageValidatingPolicy: true}}
- {{policy: no-latest, kind: Pod, resources: [bad], result: {bad}, isImageValidatingPolicy: true}}
"""


def _run(directory: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "stockade", "test", str(directory)], capture_output=True, text=True, env=env, timeout=60)


def test_stockade_test_judges_image_validating_policy(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "resources.yaml").write_text(RESOURCES)
    (tmp_path / "kyverno-test.yaml").write_text(_test_file("pass", "fail"))
    result = _run(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 tests passed and 0 tests failed" in result.stdout

    (tmp_path / "kyverno-test.yaml").write_text(_test_file("pass", "pass"))
    flipped = _run(tmp_path)
    assert flipped.returncode == 1, flipped.stdout + flipped.stderr
    assert "Want pass, got fail" in flipped.stdout
