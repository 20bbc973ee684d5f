"""Broken policies never pass silently: every entry point runs the one policy check (schema, then Kyverno's
validation).  Each class of typo a user makes has a case: the exit status, the message naming file, document,
policy and field, and nothing evaluated when the policy is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from stockade.cli.main import cli

POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\nspec: {containers: [{name: c, image: nginx}]}\n"


def policy(spec_rules: str, spec_extra: str = "", kind: str = "ClusterPolicy") -> str:
    return f"apiVersion: kyverno.io/v1\nkind: {kind}\nmetadata: {{name: demo}}\nspec:\n{spec_extra}  rules:\n{spec_rules}"


RULE = """\
  - name: check-team
    match:
      any:
      - resources: {kinds: [Pod]}
    validate:
      message: team label required
      pattern:
        metadata: {labels: {team: "?*"}}
"""
VALID = policy(RULE, "  validationFailureAction: Enforce\n")

# (case, document, expected path, exit status of apply without --strict)
UNKNOWN_FIELDS = [
    ("spec-field", VALID.replace("validationFailureAction:", "validationFailureActionn:"), 'spec.validationFailureActionn" (did you mean "validationFailureAction"?)', 1),
    ("pattern", VALID.replace("pattern:", "patern:"), 'spec.rules[0].validate.patern" (did you mean "pattern"?)', 2),
    ("rule-type", VALID.replace("validate:", "validatons:"), 'spec.rules[0].validatons"', 2),
]
INVALID_VALUES = [
    ("enum", VALID.replace("Enforce", "Enforcee"), 'spec.validationFailureAction: Unsupported value: "Enforcee"'),
    ("operation", VALID.replace("{kinds: [Pod]}", "{kinds: [Pod], operations: [CRATE]}"), 'spec.rules[0].match.any[0].resources.operations[0]: Unsupported value: "CRATE"'),
    (
        "operator",
        VALID.replace("    validate:", "    preconditions:\n      all:\n      - {key: a, operator: Equalz, value: a}\n    validate:"),
        # the CRD leaves the operator open (any string); Kyverno's validation refuses it
        "spec.rules[0].preconditions.all[0].operator: entered value of `operator` is invalid",
    ),
    ("rules-mapping", policy("    name: check-team\n    validate: {message: m, deny: {}}\n"), "spec.rules: Invalid value: must be a list, found mapping"),
    ("boolean", VALID.replace("  validationFailureAction: Enforce\n", "  background: yes please\n"), "spec.background: Invalid value: must be a boolean"),
]


@pytest.fixture()
def files(tmp_path: Path) -> Path:
    (tmp_path / "pod.yaml").write_text(POD)
    return tmp_path


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def write_test(directory: Path, document: str) -> None:
    (directory / "policy.yaml").write_text(document)
    (directory / "kyverno-test.yaml").write_text(
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [policy.yaml]\nresources: [pod.yaml]\n"
        "results:\n- {policy: demo, rule: check-team, resources: [web], kind: Pod, result: fail}\n"
    )


def test_a_valid_policy_is_evaluated_without_findings(files: Path) -> None:
    (files / "policy.yaml").write_text(VALID)
    status, out, err = run("apply", str(files / "policy.yaml"), "-r", str(files / "pod.yaml"))
    assert status == 1 and "fail: 1" in out
    assert "Warning" not in err and "Error" not in err


@pytest.mark.parametrize(("case", "document", "path", "apply_status"), UNKNOWN_FIELDS, ids=[c[0] for c in UNKNOWN_FIELDS])
def test_unknown_fields_warn_in_apply_and_refuse_with_strict(files: Path, case: str, document: str, path: str, apply_status: int) -> None:
    (files / "policy.yaml").write_text(document)
    status, out, err = run("apply", str(files / "policy.yaml"), "-r", str(files / "pod.yaml"))
    assert f'unknown field "{path}' in err
    assert f"{files / 'policy.yaml'} (document 1): ClusterPolicy 'demo'" in err
    assert status == apply_status
    status, out, err = run("apply", "--strict", str(files / "policy.yaml"), "-r", str(files / "pod.yaml"))
    assert status == 2 and "pass:" not in out and "Applying" not in out


@pytest.mark.parametrize(("case", "document", "path", "_status"), UNKNOWN_FIELDS, ids=[c[0] for c in UNKNOWN_FIELDS])
def test_unknown_fields_refuse_the_policy_in_test(files: Path, case: str, document: str, path: str, _status: int) -> None:
    write_test(files, document)
    status, out, err = run("test", str(files))
    assert status == 2
    assert f'unknown field "{path}' in out + err
    assert "Pass" not in out


@pytest.mark.parametrize(("case", "document", "message"), INVALID_VALUES, ids=[c[0] for c in INVALID_VALUES])
def test_invalid_values_are_errors_everywhere(files: Path, case: str, document: str, message: str) -> None:
    (files / "policy.yaml").write_text(document)
    for command in (["apply", str(files / "policy.yaml"), "-r", str(files / "pod.yaml")], ["explain", str(files / "policy.yaml"), "-r", str(files / "pod.yaml")], ["lint", str(files / "policy.yaml")]):
        status, out, err = run(*command)
        assert status in (1, 2) and status == (1 if command[0] == "lint" else 2), command
        assert message in err, (command, err)
        assert "Traceback" not in err + out
        assert "pass:" not in out
    write_test(files, document)
    status, out, err = run("test", str(files))
    assert status == 2 and message in out + err


def test_a_misspelt_kind_is_not_read_as_a_plain_resource(files: Path) -> None:
    (files / "policy.yaml").write_text(VALID.replace("kind: ClusterPolicy", "kind: ClusterPolcy"))
    status, _, err = run("apply", str(files / "policy.yaml"), "-r", str(files / "pod.yaml"))
    assert status == 2 and 'no kind "ClusterPolcy" in kyverno.io' in err and 'did you mean "ClusterPolicy"' in err
    status, _, err = run("lint", str(files / "policy.yaml"))
    assert status == 1 and "ClusterPolcy" in err


def test_an_unserved_version_is_refused(files: Path) -> None:
    (files / "policy.yaml").write_text(VALID.replace("kyverno.io/v1", "kyverno.io/v3"))
    status, _, err = run("lint", str(files / "policy.yaml"))
    assert status == 1 and "kyverno.io/v1, kyverno.io/v2beta1" in err


def test_lint_json_output_is_the_only_thing_on_stdout(files: Path) -> None:
    (files / "policy.yaml").write_text(VALID.replace("pattern:", "patern:") + "---\n" + VALID.replace("name: demo", "name: other"))
    status, out, err = run("lint", "-o", "json", str(files / "policy.yaml"))
    payload = json.loads(out)
    assert payload["checked"] == 2 and payload["ok"] is False and status == 1
    unknown = [f for f in payload["findings"] if f["code"] == "unknown-field"]
    assert unknown == [
        {
            "severity": "warning", "code": "unknown-field", "file": str(files / "policy.yaml"), "document": 1, "kind": "ClusterPolicy", "name": "demo",
            "path": "spec.rules[0].validate.patern", "message": 'unknown field "spec.rules[0].validate.patern" (did you mean "pattern"?)', "suggestion": "pattern",
        }
    ]
    # with the pattern pruned the rule validates nothing: Kyverno's validation refuses it
    assert any(f["severity"] == "error" and f["document"] == 1 for f in payload["findings"])
    assert not any(f["document"] == 2 for f in payload["findings"])


def test_lint_strict_refuses_unknown_fields(files: Path) -> None:
    (files / "policy.yaml").write_text(VALID.replace("  validationFailureAction: Enforce\n", "  validationFailureAction: Enforce\n  backgroud: true\n"))
    assert run("lint", str(files / "policy.yaml"))[0] == 0
    status, _, err = run("lint", "--strict", str(files / "policy.yaml"))
    assert status == 1 and 'unknown field "spec.backgroud" (did you mean "background"?)' in err


def test_lint_of_a_path_without_policies_fails(files: Path) -> None:
    status, _, err = run("lint", str(files / "pod.yaml"))
    assert status == 2 and f"no policy found in {files / 'pod.yaml'}" in err


def test_lint_accepts_valid_policies_of_every_group(files: Path) -> None:
    cel = (
        "apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {name: v}\nspec:\n"
        "  matchConstraints:\n    resourceRules:\n    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}\n"
        "  validations:\n  - expression: has(object.metadata.labels)\n"
    )
    (files / "policies.yaml").write_text(VALID + "---\n" + cel)
    status, _, err = run("lint", str(files / "policies.yaml"))
    assert status == 0, err
    assert "2 policies checked, 0 refused" in err


def test_an_expensive_cel_expression_warns_offline_but_is_refused_for_admission(files: Path) -> None:
    """Kyverno has no estimated-cost check; Stockade refuses such a policy only where it would serve admission."""
    from stockade.lint.check import Code, Severity, check_policy

    expression = "object.metadata.name"
    for _ in range(12):  # each binding doubles the string: far beyond any request
        expression = f"cel.bind(s, {expression}, s + s)"
    hostile = (
        "apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {name: costly}\nspec:\n"
        "  matchConstraints:\n    resourceRules:\n    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}\n"
        f"  validations:\n  - expression: '({expression}).size() > 0'\n"
    )
    (files / "policy.yaml").write_text(hostile)
    status, out, err = run("lint", "-o", "json", str(files / "policy.yaml"))
    assert status == 0, out
    [finding] = json.loads(out)["findings"]
    assert (finding["severity"], finding["code"], finding["path"]) == ("warning", "admission-safety", "spec.validations[0].expression")
    import yaml

    findings = check_policy(yaml.safe_load(hostile), admission=True)
    assert [(f.severity, f.code) for f in findings] == [(Severity.ERROR, Code.ADMISSION_SAFETY)]


def test_explain_refuses_an_expensive_cel_expression_once_as_the_webhook_would(files: Path) -> None:
    """explain answers as the webhook would serve the policy: the admission-safety finding is an error, reported
    once, and nothing is evaluated."""
    expression = "object.metadata.name"
    for _ in range(12):
        expression = f"cel.bind(s, {expression}, s + s)"
    (files / "policy.yaml").write_text(
        "apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {name: costly}\nspec:\n"
        "  matchConstraints:\n    resourceRules:\n    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}\n"
        f"  validations:\n  - expression: '({expression}).size() > 0'\n"
    )
    (files / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec: {containers: [{name: c, image: nginx}]}\n")
    status, out, err = run("explain", str(files / "policy.yaml"), "-r", str(files / "pod.yaml"))
    assert status == 2, (out, err)
    assert err.count("spec.validations[0].expression") == 1, err
    assert "ALLOWED" not in out and "DENIED" not in out
