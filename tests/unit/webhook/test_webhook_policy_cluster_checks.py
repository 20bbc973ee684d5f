"""The policy webhook refines its static verdict with the checks that ask the cluster, and passes the old policy of
an UPDATE to the immutable-field check, as Kyverno's policy webhook does."""

from __future__ import annotations

from typing import Any

from stockade.webhook.admission import AdmissionDecision, parse_review
from stockade.webhook.server import cluster_policy_decision, policy_validation_decision

RULE = {
    "name": "gen",
    "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
    "generate": {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "namespace": "x", "synchronize": True, "data": {}},
}


def policy(rule_name: str = "gen") -> dict[str, Any]:
    return {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {"rules": [{**RULE, "name": rule_name}]}}


def review(operation: str, new: dict[str, Any], old: dict[str, Any] | None = None) -> Any:
    request: dict[str, Any] = {
        "uid": "u1", "operation": operation, "kind": {"group": "kyverno.io", "version": "v1", "kind": "ClusterPolicy"},
        "resource": {"group": "kyverno.io", "version": "v1", "resource": "clusterpolicies"}, "name": "p", "object": new,
        "userInfo": {"username": "admin"},
    }
    if old is not None:
        request["oldObject"] = old
    return parse_review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})


class Checks:
    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        self.seen: list[Any] = []

    def check(self, document: dict[str, Any], old: dict[str, Any] | None) -> tuple[list[str], list[str]]:
        self.seen.append(old)
        return self.errors, ["w"]


def test_renaming_a_generate_rule_is_refused_on_update() -> None:
    denied = policy_validation_decision(review("UPDATE", policy("renamed"), policy()))
    assert not denied.allowed and "changes of immutable fields" in denied.message
    assert policy_validation_decision(review("CREATE", policy("renamed"))).allowed


def test_cluster_checks_refine_the_static_verdict() -> None:
    checks = Checks(["path: spec.rules[0].generate..: no permission"])
    decision = cluster_policy_decision(checks, review("UPDATE", policy(), policy()), AdmissionDecision(True, warnings=["s"]))
    assert not decision.allowed and decision.message.endswith("no permission") and decision.warnings == ["s", "w"]
    assert checks.seen == [policy()]
    assert cluster_policy_decision(Checks([]), review("CREATE", policy()), AdmissionDecision(True)).allowed
