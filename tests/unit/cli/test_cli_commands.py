"""The CLI as users run it: exit codes, tables, formats, legacy files and bad input."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = ROOT / "examples" / "quickstart"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "stockade", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=60)


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    target = tmp_path / "suite" / ".hidden"
    shutil.copytree(QUICKSTART, target)
    return target


def test_quickstart_passes_and_prints_table() -> None:
    result = run("test", str(QUICKSTART))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ID  POLICY" in result.stdout
    assert "Test Summary: 6 tests passed and 0 tests failed" in result.stdout


def test_flipped_expectation_fails_with_reason(suite: Path) -> None:
    test_file = suite / "kyverno-test.yaml"
    text = test_file.read_text().replace("resources: [bad]\n    kind: Pod\n    result: fail", "resources: [bad]\n    kind: Pod\n    result: pass", 1)
    test_file.write_text(text)
    result = run("test", str(suite.parent))  # found inside a hidden directory
    assert result.returncode == 1
    assert "Want pass, got fail" in result.stdout
    assert "1 tests failed" in result.stdout


def test_unknown_rule_and_resource_names_are_reported(suite: Path) -> None:
    test_file = suite / "kyverno-test.yaml"
    text = test_file.read_text().replace("rule: require-team-label\n    resources: [good]", "rule: no-such-rule\n    resources: [good]", 1)
    text = text.replace("resources: [web]", "resources: [no-such-resource]", 1)
    test_file.write_text(text)
    result = run("test", str(suite))
    assert "warning: results[0] names rule 'no-such-rule', which policy 'require-labels-and-no-latest' does not have" in result.stdout
    assert "warning: results[4] names resources no-such-resource that are not among the loaded resources" in result.stdout


def test_json_and_junit_output(suite: Path) -> None:
    result = run("test", str(suite), "--output-format", "json")
    payload = json.loads(result.stdout)
    assert payload[0]["test"] == "quickstart" and len(payload[0]["results"]) == 6
    junit = run("test", str(suite), "--output-format", "junit")
    assert junit.stdout.startswith('<?xml version="1.0"') and 'failures="0"' in junit.stdout


def test_legacy_format_with_status_and_resource(tmp_path: Path) -> None:
    shutil.copy(QUICKSTART / "policy.yaml", tmp_path)
    shutil.copy(QUICKSTART / "resources.yaml", tmp_path)
    (tmp_path / "kyverno-test.yaml").write_text(
        "name: legacy\npolicies: [policy.yaml]\nresources: [resources.yaml]\nresults:\n"
        "- policy: require-labels-and-no-latest\n  rule: require-team-label\n  resource: bad\n  kind: Pod\n  status: fail\n"
    )
    result = run("test", str(tmp_path))
    assert result.returncode == 0, result.stdout
    assert "Test Summary: 1 tests passed" in result.stdout


def test_malformed_test_file_is_an_error_naming_the_field(tmp_path: Path) -> None:
    (tmp_path / "kyverno-test.yaml").write_text("apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nresults:\n- policy: p\n  result: maybe\n")
    result = run("test", str(tmp_path))
    assert result.returncode == 1
    assert "results[0].result" in result.stderr


def test_broken_yaml_policy_reports_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text("apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: [\n")
    (tmp_path / "kyverno-test.yaml").write_text("apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\npolicies: [policy.yaml]\nresources: []\nresults: []\n")
    result = run("test", str(tmp_path))
    assert result.returncode == 1
    assert "policy.yaml" in result.stdout and "malformed YAML at line" in result.stdout


def test_apply_summary_and_exit_code(tmp_path: Path) -> None:
    result = run("apply", str(QUICKSTART / "policy.yaml"), "-r", str(QUICKSTART / "resources.yaml"), "-o", str(tmp_path / "out"))
    assert result.returncode == 1
    assert "pass: 7, fail: 2, warn: 0, error: 0, skip: 0" in result.stdout
    assert "policy require-labels-and-no-latest -> resource default/Pod/bad failed:" in result.stdout
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert "Pod-default-good.yaml" in written


def test_apply_audit_warn_and_policy_report(tmp_path: Path) -> None:
    policy = (QUICKSTART / "policy.yaml").read_text().replace("validationFailureAction: Enforce", "validationFailureAction: Audit")
    (tmp_path / "audit.yaml").write_text(policy)
    result = run("apply", str(tmp_path / "audit.yaml"), "-r", str(QUICKSTART / "resources.yaml"), "--audit-warn", "--policy-report", "--output-format", "json")
    assert result.returncode == 0
    # the report is all there is on stdout (it parses whole); progress and the summary are on stderr
    assert json.loads(result.stdout)["kind"] == "ClusterPolicyReport"
    assert "pass: 7, fail: 0, warn: 2" in result.stderr and "Applying" in result.stderr


def test_apply_without_resources_is_a_usage_error() -> None:
    result = run("apply", str(QUICKSTART / "policy.yaml"))
    assert result.returncode == 2
    assert "no resources" in result.stderr


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0 and "stockade, version" in result.stdout
