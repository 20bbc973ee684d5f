"""What ``stockade test`` reports for objects a GeneratingPolicy hands to ``generator.Apply``, per Kyverno 1.19.1.

Kyverno's test command evaluates against its fake context provider unless the test names ``clusterResources``; then
it builds a (fake) cluster client and uses the real libs context in CLI mode.  The two store generated objects
differently (``pkg/cel/libs/fake_context.go`` and ``context.go`` ``GenerateResources``):

* offline: each object (each item of a List) is kept as given, its namespace set to the call's namespace;
* with clusterResources: cluster-scoped kinds get no namespace, ownerReferences go when the object leaves its
  source namespace, and uid, resourceVersion, creationTimestamp, managedFields and annotations are cleared.

Each generated object is one row, compared with ``generatedResource`` (must hold it) or ``generatedResources``
(any file may hold it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from stockade.cel import CelEvalError

from stockade.celpolicy.evaluator import GeneratedPlacement
from stockade.kyvernotest import runner
from stockade.kyvernotest.runner import TestRunner as CaseRunner
from stockade.kyvernotest.schema import load_test_files

SOURCE_METADATA = {
    "name": "regcred",
    "namespace": "default",
    "uid": "0b7f5f53-aaaa-4bbb-8ccc-123456789abc",
    "resourceVersion": "4711",
    "creationTimestamp": "2024-05-01T10:00:00Z",
    "annotations": {"owner": "platform"},
    "labels": {"app": "registry"},
    "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "1111"}],
    "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
}
SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": SOURCE_METADATA, "type": "Opaque", "data": {"token": "dG9r"}}
CLUSTER_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "reader", "uid": "2222", "resourceVersion": "9"},
    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
}
POLICY = """\
apiVersion: policies.kyverno.io/v1beta1
kind: GeneratingPolicy
metadata: {name: place}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  variables:
  - {name: secret, expression: 'resource.Get("v1", "secrets", "default", "regcred")'}
  - {name: role, expression: 'resource.Get("rbac.authorization.k8s.io/v1", "clusterroles", "", "reader")'}
  - {name: listed, expression: 'resource.List("v1", "secrets", "default")'}
  generate:
  - expression: "GENERATE"
