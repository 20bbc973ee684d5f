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


def test_a_pool_starts_small_and_grows_when_a_review_finds_every_worker_busy(store: PolicyStore) -> None:
    """min_size workers start; a review that finds them all busy starts another (up to size) and waits in the pool,
    not behind the busy worker's review, so the new worker answers it while the slow review still runs."""

    async def scenario() -> None:
        pool = EvaluationPool(2, min_size=1)
        await pool.start(list(store.snapshot.documents))
        evaluations = IsolatedEvaluations(pool)
        try:
            assert pool.worker_count == 1
            quick_body = json.dumps(review(pod("web"))).encode()
            for _ in range(3):  # one at a time: the one worker is idle each time, nothing grows
                await evaluations.decide(store.snapshot, parse_review(json.loads(quick_body)), quick_body, "validate", None, time.monotonic())
            assert pool.worker_count == 1
            slow_body = json.dumps(review(big_pod())).encode()
            slow = asyncio.create_task(evaluations.decide(store.snapshot, parse_review(json.loads(slow_body)), slow_body, "validate", None, time.monotonic()))
            await asyncio.sleep(0.3)
            decision, answer = await evaluations.decide(store.snapshot, parse_review(json.loads(quick_body)), quick_body, "validate", None, time.monotonic())
            assert not slow.done(), "the quick review waited for the slow one"
            assert answer is not None and b"rule check-team failed" in answer and not decision.allowed
            assert pool.worker_count == 2
            busy = [
                asyncio.create_task(evaluations.decide(store.snapshot, parse_review(json.loads(quick_body)), quick_body, "validate", None, time.monotonic()))
                for _ in range(6)
            ]
            await asyncio.gather(*busy)
            assert pool.worker_count == 2  # never past size
            decision, _ = await slow
            assert "timed out" in decision.message
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


class RecordingPool:
    """Stands in for EvaluationPool: records what a worker's pipe delivered."""

    def __init__(self) -> None:
        self.received: list[tuple[int, bytes]] = []

    def _received(self, worker: Any, kind: int, payload: bytes) -> None:
        self.received.append((kind, payload))


def test_frames_split_or_batched_on_the_pipe_are_each_delivered_once() -> None:
    from stockade.webhook.isolation import MESSAGE_READY, MESSAGE_RESULT, _Worker, frame

    frames = [(MESSAGE_RESULT, b"first" * 1000), (MESSAGE_READY, b""), (MESSAGE_RESULT, b"x")]
    stream = b"".join(frame(kind, payload) for kind, payload in frames)

    async def scenario() -> None:
        for chunks in ([stream], [stream[i : i + 1] for i in range(len(stream))], [stream[:7], stream[7:5003], stream[5003:]]):
            pool = RecordingPool()
            worker = _Worker(pool, process=None)  # type: ignore[arg-type]
            for chunk in chunks:
                worker.data_received(chunk)
            assert pool.received == frames

    run(scenario())


def test_worker_results_keep_answer_bytes_summaries_and_errors() -> None:
    from stockade.webhook.isolation import _FRAME, parse_result, result_frame

    answer = b'{"response":{"allowed":false}}'
    summaries = [["cpol/require-team-label", "ClusterPolicy", "", "require-team-label", [["check-team", "Validation", "fail", "label 'team' is required", "Enforce"]]]]
    request_id, parsed = parse_result(result_frame(41, answer, False, summaries, False, "")[_FRAME.size :])
    assert request_id == 41 and parsed.answer == answer and parsed.allowed is False and parsed.summaries == summaries and not parsed.retire
    request_id, parsed = parse_result(result_frame(42, None, False, [], True, "evaluation exceeded the worker memory limit")[_FRAME.size :])
    assert request_id == 42 and parsed.answer is None and parsed.retire and parsed.error == "evaluation exceeded the worker memory limit"


def test_reviews_beyond_the_idle_workers_wait_for_one(store: PolicyStore) -> None:
    async def scenario() -> None:
        pool = EvaluationPool(1)
        await pool.start(list(store.snapshot.documents))
        evaluations = IsolatedEvaluations(pool)
        try:
            bodies = [json.dumps(review(pod(f"web-{i}", labels={"team": "a"} if i % 2 else None))).encode() for i in range(6)]
            results = await asyncio.gather(
                *(evaluations.decide(store.snapshot, parse_review(json.loads(b)), b, "validate", None, time.monotonic()) for b in bodies)
            )
            for index, (decision, answer) in enumerate(results):
                assert answer is not None and json.loads(answer)["response"]["uid"] == json.loads(bodies[index])["request"]["uid"]
                assert decision.allowed is bool(index % 2)
            assert pool.replaced == 0
        finally:
            await pool.close(0)

    run(scenario())


def test_rule_properties_survive_the_worker_boundary() -> None:
    """Reports are written by the parent from the worker's summaries: a rule's properties (reportProperties, audit
    annotations, podSecurity controls) must travel with it, or admission reports lose them."""
    from stockade.engine.response import EngineResponse, RuleResponse
    from stockade.policy.model import KyvernoPolicy
    from stockade.webhook.isolation import rebuild_responses, summarize

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    policy = KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "require-owner"}, "spec": {"rules": []}})
    response = EngineResponse(policy, pod, pod)
    response.rules = [RuleResponse("check-owner", "Validation", "pass", "ok", properties={"objName": "bar", "operation": "CREATE"})]
    wire = json.loads(json.dumps(summarize([response])))
    rebuilt = rebuild_responses(wire, {}, pod)
    assert rebuilt[0].rules[0].properties == {"objName": "bar", "operation": "CREATE"}


def test_rebuilt_rule_responses_carry_every_summarized_field_and_defaults_for_the_rest() -> None:
    """The parent rebuilds RuleResponses positionally (the cheap way, once per rule of every review): each field
    the worker summarizes comes back in its own place, every other field gets its declared default."""
    import dataclasses

    from stockade.engine.response import EngineResponse, ImageCheck, RuleResponse
    from stockade.webhook.isolation import rebuild_responses, summarize

    carried = {
        "name": "check-owner",
        "rule_type": "Validation",
        "status": "fail",
        "message": "owner label missing",
        "exceptions": ["ops/allow-web"],
        "properties": {"objName": "bar"},
        "failure_action": "Enforce",
        "started_ns": 1_700_000_000_000_000_001,
        "duration_ns": 4321,
        "image_checks": [ImageCheck("ghcr.io/a/b:1", "sha256:00", "registry", "pass", 5, 6, [["GET", "https://ghcr.io/v2/", 200, 7, 8]])],
    }
    original = RuleResponse(**carried)  # type: ignore[arg-type]
    wire = json.loads(json.dumps(summarize([EngineResponse(None, {}, {}, [original])])))
    (rebuilt,) = rebuild_responses(wire, {}, {})
    (rule,) = rebuilt.rules
    defaults = RuleResponse("n", "t", "s")
    for declared in dataclasses.fields(RuleResponse):
        expected = carried[declared.name] if declared.name in carried else getattr(defaults, declared.name)
        assert getattr(rule, declared.name) == expected, declared.name
