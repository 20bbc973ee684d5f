"""Admission evaluation in worker processes that can be abandoned.

A policy is user input: a nested ``foreach`` over a large list, a CEL expression building a huge string or a deeply
nested object can take seconds or gigabytes.  Evaluating on the server's event loop would stall every other review,
the health probes and SIGTERM behind it, and a timeout checked after evaluation returns is no bound at all.  So the
server keeps only HTTP, parsing of the review header and bookkeeping; evaluation runs in a pool of worker processes:

* each worker holds its own PolicyStore, rebuilt from the policy *documents* the parent sends on start and on every
  store change (plain dicts pickle cheaply and once per change, compiled policies do not pickle at all);
* a review travels as its raw bytes plus a small header; the answer comes back as the serialized AdmissionReview
  response plus a compact rule summary (enough for metrics, Events and PolicyReports);
* when a review's budget (the smallest timeout of the policies in play) runs out, the parent answers with the
  failurePolicy of those policies, SIGKILLs the worker and starts a fresh one at once;
* a worker's data segment is capped (RLIMIT_DATA), so a runaway allocation fails or kills that worker only;
* evaluation runs in a thread with a large stack and a raised recursion limit, so JSON nested up to
  ``MAX_JSON_DEPTH`` levels (Kubernetes' own decoder limit) is evaluated rather than refused.

Cluster lookups (namespace labels, roles, configMap/apiCall context) are answered inside the worker by clients it
builds itself from the same kubeconfig (``setup``): no request/response protocol back to the parent is needed in the
middle of an evaluation, and those calls are cut off by the same kill as the evaluation that made them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import multiprocessing
import os
import pickle
import resource
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from stockade.engine.engine import Engine
from stockade.engine.response import EngineResponse, RuleResponse
from stockade.policy.loader import Document
from stockade.webhook.admission import (
    FAILURE_POLICY_FAIL,
    FAILURE_POLICY_IGNORE,
    AdmissionDecision,
    AdmissionEvaluator,
    AdmissionRequest,
    InvalidAdmissionReview,
    block_message,
    blocking_rules,
    failure_policy,
    parse_review,
    resource_label,
    review_response,
    timed_out_response,
)

log = logging.getLogger("stockade.webhook")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # the server's and its workers' log lines

MAX_JSON_DEPTH = 10_000
"""Deepest nesting evaluated.  Go's encoding/json (and sigs.k8s.io/json, which the apiserver decodes with) stops at
10,000 levels, so no stored object is deeper; anything deeper is refused with a clear error."""
EVALUATION_STACK_BYTES = 64 * 1024 * 1024  # measured: 10,000 levels through validate+mutate need well under this
EVALUATION_RECURSION_LIMIT = 4 * MAX_JSON_DEPTH  # engine walkers use up to ~3 frames per nesting level
PARENT_MEMORY_RESERVE = 192 * 1024 * 1024  # the server process itself (HTTP, caches, controllers)
MIN_WORKER_MEMORY = EVALUATION_STACK_BYTES + 96 * 1024 * 1024  # imports + compiled policies + the evaluation stack
DEFAULT_MEMORY_BUDGET = 512 * 1024 * 1024  # the Helm chart's container limit, used when no cgroup limit is readable
DEADLINE_MARGIN_SECONDS = 0.5  # answer this much before the budget ends, so the answer reaches the apiserver in time
SHUTDOWN_DRAIN_SECONDS = 2.0


class JsonTooDeep(InvalidAdmissionReview):
    """The review nests deeper than MAX_JSON_DEPTH (the apiserver itself would never send it)."""


class WorkerUnavailable(Exception):
    """No worker answered: it was killed (budget, memory) or the pool is shutting down."""


# -- decoding ---------------------------------------------------------------------------------------------------


def _fast_loads() -> Callable[[bytes], Any]:
    try:
        import orjson

        return orjson.loads
    except ImportError:  # pragma: no cover - orjson is part of the server extra
        return json.loads


_loads = _fast_loads()


def json_depth(value: Any) -> int:
    """Nesting depth of decoded JSON, iteratively (a recursive walk is what this guards against)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in item.values() if isinstance(child, (dict, list)))
        elif isinstance(item, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in item if isinstance(child, (dict, list)))
    return deepest


