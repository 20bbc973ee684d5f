"""Per-policy evaluation budgets: a policy that overruns its timeout is an error handled by its failurePolicy."""

from __future__ import annotations

from typing import Any

import yaml

from stockade.controllers.webhookconfig import WebhookTarget, build_configurations, static_resolver
from stockade.engine.engine import Engine
from stockade.policy.model import KyvernoPolicy
from stockade.webhook.admission import AdmissionEvaluator, failure_policy, parse_review, policy_timeout


class SteppingClock:
    """Each reading is ``step`` seconds after the previous one: every check sees time pass, deterministically."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def policy(name: str, *, timeout: int | None = None, failure: str | None = None, rule: str = "validate", nested: bool = False) -> KyvernoPolicy:
    spec: dict[str, Any] = {"validationFailureAction": "Enforce"}
    if timeout is not None:
        if nested:
            spec["webhookConfiguration"] = {"timeoutSeconds": timeout}
        else:
            spec["webhookTimeoutSeconds"] = timeout
    if failure:
        spec["failurePolicy"] = failure
    body = (
        {"validate": {"message": "needs team", "pattern": {"metadata": {"labels": {"team": "?*"}}}}}
        if rule == "validate"
        else {"mutate": {"patchStrategicMerge": {"metadata": {"labels": {"mutated": "yes"}}}}}
    )
    spec["rules"] = [{"name": f"{name}-rule", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, **body}]
    return KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": name}, "spec": spec})


def request(labels: dict[str, str] | None = None) -> Any:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default", "labels": labels or {"team": "a"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    return parse_review(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "u1", "operation": "CREATE", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "default", "name": "web", "object": pod},
        }
    )


def evaluator(policies: list[KyvernoPolicy], step: float) -> AdmissionEvaluator:
    return AdmissionEvaluator(Engine(), policies, clock=SteppingClock(step))


def test_fail_policy_over_budget_denies_saying_it_timed_out() -> None:
    decision = evaluator([policy("slow", timeout=1)], step=0.6).validate(request(), "Fail")
    assert decision.allowed is False
    assert "slow-rule: 'policy slow timed out: evaluation exceeded its 1s budget'" in decision.message


def test_ignore_policy_over_budget_admits_with_warning() -> None:
    decision = evaluator([policy("slow", timeout=1, failure="Ignore")], step=0.6).validate(request(), "Ignore")
    assert decision.allowed is True
    assert decision.warnings == ["policy slow.slow-rule: policy slow timed out: evaluation exceeded its 1s budget"]


def test_policy_within_budget_is_judged_normally() -> None:
    fine = evaluator([policy("fine", timeout=5)], step=0.6)
    assert fine.validate(request(), "Fail").allowed is True
    denied = fine.validate(request({"app": "x"}), "Fail")
    assert denied.allowed is False and "needs team" in denied.message and "timed out" not in denied.message


def test_budget_counts_from_request_arrival() -> None:
    # the request arrived long ago (started=-100): even a generous budget is already spent, so nothing is evaluated
    decision = evaluator([policy("late", timeout=30)], step=0.0).validate(request(), "Fail", started=-100.0)
    assert decision.allowed is False and "policy late timed out" in decision.message


def test_timed_out_mutation_drops_its_patch_under_ignore() -> None:
    slow = policy("slow-mutate", timeout=1, failure="Ignore", rule="mutate")
    decision = evaluator([slow], step=0.6).mutate(request(), "Ignore")
    assert decision.allowed is True and decision.patch == []
    assert decision.warnings == ["policy slow-mutate.slow-mutate-rule: policy slow-mutate timed out: evaluation exceeded its 1s budget"]
    quick = evaluator([policy("quick", failure="Ignore", rule="mutate")], step=0.6).mutate(request(), "Ignore")
    assert quick.patch and quick.patch[0]["path"].startswith("/metadata/labels")


def test_timed_out_mutation_denies_under_fail() -> None:
    decision = evaluator([policy("slow-mutate", timeout=1, rule="mutate")], step=0.6).mutate(request(), "Fail")
    assert decision.allowed is False and "timed out" in decision.message


def test_failure_variants_only_see_their_policies() -> None:
    both = evaluator([policy("fails", timeout=1), policy("ignores", failure="Ignore")], step=0.6)
    assert [p.name for p in both.policies_for("Fail")] == ["fails"]
    assert [p.name for p in both.policies_for("Ignore")] == ["ignores"]
    assert both.validate(request(), "Ignore").allowed is True  # the slow Fail policy is not evaluated here


def test_timeout_and_failure_policy_sources() -> None:
    assert policy_timeout(policy("a", timeout=3)) == 3.0
    assert policy_timeout(policy("b", timeout=4, nested=True)) == 4.0
    assert policy_timeout(policy("c"), default=7) == 7.0
    nested = policy("d")
    nested.raw["spec"]["webhookConfiguration"] = {"failurePolicy": "Ignore"}
    assert failure_policy(nested) == "Ignore" and failure_policy(policy("e")) == "Fail"


def test_webhook_timeout_covers_the_slowest_policy_of_each_webhook() -> None:
    policies = [policy("f1", timeout=12), policy("f2", timeout=25, nested=True), policy("i1", timeout=5, failure="Ignore"), policy("i2", timeout=45, failure="Ignore")]
    _, validating = build_configurations(policies, WebhookTarget(url="https://x"), b"CA", static_resolver(), timeout_seconds=10)
    timeouts = {hook["name"]: hook["timeoutSeconds"] for hook in validating["webhooks"]}
    assert timeouts == {"validate.stockade.svc-fail": 25, "validate.stockade.svc-ignore": 30}  # capped at the apiserver's 30s


def test_cel_policy_timeout_is_read_from_webhook_configuration() -> None:
    document = yaml.safe_load("""
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: vp}
spec:
  webhookConfiguration: {timeoutSeconds: 2}
  validations: [{expression: "true"}]
""")
    from stockade.celpolicy import CelPolicy

    assert policy_timeout(CelPolicy(document)) == 2.0
