"""JSON-mode ValidatingPolicies over multi-document test files (each document is its own test)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from stockade.kyvernotest.runner import TestRunner as CaseRunner
from stockade.kyvernotest.schema import TestFileError as CaseFileError, load_test_file, load_test_files

POLICY = """\
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: no-root-ca
spec:
  evaluation:
    mode: JSON
  validations:
  - expression: "object.cas.all(ca, ca.type != 'ROOT' || !ca.enabled)"
    message: root CAs must be disabled
"""

TESTS = """\
apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: passing}
policies: [policy.yaml]
jsonPayloads: [good.json]
results:
- {kind: "", policy: no-root-ca, result: pass}
---
apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: failing}
policies: [policy.yaml]
jsonPayloads: [bad.json]
results:
- {kind: "", policy: no-root-ca, result: fail}
"""


@pytest.fixture()
def case_dir(tmp_path: Any) -> str:
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "kyverno-test.yaml").write_text(TESTS)
    (tmp_path / "good.json").write_text(json.dumps({"cas": [{"type": "ROOT", "enabled": False}, {"type": "SUB", "enabled": True}]}))
    (tmp_path / "bad.json").write_text(json.dumps({"cas": [{"type": "ROOT", "enabled": True}]}))
    return str(tmp_path)


def test_each_document_is_a_test_with_its_own_payload(case_dir: str) -> None:
    cases = load_test_files(os.path.join(case_dir, "kyverno-test.yaml"))
    assert [case.name for case in cases] == ["passing", "failing"]
    for case in cases:
        run = CaseRunner(case).execute()
        assert not run.error
        assert [row.ok for row in run.rows] == [True]


def test_flipped_expectation_fails(case_dir: str) -> None:
    path = os.path.join(case_dir, "kyverno-test.yaml")
    with open(path) as handle:
        text = handle.read()
    with open(path, "w") as handle:
        handle.write(text.replace("result: fail", "result: pass"))
    failing = load_test_files(path)[1]
    assert [row.ok for row in CaseRunner(failing).execute().rows] == [False]


def test_single_document_loader_still_rejects_multi_document_files(case_dir: str) -> None:
    with pytest.raises(CaseFileError):
        load_test_file(os.path.join(case_dir, "kyverno-test.yaml"))


EXCEPTION = """\
apiVersion: policies.kyverno.io/v1
kind: PolicyException
metadata: {name: lab-ca, namespace: default}
spec:
  policyRefs:
  - {name: no-root-ca, kind: ValidatingPolicy}
  matchConditions:
  - {name: lab, expression: "object.?env.orValue('') == 'lab'"}
"""

DELETING = """\
apiVersion: policies.kyverno.io/v1
kind: DeletingPolicy
metadata: {name: stale-ca}
spec:
  schedule: "*/5 * * * *"
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: ["*"], resources: [configmaps]}
  conditions:
  - {name: stale, expression: "object.cas.exists(ca, ca.type == 'ROOT')"}
"""


def _single_test(tmp_path: Any, body: str) -> Any:
    header = "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: t}\n"
    (tmp_path / "kyverno-test.yaml").write_text(header + body)
    (case,) = load_test_files(os.path.join(str(tmp_path), "kyverno-test.yaml"))
    return CaseRunner(case).execute()


def test_policy_exception_skips_a_matching_json_payload(case_dir: str, tmp_path: Any) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "exception.yaml").write_text(EXCEPTION)
    (tmp_path / "lab.json").write_text(json.dumps({"env": "lab", "cas": [{"type": "ROOT", "enabled": True}]}))
    (tmp_path / "prod.json").write_text(json.dumps({"env": "prod", "cas": [{"type": "ROOT", "enabled": True}]}))
    run = _single_test(tmp_path, "policies: [policy.yaml]\nexceptions: [exception.yaml]\njsonPayloads: [lab.json]\nresults:\n- {kind: '', policy: no-root-ca, result: skip}\n")
    assert not run.error and [row.ok for row in run.rows] == [True]
    assert "policy exception" in run.rows[0].message
    run = _single_test(tmp_path, "policies: [policy.yaml]\nexceptions: [exception.yaml]\njsonPayloads: [prod.json]\nresults:\n- {kind: '', policy: no-root-ca, result: skip}\n")
    assert [row.ok for row in run.rows] == [False]


def test_json_mode_match_conditions_apply_to_payloads(tmp_path: Any) -> None:
    policy = POLICY.replace("  validations:", "  matchConditions:\n  - {name: has-cas, expression: \"has(object.cas)\"}\n  validations:")
    (tmp_path / "policy.yaml").write_text(policy)
    (tmp_path / "other.json").write_text(json.dumps({"unrelated": True}))
    run = _single_test(tmp_path, "policies: [policy.yaml]\njsonPayloads: [other.json]\nresults:\n- {kind: '', policy: no-root-ca, result: skip}\n")
    assert [row.ok for row in run.rows] == [True]


def test_deleting_policy_conditions_judge_json_payloads(tmp_path: Any) -> None:
    (tmp_path / "deleting.yaml").write_text(DELETING)
    (tmp_path / "root.json").write_text(json.dumps({"cas": [{"type": "ROOT"}]}))
    (tmp_path / "sub.json").write_text(json.dumps({"cas": [{"type": "SUB"}]}))
    run = _single_test(tmp_path, "policies: [deleting.yaml]\njsonPayloads: [root.json]\nresults:\n- {kind: '', policy: stale-ca, result: pass}\n")
    assert not run.error and [(row.ok, row.message) for row in run.rows] == [(True, "resource matched")]
    run = _single_test(tmp_path, "policies: [deleting.yaml]\njsonPayloads: [sub.json]\nresults:\n- {kind: '', policy: stale-ca, result: pass}\n")
    assert [row.ok for row in run.rows] == [False]


def test_payload_must_be_a_non_empty_object(tmp_path: Any) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "empty.json").write_text("{}")
    run = _single_test(tmp_path, "policies: [policy.yaml]\njsonPayloads: [empty.json]\nresults:\n- {kind: '', policy: no-root-ca, result: pass}\n")
    assert "empty.json" in run.error and "non-empty top-level object" in run.error