def decode_review_body(body: bytes) -> Any:
    """orjson for the usual review; JSON nested beyond orjson's 1,024 levels goes through the stdlib decoder, which
    needs a thread with a large stack and a raised recursion limit (see ``DeepStackRunner``).  Raises ValueError
    (JsonTooDeep beyond MAX_JSON_DEPTH)."""
    try:
        return _loads(body)
    except ValueError as fast_error:
        try:
            value = json.loads(body)
        except RecursionError:
            raise JsonTooDeep(f"request nests deeper than {MAX_JSON_DEPTH} levels (the Kubernetes JSON decoder limit)") from None
        except ValueError:
            raise fast_error from None
    if json_depth(value) > MAX_JSON_DEPTH:
        raise JsonTooDeep(f"request nests deeper than {MAX_JSON_DEPTH} levels (the Kubernetes JSON decoder limit)")
    return value


def raise_recursion_limit() -> None:
    """Deep JSON needs more frames than Python's default 1,000; only threads with a large stack get that deep."""
    if sys.getrecursionlimit() < EVALUATION_RECURSION_LIMIT:
        sys.setrecursionlimit(EVALUATION_RECURSION_LIMIT)


def start_deep_stack_thread(target: Callable[[], None], name: str) -> threading.Thread:
    """A daemon thread whose C stack holds EVALUATION_RECURSION_LIMIT frames."""
    previous = threading.stack_size(EVALUATION_STACK_BYTES)
    try:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
    finally:
        threading.stack_size(previous)
    return thread


class DeepStackRunner:
    """One large-stack thread in the server process for the rare review orjson refuses as too deep."""

    def __init__(self) -> None:
        self._jobs: Any = None
        self._lock = threading.Lock()

    def _ensure(self) -> Any:
        import queue

        with self._lock:
            if self._jobs is None:
                raise_recursion_limit()
                self._jobs = queue.SimpleQueue()
                start_deep_stack_thread(self._run, "stockade-deep-json")
            return self._jobs

    def _run(self) -> None:
        while True:
            function, argument, future, loop = self._jobs.get()
            try:
                result = function(argument)
            except BaseException as exc:  # handed back to the awaiting coroutine
                loop.call_soon_threadsafe(_settle, future, None, exc)
            else:
                loop.call_soon_threadsafe(_settle, future, result, None)

    async def run(self, function: Callable[[Any], Any], argument: Any) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._ensure().put((function, argument, future, loop))
        return await future


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


deep_stack = DeepStackRunner()


async def read_review_body(body: bytes) -> Any:
    """Decode an AdmissionReview body on the event loop when orjson can, else on the deep-stack thread."""
    try:
        return _loads(body)
    except ValueError:
        return await deep_stack.run(decode_review_body, body)


# -- decisions shared by both sides ------------------------------------------------------------------------------


def evaluate_review(evaluator: AdmissionEvaluator, review: AdmissionRequest, phase: str, failure: str | None, arrived: float) -> AdmissionDecision:
    """The one evaluation entry point, used in-process and in workers."""
    evaluate = evaluator.mutate if phase == "mutate" else evaluator.validate
    return evaluate(review, failure, arrived)


def failure_decision(review: AdmissionRequest, failure: str | None, reason: str) -> AdmissionDecision:
    """Evaluation could not finish (engine error, worker lost): the endpoint's failurePolicy decides."""
    if failure == FAILURE_POLICY_IGNORE:
        return AdmissionDecision(True, warnings=[f"stockade: policy evaluation failed: {reason}"])
    return AdmissionDecision(False, f"stockade: policy evaluation failed: {reason}")


def deadline_decision(review: AdmissionRequest, policies: list[Any], budget: float, phase: str = "validate") -> AdmissionDecision:
    """The answer when a review's budget ran out before its evaluation finished: every policy in play is reported as
    timed out; the request is denied when one of them has failurePolicy Fail, otherwise admitted with warnings."""
    rule_type = "Mutation" if phase == "mutate" else "Validation"
    responses = [timed_out_response(p, None, review.subject, budget, rule_type) for p in policies]
    blocked = blocking_rules(responses)
    if blocked:
        return AdmissionDecision(False, block_message(resource_label(review.subject, review), blocked), responses=responses)
    warnings = [f"policy {r.policy_name}: {r.rules[0].message}" for r in responses if r.rules]
    return AdmissionDecision(True, warnings=warnings, responses=responses)


