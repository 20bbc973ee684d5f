"""``context.apiCall`` in ``stockade test`` without a cluster, as Kyverno's CLI answers it: mocks from
``apiCallResponses`` first; with ``clusterResources`` the test's objects answer urlPath GETs; without them an
unmocked call is left out, so only values can define its variable. With ``clusterResources`` a resource's
Namespace there gives the labels namespaceSelector sees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stockade.kyvernotest import runner
from stockade.kyvernotest.runner import TestRunner as CaseRunner
from stockade.kyvernotest.schema import load_test_files

POLICY = """\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: api-lookup}
spec:
  background: false
  rules:
  - name: count-pods
    match:
      any:
      - resources: {kinds: [Pod]}
    context:
    - name: podcount
      apiCall:
        urlPath: "/api/v1/namespaces/{{request.object.metadata.namespace}}/pods"
        jmesPath: "items | length(@)"
    validate:
      failureAction: Enforce
      message: "too many pods: {{podcount}}"
      deny:
        conditions:
          any:
          - {key: "{{podcount}}", operator: GreaterThan, value: 1}
"""
PODS = """\
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: ns1}
spec: {containers: [{name: c, image: nginx}]}
---
apiVersion: v1
kind: Pod
metadata: {name: b, namespace: ns1}
spec: {containers: [{name: c, image: nginx}]}
---
apiVersion: v1
kind: Pod
metadata: {name: c, namespace: ns2}
spec: {containers: [{name: c, image: nginx}]}
"""
NAMESPACES = """\
apiVersion: cli.kyverno.io/v1alpha1
kind: ClusterResource
metadata: {name: cluster}
spec:
  resources:
  - {apiVersion: v1, kind: Namespace, metadata: {name: ns1, labels: {env: prod}}}
  - {apiVersion: v1, kind: Namespace, metadata: {name: ns2}}
"""
RESULTS = """\
results:
- {policy: api-lookup, rule: count-pods, kind: Pod, resources: [a, b], result: fail}
- {policy: api-lookup, rule: count-pods, kind: Pod, resources: [c], result: pass}
"""
MOCK_NS1 = "apiCallResponses:\n- urlPath: /api/v1/namespaces/ns1/pods\n  response:\n    body: {items: [{}, {}, {}]}\n"


def _run(tmp_path: Path, extra: str, results: str = RESULTS, policy: str = POLICY, cluster: str = NAMESPACES) -> runner.TestRun:
    (tmp_path / "policy.yaml").write_text(policy)
    (tmp_path / "pods.yaml").write_text(PODS)
    (tmp_path / "cluster.yaml").write_text(cluster)
    (tmp_path / "kyverno-test.yaml").write_text(
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [policy.yaml]\n"
        f"resources: [pods.yaml]\n{extra}{results}"
    )
    (case,) = load_test_files(os.path.join(str(tmp_path), "kyverno-test.yaml"))
    return CaseRunner(case).execute()


def _outcomes(run: runner.TestRun) -> list[tuple[str, bool, str]]:
    return [(row.resource, row.ok, row.reason) for row in run.rows]


def test_without_cluster_an_unmocked_call_is_left_out(tmp_path: Path) -> None:
    run = _run(tmp_path, MOCK_NS1)
    assert not run.error
    assert _outcomes(run) == [
        ("v1/Pod/ns1/a", True, "Ok"),
        ("v1/Pod/ns1/b", True, "Ok"),
        # not mocked and no cluster: podcount is undefined, the rule errors (Kyverno: "Want pass, got error")
        ("v1/Pod/ns2/c", False, "Want pass, got error"),
    ]


def test_without_cluster_values_stand_in_for_the_call(tmp_path: Path) -> None:
    (tmp_path / "values.yaml").write_text(
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Values\npolicies:\n- name: api-lookup\n  resources:\n"
        "  - name: c\n    values: {podcount: 0}\n"
    )
    run = _run(tmp_path, MOCK_NS1 + "variables: values.yaml\n")
    assert [row.ok for row in run.rows] == [True, True, True]


def test_with_cluster_resources_url_path_reads_the_test_objects(tmp_path: Path) -> None:
    run = _run(tmp_path, "clusterResources: [cluster.yaml]\n")
    assert not run.error
    assert _outcomes(run) == [("v1/Pod/ns1/a", True, "Ok"), ("v1/Pod/ns1/b", True, "Ok"), ("v1/Pod/ns2/c", True, "Ok")]


def test_a_mock_wins_over_the_cluster_objects(tmp_path: Path) -> None:
    mock_ns2 = "apiCallResponses:\n- urlPath: /api/v1/namespaces/ns2/pods\n  method: GET\n  response:\n    body: {items: [{}, {}]}\n"
    run = _run(tmp_path, "clusterResources: [cluster.yaml]\n" + mock_ns2)
    assert _outcomes(run)[2] == ("v1/Pod/ns2/c", False, "Want pass, got fail")


def test_a_non_2xx_mock_makes_the_rule_error(tmp_path: Path) -> None:
    mock = "apiCallResponses:\n- urlPath: /api/v1/namespaces/ns1/pods\n  response:\n    statusCode: 404\n    body: {message: gone}\n"
    run = _run(tmp_path, mock)
    assert _outcomes(run)[0] == ("v1/Pod/ns1/a", False, "Want fail, got error")


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("- {response: {body: {a: 1}}}\n", "either url or urlPath is required"),
        ("- {url: 'https://x.io/a', urlPath: /a, response: {body: {a: 1}}}\n", "mutually exclusive"),
        ("- {url: 'ftp://x.io/a', response: {body: {a: 1}}}\n", "must be an absolute https/http URL"),
        ("- {url: 'https:///a', response: {body: {a: 1}}}\n", "has scheme but no host"),
        ("- {urlPath: api/v1, response: {body: {a: 1}}}\n", "must be an absolute path"),
        ("- {urlPath: /a, method: PUT, response: {body: {a: 1}}}\n", "method must be GET or POST"),
        ("- {urlPath: /a, response: {}}\n", "response.body is required"),
        ("- {urlPath: /a, response: {body: [1]}}\n", "must be a JSON object"),
        ("- {urlPath: /a, response: {statusCode: 700, body: {a: 1}}}\n", "between 100 and 599"),
        ("- {urlPath: /a, response: {body: {a: 1}}}\n- {urlPath: /a, response: {body: {b: 1}}}\n", "duplicate entry"),
    ],
)
def test_bad_mock_entries_stop_the_test_naming_the_entry(tmp_path: Path, entry: str, reason: str) -> None:
    run = _run(tmp_path, "apiCallResponses:\n" + entry)
    assert reason in run.error and "apiCallResponses[" in run.error and "kyverno-test.yaml" in run.error
    assert run.failed == 1


SELECTOR_POLICY = """\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: prod-only}
spec:
  background: false
  rules:
  - name: no-latest
    match:
      any:
      - resources:
          kinds: [Pod]
          namespaceSelector: {matchLabels: {env: prod}}
    validate:
      failureAction: Enforce
      message: no latest
      pattern:
        spec:
          containers:
          - image: "!*:latest"
