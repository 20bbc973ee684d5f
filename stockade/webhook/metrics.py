"""Prometheus metrics named after Kyverno's so existing dashboards keep working.

Each server gets its own registry: tests start several servers in one process and must not share counters.

Label values never come from a request unchecked, so the number of series stays bounded whatever clients send:
policy and rule names come from loaded policies; a resource kind is reported only when a loaded policy names it
in ``match`` (wildcards name none), a namespace only when ``report_namespaces`` lists it, an operation only when it
is one of Kubernetes' four; anything else is reported as ``other`` (cluster-scoped requests keep the empty
namespace).  When policies are reloaded, the series of policies and kinds no longer loaded are removed, so the
series count is bounded by what the current policies name.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

# prometheus_client leaves this helper unannotated: typed here, at the one place it is imported.
_go_float_text: Callable[[float], str] = floatToGoString

from stockade.engine.match import parse_kind_selector
from stockade.engine.response import EngineResponse
from stockade.policy.autogen import block_kinds
from stockade.policy.model import KyvernoPolicy

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
OTHER = "other"  # the label value of every kind, namespace or operation outside the allowed sets
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
_KIND_POSITION = {"request": 1, "rule": 6}  # where resource_kind sits in each label tuple


def matched_kinds(policies: Iterable[Any]) -> frozenset[str]:
    """Kinds the policies' rules name in ``match`` (autogen rules included); wildcard selectors name none."""
    kinds: set[str] = set()
    for policy in policies:
        if not isinstance(policy, KyvernoPolicy):
            continue
        for rule in policy.rules:
            for selector in block_kinds(rule.match):
                kind = parse_kind_selector(str(selector))[2]
                if kind and "*" not in kind and "?" not in kind:
                    kinds.add(kind)
    return frozenset(kinds)


RULE_LABELS = (
    "policy_name",
    "policy_type",
    "policy_validation_mode",
    "rule_name",
    "rule_type",
    "rule_result",
    "resource_kind",
    "resource_request_operation",
    "rule_execution_cause",
)


class _RuleSeries:
    """One label set of the per-rule metrics: result count, duration sum, per-bucket counts, creation time."""

    __slots__ = ("count", "total", "buckets", "created")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # the last one is +Inf
        self.created = time.time()


class RuleResultsCollector:
    """``kyverno_policy_results`` and ``kyverno_policy_execution_duration_seconds`` as plain counters, rendered at
    scrape time.  A review updates one series per rule (14 for the PSS set); going through prometheus_client's
    Counter and Histogram children cost three locked increments and a bucket search for each of them.  The text
    rendered is the same as those metric types give (values, buckets, sum, count, created)."""

    def __init__(self, lock: threading.Lock) -> None:
        self.series: dict[tuple[str, ...], _RuleSeries] = {}
        self._lock = lock  # shared with WebhookMetrics: new series and removals vs. a scrape in another thread

    def add(self, labels: tuple[str, ...]) -> _RuleSeries:
        """A new series (observations happen on the event loop only, in ``WebhookMetrics.observe_rules``); added
        under the lock so a scrape never sees the dict change size while it copies it."""
        with self._lock:
            series = self.series[labels] = _RuleSeries()
        return series

    @staticmethod
    def _families() -> tuple[CounterMetricFamily, HistogramMetricFamily]:
        return (
            CounterMetricFamily("kyverno_policy_results", "Rule results of admission evaluations.", labels=RULE_LABELS),
            HistogramMetricFamily(
                "kyverno_policy_execution_duration_seconds",
                "Time the engine spent on one rule in an admission review (the whole review's engine time when not measured per rule).",
                labels=RULE_LABELS,
            ),
        )

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            rows = [(labels, s.count, s.total, list(s.buckets), s.created) for labels, s in self.series.items()]
        results, durations = self._families()
        bounds = [_go_float_text(b) for b in LATENCY_BUCKETS] + ["+Inf"]
        for labels, count, total, buckets, created in rows:
            results.add_metric(labels, float(count), created=created)
            cumulative, running = [], 0
            for bound, hits in zip(bounds, buckets):
                running += hits
                cumulative.append((bound, float(running)))
            durations.add_metric(labels, cumulative, total)
            durations.samples.append(Sample(durations.name + "_created", dict(zip(RULE_LABELS, labels)), created))
        yield results
        yield durations