"""
TRIGGER = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: trigger, namespace: default}\ndata: {a: b}\n"


def _run(tmp_path: Path, generate: str, expected: list[dict[str, Any]], *, cluster: bool, many: bool = False) -> runner.TestRun:
    (tmp_path / "policy.yaml").write_text(POLICY.replace("GENERATE", generate))
    (tmp_path / "trigger.yaml").write_text(TRIGGER)
    sources = yaml.safe_dump_all([SECRET, CLUSTER_ROLE])
    if many:
        for index, document in enumerate(expected):
            (tmp_path / f"expected-{index}.yaml").write_text(yaml.safe_dump(document))
        expected_field = "generatedResources: [" + ", ".join(f"expected-{i}.yaml" for i in range(len(expected))) + "]"
    else:
        (tmp_path / "expected.yaml").write_text(yaml.safe_dump_all(expected))
        expected_field = "generatedResource: expected.yaml"
    test = "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [policy.yaml]\nresources: [trigger.yaml]\n"
    if cluster:
        (tmp_path / "cluster.yaml").write_text(sources)
        test += "clusterResources: [cluster.yaml]\n"
    else:
        context = {"apiVersion": "cli.kyverno.io/v1alpha1", "kind": "Context", "metadata": {"name": "c"},
                   "spec": {"resources": [SECRET, CLUSTER_ROLE]}}
        (tmp_path / "context.yaml").write_text(yaml.safe_dump(context))
        test += "context: context.yaml\n"
    test += ("results:\n- {policy: place, isGeneratingPolicy: true, kind: ConfigMap, resources: [trigger], result: pass, "
             + expected_field + "}\n")
    (tmp_path / "kyverno-test.yaml").write_text(test)
    (case,) = load_test_files(os.path.join(str(tmp_path), "kyverno-test.yaml"))
    return CaseRunner(case).execute()


def _secret(namespace: str, **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "regcred", "namespace": namespace, **metadata},
            "type": "Opaque", "data": {"token": "dG9r"}}


def _outcomes(run: runner.TestRun) -> list[tuple[bool, str]]:
    assert not run.error, run.error
    return [(row.ok, row.reason) for row in run.rows]


OFFLINE_KEPT = {key: value for key, value in SOURCE_METADATA.items() if key not in ("name", "namespace")}


def test_offline_clones_keep_the_source_metadata_in_each_target(tmp_path: Path) -> None:
    expected = [_secret("team-a", **OFFLINE_KEPT), _secret("team-b", **OFFLINE_KEPT)]
    run = _run(tmp_path, "['team-a', 'team-b'].all(ns, generator.Apply(ns, [variables.secret]))", expected, cluster=False)
    assert _outcomes(run) == [(True, "Ok"), (True, "Ok")]
    # like Kyverno's table, a generated object's row names that object
    assert [row.resource for row in run.rows] == ["regcred", "regcred"]


def test_offline_clones_compared_without_the_source_metadata_differ(tmp_path: Path) -> None:
    expected = [_secret("team-a", labels={"app": "registry"}), _secret("team-b", labels={"app": "registry"})]
    run = _run(tmp_path, "['team-a', 'team-b'].all(ns, generator.Apply(ns, [variables.secret]))", expected, cluster=False)
    assert _outcomes(run) == [(False, "Resource diff"), (False, "Resource diff")]


def test_cluster_clones_are_cleared_and_lose_owners_outside_their_namespace(tmp_path: Path) -> None:
    expected = [
        _secret("team-a", labels={"app": "registry"}),
        # same namespace as the source: ownerReferences stay, the rest is cleared all the same
        _secret("default", labels={"app": "registry"}, ownerReferences=SOURCE_METADATA["ownerReferences"]),
    ]
    run = _run(tmp_path, "['team-a', 'default'].all(ns, generator.Apply(ns, [variables.secret]))", expected, cluster=True)
    assert _outcomes(run) == [(True, "Ok"), (True, "Ok")]


def test_cluster_scoped_kinds_get_no_namespace_against_a_cluster(tmp_path: Path) -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "reader"},
            "rules": CLUSTER_ROLE["rules"]}
    run = _run(tmp_path, "generator.Apply('team-a', [variables.role])", [role], cluster=True)
    assert _outcomes(run) == [(True, "Ok")]


def test_cluster_scoped_kinds_take_the_call_namespace_offline(tmp_path: Path) -> None:
    role = {**CLUSTER_ROLE, "metadata": {**CLUSTER_ROLE["metadata"], "namespace": "team-a"}}
    run = _run(tmp_path, "generator.Apply('team-a', [variables.role])", [role], cluster=False)
    # the expected ClusterRole in team-a is found and equal: Kyverno's fake context sets the namespace on any kind
    assert _outcomes(run) == [(True, "Ok")]


def test_a_listed_source_generates_each_item_into_each_target(tmp_path: Path) -> None:
    expected = [_secret(ns, labels={"app": "registry"}) for ns in ("team-a", "team-b")]
    run = _run(tmp_path, "['team-a', 'team-b'].all(ns, generator.Apply(ns, [variables.listed]))", expected, cluster=True)
    assert _outcomes(run) == [(True, "Ok"), (True, "Ok")]


def test_generated_resources_accepts_each_object_from_any_listed_file(tmp_path: Path) -> None:
    expected = [_secret(ns, labels={"app": "registry"}) for ns in ("team-a", "team-b", "team-c")]
    generate = "['team-a', 'team-b', 'team-c'].all(ns, generator.Apply(ns, [variables.secret]))"
    run = _run(tmp_path, generate, expected, cluster=True, many=True)
    assert _outcomes(run) == [(True, "Ok")] * 3
    # an object that no listed file holds fails its own row only
    run = _run(tmp_path, generate, expected[:2], cluster=True, many=True)
    assert sorted(_outcomes(run)) == [(False, "Resource error"), (True, "Ok"), (True, "Ok")]


def test_placement_unit_offline_and_cluster() -> None:
    offline = GeneratedPlacement().place(SECRET, "", "")
    assert "namespace" not in offline["metadata"] and offline["metadata"]["uid"] == SOURCE_METADATA["uid"]

    def scope(api_version: str, kind: str) -> bool | None:
        return {"ClusterRole": False, "Secret": True}.get(kind)

    cli = GeneratedPlacement(cluster=True, kind_namespaced=scope)
    placed = cli.place(SECRET, "team-a", "")
    assert placed["metadata"] == {"name": "regcred", "namespace": "team-a", "labels": {"app": "registry"}}
    assert cli.place(CLUSTER_ROLE, "team-a", "")["metadata"] == {"name": "reader"}
    # a kind the cluster does not know is namespaced, as Kyverno's REST mapper fallback treats it
    unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert cli.place(unknown, "team-a", "")["metadata"]["namespace"] == "team-a"


def test_a_namespaced_policy_may_not_generate_a_cluster_scoped_kind() -> None:
    placement = GeneratedPlacement(cluster=True, kind_namespaced=lambda api_version, kind: kind != "ClusterRole")
    with pytest.raises(CelEvalError, match="cross-scope generation denied"):
        placement.place(CLUSTER_ROLE, "team-a", "team-a")
