"""The CLI in a pipeline: inputs from stdin (`-`), machine output alone on stdout, `-o DIR` writes all or nothing
and never overwrites an input, `-h` on every command, shell completion, one error style, and no green run that
evaluated nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner, Result

from stockade.cli.main import cli

ROOT = Path(__file__).resolve().parents[3]

POLICY = """\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: add-label}
spec:
  rules:
  - name: add
    match: {any: [{resources: {kinds: [ConfigMap]}}]}
    mutate: {patchStrategicMerge: {metadata: {labels: {added: 'yes'}}}}
  - name: need-team
    match: {any: [{resources: {kinds: [ConfigMap]}}]}
    validate:
      failureAction: Audit
      message: team label required
      pattern: {metadata: {labels: {team: "?*"}}}
"""
CONFIGMAPS = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: a, namespace: default, labels: {team: red}}
data: {}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: b, namespace: default, labels: {team: blue}}
data: {}
"""
POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec: {containers: [{name: c, image: nginx}]}\n"


def invoke(*args: str, stdin: str | None = None) -> Result:
    return CliRunner(env={"NO_COLOR": "1"}).invoke(cli, list(args), input=stdin, prog_name="stockade")


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "cms.yaml").write_text(CONFIGMAPS)
    (tmp_path / "pod.yaml").write_text(POD)
    return {"policy": tmp_path / "policy.yaml", "cms": tmp_path / "cms.yaml", "pod": tmp_path / "pod.yaml"}


# -- 1. standard input -------------------------------------------------------------------------------------------------
def test_apply_reads_resources_from_stdin(files: dict[str, Path]) -> None:
    piped = invoke("apply", str(files["policy"]), "-r", "-", stdin=CONFIGMAPS)
    from_file = invoke("apply", str(files["policy"]), "-r", str(files["cms"]))
    assert piped.exit_code == from_file.exit_code == 0, piped.output
    assert piped.stdout == from_file.stdout and "Applying 2 policy rule(s) to 2 resource(s)" in piped.stdout


def test_apply_reads_the_policy_from_stdin(files: dict[str, Path]) -> None:
    result = invoke("apply", "-", "--resource", str(files["cms"]), stdin=POLICY)
    assert result.exit_code == 0, result.output
    assert "pass: 4, fail: 0" in result.stdout


def test_a_bad_stdin_document_is_named_stdin(files: dict[str, Path]) -> None:
    result = invoke("apply", str(files["policy"]), "-r", "-", stdin="kind: [oops\n")
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: <stdin>: malformed YAML") and result.stdout == ""


@pytest.mark.parametrize(
    "args",
    [["apply", "-", "-r", "-"], ["apply", "-", "-", "-r", "CMS"], ["apply", "POLICY", "-r", "-", "--values-file", "-"], ["explain", "-", "-r", "-"], ["explain", "POLICY", "--old", "-", "--new", "-"]],
)
def test_only_one_input_may_be_stdin(files: dict[str, Path], args: list[str]) -> None:
    args = [str(files["policy"]) if a == "POLICY" else str(files["cms"]) if a == "CMS" else a for a in args]
    result = invoke(*args, stdin=CONFIGMAPS)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("Error: only one input can be read from standard input") and result.stdout == ""


def test_explain_reads_the_resource_from_stdin(files: dict[str, Path]) -> None:
    result = invoke("explain", str(files["policy"]), "-r", "-", "-o", "json", stdin=CONFIGMAPS.split("---")[0])
    assert result.exit_code == 0, result.output
    explanation = json.loads(result.stdout)
    assert explanation["resource"] == "ConfigMap/default/a" and explanation["allowed"] is True


def test_explain_reads_the_policy_from_stdin(files: dict[str, Path]) -> None:
    (files["cms"].parent / "one.yaml").write_text(CONFIGMAPS.split("---")[0])
    result = invoke("explain", "-", "-r", str(files["cms"].parent / "one.yaml"), stdin=POLICY)
    assert result.exit_code == 0, result.output
    assert "policy add-label / rule need-team" in result.stdout


