"""A GeneratingPolicy cloning into several target namespaces in ``stockade test``: one ``generator.Apply`` per
target, sources read with ``resource.Get`` (clone) and ``resource.List`` with a label selector (cloneList), with
synchronization on and off. Kyverno 1.19.1's CLI passes the same test with the same generated file in both modes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stockade.kyvernotest import runner
from stockade.kyvernotest.runner import TestRunner as CaseRunner
from stockade.kyvernotest.schema import load_test_files

POLICY = """\
apiVersion: policies.kyverno.io/v1beta1
kind: GeneratingPolicy
metadata: {name: fan-out}
spec:
  evaluation:
    synchronize: {enabled: SYNC}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  matchConditions:
  - {name: is-targets, expression: "object.metadata.name == 'targets'"}
  variables:
  - {name: targets, expression: "object.data.namespaces.split(',')"}
  - {name: regcred, expression: 'resource.Get("v1", "secrets", "default", "regcred")'}
  - {name: shared, expression: 'resource.List("v1", "configmaps", "default", {"share": "yes"})'}
  generate:
  - expression: "variables.targets.all(ns, generator.Apply(ns, [variables.regcred]))"
  - expression: "variables.targets.all(ns, generator.Apply(ns, [variables.shared]))"
"""
CONTEXT = """\
apiVersion: cli.kyverno.io/v1alpha1
kind: Context
metadata: {name: context}
spec:
  resources:
  - {apiVersion: v1, kind: Secret, metadata: {name: regcred, namespace: default}, type: Opaque, data: {token: dG9r}}
  - {apiVersion: v1, kind: ConfigMap, metadata: {name: shared-a, namespace: default, labels: {share: "yes"}}, data: {a: "1"}}
  - {apiVersion: v1, kind: ConfigMap, metadata: {name: shared-b, namespace: default, labels: {share: "yes"}}, data: {b: "2"}}
"""
PRIVATE = '  - {apiVersion: v1, kind: ConfigMap, metadata: {name: private, namespace: default, labels: {share: "no"}}, data: {c: "3"}}\n'
TRIGGER = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: targets, namespace: default}\ndata: {namespaces: 'team-a,team-b'}\n"


def _generated(namespaces: tuple[str, ...]) -> str:
    documents = []
    for namespace in namespaces:
        documents.append(f"apiVersion: v1\nkind: Secret\nmetadata: {{name: regcred, namespace: {namespace}}}\ntype: Opaque\ndata: {{token: dG9r}}\n")
        documents.append(f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: shared-a, namespace: {namespace}, labels: {{share: 'yes'}}}}\ndata: {{a: '1'}}\n")
        documents.append(f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: shared-b, namespace: {namespace}, labels: {{share: 'yes'}}}}\ndata: {{b: '2'}}\n")
    return "---\n".join(documents)


def _run(tmp_path: Path, sync: str, generated: str, context: str = CONTEXT) -> runner.TestRun:
    (tmp_path / "policy.yaml").write_text(POLICY.replace("SYNC", sync))
    (tmp_path / "context.yaml").write_text(context)
    (tmp_path / "trigger.yaml").write_text(TRIGGER)
    (tmp_path / "generated.yaml").write_text(generated)
    (tmp_path / "kyverno-test.yaml").write_text(
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [policy.yaml]\nresources: [trigger.yaml]\n"
        "context: context.yaml\nresults:\n- {policy: fan-out, isGeneratingPolicy: true, kind: ConfigMap, resources: [targets], "
        "result: pass, generatedResource: generated.yaml}\n"
    )
    (case,) = load_test_files(os.path.join(str(tmp_path), "kyverno-test.yaml"))
    return CaseRunner(case).execute()


@pytest.mark.parametrize("sync", ["true", "false"])
def test_clone_and_clone_list_into_every_target(tmp_path: Path, sync: str) -> None:
    run = _run(tmp_path, sync, _generated(("team-a", "team-b")))
    assert not run.error
    # one row per generated object: 2 targets x (1 cloned secret + 2 listed config maps)
    assert [(row.ok, row.reason) for row in run.rows] == [(True, "Ok")] * 6


@pytest.mark.parametrize("sync", ["true", "false"])
def test_an_object_missing_from_the_expected_targets_fails(tmp_path: Path, sync: str) -> None:
    run = _run(tmp_path, sync, _generated(("team-a",)))
    failures = [row for row in run.rows if not row.ok]
    assert len(failures) == 3 and all("not found in manifest" in row.message for row in failures)


def test_the_label_selector_limits_what_is_listed(tmp_path: Path) -> None:
    # Kyverno 1.19.1's offline CLI ignores resource.List's label selector (its fake provider drops it) and would
    # clone "private" too; stockade lists what a cluster would return.
    run = _run(tmp_path, "true", _generated(("team-a", "team-b")), CONTEXT + PRIVATE)
    assert [(row.ok, row.reason) for row in run.rows] == [(True, "Ok")] * 6
