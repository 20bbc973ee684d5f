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