"""
SELECTOR_RESULTS = """\
results:
- {policy: prod-only, rule: no-latest, kind: Pod, resources: [a], result: pass}
- {policy: prod-only, rule: no-latest, kind: Pod, resources: [c], result: skip}
"""


def test_namespace_labels_come_from_the_cluster_resources(tmp_path: Path) -> None:
    run = _run(tmp_path, "clusterResources: [cluster.yaml]\n", SELECTOR_RESULTS, SELECTOR_POLICY)
    assert not run.error
    assert [(row.resource, row.ok, row.reason) for row in run.rows if row.resource.endswith(("/a", "/c"))] == [
        ("v1/Pod/ns1/a", True, "Ok"),
        ("v1/Pod/ns2/c", True, "Excluded"),
    ]


def test_a_namespace_missing_from_the_cluster_resources_is_warned_about(tmp_path: Path) -> None:
    # Kyverno 1.19.1 stops the test here; Kyverno's newer corpus (test/cli/test-context-configmap) expects it to run
    only_ns1 = NAMESPACES.rsplit("  - ", 1)[0]
    run = _run(tmp_path, "clusterResources: [cluster.yaml]\n", SELECTOR_RESULTS, SELECTOR_POLICY, only_ns1)
    assert not run.error and [row.ok for row in run.rows] == [True, True]
    assert run.warnings == ["namespace 'ns2' of resource 'c' is not among the clusterResources; matching it with no namespace labels"]


def test_values_namespace_labels_take_precedence_over_the_cluster(tmp_path: Path) -> None:
    (tmp_path / "values.yaml").write_text(
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Values\nnamespaceSelector:\n- name: ns2\n  labels: {env: prod}\n"
    )
    run = _run(tmp_path, "clusterResources: [cluster.yaml]\nvariables: values.yaml\n", SELECTOR_RESULTS.replace("result: skip", "result: pass"), SELECTOR_POLICY)
    assert not run.error and [row.ok for row in run.rows] == [True, True]


