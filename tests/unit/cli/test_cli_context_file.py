"""The ``context`` file of ``stockade test`` and the CEL data it feeds, as Kyverno 1.19.1's CLI reads them: the
file is decoded strictly (an unknown or mistyped field stops the test, naming it), an unknown global context entry
is null, and image data the file lacks is an error naming the image."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from stockade.kyvernotest import runner
from stockade.kyvernotest.runner import TestRunner as CaseRunner
from stockade.kyvernotest.schema import load_test_files

CONTEXT = """\
apiVersion: cli.kyverno.io/v1alpha1
kind: Context
metadata: {name: c}
spec:
  images:
  - image: nginx:1.0
    config: {architecture: amd64}
  resources:
  - {apiVersion: v1, kind: ConfigMap, metadata: {name: other, namespace: default}, data: {a: b}}
"""
POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec: {containers: [{name: c, image: nginx}]}\n"


def _run(tmp_path: Path, expression: str, context: str = CONTEXT) -> runner.TestRun:
    (tmp_path / "policy.yaml").write_text(
        "apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {name: check}\nspec:\n  validationActions: [Deny]\n"
        "  matchConstraints:\n    resourceRules:\n    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}\n"
        f"  validations:\n  - expression: {json.dumps(expression)}\n"
    )
    (tmp_path / "context.yaml").write_text(context)
    (tmp_path / "pod.yaml").write_text(POD)
    (tmp_path / "kyverno-test.yaml").write_text(
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [policy.yaml]\nresources: [pod.yaml]\n"
        "context: context.yaml\nresults:\n- {policy: check, isValidatingPolicy: true, kind: Pod, resources: [p], result: pass}\n"
    )
    (case,) = load_test_files(os.path.join(str(tmp_path), "kyverno-test.yaml"))
    return CaseRunner(case).execute()


@pytest.mark.parametrize(
    ("context", "field", "reason"),
    [
        (CONTEXT.replace("config: {architecture: amd64}", "imageData: {architecture: amd64}"), "spec.images[0].imageData", "unknown field"),
        (CONTEXT.replace("  resources:", "  resource:"), "spec.resource", "unknown field"),
        (CONTEXT.replace("metadata: {name: c}", "metadata: {name: c, colour: red}"), "metadata.colour", "unknown field"),
        (CONTEXT.replace("image: nginx:1.0", "image: 5"), "spec.images[0].image", "expected a string"),
        (CONTEXT.replace("kind: Context", "kind: Context\nextra: 1"), "extra", "unknown field"),
    ],
)
def test_the_context_file_is_read_strictly(tmp_path: Path, context: str, field: str, reason: str) -> None:
    run = _run(tmp_path, "true", context)
    assert f"context.yaml field {field}: {reason}" in run.error and run.failed == 1


def test_image_data_from_the_context(tmp_path: Path) -> None:
    assert [row.ok for row in _run(tmp_path, "image.GetMetadata('nginx:1.0').config.architecture == 'amd64'").rows] == [True]
    missing = _run(tmp_path, "image.GetMetadata('ghcr.io/x/y:1') != null")
    assert missing.rows[0].reason == "Want pass, got error"
    assert "failed to get image data: image data for ghcr.io/x/y:1 not found in the context" in missing.rows[0].message
    none = _run(tmp_path, "image.GetMetadata('nginx:1.0') != null", CONTEXT.split("  images:")[0] + "  resources: []\n")
    assert "failed to get image data: image data not found in the context" in none.rows[0].message


def test_an_unknown_global_context_entry_is_null(tmp_path: Path) -> None:
    assert [row.ok for row in _run(tmp_path, "globalContext.Get('missing', '') == null").rows] == [True]
