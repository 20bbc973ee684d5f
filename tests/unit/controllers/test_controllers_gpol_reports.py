"""GeneratingPolicy results in the trigger's report, as Kyverno's CEL generate controller writes them: source
KyvernoGeneratingPolicy, message "policy evaluated successfully", the generated resources and audit annotations as
properties, exceptions named on skipped results."""

from __future__ import annotations

from typing import Any

from stockade.celpolicy.model import CelPolicy
from stockade.controllers.generate import GenerateController, TriggerEvent
from stockade.controllers.reports import build_report, gvk_string
from tests.unit.controllers.fakecluster import FakeCluster
from tests.unit.controllers.test_controllers_generating_policy import Store, gpol, trigger


class Reports:
    def __init__(self) -> None:
        self.reports: list[dict[str, Any]] = []

    def submit(self, resource: dict[str, Any], responses: list[Any], **options: Any) -> None:
        report = build_report(resource, responses, process=options.get("process", "admission review"))
        assert report is not None
        self.reports.append(report)


def test_gvk_strings_read_like_go() -> None:
    assert gvk_string("v1", "ConfigMap") == "/v1, Kind=ConfigMap"
    assert gvk_string("networking.k8s.io/v1", "NetworkPolicy") == "networking.k8s.io/v1, Kind=NetworkPolicy"


def test_a_generating_policy_result_is_reported_on_its_trigger() -> None:
    cluster = FakeCluster()
    document = gpol()
    document["spec"]["auditAnnotations"] = [{"key": "namespace", "valueExpression": "object.metadata.namespace"}, {"key": "none", "valueExpression": "null"}]
    reports = Reports()
    ctl = GenerateController(None, Store(document), cluster_data=cluster, reports=reports)  # type: ignore[arg-type]
    cm = trigger(cluster)
    assert ctl.process_event(TriggerEvent("CREATE", cm)) == []
    (report,) = reports.reports
    (result,) = report["results"]
    assert report["kind"] == "PolicyReport" and report["metadata"]["ownerReferences"][0]["name"] == "cm"
    assert (result["source"], result["policy"], result["rule"], result["result"]) == ("KyvernoGeneratingPolicy", "gen", "gen", "pass")
    assert result["message"] == "policy evaluated successfully"
    assert result["properties"] == {
        "namespace": "ns1",
        "generated-resources": "networking.k8s.io/v1, Kind=NetworkPolicy Name=default-deny Namespace=ns1",
        "process": "admission review",
    }


def test_an_exception_skip_names_the_exception() -> None:
    cluster = FakeCluster()
    exception = {
        "apiVersion": "policies.kyverno.io/v1alpha1",
        "kind": "PolicyException",
        "metadata": {"name": "allow", "namespace": "ns1"},
        "spec": {"policyRefs": [{"name": "gen", "kind": "GeneratingPolicy"}], "matchConditions": [{"name": "all", "expression": "true"}]},
    }
    reports = Reports()
    ctl = GenerateController(None, Store(gpol(), exception), cluster_data=cluster, reports=reports)  # type: ignore[arg-type]
    ctl.process_event(TriggerEvent("CREATE", trigger(cluster)))
    (result,) = reports.reports[0]["results"]
    assert result["result"] == "skip" and result["properties"]["exceptions"] == "allow"
    assert CelPolicy(gpol()).base_kind == "GeneratingPolicy"


def test_a_resource_that_cannot_be_written_is_reported_as_an_error() -> None:
    """Kyverno's generator writes while the policy is evaluated, so a write that fails makes the result an error."""
    cluster = FakeCluster()
    bad = (
        '[{"kind": dyn("NetworkPolicy"), "apiVersion": dyn("networking.k8s.io/apps/v1"), '
        '"metadata": dyn({"name": "x"}), "spec": dyn({"podSelector": dyn({})})}]'
    )
    reports = Reports()
    ctl = GenerateController(None, Store(gpol(expression=f"generator.Apply(object.metadata.namespace, {bad})")), cluster_data=cluster, reports=reports)  # type: ignore[arg-type]
    assert ctl.process_event(TriggerEvent("CREATE", trigger(cluster))) != []
    (result,) = reports.reports[-1]["results"]
    assert result["result"] == "error" and "generated-resources" not in result["properties"]
