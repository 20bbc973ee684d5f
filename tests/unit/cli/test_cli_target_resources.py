"""`stockade test` with targetResources: mutate.targets results are judged on the patched targets."""

import os
import subprocess
import sys
from pathlib import Path

POLICY = """\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: stamp-secrets}
spec:
  rules:
  - name: stamp
    match: {any: [{resources: {kinds: [ConfigMap]}}]}
    mutate:
      targets: [{apiVersion: v1, kind: Secret, name: "creds-*"}]
      patchStrategicMerge: {metadata: {labels: {stamped: "{{ request.object.data.stamp }}"}}}
"""
TRIGGER = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: trigger, namespace: apps}\ndata: {stamp: s1}\n"
TARGETS = "apiVersion: v1\nkind: Secret\nmetadata: {name: creds-a, namespace: apps}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: other, namespace: apps}\n"


def write_case(directory: Path, stamp: str, result: str = "pass") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "policy.yaml").write_text(POLICY)
    (directory / "trigger.yaml").write_text(TRIGGER)
    (directory / "targets.yaml").write_text(TARGETS)
    (directory / "patched.yaml").write_text(f"apiVersion: v1\nkind: Secret\nmetadata: {{name: creds-a, namespace: apps, labels: {{stamped: {stamp}}}}}\n")
    (directory / "kyverno-test.yaml").write_text(
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [policy.yaml]\nresources: [trigger.yaml]\n"
        "targetResources: [targets.yaml]\nresults:\n"
        f"- {{policy: stamp-secrets, rule: stamp, resources: [apps/creds-a], patchedResources: patched.yaml, result: {result}}}\n"
    )
    return directory


def run_test(directory: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "stockade", "test", str(directory)], capture_output=True, text=True, env=env, timeout=60)


def test_patched_target_matches(tmp_path: Path) -> None:
    result = run_test(write_case(tmp_path / "ok", "s1"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "v1/Secret/apps/creds-a" in result.stdout and "1 tests passed and 0 tests failed" in result.stdout


def test_wrong_patch_or_wrong_verdict_fails(tmp_path: Path) -> None:
    diff = run_test(write_case(tmp_path / "diff", "other-value"))
    assert diff.returncode == 1 and "Resource diff" in diff.stdout
    verdict = run_test(write_case(tmp_path / "verdict", "s1", result="fail"))
    assert verdict.returncode == 1 and "Want fail, got pass" in verdict.stdout