def test_images_reconcile_reads_stdin(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["images", "reconcile", "-", "--store", str(tmp_path / "s")], input="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert result.exit_code == 2
    assert result.stderr == "Error: no ImageRepository or ImagePolicy objects found in <stdin>\n"


# -- 2. machine output alone on stdout --------------------------------------------------------------------------------
def test_apply_prints_mutated_resources_on_stdout_and_the_rest_on_stderr(files: dict[str, Path]) -> None:
    result = invoke("apply", str(files["policy"]), "-r", str(files["cms"]), "-o", "-")
    assert result.exit_code == 0, result.output
    documents = list(yaml.safe_load_all(result.stdout))
    assert [(d["metadata"]["name"], d["metadata"]["labels"]["added"]) for d in documents] == [("a", "yes"), ("b", "yes")]
    assert "Applying 2 policy rule(s)" in result.stderr and "pass: 4, fail: 0, warn: 0, error: 0, skip: 0" in result.stderr


def test_apply_failures_go_to_stderr_with_machine_output(files: dict[str, Path]) -> None:
    files["cms"].write_text(CONFIGMAPS.replace("labels: {team: blue}", "labels: {}"))
    result = invoke("apply", str(files["policy"]), "-r", str(files["cms"]), "--policy-report", "--output-format", "json", "--detailed-results")
    assert result.exit_code == 1, result.output  # a fail result
    report = json.loads(result.stdout)
    assert report["kind"] == "ClusterPolicyReport" and report["summary"]["fail"] == 1
    assert "policy add-label -> resource default/ConfigMap/b failed:" in result.stderr


def test_apply_policy_report_yaml_parses_whole(files: dict[str, Path]) -> None:
    result = invoke("apply", str(files["policy"]), "-r", str(files["cms"]), "-p")
    assert result.exit_code == 0
    assert yaml.safe_load(result.stdout)["summary"]["pass"] == 4


def test_default_output_stays_on_stdout(files: dict[str, Path]) -> None:
    result = invoke("apply", str(files["policy"]), "-r", str(files["cms"]))
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout.startswith("\nApplying 2 policy rule(s) to 2 resource(s)...") and "pass: 4" in result.stdout


def test_report_and_resources_cannot_share_stdout(files: dict[str, Path]) -> None:
    result = invoke("apply", str(files["policy"]), "-r", str(files["cms"]), "-p", "-o", "-")
    assert result.exit_code == 2 and result.stdout == "" and result.stderr.startswith("Error: --policy-report and -o -")


def test_test_json_without_test_files_prints_an_empty_payload(tmp_path: Path) -> None:
    result = invoke("test", str(tmp_path), "-o", "json")
    assert result.exit_code == 0 and json.loads(result.stdout) == [] and "No test yamls available" in result.stderr


# -- 3. -o DIR: every file or none, never an input ---------------------------------------------------------------------
def test_output_directory_gets_every_file(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "new" / "out"
    result = invoke("apply", str(files["policy"]), "-r", str(files["cms"]), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["ConfigMap-default-a.yaml", "ConfigMap-default-b.yaml"]


def test_a_failing_write_leaves_nothing_behind(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "ConfigMap-default-b.yaml").mkdir(parents=True)  # the second file cannot replace a directory
    result = invoke("apply", str(files["policy"]), "-r", str(files["cms"]), "-o", str(out))
    assert result.exit_code == 2 and "nothing was written" in result.stderr
    assert [p.name for p in out.iterdir()] == ["ConfigMap-default-b.yaml"]  # no a.yaml, no temporary file


def test_a_failing_write_removes_the_directories_it_created(files: dict[str, Path], tmp_path: Path) -> None:
    files["cms"].write_text(CONFIGMAPS + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: 'x/y', namespace: default, labels: {team: t}}\n")
    result = invoke("apply", str(files["policy"]), "-r", str(files["cms"]), "-o", str(tmp_path / "made" / "out"))
    assert result.exit_code == 2 and not (tmp_path / "made").exists()


def test_output_never_overwrites_an_input_file(files: dict[str, Path]) -> None:
    before = files["cms"].read_text()
    result = invoke("apply", str(files["policy"]), "-r", str(files["cms"]), "-o", str(files["cms"]))
    assert result.exit_code == 2 and "is one of the input files" in result.stderr
    assert files["cms"].read_text() == before


def test_output_directory_never_overwrites_an_input_in_it(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    resource = out / "ConfigMap-default-a.yaml"
    resource.write_text(CONFIGMAPS.split("---")[0])
    link = tmp_path / "alias.yaml"
    link.hardlink_to(resource)  # the same file under another name is still that file
    result = invoke("apply", str(files["policy"]), "-r", str(link), "-o", str(out))
    assert result.exit_code == 2 and "is one of the input files" in result.stderr
    assert resource.read_text() == CONFIGMAPS.split("---")[0] and [p.name for p in out.iterdir()] == [resource.name]


# -- 4. -h everywhere --------------------------------------------------------------------------------------------------
def _command_paths(group: click.Group, prefix: list[str]) -> Iterator[list[str]]:
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None, name
        yield prefix + [name]
        if isinstance(command, click.Group):
            yield from _command_paths(command, prefix + [name])


COMMANDS: list[list[str]] = [[]] + list(_command_paths(cli, []))


def test_the_walk_reaches_the_lazy_commands_and_their_subcommands() -> None:
    names = {" ".join(path) for path in COMMANDS}
    assert {"serve", "cleanup", "sign", "verify", "images scan", "images controller", "completion", "apply"} <= names


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) or "stockade" for p in COMMANDS])
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_every_command_prints_help(path: list[str], flag: str) -> None:
    result = invoke(*path, flag)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"Usage: {' '.join(['stockade', *path])} ")


