"""MutatingPolicies in background scans, as Kyverno's reports scanner judges them (a pending mutation fails with
"mutation is not applied")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stockade.celpolicy import CelPolicy, CelPolicyEvaluator
from stockade.controllers.background import MUTATION_NOT_APPLIED, BackgroundScanner
from tests.unit.controllers.fakecluster import FakeCluster

LABEL_FOO = "Object{metadata: Object.metadata{labels: Object.metadata.labels{foo: \"bar\"}}}"


def mpol(name: str = "add-foo", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]},
        "matchConditions": [{"name": "ns1", "expression": "object.metadata.namespace == 'ns1'"}],
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": LABEL_FOO}}],
    }
    body.update(spec)
    return {"apiVersion": "policies.kyverno.io/v1beta1", "kind": "MutatingPolicy", "metadata": {"name": name}, "spec": body}


@dataclass
class Evaluator:
    cel_evaluator: Any = field(default_factory=CelPolicyEvaluator)


@dataclass
class Snapshot:
    cel_policies: list[Any]
    policies: list[Any] = field(default_factory=list)
    evaluator: Any = field(default_factory=Evaluator)


class Store:
    def __init__(self, *docs: dict[str, Any]) -> None:
        self.listeners: list[Any] = []
        self.set(*docs)

    def set(self, *docs: dict[str, Any]) -> None:
        self.snapshot = Snapshot([CelPolicy(d) for d in docs])


class Reports:
    def __init__(self) -> None:
        self.results: dict[str, list[tuple[str, str, str]]] = {}
        self.replaced: list[frozenset[str]] = []

    def submit(self, obj: dict[str, Any], responses: list[Any], **options: Any) -> None:
        self.results[f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"] = [
            (r.policy_name, rule.status, rule.message) for r in responses for rule in r.rules
        ]
        self.replaced.append(options["replace_policies"])


def cluster() -> FakeCluster:
    fake = FakeCluster()
    fake.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain", "namespace": "ns1"}})
    fake.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "done", "namespace": "ns1", "labels": {"foo": "bar"}}})
    fake.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "elsewhere", "namespace": "ns2"}})
    return fake


def test_a_pending_mutation_fails_a_done_one_passes_and_unmatched_conditions_skip() -> None:
    reports = Reports()
    scanner = BackgroundScanner(None, Store(mpol()), reports, cluster_data=cluster())  # type: ignore[arg-type]
    summary = scanner.scan_once()
    assert summary.errors == []
    assert reports.results == {
        "ns1/plain": [("add-foo", "fail", MUTATION_NOT_APPLIED)],
        "ns1/done": [("add-foo", "pass", "success")],
        "ns2/elsewhere": [("add-foo", "skip", "skip")],
    }


def test_background_disabled_mutating_policies_are_not_scanned_and_admission_disabled_ones_are() -> None:
    reports = Reports()
    no_background = mpol(evaluation={"background": {"enabled": False}})
    scanner = BackgroundScanner(None, Store(no_background), reports, cluster_data=cluster())  # type: ignore[arg-type]
    scanner.scan_once()
    assert all(results == [] for results in reports.results.values())
    background_only = mpol(evaluation={"admission": {"enabled": False}, "mutateExisting": {"enabled": True}})
    scanner = BackgroundScanner(None, Store(background_only), reports, cluster_data=cluster())  # type: ignore[arg-type]
    scanner.scan_once()
    assert reports.results["ns1/plain"] == [("add-foo", "fail", MUTATION_NOT_APPLIED)]
