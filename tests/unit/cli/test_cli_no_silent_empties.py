"""A test must check something. Kyverno 1.19.1 prints "0 tests passed and 0 tests failed" and exits 0 for a test
without results or whose every result is skipped (its resource missing from the patchedResources file); stockade
fails such a test with a reason instead. Where Kyverno does report a row (a policy that is not loaded: "Not found";
a rule the policy lacks: "Excluded"), the verdict stays Kyverno's and stockade adds a warning."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from stockade.cli.main import cli
from stockade.kyvernotest import runner
from stockade.kyvernotest.runner import TestRunner as CaseRunner
from stockade.kyvernotest.schema import load_test_files

POLICY = """\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: add-team}
spec:
  rules:
  - name: label
    match:
      any:
      - resources: {kinds: [Pod]}
    mutate:
      patchStrategicMerge:
        metadata:
          labels: {team: red}
"""
POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: default}\nspec: {containers: [{name: c, image: nginx}]}\n"
PATCHED_OTHER = POD.replace("name: a, namespace: default", "name: other, namespace: default, labels: {team: red}")
PATCHED_A = POD.replace("namespace: default", "namespace: default, labels: {team: red}")


def _write(tmp_path: Path, results: str) -> str:
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "pod.yaml").write_text(POD)
    (tmp_path / "other.yaml").write_text(PATCHED_OTHER)
    (tmp_path / "patched.yaml").write_text(PATCHED_A)
    path = tmp_path / "kyverno-test.yaml"
    path.write_text(f"apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {{name: t}}\npolicies: [policy.yaml]\nresources: [pod.yaml]\n{results}")
    return str(path)


def _run(tmp_path: Path, results: str) -> runner.TestRun:
    (case,) = load_test_files(_write(tmp_path, results))
    return CaseRunner(case).execute()


def test_a_test_without_results_fails(tmp_path: Path) -> None:
    run = _run(tmp_path, "results: []\n")
    assert run.error == "the test checks nothing: it lists no results" and run.failed == 1
    outcome = CliRunner().invoke(cli, ["test", os.path.dirname(_write(tmp_path, "results: []\n"))])
    assert outcome.exit_code == 1 and "0 tests passed and 1 tests failed" in outcome.output


def test_a_test_whose_every_result_is_skipped_fails(tmp_path: Path) -> None:
    run = _run(tmp_path, "results:\n- {policy: add-team, rule: label, kind: Pod, resources: [a], result: pass, patchedResources: other.yaml}\n")
    assert "every result was skipped" in run.error and run.failed == 1


def test_a_checked_patched_resource_still_passes(tmp_path: Path) -> None:
    run = _run(tmp_path, "results:\n- {policy: add-team, rule: label, kind: Pod, resources: [a], result: pass, patchedResources: patched.yaml}\n")
    assert not run.error and [(row.ok, row.reason) for row in run.rows] == [(True, "Ok")]


def test_a_policy_that_is_not_loaded_is_not_found(tmp_path: Path) -> None:
    run = _run(tmp_path, "results:\n- {policy: nope, rule: label, kind: Pod, resources: [a], result: pass}\n")
    assert [(row.ok, row.reason) for row in run.rows] == [(False, "Not found")]


def test_a_rule_the_policy_lacks_is_excluded_as_in_kyverno_with_a_warning(tmp_path: Path) -> None:
    run = _run(tmp_path, "results:\n- {policy: add-team, rule: nope, kind: Pod, resources: [a], result: fail}\n")
    assert [(row.ok, row.reason) for row in run.rows] == [(True, "Excluded")]
    assert any("does not have" in warning and "'nope'" in warning for warning in run.warnings)


def test_a_resource_that_is_not_loaded_is_warned_about(tmp_path: Path) -> None:
    run = _run(tmp_path, "results:\n- {policy: add-team, rule: label, kind: Pod, resources: [zzz], result: pass}\n")
    assert any("zzz" in warning and "not among the loaded resources" in warning for warning in run.warnings)
    assert [(row.resource, row.ok) for row in run.rows] == [("v1/Pod/default/a", True)]
