"""`stockade apply` flags Kyverno's apply has: --warn-exit-code, --warn-no-pass, the --cluster options (and their
refusal without --cluster), and Kyverno's progress/failure lines (exceptions counted, bindings not)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from stockade.cli.main import cli

AUDIT_POLICY = """\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: need-team}
spec:
  validationFailureAction: Audit
  rules:
  - name: need-team
    match:
      any:
      - resources: {kinds: [ConfigMap]}
    validate:
      message: team label required
      pattern: {metadata: {labels: {team: "?*"}}}
"""

CONFIGMAPS = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: unlabelled, namespace: default}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: labelled, namespace: default, labels: {team: a}}
"""

EXCEPTION = """\
apiVersion: kyverno.io/v2
kind: PolicyException
metadata: {name: skip-unlabelled}
spec:
  exceptions:
  - {policyName: need-team, ruleNames: [need-team]}
  match:
    any:
    - resources: {kinds: [ConfigMap], names: [unlabelled]}
"""

MAP_WITH_BINDING = """\
apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicy
metadata: {name: add-env}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{metadata: Object.metadata{labels: {'env': 'prod'}}}"
---
apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicyBinding
metadata: {name: add-env}
spec:
  policyName: add-env
"""


def invoke(*args: str) -> Result:
    return CliRunner(env={"NO_COLOR": "1"}).invoke(cli, list(args), prog_name="stockade")


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    paths = {"policy": AUDIT_POLICY, "cms": CONFIGMAPS, "exception": EXCEPTION, "map": MAP_WITH_BINDING}
    for name, text in paths.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    return {name: str(tmp_path / f"{name}.yaml") for name in paths}


def test_warn_exit_code_applies_to_warnings_only(files: dict[str, str]) -> None:
    warned = invoke("apply", files["policy"], "-r", files["cms"], "--audit-warn", "--warn-exit-code", "3")
    assert warned.exit_code == 3, warned.output
    assert "policy need-team -> resource default/ConfigMap/unlabelled failed as audit warning:\n1 - need-team validation error:" in warned.stdout
    assert warned.stdout.rstrip().endswith("pass: 1, fail: 0, warn: 1, error: 0, skip: 0 \nexit as warnExitCode is 3")
    # without --audit-warn the Audit failure is a failure: exit 1 whatever --warn-exit-code says
    failed = invoke("apply", files["policy"], "-r", files["cms"], "--warn-exit-code", "3")
    assert failed.exit_code == 1 and "failed:\n1 - need-team" in failed.stdout and "warnExitCode" not in failed.stdout
    # a warning without --warn-exit-code exits 0
    assert invoke("apply", files["policy"], "-r", files["cms"], "--audit-warn").exit_code == 0


def test_warn_no_pass_when_nothing_passed(files: dict[str, str], tmp_path: Path) -> None:
    only_unlabelled = tmp_path / "one.yaml"
    only_unlabelled.write_text(CONFIGMAPS.split("---\n")[0])
    result = invoke("apply", files["policy"], "-r", str(only_unlabelled), "-e", files["exception"], "--warn-no-pass", "--warn-exit-code", "4")
    assert result.exit_code == 4, result.output
    assert "pass: 0, fail: 0, warn: 0, error: 0, skip: 1" in result.stdout and "exit as no objects satisfied policy" in result.stdout
    # Kyverno's --warn-no-pass alone prints the notice and exits with the default warn code, 0
    alone = invoke("apply", files["policy"], "-r", str(only_unlabelled), "-e", files["exception"], "--warn-no-pass")
    assert alone.exit_code == 0 and "exit as no objects satisfied policy" in alone.stdout
    # something passed: no notice
    passed = invoke("apply", files["policy"], "-r", files["cms"], "-e", files["exception"], "--warn-no-pass", "--warn-exit-code", "4")
    assert passed.exit_code == 0 and "no objects satisfied" not in passed.stdout


def test_progress_line_counts_exceptions_and_not_bindings(files: dict[str, str]) -> None:
    result = invoke("apply", files["policy"], "-r", files["cms"], "-e", files["exception"])
    assert result.stdout.startswith("\nApplying 1 policy rule(s) to 2 resource(s) with 1 exception(s)...\n")
    mutated = invoke("apply", files["map"], "-r", files["cms"])
    assert mutated.exit_code == 0, mutated.output
    assert mutated.stdout.startswith("\nApplying 1 policy rule(s) to 2 resource(s)...\n")
    assert "\npolicy add-env applied to default/ConfigMap/labelled:\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  labels:\n    env: prod\n    team: a\n" in mutated.stdout
    assert mutated.stdout.count("\n\nMutation:\nMutation has been applied successfully.") == 2


@pytest.mark.parametrize("option", [("--namespace", "default"), ("--context", "kind"), ("--cluster-wide-resources",)])
def test_cluster_options_need_cluster(files: dict[str, str], option: tuple[str, ...]) -> None:
    result = invoke("apply", files["policy"], "-r", files["cms"], *option)
    assert result.exit_code == 2 and "apply to --cluster only" in result.stderr


def test_offline_resource_paths_must_exist(files: dict[str, str], tmp_path: Path) -> None:
    result = invoke("apply", files["policy"], "-r", str(tmp_path / "missing.yaml"))
    assert result.exit_code == 2 and "does not exist" in result.stderr


def test_unreachable_cluster_is_a_failure(files: dict[str, str], tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
    )
    result = invoke("apply", files["policy"], "--cluster", "--kubeconfig", str(kubeconfig))
    assert result.exit_code == 1 and result.stderr.startswith("Error: ") and "Applying" not in result.stdout
    unknown_context = invoke("apply", files["policy"], "--cluster", "--kubeconfig", str(kubeconfig), "--context", "nope")
    assert unknown_context.exit_code == 1 and "cannot load the cluster configuration" in unknown_context.stderr
