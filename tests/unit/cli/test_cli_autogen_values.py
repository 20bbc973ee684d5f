"""Values files naming rules of autogen'd policies: Kyverno's CLI gives a rule the first ``rules[]`` entry (in file
order) named after it or after the rule it was generated from, so values for ``check`` also reach
``autogen-check`` and ``autogen-cronjob-check`` unless an earlier entry names those."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stockade.kyvernotest import runner
from stockade.kyvernotest.runner import TestRunner as CaseRunner
from stockade.kyvernotest.schema import load_test_files
from stockade.kyvernotest.values import values_from_mapping
from stockade.policy.loader import LoadError

POLICY = """\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: team-label}
spec:
  background: false
  rules:
  - name: check-team
    match:
      any:
      - resources: {kinds: [Pod]}
    context:
    - name: allowedteam
      apiCall: {urlPath: /api/v1/namespaces/default/configmaps/teams, jmesPath: data.team}
    validate:
      failureAction: Enforce
      message: "team must be {{allowedteam}}"
      pattern:
        metadata:
          labels: {team: "{{allowedteam}}"}
"""
RESOURCES = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: d1, namespace: default}
spec:
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x, team: red}}
    spec: {containers: [{name: c, image: nginx}]}
---
apiVersion: v1
kind: Pod
metadata: {name: p1, namespace: default, labels: {team: red}}
spec: {containers: [{name: c, image: nginx}]}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: cj, namespace: default}
spec:
  schedule: "* * * * *"
  jobTemplate:
    spec:
      template:
        metadata: {labels: {team: red}}
        spec: {containers: [{name: c, image: nginx}], restartPolicy: Never}
"""
RESULTS = """\
results:
- {policy: team-label, rule: check-team, kind: Pod, resources: [p1], result: pass}
- {policy: team-label, rule: autogen-check-team, kind: Deployment, resources: [d1], result: pass}
- {policy: team-label, rule: autogen-cronjob-check-team, kind: CronJob, resources: [cj], result: pass}
"""


def _run(tmp_path: Path, rules: str) -> runner.TestRun:
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "resources.yaml").write_text(RESOURCES)
    (tmp_path / "values.yaml").write_text(
        f"apiVersion: cli.kyverno.io/v1alpha1\nkind: Values\npolicies:\n- name: team-label\n  rules:\n{rules}"
    )
    (tmp_path / "kyverno-test.yaml").write_text(
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [policy.yaml]\n"
        f"resources: [resources.yaml]\nvariables: values.yaml\n{RESULTS}"
    )
    (case,) = load_test_files(os.path.join(str(tmp_path), "kyverno-test.yaml"))
    return CaseRunner(case).execute()


def _reasons(run: runner.TestRun) -> dict[str, str]:
    return {row.rule: row.reason for row in run.rows}


def test_values_for_the_rule_reach_its_autogen_rules(tmp_path: Path) -> None:
    run = _run(tmp_path, "  - {name: check-team, values: {allowedteam: red}}\n")
    assert not run.error
    assert _reasons(run) == {"check-team": "Ok", "autogen-check-team": "Ok", "autogen-cronjob-check-team": "Ok"}


def test_the_first_matching_entry_wins(tmp_path: Path) -> None:
    # Kyverno 1.19.1: the base entry listed first answers for autogen-check-team, the later entry is never read
    run = _run(tmp_path, "  - {name: check-team, values: {allowedteam: red}}\n  - {name: autogen-check-team, values: {allowedteam: blue}}\n")
    assert _reasons(run)["autogen-check-team"] == "Ok"
    run = _run(tmp_path, "  - {name: autogen-check-team, values: {allowedteam: blue}}\n  - {name: check-team, values: {allowedteam: red}}\n")
    assert _reasons(run) == {"check-team": "Ok", "autogen-check-team": "Want pass, got fail", "autogen-cronjob-check-team": "Ok"}


def test_values_for_an_autogen_name_do_not_reach_the_pod_rule(tmp_path: Path) -> None:
    run = _run(tmp_path, "  - {name: autogen-cronjob-check-team, values: {allowedteam: red}}\n")
    # no values for check-team or autogen-check-team: the apiCall is left out offline, so those rules error
    assert _reasons(run) == {"check-team": "Want pass, got error", "autogen-check-team": "Want pass, got error", "autogen-cronjob-check-team": "Ok"}


def test_an_entry_without_values_still_shadows_later_ones() -> None:
    values = values_from_mapping(
        {"policies": [{"name": "p", "rules": [{"name": "r"}, {"name": "autogen-r", "values": {"a": 1}}]}]}
    )
    assert values.values_for_rule("p", "autogen-r") == {}
    assert values.values_for_rule("p", "other") is None
    assert values.values_for_rule("q", "r") is None


@pytest.mark.parametrize(
    ("rules", "field"),
    [
        ("  - {name: check-team, valuez: {allowedteam: red}}\n", "policies[0].rules[0].valuez"),
        ("  - {name: check-team, values: {allowedteam: red}}\n  resource: []\n", "policies[0].resource"),
    ],
)
def test_a_misspelt_values_field_stops_the_test(tmp_path: Path, rules: str, field: str) -> None:
    # Kyverno 1.19.1 decodes values files strictly: "json: unknown field" instead of running without the values
    run = _run(tmp_path, rules)
    assert f"values.yaml field {field}: unknown field" in run.error and not run.rows


def test_a_misspelt_top_level_values_field_is_named() -> None:
    with pytest.raises(LoadError, match="field polices: unknown field 'polices'"):
        values_from_mapping({"polices": []}, "values.yaml")
    with pytest.raises(LoadError, match="field values.metadata: unknown field 'metadata'"):
        values_from_mapping({"metadata": {}}, "kyverno-test.yaml", inline=True)
    # Kyverno matches field names without regard to case
    assert values_from_mapping({"Policies": [{"Name": "p", "Rules": [{"name": "r", "values": {"a": 1}}]}]}).values_for_rule("p", "r") == {"a": 1}