def test_the_root_help_lists_lazy_commands_without_importing_them() -> None:
    code = (
        "import sys\nfrom stockade.cli.main import main\nsys.argv = ['stockade', '-h']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\nprint('imported' if 'stockade.cli.serve_cmd' in sys.modules else 'lazy')"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False, timeout=60)
    assert "serve       Run the HTTPS admission webhook." in completed.stdout
    assert completed.stdout.splitlines()[-1] == "lazy"


# -- 5. completion -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shell, marker", [("bash", "_stockade_completion"), ("zsh", "#compdef stockade"), ("fish", "complete --no-files --command stockade")])
def test_completion_scripts(shell: str, marker: str) -> None:
    result = invoke("completion", shell)
    assert result.exit_code == 0, result.output
    assert marker in result.stdout and "_STOCKADE_COMPLETE" in result.stdout


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_the_bash_completion_script_parses(tmp_path: Path) -> None:
    script = tmp_path / "stockade.bash"
    script.write_text(invoke("completion", "bash").stdout)
    checked = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr


def test_completion_reaches_into_lazy_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_STOCKADE_COMPLETE", "bash_complete")
    monkeypatch.setenv("COMP_WORDS", "stockade images scan --ti")
    monkeypatch.setenv("COMP_CWORD", "3")
    result = CliRunner().invoke(cli, [], prog_name="stockade", complete_var="_STOCKADE_COMPLETE")
    assert result.exit_code == 0 and "plain,--timeout" in result.stdout


def test_completion_needs_a_known_shell() -> None:
    result = invoke("completion", "tcsh")
    assert result.exit_code == 2 and result.stderr.splitlines()[-1].startswith("Error: Invalid value for ")


