"""Prometheus metrics named after Kyverno's so existing dashboards keep working.

Each server gets its own registry: tests start several servers in one process and must not share counters.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from stockade.engine.response import EngineResponse
from stockade.policy.model import KyvernoPolicy

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class WebhookMetrics:
    """Admission request counters and latency histograms, per request and per policy rule."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        request_labels = ["webhook", "resource_kind", "resource_namespace", "resource_request_operation", "request_allowed"]
        self.admission_requests = Counter(
            "kyverno_admission_requests", "Admission requests handled.", request_labels, registry=self.registry
        )
        self.admission_duration = Histogram(
            "kyverno_admission_review_duration_seconds",
            "Time to answer one admission review.",
            request_labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        rule_labels = [
            "policy_name",
            "policy_type",
            "policy_validation_mode",
            "rule_name",
            "rule_type",
            "rule_result",
            "resource_kind",
            "resource_request_operation",
            "rule_execution_cause",
        ]
        self.policy_results = Counter("kyverno_policy_results", "Rule results of admission evaluations.", rule_labels, registry=self.registry)
        self.policy_duration = Histogram(
            "kyverno_policy_execution_duration_seconds",
            "Time spent evaluating policies for one admission review, by rule result.",
            rule_labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        # labels() validates and hashes on every call; admission traffic repeats the same few label sets
        self._rule_children: dict[tuple[str, ...], tuple[Any, Any]] = {}
        self._request_children: dict[tuple[str, ...], tuple[Any, Any]] = {}
        self.bad_requests = Counter("kyverno_admission_invalid_requests", "Request bodies that were not AdmissionReviews.", ["webhook"], registry=self.registry)

    def observe_request(self, webhook: str, kind: str, namespace: str, operation: str, allowed: bool, seconds: float) -> None:
        labels = (webhook, kind, namespace, operation, "true" if allowed else "false")
        children = self._request_children.get(labels)
        if children is None:
            children = self._request_children[labels] = (self.admission_requests.labels(*labels), self.admission_duration.labels(*labels))
        children[0].inc()
        children[1].observe(seconds)

    def observe_rules(self, responses: list[EngineResponse], kind: str, operation: str, seconds: float) -> None:
        """Engine time is measured per review, so every rule of that review is attributed the same duration."""
        for response in responses:
            policy = response.policy
            policy_type = "namespaced" if isinstance(policy, KyvernoPolicy) and policy.namespace else "cluster"
            for rule in response.rules:
                labels = (
                    response.policy_name,
                    policy_type,
                    rule.failure_action.lower(),
                    rule.name,
                    rule.rule_type,
                    rule.status,
                    kind,
                    operation,
                    "admission_request",
                )
                children = self._rule_children.get(labels)
                if children is None:
                    children = self._rule_children[labels] = (self.policy_results.labels(*labels), self.policy_duration.labels(*labels))
                children[0].inc()
                children[1].observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
