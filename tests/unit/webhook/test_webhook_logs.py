"""Structured logs: one JSON line per denied rule with policy, rule, resource, reason and the trace id."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from webhook_helpers import pod, review

from stockade.webhook.admission import parse_review
from stockade.webhook.logs import JsonFormatter, TraceContextFilter, log_denial, log_unmatched
from stockade.webhook.policystore import PolicyStore
from stockade.webhook.tracing import Tracing, current_trace_ids


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(TraceContextFilter(current_trace_ids))
    logger = logging.getLogger("stockade.webhook.decisions")
    logger.addHandler(handler)
    previous = logger.level
    logger.setLevel(logging.DEBUG)
    yield stream
    logger.removeHandler(handler)
    logger.setLevel(previous)


def test_denial_lines_carry_rule_resource_reason_and_trace_id(policy_dir: Path, captured: io.StringIO) -> None:
    store = PolicyStore([str(policy_dir)])
    store.load()
    request = parse_review(review(pod(name="web", image="nginx:latest")))
    decision = store.snapshot.evaluator.validate(request, "Fail")  # type: ignore[union-attr]
    assert not decision.allowed
    tracing = Tracing("http://127.0.0.1:1", processor=SimpleSpanProcessor(InMemorySpanExporter()))
    with tracing.request_span("admission /validate/fail", {}, {}) as span:
        log_denial(request, decision)
        log_unmatched(request, decision)
    trace_id = f"{span.get_span_context().trace_id:032x}"
    lines = [json.loads(line) for line in captured.getvalue().splitlines()]
    denials = [line for line in lines if line["level"] == "info"]
    # the Audit policy's failure is not part of a denial: Kyverno evaluates Audit rules only after admitting
    assert {(d["policy"], d["rule"]) for d in denials} == {("require-team-label", "check-team")}
    for denial in denials:
        assert denial["resource"] == "Pod/default/web" and denial["operation"] == "CREATE" and denial["reason"]
        assert denial["trace_id"] == trace_id and len(denial["span_id"]) == 16
        assert denial["msg"].startswith("denied CREATE Pod/default/web: policy ")
