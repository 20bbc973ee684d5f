"""Evaluation in worker processes: a review that runs past its budget gets the failurePolicy answer and its worker
is replaced; deep but legal JSON is evaluated; what is too deep is refused with the reason."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from webhook_helpers import pod, review

from stockade.webhook.admission import parse_review
from stockade.webhook.isolation import (
    MAX_JSON_DEPTH,
    EvaluationPool,
    IsolatedEvaluations,
    JsonTooDeep,
    default_worker_memory,
    json_depth,
)
from stockade.webhook.policystore import PolicyStore

SLOW_POLICY = """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: slow-nested-foreach
spec:
  validationFailureAction: Enforce
  failurePolicy: {failure}
  webhookTimeoutSeconds: 2
  rules:
  - name: pairwise
    match:
      any:
      - resources:
          kinds: [Pod]
          names: ["big*"]
    validate:
      foreach:
      - list: "request.object.spec.containers"
        foreach:
        - list: "request.object.spec.containers"
          deny:
            conditions:
              any:
              - key: "{{{{ element.name }}}}"
                operator: Equals
                value: "never"
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: require-team-label
spec:
  validationFailureAction: Enforce
  failurePolicy: {failure}
  rules:
  - name: check-team
    match:
      any:
      - resources:
          kinds: [Pod]
    validate:
      message: "label 'team' is required"
      pattern:
        metadata:
          labels:
            team: "?*"
"""


def big_pod(containers: int = 2000) -> dict[str, Any]:
    """Nested foreach over 2,000 containers: four million iterations, minutes of evaluation."""
    body = pod("big", labels={"team": "a"})
    body["spec"]["containers"] = [{"name": f"c{i}", "image": "nginx:1.27"} for i in range(containers)]
    return body


def deep_review_bytes(depth: int) -> bytes:
    shell = review(pod("deep"))
    shell["request"]["object"]["spec"]["deep"] = "@@DEEP@@"
    inner = '{"a":' * depth + "{}" + "}" * depth
    return json.dumps(shell).replace('"@@DEEP@@"', inner).encode()


@pytest.fixture()
def store(tmp_path: Path) -> PolicyStore:
    (tmp_path / "policies.yaml").write_text(SLOW_POLICY.format(failure="Fail"))
    store = PolicyStore([str(tmp_path)])
    store.load()
    return store


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 60))  # a hang fails instead of blocking the suite


def test_budget_overrun_answers_failure_policy_and_replaces_the_worker(store: PolicyStore) -> None:
    async def scenario() -> None:
        pool = EvaluationPool(2, memory_bytes=default_worker_memory(2))
        await pool.start(list(store.snapshot.documents))
        evaluations = IsolatedEvaluations(pool)
        try:
            slow_body = json.dumps(review(big_pod())).encode()
            slow_review = parse_review(json.loads(slow_body))
            arrived = time.monotonic()
            slow = asyncio.create_task(evaluations.decide(store.snapshot, slow_review, slow_body, "validate", None, arrived))
            await asyncio.sleep(0.3)
            # another review is answered by the other worker while the slow one runs
            quick_body = json.dumps(review(pod("web"))).encode()
            started = time.monotonic()
            decision, answer = await evaluations.decide(store.snapshot, parse_review(json.loads(quick_body)), quick_body, "validate", None, time.monotonic())
            assert time.monotonic() - started < 1.0 and not slow.done()
            assert not decision.allowed and answer is not None and b"rule check-team failed" in answer
            decision, answer = await slow
            elapsed = time.monotonic() - arrived
            assert 1.0 < elapsed < 2.0 + 2.0
            assert answer is None and not decision.allowed
            assert "policy slow-nested-foreach timed out" in decision.message and "2s budget" in decision.message
            assert pool.replaced == 1
            # the replacement answers later reviews
            for _ in range(3):
                decision, answer = await evaluations.decide(store.snapshot, parse_review(json.loads(quick_body)), quick_body, "validate", None, time.monotonic())
                assert answer is not None and json.loads(answer)["response"]["allowed"] is False
        finally:
            await pool.close(0)

    run(scenario())


def test_budget_overrun_under_ignore_admits_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / "policies.yaml").write_text(SLOW_POLICY.format(failure="Ignore"))
    store = PolicyStore([str(tmp_path)])
    store.load()

    async def scenario() -> None:
        pool = EvaluationPool(1)
        await pool.start(list(store.snapshot.documents))
        try:
            body = json.dumps(review(big_pod())).encode()
            decision, answer = await IsolatedEvaluations(pool).decide(store.snapshot, parse_review(json.loads(body)), body, "validate", "Ignore", time.monotonic())
            assert decision.allowed and answer is None
            assert any("slow-nested-foreach" in w and "timed out" in w for w in decision.warnings)
        finally:
            await pool.close(0)

    run(scenario())


@pytest.mark.parametrize("depth", [325, 3000])
def test_deep_objects_are_evaluated(store: PolicyStore, depth: int) -> None:
    body = deep_review_bytes(depth)

    async def scenario() -> None:
        pool = EvaluationPool(1)
        await pool.start(list(store.snapshot.documents))
        try:
            from stockade.webhook.isolation import read_review_body

            value = await read_review_body(body)  # beyond orjson's 1,024 levels: on the large-stack thread
            assert json_depth(value) == depth + 5
            parsed = parse_review(value)
            decision, answer = await IsolatedEvaluations(pool).decide(store.snapshot, parsed, body, "validate", None, time.monotonic())
            assert answer is not None
            response = json.loads(answer)["response"]
            assert response["allowed"] is False and "rule check-team failed" in response["status"]["message"]
        finally:
            await pool.close(0)

    run(scenario())


def test_deeper_than_the_kubernetes_limit_is_refused_with_the_reason() -> None:
    async def scenario() -> None:
        from stockade.webhook.isolation import read_review_body

        with pytest.raises(JsonTooDeep, match=f"deeper than {MAX_JSON_DEPTH} levels"):
            await read_review_body(deep_review_bytes(MAX_JSON_DEPTH + 10))

    run(scenario())


def test_worker_memory_cap_keeps_workers_and_server_inside_the_limit() -> None:
    limit = 512 * 1024 * 1024
    for workers in (1, 2):
        assert workers * default_worker_memory(workers, limit) + 192 * 1024 * 1024 <= limit


def test_policy_changes_reach_the_workers(store: PolicyStore, tmp_path: Path) -> None:
    allow_all = [d for d in store.snapshot.documents if d.data["metadata"]["name"] != "require-team-label"]

    async def scenario() -> None:
        pool = EvaluationPool(1)
        await pool.start(list(store.snapshot.documents))
        try:
            body = json.dumps(review(pod("web"))).encode()
            parsed = parse_review(json.loads(body))
            decision, _ = await IsolatedEvaluations(pool).decide(store.snapshot, parsed, body, "validate", None, time.monotonic())
            assert not decision.allowed
            pool.publish(allow_all)
            await asyncio.sleep(0)
            decision, answer = await IsolatedEvaluations(pool).decide(store.snapshot, parsed, body, "validate", None, time.monotonic())
            assert answer is not None and json.loads(answer)["response"]["allowed"] is True
        finally:
            await pool.close(0)

    run(scenario())