RuleSummary = tuple[str, str, str, str, str]  # name, rule type, status, message, failure action
PolicySummary = tuple[str, str, str, str, tuple[RuleSummary, ...]]  # key, kind, namespace, name, rules


def summarize(responses: list[EngineResponse]) -> tuple[PolicySummary, ...]:
    """What the parent needs of the engine responses (metrics, Events, PolicyReports) as plain tuples."""
    return tuple(
        (
            str(getattr(r.policy, "key", r.policy_name)),
            str(getattr(r.policy, "kind", "")),
            str(getattr(r.policy, "namespace", "") or ""),
            r.policy_name,
            tuple((rule.name, rule.rule_type, rule.status, rule.message, rule.failure_action) for rule in r.rules),
        )
        for r in responses
    )


@dataclass(frozen=True)
class PolicyReference:
    """Stands in for a policy the parent's snapshot no longer has (the worker answered from an older one)."""

    key: str
    kind: str
    namespace: str
    name: str
    spec: dict[str, Any] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


def rebuild_responses(summaries: tuple[PolicySummary, ...], policies: dict[str, Any], subject: dict[str, Any]) -> list[EngineResponse]:
    responses = []
    for key, kind, namespace, name, rules in summaries:
        policy = policies.get(key) or PolicyReference(key, kind, namespace, name)
        response = EngineResponse(policy, subject, subject)
        response.rules = [RuleResponse(n, t, s, m, failure_action=a) for n, t, s, m, a in rules]
        responses.append(response)
    return responses


# -- worker side --------------------------------------------------------------------------------------------------


def logging_worker_main(log_level: int, *arguments: Any) -> None:
    """``worker_main`` logging like the server (format, level): a forkserver child inherits no logging setup."""
    logging.basicConfig(level=log_level, format=LOG_FORMAT)
    worker_main(*arguments)


class DocumentsSource:
    """The policy documents (and run-time Engine settings) the parent last sent; the generation is the fingerprint."""

    def __init__(self) -> None:
        self.generation = -1
        self.current: list[Document] = []
        self.engine_settings: dict[str, Any] = {}

    def fingerprint(self) -> Hashable:
        return self.generation

    def documents(self) -> list[Document]:
        return list(self.current)


WorkerSetup = Callable[[], dict[str, Any]]
"""Picklable; called once in each worker and returns the PolicyStore keyword arguments (engine factory with cluster
providers, image verifier and cache, namespace labels, evaluator options, exception namespaces)."""


