"""MutatingPolicy mutateExisting in ``stockade test``: targetResources are mutated on behalf of the trigger and
compared with patchedResources."""

from __future__ import annotations

import os
from typing import Any

import pytest

from stockade.kyvernotest.runner import TestRunner as CaseRunner
from stockade.kyvernotest.schema import load_test_files

POLICY = """\
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata: {name: label-secrets}
spec:
  evaluation:
    mutateExisting: {enabled: true}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
%(targets)s
  targetMatchConditions:
  - {name: same-ns, expression: "object.metadata.namespace == request.namespace"}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {"trigger": request.name}}}'
"""
RULE_TARGETS = """\
  targetMatchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [secrets]}"""
EXPRESSION_TARGETS = """\
  targetMatchConstraints:
    expression: 'resource.Get("v1", "secrets", object.metadata.namespace, "s1")'"""

TRIGGER = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm, namespace: default}\n"
TARGETS = """\
apiVersion: v1
kind: Secret
metadata: {name: s1, namespace: default}
---
apiVersion: v1
kind: Secret
metadata: {name: s2, namespace: other}
"""
PATCHED = "apiVersion: v1\nkind: Secret\nmetadata: {name: s1, namespace: default, labels: {trigger: %s}}\n"


def _run(tmp_path: Any, targets: str, label: str, resource: str = "default/s1") -> Any:
    (tmp_path / "policy.yaml").write_text(POLICY % {"targets": targets})
    (tmp_path / "trigger.yaml").write_text(TRIGGER)
    (tmp_path / "targets.yaml").write_text(TARGETS)
    (tmp_path / "patched.yaml").write_text(PATCHED % label)
    (tmp_path / "kyverno-test.yaml").write_text(
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [policy.yaml]\nresources: [trigger.yaml]\n"
        "targetResources: [targets.yaml]\nresults:\n"
        f"- {{policy: label-secrets, isMutatingPolicy: true, kind: Secret, resources: [{resource}], patchedResources: patched.yaml, result: pass}}\n"
    )
    (case,) = load_test_files(os.path.join(str(tmp_path), "kyverno-test.yaml"))
    return CaseRunner(case).execute()


@pytest.mark.parametrize("targets", [RULE_TARGETS, EXPRESSION_TARGETS], ids=["resource-rules", "expression"])
def test_target_is_patched_and_compared(tmp_path: Any, targets: str) -> None:
    run = _run(tmp_path, targets, "cm")
    assert not run.error
    assert [(row.ok, row.resource) for row in run.rows] == [(True, "v1/Secret/default/s1")]


@pytest.mark.parametrize("targets", [RULE_TARGETS, EXPRESSION_TARGETS], ids=["resource-rules", "expression"])
def test_wrong_expected_target_fails(tmp_path: Any, targets: str) -> None:
    run = _run(tmp_path, targets, "other")
    assert [row.ok for row in run.rows] == [False]
    assert run.rows[0].reason == "Resource diff"


def test_target_rejected_by_target_match_conditions_is_not_patched(tmp_path: Any) -> None:
    # s2 lives in another namespace than the trigger: targetMatchConditions skip it, so only s1 has a patched copy
    # (and, as in kyverno, an expectation naming an unknown resource falls back to every resource)
    run = _run(tmp_path, RULE_TARGETS, "cm", resource="other/s2")
    assert [row.resource for row in run.rows] == ["v1/Secret/default/s1"]
    assert any("other/s2" in warning for warning in run.warnings)
