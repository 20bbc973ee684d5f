"""PolicyReport documents built from admission results."""

from __future__ import annotations

import datetime as dt

import yaml

from stockade.controllers.reports import build_report, merge_into
from stockade.engine.response import EngineResponse, RuleResponse
from stockade.policy.model import KyvernoPolicy

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)


def policy(name: str, namespace: str = "", annotations: dict[str, str] | None = None) -> KyvernoPolicy:
    metadata: dict[str, object] = {"name": name, "annotations": annotations or {}}
    if namespace:
        metadata["namespace"] = namespace
    return KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "Policy" if namespace else "ClusterPolicy", "metadata": metadata, "spec": {"rules": []}})


POD = yaml.safe_load("{apiVersion: v1, kind: Pod, metadata: {name: web, namespace: default, uid: 1234-abcd}}")


def test_report_is_named_after_and_owned_by_the_resource() -> None:
    responses = [
        EngineResponse(policy("audit", annotations={"policies.kyverno.io/severity": "high", "policies.kyverno.io/category": "Best Practices"}), POD, POD, [RuleResponse("r1", "Validation", "fail", "bad", failure_action="Audit")]),
        EngineResponse(policy("local", namespace="default"), POD, POD, [RuleResponse("r2", "Validation", "pass", "ok")]),
        EngineResponse(policy("unscored", annotations={"policies.kyverno.io/scored": "false"}), POD, POD, [RuleResponse("r3", "Validation", "fail", "meh")]),
    ]
    report = build_report(POD, responses, NOW)
    assert report is not None
    assert report["kind"] == "PolicyReport" and report["metadata"]["name"] == "1234-abcd" and report["metadata"]["namespace"] == "default"
    assert report["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "1234-abcd"}]
    # Kyverno's SetManagedByKyvernoLabel: readers of Kyverno's reports (its e2e suite included) select on it
    assert report["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kyverno"}
    assert report["scope"] == {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "1234-abcd", "namespace": "default"}
    first, second, third = report["results"]
    assert first == {
        "source": "kyverno", "policy": "audit", "rule": "r1", "result": "fail", "message": "bad", "scored": True,
        # Kyverno's process follows the policy, not the evaluation: background processing is on by default
        "timestamp": {"seconds": int(NOW.timestamp()), "nanos": 0}, "properties": {"process": "background scan"},
        "severity": "high", "category": "Best Practices",
    }
    assert second["policy"] == "default/local" and second["result"] == "pass"
    assert third["result"] == "warn" and third["scored"] is False
    assert report["summary"] == {"pass": 1, "fail": 1, "warn": 1, "error": 0, "skip": 0}


def test_cluster_scoped_resources_get_cluster_reports_and_uidless_ones_none() -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "uid": "u-1"}}
    response = EngineResponse(policy("p"), namespace, namespace, [RuleResponse("r", "Validation", "pass")])
    report = build_report(namespace, [response], NOW)
    assert report is not None and report["kind"] == "ClusterPolicyReport" and "namespace" not in report["metadata"]
    assert build_report({"kind": "Pod", "metadata": {"name": "x"}}, [response], NOW) is None


def test_merge_keeps_other_policies_and_replaces_reevaluated_ones() -> None:
    old = {"metadata": {"resourceVersion": "7"}, "results": [{"policy": "a", "result": "fail"}, {"policy": "b", "result": "pass"}]}
    new = {"metadata": {"name": "x"}, "results": [{"policy": "a", "result": "pass"}]}
    merge_into(new, old)
    assert new["results"] == [{"policy": "a", "result": "pass"}, {"policy": "b", "result": "pass"}]  # Kyverno's order
    assert new["summary"]["pass"] == 2 and new["summary"]["fail"] == 0
    assert new["metadata"]["resourceVersion"] == "7"


def test_results_carry_kyverno_sources_processes_and_properties() -> None:
    """Kyverno's ToPolicyReportResult: source per policy kind, ``process`` from the policy's background/admission
    settings, rule properties (audit annotations) and the exempting exceptions' names."""
    from stockade.celpolicy import CelPolicy

    def cel(kind: str, evaluation: dict[str, object] | None = None) -> CelPolicy:
        return CelPolicy({"apiVersion": "policies.kyverno.io/v1", "kind": kind, "metadata": {"name": kind.lower()}, "spec": {"evaluation": evaluation or {}}})

    exempted = RuleResponse("exception", "Mutation", "skip", "rule is skipped due to policy exception: default/a, b", exceptions=["default/a", "b"])
    audited = RuleResponse("mutatingpolicy", "Mutation", "pass", "success", properties={"resource-name": "web"})
    responses = [
        EngineResponse(cel("MutatingPolicy"), POD, POD, [audited, exempted]),
        EngineResponse(cel("ValidatingPolicy", {"background": {"enabled": False}}), POD, POD, [RuleResponse("validatingpolicy", "Validation", "pass")]),
        EngineResponse(cel("GeneratingPolicy"), POD, POD, [RuleResponse("generatingpolicy", "Generation", "pass")]),
        EngineResponse(
            KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "k"}, "spec": {"background": False, "rules": []}}),
            POD, POD, [RuleResponse("r", "Validation", "pass")],
        ),
    ]
    report = build_report(POD, responses, NOW)
    assert report is not None
    results = [(r["source"], r["properties"]) for r in report["results"]]
    assert results == [  # in Kyverno's order: by policy, then rule
        ("KyvernoGeneratingPolicy", {"process": "admission review"}),
        ("kyverno", {"process": "admission review"}),
        ("KyvernoMutatingPolicy", {"process": "background scan", "exceptions": "a,b"}),
        ("KyvernoMutatingPolicy", {"resource-name": "web", "process": "background scan"}),
        ("KyvernoValidatingPolicy", {"process": "admission review"}),
    ]