def worker_main(connection: Any, setup: WorkerSetup | None, memory_bytes: int | None) -> None:
    """Entry point of a worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the server decides when we go
    if memory_bytes:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))
    raise_recursion_limit()
    done = threading.Event()
    start_deep_stack_thread(lambda: _serve_worker(connection, setup, done), "stockade-evaluation")
    done.wait()


def _serve_worker(connection: Any, setup: WorkerSetup | None, done: threading.Event) -> None:
    from stockade.webhook.policystore import PolicyStore

    try:
        source = DocumentsSource()
        options = setup() if setup is not None else {}
        build_engine = options.pop("engine_factory", None) or Engine
        options["engine_factory"] = lambda **kwargs: build_engine(**source.engine_settings, **kwargs)
        options["log_rejections"] = False  # the server's own store names every policy left out, and why
        store = PolicyStore(sources=[source], **options)
        while True:
            try:
                message = pickle.loads(connection.recv_bytes())
            except EOFError:
                return
            if message[0] == "policies":
                source.generation, source.current, source.engine_settings = message[1], message[2], message[3]
                store.load()
                connection.send_bytes(pickle.dumps(("ready", message[1]), protocol=pickle.HIGHEST_PROTOCOL))
            elif message[0] == "review":
                _, request_id, phase, failure, arrived, body = message
                assert store.snapshot is not None
                outcome = _evaluate_in_worker(store.snapshot.evaluator, body, phase, failure, arrived)
                connection.send_bytes(pickle.dumps(("result", request_id, *outcome), protocol=pickle.HIGHEST_PROTOCOL))
                if outcome[3]:
                    return  # state after a MemoryError is not trusted: the parent starts a fresh worker
    finally:
        done.set()


def _evaluate_in_worker(evaluator: AdmissionEvaluator, body: bytes, phase: str, failure: str | None, arrived: float) -> tuple[bytes | None, bool, tuple[PolicySummary, ...], bool, str]:
    """(answer bytes, allowed, rule summaries, retire this worker, error); with an error the parent answers."""
    try:
        review = parse_review(decode_review_body(body))
        decision = evaluate_review(evaluator, review, phase, failure, arrived)
        return _dumps(review_response(review, decision)), decision.allowed, summarize(decision.responses), False, ""
    except MemoryError:
        return None, False, (), True, "evaluation exceeded the worker memory limit"
    except RecursionError:
        return None, False, (), False, f"object nests too deeply to evaluate (limit {MAX_JSON_DEPTH} levels)"
    except InvalidAdmissionReview as exc:
        return None, False, (), False, str(exc)
    except Exception as exc:  # an engine bug must not take the worker down; failurePolicy decides
        log.exception("evaluation failed")
        return None, False, (), False, f"{type(exc).__name__}: {exc}"


def _dumps(value: Any) -> bytes:
    try:
        import orjson

        return orjson.dumps(value)
    except ImportError:  # pragma: no cover
        return json.dumps(value, separators=(",", ":")).encode()


# -- parent side --------------------------------------------------------------------------------------------------


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) or 1


def cgroup_memory_limit() -> int | None:
    """The container's memory limit (cgroup v2, then v1), or None when unlimited or unreadable."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = open(path).read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 50:
            return int(text)
        return None
    return None


