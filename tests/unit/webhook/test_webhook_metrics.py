"""The per-rule metrics are kept as plain counters and rendered at scrape time; the text must be what
prometheus_client's own Counter and Histogram would render for the same observations."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from stockade.engine.response import EngineResponse, RuleResponse
from stockade.policy.model import KyvernoPolicy
from stockade.webhook.metrics import LATENCY_BUCKETS, RULE_LABELS, WebhookMetrics


def policy(name: str, namespace: str = "") -> KyvernoPolicy:
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    rule = {"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "validate": {"pattern": {}}}
    return KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "Policy" if namespace else "ClusterPolicy", "metadata": metadata, "spec": {"rules": [rule]}})


def without_created(text: str) -> str:
    return re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", text)


def test_rule_metrics_render_like_prometheus_counter_and_histogram() -> None:
    cluster, namespaced = policy("cluster"), policy("local", "team")
    metrics = WebhookMetrics()
    metrics.retain([cluster, namespaced])
    reference = CollectorRegistry()
    results = Counter("kyverno_policy_results", "Rule results of admission evaluations.", RULE_LABELS, registry=reference)
    durations = Histogram(
        "kyverno_policy_execution_duration_seconds",
        "Time spent evaluating policies for one admission review, by rule result.",
        RULE_LABELS,
        buckets=LATENCY_BUCKETS,
        registry=reference,
    )
    # on a bound, between bounds, below the first, above the last
    for index, seconds in enumerate([0.0005, 0.0007, 0.0001, 0.003, 0.0025, 9.0, 0.7]):
        status = ("pass", "fail", "skip")[index % 3]
        action = ("Audit", "Enforce")[index % 2]
        responses = [EngineResponse(p, {}, {}, rules=[RuleResponse("r", "Validation", status, failure_action=action)]) for p in (cluster, namespaced)]
        metrics.observe_rules(responses, "Pod", "CREATE", seconds)
        for name, kind in (("cluster", "cluster"), ("local", "namespaced")):
            labels = (name, kind, action.lower(), "r", "Validation", status, "Pod", "CREATE", "admission_request")
            results.labels(*labels).inc()
            durations.labels(*labels).observe(seconds)
    ours = without_created(metrics.exposition().decode())
    theirs = without_created(generate_latest(reference).decode())
    assert theirs.strip() and theirs in ours