# -- 6. one error style ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ["apply", "BROKEN", "-r", "CMS"],
        ["apply", "POLICY", "-r", "BROKEN"],
        ["explain", "POLICY", "-r", "BROKEN"],
        ["images", "reconcile", "BROKEN", "--store", "STORE"],
        ["images", "update", "DIR", "--policies", "BROKEN"],
        ["images", "latest", "oci://x.io/a", "--semver", "1.x"],
        ["apply", "POLICY", "-r", "/does/not/exist"],
    ],
)
def test_input_errors_say_error_and_exit_2(files: dict[str, Path], tmp_path: Path, args: list[str]) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: v1\nkind: [oops\n")
    names = {"BROKEN": str(broken), "CMS": str(files["cms"]), "POLICY": str(files["policy"]), "STORE": str(tmp_path / "s"), "DIR": str(tmp_path)}
    result = invoke(*[names.get(a, a) for a in args])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines()[-1].startswith("Error: ") and result.stdout == ""


def test_a_test_file_that_cannot_load_says_error(tmp_path: Path) -> None:
    (tmp_path / "kyverno-test.yaml").write_text("name: [oops\n")
    result = invoke("test", str(tmp_path))
    assert result.exit_code == 1 and result.stderr.startswith("Error: cannot load test ")


# -- 7. nothing evaluated is an error ----------------------------------------------------------------------------------
def test_no_policy_in_the_policy_paths_is_an_error(files: dict[str, Path]) -> None:
    result = invoke("apply", str(files["cms"]), "-r", str(files["cms"]))
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == f"Error: no policy found in {files['cms']} (nothing to evaluate)\n"


def test_no_rule_for_any_given_kind_is_an_error(files: dict[str, Path]) -> None:
    result = invoke("apply", str(files["policy"]), "-r", str(files["pod"]))
    assert result.exit_code == 2 and result.stdout == ""
    assert str(files["policy"]) in result.stderr and str(files["pod"]) in result.stderr and "(Pod)" in result.stderr


def test_one_resource_of_a_matching_kind_is_enough(files: dict[str, Path]) -> None:
    result = invoke("apply", str(files["policy"]), "-r", str(files["pod"]), "-r", str(files["cms"]))
    assert result.exit_code == 0, result.output


def test_a_wildcard_kind_applies_to_everything(files: dict[str, Path]) -> None:
    # Kyverno refuses a wildcard kind in background mode
    files["policy"].write_text(POLICY.replace("kinds: [ConfigMap]", "kinds: ['*']").replace("spec:\n  rules:", "spec:\n  background: false\n  rules:"))
    result = invoke("apply", str(files["policy"]), "-r", str(files["pod"]))
    assert result.exit_code == 1, result.output  # evaluated: the pod has no team label
    assert "pass: 1, fail: 1" in result.stdout


def test_a_pod_rule_applies_to_pod_controllers(tmp_path: Path, files: dict[str, Path]) -> None:
    files["policy"].write_text(POLICY.replace("kinds: [ConfigMap]", "kinds: [Pod]"))
    deployment = tmp_path / "deploy.yaml"
    deployment.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: default}\n"
        "spec: {selector: {matchLabels: {a: b}}, template: {metadata: {labels: {a: b}}, spec: {containers: [{name: c, image: nginx}]}}}\n"
    )
    assert invoke("apply", str(files["policy"]), "-r", str(deployment)).exit_code != 2


CEL_POLICY = """\
apiVersion: policies.kyverno.io/v1alpha1
kind: ValidatingPolicy
metadata: {name: need-team}
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [RESOURCES]}]
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: team label required
"""


@pytest.mark.parametrize("resources, exit_code", [("configmaps", 2), ("pods", 1), ("'*'", 1)])
def test_cel_policies_match_by_resource_rules(tmp_path: Path, files: dict[str, Path], resources: str, exit_code: int) -> None:
    policy = tmp_path / "cel.yaml"
    policy.write_text(CEL_POLICY.replace("RESOURCES", resources))
    result = invoke("apply", str(policy), "-r", str(files["pod"]))
    assert result.exit_code == exit_code, result.output  # 1: evaluated, and the pod has no team label


SCALE_VALUES = """\
apiVersion: cli.kyverno.io/v1alpha1
kind: Values
subresources:
- parentResource: {group: apps, kind: Deployment, name: deployments, namespaced: true, version: v1}
  subresource: {group: autoscaling, kind: Scale, name: deployments/scale, namespaced: true, version: v1}
"""


def test_a_subresource_kind_counts_as_its_parent_declared_in_values(tmp_path: Path, files: dict[str, Path]) -> None:
    files["policy"].write_text(POLICY.replace("kinds: [ConfigMap]", "kinds: [Deployment/scale]"))
    scale = tmp_path / "scale.yaml"
    scale.write_text("apiVersion: autoscaling/v1\nkind: Scale\nmetadata: {name: s, namespace: default}\nspec: {replicas: 2}\n")
    (tmp_path / "values.yaml").write_text(SCALE_VALUES)
    assert invoke("apply", str(files["policy"]), "-r", str(scale)).exit_code == 2  # nothing says a Scale is a Deployment's
    result = invoke("apply", str(files["policy"]), "-r", str(scale), "--values-file", str(tmp_path / "values.yaml"))
    assert result.exit_code != 2 and "Applying 2 policy rule(s) to 1 resource(s)" in result.stdout, result.output