def default_worker_memory(workers: int, limit: int | None = None) -> int:
    """Per-worker data cap so that workers x cap + the server stays below the container limit (the chart's 512 MiB
    when no cgroup limit is readable); never below what a worker needs to start."""
    budget = limit if limit is not None else cgroup_memory_limit() or DEFAULT_MEMORY_BUDGET
    return max(MIN_WORKER_MEMORY, (budget - PARENT_MEMORY_RESERVE) // max(1, workers))


@dataclass(frozen=True)
class WorkerAnswer:
    answer: bytes | None
    allowed: bool
    summaries: tuple[PolicySummary, ...]
    retire: bool
    error: str


_HEADER = struct.Struct("!i")
_LONG_HEADER = struct.Struct("!Q")


class _Worker:
    """One worker process and the parent's end of its pipe (multiprocessing's Connection framing, read with asyncio)."""

    def __init__(self, process: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.process = process
        self.reader = reader
        self.writer = writer
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending: dict[int, asyncio.Future[WorkerAnswer]] = {}
        self.listener: asyncio.Task[None] | None = None
        self.dead = False

    def send(self, payload: bytes) -> None:
        if len(payload) > 0x7FFFFFFF:
            self.writer.write(_HEADER.pack(-1) + _LONG_HEADER.pack(len(payload)) + payload)
        else:
            self.writer.write(_HEADER.pack(len(payload)) + payload)

    async def receive(self) -> bytes:
        (size,) = _HEADER.unpack(await self.reader.readexactly(4))
        if size == -1:
            (size,) = _LONG_HEADER.unpack(await self.reader.readexactly(8))
        return await self.reader.readexactly(size)

    def kill(self) -> None:
        self.dead = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self.process.kill()
        self.writer.close()


class EvaluationPool:
    """``size`` worker processes, one review at a time each; see the module docstring."""

    def __init__(self, size: int, setup: WorkerSetup | None = None, memory_bytes: int | None = None, start_method: str = "forkserver") -> None:
        self.size = size
        self.setup = setup
        self.memory_bytes = memory_bytes
        self.log_level = logging.getLogger().getEffectiveLevel()  # workers log at the server's level
        self.context = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            # workers fork from a server that has the engine imported already: a replacement is ready in milliseconds
            self.context.set_forkserver_preload(["stockade.webhook.isolation", "stockade.webhook.policystore", "stockade.celpolicy"])
        self._documents: bytes = b""
        self._generation = 0
        self._idle: asyncio.Queue[_Worker] = asyncio.Queue()
        self._workers: set[_Worker] = set()
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self._spawning: set[asyncio.Task[None]] = set()
        self.replaced = 0  # workers killed and started anew (budget, memory, crash)

    # lifecycle
    async def start(self, documents: list[Document], engine_settings: dict[str, Any] | None = None) -> None:
        """Start every worker and wait until each has built the given policies."""
        self._loop = asyncio.get_running_loop()
        self._set_documents(documents, engine_settings or {})
        workers = await asyncio.gather(*(self._spawn() for _ in range(self.size)))
        await asyncio.gather(*(asyncio.wait_for(asyncio.shield(w.ready), 120) for w in workers))

    def publish(self, documents: list[Document], engine_settings: dict[str, Any] | None = None) -> None:
        """A new policy set (called from any thread, e.g. the store's reload); every worker rebuilds its snapshot.
        ``engine_settings`` are Engine keyword arguments decided at run time (Kyverno's ConfigMap registry settings)."""
        if self._loop is None or self._closing:
            return
        self._loop.call_soon_threadsafe(self._broadcast, list(documents), dict(engine_settings or {}))

    def _set_documents(self, documents: list[Document], engine_settings: dict[str, Any]) -> None:
        self._generation += 1
        self._documents = pickle.dumps(("policies", self._generation, documents, engine_settings), protocol=pickle.HIGHEST_PROTOCOL)

    def _broadcast(self, documents: list[Document], engine_settings: dict[str, Any]) -> None:
        self._set_documents(documents, engine_settings)
        for worker in list(self._workers):
            if not worker.dead:
                worker.send(self._documents)

    async def _spawn(self) -> _Worker:
        parent_end, child_end = self.context.Pipe(duplex=True)
        process = self.context.Process(target=logging_worker_main, args=(self.log_level, child_end, self.setup, self.memory_bytes), name="stockade-evaluator", daemon=True)
        await asyncio.to_thread(process.start)
        child_end.close()
        import socket

        sock = socket.socket(fileno=os.dup(parent_end.fileno()))
        parent_end.close()
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=1 << 20)
        worker = _Worker(process, reader, writer)
        self._workers.add(worker)
        worker.listener = asyncio.create_task(self._listen(worker))
        worker.send(self._documents)
        return worker

    def _replace(self, worker: _Worker) -> None:
        """Kill ``worker`` (if still alive) and start its successor right away."""
        worker.kill()
        self._workers.discard(worker)
        for future in worker.pending.values():
            if not future.done():
                future.set_exception(WorkerUnavailable("evaluation worker exited"))
        worker.pending.clear()
        if not worker.ready.done():
            worker.ready.set_exception(WorkerUnavailable("evaluation worker exited before it was ready"))
            worker.ready.exception()  # retrieved: nobody may be waiting for it
        reaper = asyncio.get_running_loop().run_in_executor(None, worker.process.join, 5)
        reaper.add_done_callback(lambda f: f.exception())
        if self._closing:
            return
        self.replaced += 1
        task = asyncio.create_task(self._respawn(not worker.ready.done() or worker.ready.exception() is not None))
        self._spawning.add(task)
        task.add_done_callback(self._spawning.discard)

    async def _respawn(self, failed_early: bool) -> None:
        if failed_early:
            await asyncio.sleep(1.0)  # a worker that cannot even start (e.g. memory cap too small) must not spin
        if not self._closing:
            await self._spawn()

    async def _listen(self, worker: _Worker) -> None:
        try:
            while True:
                message = pickle.loads(await worker.receive())
                if message[0] == "ready":
                    if not worker.ready.done():
                        worker.ready.set_result(None)
                        self._idle.put_nowait(worker)
                elif message[0] == "result":
                    _, request_id, answer, allowed, summaries, retire, error = message
                    future = worker.pending.pop(request_id, None)
                    if future is not None and not future.done():
                        future.set_result(WorkerAnswer(answer, allowed, summaries, retire, error))
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            return
        if not worker.dead:
            log.warning("evaluation worker %s exited (code %s); starting another", worker.process.pid, worker.process.exitcode)
        self._replace(worker)

    async def close(self, drain_seconds: float = SHUTDOWN_DRAIN_SECONDS) -> None:
        """Let running evaluations finish for up to ``drain_seconds``, then kill every worker (their reviews get the
        failurePolicy answer)."""
        deadline = time.monotonic() + drain_seconds
        while any(w.pending for w in self._workers) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        self._closing = True
        for task in list(self._spawning):
            task.cancel()
        for worker in list(self._workers):
            if worker.listener is not None:
                worker.listener.cancel()
            self._replace(worker)
        await asyncio.to_thread(self._reap)

    def _reap(self) -> None:
        for child in self.context.active_children():
            child.join(2)

    # requests
    async def evaluate(self, body: bytes, phase: str, failure: str | None, arrived: float, deadline: float) -> WorkerAnswer:
        """Evaluate on an idle worker; raises TimeoutError when ``deadline`` (monotonic) passes first (the worker
        is then killed and replaced) and WorkerUnavailable when the worker died or the pool closes."""
        if self._closing:
            raise WorkerUnavailable("server is shutting down")
        worker = await asyncio.wait_for(self._idle.get(), max(0.0, deadline - time.monotonic()))
        while worker.dead:  # killed while idle (pool closing)
            worker = await asyncio.wait_for(self._idle.get(), max(0.0, deadline - time.monotonic()))
        request_id = next(self._ids)
        future: asyncio.Future[WorkerAnswer] = asyncio.get_running_loop().create_future()
        worker.pending[request_id] = future
        worker.send(pickle.dumps(("review", request_id, phase, failure, arrived, body), protocol=pickle.HIGHEST_PROTOCOL))
        try:
            answer = await asyncio.wait_for(future, max(0.0, deadline - time.monotonic()))
        except (TimeoutError, asyncio.TimeoutError):
            log.warning("evaluation ran past its budget; replacing worker %s", worker.process.pid)
            self._replace(worker)
            raise TimeoutError from None
        except asyncio.CancelledError:
            self._replace(worker)  # the client went away mid-evaluation: the worker's state is unknown
            raise
        if answer.retire:
            self._replace(worker)
        else:
            self._idle.put_nowait(worker)
        return answer


class IsolatedEvaluations:
    """The server's view of the pool: budgets, failurePolicy answers and rebuilt responses for one review."""

    def __init__(self, pool: EvaluationPool) -> None:
        self.pool = pool
        self._policy_index: tuple[int, dict[str, Any]] = (0, {})

    def _policies_by_key(self, snapshot: Any) -> dict[str, Any]:
        marker, index = self._policy_index
        if marker != id(snapshot):
            index = {str(p.key): p for p in [*snapshot.policies, *snapshot.cel_policies]}
            self._policy_index = (id(snapshot), index)
        return index

    async def decide(self, snapshot: Any, review: AdmissionRequest, body: bytes, phase: str, failure: str | None, arrived: float) -> tuple[AdmissionDecision, bytes | None]:
        """(decision, serialized answer or None when the caller must serialize ``decision`` itself)."""
        evaluator: AdmissionEvaluator = snapshot.evaluator
        in_play = evaluator.policies_in_play(phase, failure)
        if not in_play:
            return evaluate_review(evaluator, review, phase, failure, arrived), None
        budget = evaluator.budget(in_play)
        deadline = arrived + budget - min(DEADLINE_MARGIN_SECONDS, budget / 10)
        try:
            answer = await self.pool.evaluate(body, phase, failure, arrived, deadline)
        except TimeoutError:
            return deadline_decision(review, in_play, budget, phase), None
        except WorkerUnavailable as exc:
            return _failure_for(review, in_play, failure, str(exc)), None
        if answer.error or answer.answer is None:
            return _failure_for(review, in_play, failure, answer.error or "no answer"), None
        responses = rebuild_responses(answer.summaries, self._policies_by_key(snapshot), review.subject)
        return AdmissionDecision(answer.allowed, responses=responses), answer.answer


def _failure_for(review: AdmissionRequest, in_play: list[Any], failure: str | None, reason: str) -> AdmissionDecision:
    """On the catch-all endpoint the policies in play decide: Fail when any of them says Fail."""
    if failure is None:
        failure = FAILURE_POLICY_FAIL if any(failure_policy(p) == FAILURE_POLICY_FAIL for p in in_play) else FAILURE_POLICY_IGNORE
    return failure_decision(review, failure, reason)
