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
        "Time the engine spent on one rule in an admission review (the whole review's engine time when not measured per rule).",
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


def test_rule_duration_is_the_rule_own_time() -> None:
    cluster = policy("cluster")
    metrics = WebhookMetrics()
    metrics.retain([cluster])
    measured = RuleResponse("r", "Validation", "pass", started_ns=1, duration_ns=3_000_000)
    unmeasured = RuleResponse("r", "Validation", "fail")
    metrics.observe_rules([EngineResponse(cluster, {}, {}, rules=[measured])], "Pod", "CREATE", 1.0)
    metrics.observe_rules([EngineResponse(cluster, {}, {}, rules=[unmeasured])], "Pod", "CREATE", 1.0)
    text = generate_latest(metrics.registry).decode()
    sums = dict(re.findall(r'kyverno_policy_execution_duration_seconds_sum\{.*rule_result="(\w+)".*\} (\S+)', text))
    assert float(sums["pass"]) == 0.003 and float(sums["fail"]) == 1.0


def test_grafana_dashboard_queries_only_exported_series() -> None:
    import json
    from pathlib import Path

    dashboard = json.loads((Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "stockade-admission.json").read_text())
    cluster = policy("cluster")
    metrics = WebhookMetrics()
    metrics.retain([cluster])
    metrics.observe_request("/validate", "Pod", "", "CREATE", True, 0.01)
    metrics.observe_rules([EngineResponse(cluster, {}, {}, rules=[RuleResponse("r", "Validation", "pass")])], "Pod", "CREATE", 0.01)
    metrics.bad_requests.labels("/validate").inc()
    exported = set(re.findall(r"^(\w+)[{ ]", generate_latest(metrics.registry).decode(), re.M))
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    referenced = {name for expr in expressions for name in re.findall(r"\b(kyverno_\w+)\{", expr)}
    assert len(referenced) == 5 and referenced <= exported, referenced - exported
