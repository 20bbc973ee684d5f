"""Pod Security rules in ``stockade test`` on unusual input, as Kyverno 1.19.1 reports them: a mistyped
seLinuxOptions field makes the rule an error (not a pass or fail), unusual but well-typed SELinux types are judged
per version, and a CronJob's pod template is checked with the job template's metadata (Kyverno's pairing)."""

from __future__ import annotations

import os
from pathlib import Path

from stockade.kyvernotest import runner
from stockade.kyvernotest.runner import TestRunner as CaseRunner
from stockade.kyvernotest.schema import load_test_files

POLICY = """\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: pss}
spec:
  rules:
  - name: baseline
    match:
      any:
      - resources: {kinds: [Pod]}
    validate:
      failureAction: Enforce
      podSecurity: {level: baseline, version: VERSION}
"""


def _pod(name: str, options: str) -> str:
    return (f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  containers:\n  - name: c\n"
            f"    image: nginx\n    securityContext:\n      seLinuxOptions: {options}\n")


PODS = "---\n".join([
    _pod("numeric-type", "{type: 123}"),
    _pod("engine", "{type: container_engine_t}"),
    _pod("spaced", "{type: ' container_t'}"),
    _pod("level-only", "{level: 's0:c123,c456'}"),
])
CRONJOBS = """\
apiVersion: batch/v1
kind: CronJob
metadata: {name: on-pod-template, namespace: default}
spec:
  schedule: '* * * * *'
  jobTemplate:
    spec:
      template:
        metadata:
          annotations: {container.apparmor.security.beta.kubernetes.io/c: unconfined}
        spec:
          restartPolicy: Never
          containers: [{name: c, image: nginx}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: on-job-template, namespace: default}
spec:
  schedule: '* * * * *'
  jobTemplate:
    metadata:
      annotations: {container.apparmor.security.beta.kubernetes.io/c: unconfined}
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: c, image: nginx}]
"""


def _run(tmp_path: Path, version: str, resources: str, results: str) -> runner.TestRun:
    (tmp_path / "policy.yaml").write_text(POLICY.replace("VERSION", version))
    (tmp_path / "resources.yaml").write_text(resources)
    (tmp_path / "kyverno-test.yaml").write_text(
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [policy.yaml]\nresources: [resources.yaml]\n"
        f"results:\n{results}"
    )
    (case,) = load_test_files(os.path.join(str(tmp_path), "kyverno-test.yaml"))
    return CaseRunner(case).execute()


def _result(name: str, result: str, rule: str = "baseline", kind: str = "Pod") -> str:
    return f"- {{policy: pss, rule: {rule}, kind: {kind}, resources: [{name}], result: {result}}}\n"


def test_a_mistyped_selinux_type_is_a_rule_error(tmp_path: Path) -> None:
    run = _run(tmp_path, "latest", PODS, _result("numeric-type", "error"))
    assert [(row.ok, row.reason) for row in run.rows] == [(True, "Ok")]
    assert run.rows[0].message == (
        "Error while getting new resource: json: cannot unmarshal number into Go struct field "
        "SELinuxOptions.spec.containers.securityContext.seLinuxOptions.type of type string"
    )


def test_unusual_selinux_types_by_version(tmp_path: Path) -> None:
    results = _result("engine", "pass") + _result("spaced", "fail") + _result("level-only", "pass")
    assert [row.ok for row in _run(tmp_path, "latest", PODS, results).rows] == [True, True, True]
    # container_engine_t is allowed from v1.31 only
    results = _result("engine", "fail") + _result("spaced", "fail") + _result("level-only", "pass")
    assert [row.ok for row in _run(tmp_path, "v1.30", PODS, results).rows] == [True, True, True]


def test_a_cronjob_is_checked_with_its_job_template_metadata(tmp_path: Path) -> None:
    rule = "autogen-cronjob-baseline"
    results = _result("on-pod-template", "pass", rule, "CronJob") + _result("on-job-template", "fail", rule, "CronJob")
    run = _run(tmp_path, "latest", CRONJOBS, results)
    assert [(row.resource, row.ok, row.reason) for row in run.rows] == [
        ("batch/v1/CronJob/default/on-pod-template", True, "Ok"),
        ("batch/v1/CronJob/default/on-job-template", True, "Ok"),
    ]
