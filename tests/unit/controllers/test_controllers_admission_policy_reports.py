"""Kubernetes ValidatingAdmissionPolicies and MutatingAdmissionPolicies in background scans, as Kyverno's reports
controller reports them with --validatingAdmissionPolicyReports / --mutatingAdmissionPolicyReports: only policies
labelled reports.kyverno.io/enabled=true, one result per binding that selects the resource (property ``binding`` or
``mapBinding``), source ValidatingAdmissionPolicy / MutatingAdmissionPolicy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stockade.controllers.background import MUTATION_APPLIED, MUTATION_NOT_APPLIED, BackgroundScanner, reported_admission_policies
from stockade.controllers.reports import build_report
from tests.unit.controllers.fakecluster import FakeCluster

RULES = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]


def vap(name: str, expression: str, labelled: bool = True) -> dict[str, Any]:
    labels = {"reports.kyverno.io/enabled": "true"} if labelled else {}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": labels},
        "spec": {"matchConstraints": {"resourceRules": RULES}, "validations": [{"expression": expression, "message": f"{name} failed"}]},
    }


def binding(kind: str, name: str, policy: str, namespace_labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"policyName": policy}
    if namespace_labels is not None:
        spec["matchResources"] = {"namespaceSelector": {"matchLabels": namespace_labels}}
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": f"{kind}Binding", "metadata": {"name": name}, "spec": spec}


def add_label_map() -> dict[str, Any]:
    expression = 'object.metadata.?labels["team"].hasValue() ? Object{} : Object{metadata: Object.metadata{labels: {"team": "a"}}}'
    return {
        "apiVersion": "admissionregistration.k8s.io/v1alpha1", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": "add-team", "labels": {"reports.kyverno.io/enabled": "true"}},
        "spec": {"matchConstraints": {"resourceRules": RULES}, "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}}]},
    }


@dataclass
class Document:
    data: dict[str, Any]


@dataclass
class Snapshot:
    documents: tuple[Document, ...]
    policies: list[Any] = field(default_factory=list)
    cel_policies: list[Any] = field(default_factory=list)
    evaluator: Any = None


class Store:
    def __init__(self, *docs: dict[str, Any]) -> None:
        self.snapshot = Snapshot(tuple(Document(d) for d in docs))


class Reports:
    def __init__(self) -> None:
        self.reports: dict[str, dict[str, Any]] = {}
        self.live: list[Any] = []

    def submit(self, obj: dict[str, Any], responses: list[Any], **options: Any) -> None:
        report = build_report(obj, responses, process=options["process"], allow_empty=True)
        assert report is not None
        self.reports[obj["metadata"]["name"]] = report
        self.live.append(options["live_policies"])


def cluster() -> FakeCluster:
    fake = FakeCluster()
    fake.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod", "labels": {"env": "prod"}}})
    fake.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dev", "labels": {"env": "dev"}}})
    fake.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "labelled", "namespace": "prod", "uid": "u1", "labels": {"team": "a"}}})
    fake.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain", "namespace": "dev", "uid": "u2"}})
    return fake


def results(report: dict[str, Any]) -> list[tuple[str, str, str, str, dict[str, str]]]:
    return [(r["source"], r["policy"], r["rule"], r["result"], r["properties"]) for r in report["results"]]


def scan(kinds: tuple[str, ...], *docs: dict[str, Any]) -> Reports:
    reports = Reports()
    scanner = BackgroundScanner(None, Store(*docs), reports, cluster_data=cluster(), admission_policy_kinds=kinds)  # type: ignore[arg-type]
    summary = scanner.scan_once()
    assert summary.errors == []
    return reports


def test_only_labelled_policies_of_enabled_kinds_are_reported() -> None:
    docs = [vap("needs-team", "has(object.metadata.labels) && 'team' in object.metadata.labels"), vap("unlabelled", "false", labelled=False)]
    assert [p.name for p in reported_admission_policies([Document(d) for d in docs], frozenset({"ValidatingAdmissionPolicy"}))] == ["needs-team"]
    assert reported_admission_policies([Document(d) for d in docs], frozenset()) == []
    assert scan((), *docs).reports == {}


def test_a_policy_without_binding_is_reported_on_its_own() -> None:
    reports = scan(("ValidatingAdmissionPolicy",), vap("needs-team", "has(object.metadata.labels) && 'team' in object.metadata.labels"))
    background = {"process": "background scan"}
    assert results(reports.reports["labelled"]) == [("ValidatingAdmissionPolicy", "needs-team", "needs-team", "pass", background)]
    assert results(reports.reports["plain"]) == [("ValidatingAdmissionPolicy", "needs-team", "needs-team", "fail", background)]
    assert reports.reports["plain"]["results"][0]["message"] == "needs-team failed"
    assert all("needs-team" in live for live in reports.live)  # the results are not pruned as stale


def test_a_binding_selects_the_resources_and_names_itself() -> None:
    reports = scan(
        ("ValidatingAdmissionPolicy",),
        vap("needs-team", "has(object.metadata.labels) && 'team' in object.metadata.labels"),
        binding("ValidatingAdmissionPolicy", "prod-only", "needs-team", {"env": "prod"}),
    )
    assert results(reports.reports["labelled"]) == [
        ("ValidatingAdmissionPolicy", "needs-team", "needs-team", "pass", {"binding": "prod-only", "process": "background scan"})
    ]
    assert results(reports.reports["plain"]) == []


def test_a_mutating_admission_policy_passes_once_applied_and_fails_while_pending() -> None:
    reports = scan(("MutatingAdmissionPolicy",), add_label_map(), binding("MutatingAdmissionPolicy", "everywhere", "add-team"))
    properties = {"mapBinding": "everywhere", "process": "background scan"}
    assert results(reports.reports["labelled"]) == [("MutatingAdmissionPolicy", "add-team", "add-team", "pass", properties)]
    assert reports.reports["labelled"]["results"][0]["message"] == MUTATION_APPLIED
    assert results(reports.reports["plain"]) == [("MutatingAdmissionPolicy", "add-team", "add-team", "fail", properties)]
    assert reports.reports["plain"]["results"][0]["message"] == MUTATION_NOT_APPLIED


def test_serve_flags_choose_the_reported_kinds_and_their_watches() -> None:
    from stockade.cli.serve_cmd import _reported_admission_kinds
    from stockade.controllers.policywatch import ADMISSION_POLICY_WATCHES

    options = {"background_scan_interval": 3600.0, "validating_admission_policy_reports": True, "mutating_admission_policy_reports": False}
    assert _reported_admission_kinds(options) == ("ValidatingAdmissionPolicy",)
    assert _reported_admission_kinds({**options, "mutating_admission_policy_reports": True}) == ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy")
    assert _reported_admission_kinds({**options, "background_scan_interval": 0}) == ()  # no scans, nothing reported
    assert [w.kind for w in ADMISSION_POLICY_WATCHES["MutatingAdmissionPolicy"]] == ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]