def test_report_sources_name_the_policy_family_as_kyverno_does() -> None:
    """Kyverno e2e validating-policies/report: results of a ValidatingPolicy carry source KyvernoValidatingPolicy
    (namespaced or not); ClusterPolicies ``kyverno``; admission policies their own kind."""
    from stockade.celpolicy.model import CelPolicy
    from stockade.controllers.reports import report_source
    from stockade.policy.model import KyvernoPolicy

    def cel(kind: str) -> CelPolicy:
        return CelPolicy({"apiVersion": "policies.kyverno.io/v1", "kind": kind, "metadata": {"name": "p", "namespace": "ns"}, "spec": {}})

    assert report_source(KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {"rules": []}})) == "kyverno"
    assert report_source(cel("ValidatingPolicy")) == "KyvernoValidatingPolicy"
    assert report_source(cel("NamespacedValidatingPolicy")) == "KyvernoValidatingPolicy"
    assert report_source(cel("ImageValidatingPolicy")) == "KyvernoImageValidatingPolicy"
    vap = CelPolicy({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "p"}, "spec": {}})
    assert report_source(vap) == "ValidatingAdmissionPolicy"


def test_results_follow_kyvernos_order_by_policy_rule_and_source() -> None:
    """Kyverno sorts report results by policy, rule and source; its e2e suite compares the lists in order."""
    old = {"metadata": {"resourceVersion": "7"}, "results": [{"policy": "q", "rule": "z-rule", "source": "kyverno"}]}
    new = {"metadata": {"name": "x"}, "results": [
        {"policy": "p", "rule": "b-rule", "source": "ValidatingAdmissionPolicy"},
        {"policy": "p", "rule": "b-rule", "source": "KyvernoImageValidatingPolicy"},
        {"policy": "a", "rule": "", "source": "KyvernoValidatingPolicy"},
    ]}
    merge_into(new, old, replace={"a"})
    assert [(r["policy"], r["rule"], r["source"]) for r in new["results"]] == [
        ("a", "", "KyvernoValidatingPolicy"),
        ("p", "b-rule", "KyvernoImageValidatingPolicy"),
        ("p", "b-rule", "ValidatingAdmissionPolicy"),
        ("q", "z-rule", "kyverno"),
    ]


def test_failed_pod_security_results_carry_kyvernos_control_properties() -> None:
    """Kyverno e2e reports/background/test-report-background-mode: a failed podSecurity result names the standard, its
    version and the failed controls, with the images (as full references) that failed each."""
    from stockade.engine.engine import Engine, Request

    policy = KyvernoPolicy({
        "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "psa"},
        "spec": {"rules": [{"name": "restricted", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                            "validate": {"podSecurity": {"level": "restricted", "version": "latest"}}}]},
    })
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "badpod01", "namespace": "default", "uid": "u1"}, "spec": {"containers": [{
        "name": "c", "image": "dummyimagename",
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    }]}}
    engine = Engine()
    response = engine.validate(engine.policy_context(policy, Request(resource=pod, operation="CREATE")))
    report = build_report(pod, [response], NOW)
    assert report is not None
    properties = report["results"][0]["properties"]
    assert properties == {
        "standard": "restricted",
        "version": "latest",
        "controls": "capabilities_restricted",
        "controlsJSON": '[{"ID":"capabilities_restricted","Name":"Capabilities","Images":["docker.io/dummyimagename:latest"]}]',
        "process": "background scan",
    }


def test_the_mutating_phase_reports_every_result_of_kyverno_mutate_rules() -> None:
    """Kyverno's mutation webhook writes an admission report of its mutate rules (pass, skip, fail and error alike);
    verifyImages results in the same phase and CEL MutatingPolicies are reported by their own paths."""
    from stockade.webhook.admission import mutation_report_responses

    patched = {**POD, "metadata": {**POD["metadata"], "labels": {"foo": "bar"}}}
    responses = [
        EngineResponse(policy("add-labels"), POD, patched, [RuleResponse("add", "Mutation", "pass", "mutated Pod/web in namespace default"), RuleResponse("same", "Mutation", "skip", "no patches applied")]),
        EngineResponse(policy("images"), POD, POD, [RuleResponse("verify", "ImageVerify", "pass", "verified")]),
        EngineResponse(object(), POD, POD, [RuleResponse("cel", "Mutation", "pass", "")]),
    ]
    reported = mutation_report_responses(responses)
    assert [(r.policy_name, [rule.name for rule in r.rules]) for r in reported] == [("add-labels", ["add", "same"])]
    report = build_report(POD, reported, NOW)
    assert report is not None
    assert [(r["rule"], r["result"], r["message"]) for r in report["results"]] == [
        ("add", "pass", "mutated Pod/web in namespace default"), ("same", "skip", "no patches applied")
    ]
