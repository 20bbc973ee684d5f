"""``globalContextEntries`` of a test file: ``resourceFiles`` read relative to the test, entries validated."""

from __future__ import annotations

import os
from typing import Any

from stockade.kyvernotest.runner import TestRunner as CaseRunner
from stockade.kyvernotest.schema import load_test_files

POLICY = """\
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: known-registry}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  variables:
  - {name: allowed, expression: 'globalContext.Get("registries", "names")'}
  validations:
  - expression: "object.spec.containers.all(c, variables.allowed.exists(r, c.image.startsWith(r)))"
"""
POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec:\n  containers: [{name: c, image: good.io/app}]\n"
REGISTRIES = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: r1, namespace: default}
data: {registry: good.io/}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: r2, namespace: default}
data: {registry: other.io/}
"""


def _run(tmp_path: Any, entry: str, expected: str = "pass") -> Any:
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "pod.yaml").write_text(POD)
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "registries.yaml").write_text(REGISTRIES)
    (tmp_path / "kyverno-test.yaml").write_text(
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [policy.yaml]\nresources: [pod.yaml]\n"
        f"globalContextEntries:\n{entry}results:\n- {{policy: known-registry, isValidatingPolicy: true, kind: Pod, resources: [p], result: {expected}}}\n"
    )
    (case,) = load_test_files(os.path.join(str(tmp_path), "kyverno-test.yaml"))
    return CaseRunner(case).execute()


ENTRY = "- name: registries\n  resourceFiles: [data/registries.yaml]\n  projections: [{name: names, path: '[].data.registry'}]\n"


def test_resource_files_feed_the_global_context(tmp_path: Any) -> None:
    run = _run(tmp_path, ENTRY)
    assert not run.error and [row.ok for row in run.rows] == [True]
    assert [row.ok for row in _run(tmp_path, ENTRY, "fail").rows] == [False]


def test_sources_are_mutually_exclusive(tmp_path: Any) -> None:
    run = _run(tmp_path, ENTRY + "  data: {a: 1}\n")
    assert "mutually exclusive" in run.error and "globalContextEntries[0]" in run.error


def test_entry_without_source_or_with_duplicate_name_is_an_error(tmp_path: Any) -> None:
    assert "one of data, resources, or resourceFiles" in _run(tmp_path, "- name: registries\n").error
    assert "duplicate name" in _run(tmp_path, ENTRY + ENTRY).error


def test_missing_resource_file_names_the_file(tmp_path: Any) -> None:
    run = _run(tmp_path, ENTRY.replace("data/registries.yaml", "data/missing.yaml"))
    assert "missing.yaml" in run.error