class WebhookMetrics:
    """Admission request counters and latency histograms, per request and per policy rule."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, report_namespaces: Iterable[str] = ()) -> None:
        self.report_namespaces = frozenset(report_namespaces)
        self.kinds: frozenset[str] = frozenset()  # set by retain() from the loaded policies
        self._lock = threading.Lock()  # retain() runs in the reload thread, observations on the event loop
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
        self.rule_results = RuleResultsCollector(self._lock)
        self.registry.register(self.rule_results)
        # labels() validates and hashes on every call; admission traffic repeats the same few label sets
        self._request_children: dict[tuple[str, ...], tuple[Any, Any]] = {}
        self.bad_requests = Counter("kyverno_admission_invalid_requests", "Request bodies that were not AdmissionReviews.", ["webhook"], registry=self.registry)

    def retain(self, policies: Iterable[Any]) -> None:
        """Follow a policy reload: report the kinds these policies match, drop series of policies and kinds gone."""
        policies = list(policies)
        names = {str(getattr(policy, "name", "")) for policy in policies}
        kinds = matched_kinds(policies)
        with self._lock:
            self.kinds = kinds
            kept = kinds | {OTHER, ""}
            rule_series = self.rule_results.series
            for labels in [key for key in rule_series if key[0] not in names or key[_KIND_POSITION["rule"]] not in kept]:
                del rule_series[labels]
            for labels in [key for key in self._request_children if key[_KIND_POSITION["request"]] not in kept]:
                del self._request_children[labels]
                self.admission_requests.remove(*labels)
                self.admission_duration.remove(*labels)

    def _kind(self, kind: str) -> str:
        return kind if kind in self.kinds else OTHER

    def _namespace(self, namespace: str) -> str:
        return namespace if not namespace or namespace in self.report_namespaces else OTHER

    def observe_request(self, webhook: str, kind: str, namespace: str, operation: str, allowed: bool, seconds: float) -> None:
        labels = (webhook, self._kind(kind), self._namespace(namespace), operation if operation in OPERATIONS else OTHER, "true" if allowed else "false")
        children = self._request_children.get(labels)
        if children is None:
            with self._lock:
                children = self._request_children[labels] = (self.admission_requests.labels(*labels), self.admission_duration.labels(*labels))
        children[0].inc()
        children[1].observe(seconds)

    def observe_rules(self, responses: list[EngineResponse], kind: str, operation: str, seconds: float) -> None:
        """Each rule is observed with the time the engine measured for it; a rule without one (a timeout answer, a
        CEL policy) is attributed the whole review's engine time."""
        kind = self._kind(kind)
        operation = operation if operation in OPERATIONS else OTHER
        review_bucket = bisect.bisect_left(LATENCY_BUCKETS, seconds)  # the first bound >= seconds, as Histogram.observe
        collector = self.rule_results
        series_of = collector.series.get  # RuleResultsCollector.observe, inlined: a review updates a series per rule
        for response in responses:
            policy = response.policy
            policy_type = "namespaced" if isinstance(policy, KyvernoPolicy) and policy.namespace else "cluster"
            policy_name = response.policy_name
            for rule in response.rules:
                labels = (policy_name, policy_type, rule.failure_action.lower(), rule.name, rule.rule_type, rule.status, kind, operation, "admission_request")
                series = series_of(labels) or collector.add(labels)
                if rule.duration_ns:
                    rule_seconds = rule.duration_ns / 1e9
                    series.count += 1
                    series.total += rule_seconds
                    series.buckets[bisect.bisect_left(LATENCY_BUCKETS, rule_seconds)] += 1
                else:
                    series.count += 1
                    series.total += seconds
                    series.buckets[review_bucket] += 1

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
