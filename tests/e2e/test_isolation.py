"""A chainsaw script step that leaves a deny-all policy behind must not fail the next folder (Kyverno's CI gives each
folder a fresh cluster): the runner removes what a unit left and says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stockade.testing.e2erun import main

DENY_ALL = """\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: deny-all
spec:
  background: false
  rules:
  - name: no-pods
    match:
      any:
      - resources:
          kinds: [Pod]
    validate:
      failureAction: Enforce
      message: no Pod is allowed
      deny: {}
"""

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: web
    image: nginx:1.27
"""

LEAVES_POLICY = """\
apiVersion: chainsaw.kyverno.io/v1alpha1
kind: Test
metadata:
  name: leaves-policy
spec:
  steps:
  - name: a script creates what chainsaw does not clean up
    try:
    - script:
        content: |
          set -e
          kubectl apply -f deny-all.yaml
          kubectl wait --for=condition=Ready clusterpolicy/deny-all --timeout=60s
          kubectl create namespace leftover-ns
          kubectl create configmap leftover -n default --from-literal=a=b
  - name: the policy it left denies Pods
    try:
    - apply:
        file: pod.yaml
        expect:
        - check:
            ($error != null): true
"""

CREATES_POD = """\
apiVersion: chainsaw.kyverno.io/v1alpha1
kind: Test
metadata:
  name: creates-pod
spec:
  steps:
  - name: a Pod is admitted on a clean cluster
    try:
    - apply:
        file: pod.yaml
    - assert:
        resource:
          apiVersion: v1
          kind: Pod
          metadata:
            name: web
    - script:
        content: |
          ! kubectl get namespace leftover-ns
          ! kubectl get configmap leftover -n default
"""


def _suite(root: Path) -> Path:
    for folder, test, extra in (("aa-leaves-policy", LEAVES_POLICY, {"deny-all.yaml": DENY_ALL}), ("bb-creates-pod", CREATES_POD, {})):
        directory = root / folder / "test"
        directory.mkdir(parents=True)
        (directory / "chainsaw-test.yaml").write_text(test)
        (directory / "pod.yaml").write_text(POD)
        for name, text in extra.items():
            (directory / name).write_text(text)
    return root


def test_a_policy_left_by_a_script_is_removed_before_the_next_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = _suite(tmp_path / "suite")
    exclusions = tmp_path / "excluded.yaml"
    exclusions.write_text("excluded: {}\n")
    results = tmp_path / "results"
    code = main([
        "--suite", str(suite), "--exclusions", str(exclusions), "--results", str(results),
        "--state-dir", str(tmp_path / "cluster"), "--parallel", "1",
    ])
    out = capsys.readouterr().out
    summary = json.loads((results / "summary.json").read_text())
    assert summary["totals"]["failed"] == 0 and summary["totals"]["passed"] == 2, out
    assert code == 0
    left = {unit["path"]: unit["left_behind"] for unit in summary["units"]}
    assert {"ClusterPolicy/deny-all", "Namespace/leftover-ns", "ConfigMap/default/leftover"} <= set(left["aa-leaves-policy"]), left
    assert "after aa-leaves-policy: removed" in out and "ClusterPolicy/deny-all" in out
    # the second folder's own Pod went with chainsaw's namespace: nothing of it is left to remove
    assert left["bb-creates-pod"] == [], left
