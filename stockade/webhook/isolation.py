"""Admission evaluation in worker processes that can be abandoned.

A policy is user input: a nested ``foreach`` over a large list, a CEL expression building a huge string or a deeply
nested object can take seconds or gigabytes.  Evaluating on the server's event loop would stall every other review,
the health probes and SIGTERM behind it, and a timeout checked after evaluation returns is no bound at all.  So the
server keeps only HTTP, parsing of the review header and bookkeeping; evaluation runs in a pool of worker processes:

* each worker holds its own PolicyStore, rebuilt from the policy *documents* the parent sends on start and on every
  store change (plain dicts pickle cheaply and once per change, compiled policies do not pickle at all); a change
  sends only the documents that are new, by content key, and the worker's store reuses what it built for the rest;
* the store hands each new snapshot to the pool before installing it, and every review carries the generation of the
  snapshot the parent decided it with: the policy frame is written to a worker's pipe before any such review, the
  worker reads (and builds) it first, and refuses a review newer than what it holds.  A policy change is in force in
  every worker for every review decided after the snapshot was installed;
* a review travels as its raw bytes plus a small header; the answer comes back as the serialized AdmissionReview
  response plus a compact rule summary (enough for metrics, Events and PolicyReports);
* when a review's budget (the smallest timeout of the policies in play) runs out, the parent answers with the
  failurePolicy of those policies, SIGKILLs the worker and starts a fresh one at once;
* a worker's data segment is capped (RLIMIT_DATA), so a runaway allocation fails or kills that worker only;
* the pool starts ``min_size`` workers and starts another, up to ``size``, when a review finds every worker busy;
  until it is ready, waiting reviews stay in the pool and go to whichever worker frees first.  A worker holds its own
  compiled policies, so an idle webhook keeps only the workers its load has needed (they are not retired);
* evaluation runs in a thread with a large stack and a raised recursion limit, so JSON nested up to
  ``MAX_JSON_DEPTH`` levels (Kubernetes' own decoder limit) is evaluated rather than refused.

Cluster lookups (namespace labels, roles, configMap/apiCall context) are answered inside the worker by clients it
builds itself from the same kubeconfig (``setup``): no request/response protocol back to the parent is needed in the
middle of an evaluation, and those calls are cut off by the same kill as the evaluation that made them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import itertools
import json
import logging
import multiprocessing
import os
import pickle
import resource
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext
from typing import Any, cast

from stockade.engine.engine import Engine
from stockade.engine.response import EngineResponse, ImageCheck, RuleResponse
from stockade.policy.loader import Document
from stockade.webhook.admission import (
    FAILURE_POLICY_FAIL,
    FAILURE_POLICY_IGNORE,
    MAX_SCOPED_VIEWS,
    AdmissionDecision,
    AdmissionEvaluator,
    AdmissionRequest,
    InvalidAdmissionReview,
    PolicyScope,
    block_message,
    blocking_rules,
    failure_policy,
    parse_review,
    resource_label,
    review_response,
    timed_out_response,
)
from stockade.errors import StockadeError
from stockade.identitymemo import IdentityMemo
from stockade.webhook.enforceset import override_namespace, split_responses

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
PIPELINE_DEPTH = 3  # reviews sent ahead to a busy worker; the rest wait in the parent for whichever worker frees first


class JsonTooDeep(InvalidAdmissionReview):
    """The review nests deeper than MAX_JSON_DEPTH (the apiserver itself would never send it)."""


class WorkerUnavailable(StockadeError):
    """No worker answered: it was killed (budget, memory) or the pool is shutting down."""


# -- decoding ---------------------------------------------------------------------------------------------------


def _fast_loads() -> Callable[[bytes], Any]:
    try:
        import orjson

        return orjson.loads
    except ImportError:  # pragma: no cover - orjson is part of the server extra
        return json.loads


def _fast_dumps() -> Callable[[Any], bytes]:
    try:
        import orjson

        return orjson.dumps
    except ImportError:  # pragma: no cover - orjson is part of the server extra
        return lambda value: json.dumps(value, separators=(",", ":")).encode()


_loads = _fast_loads()
_dumps = _fast_dumps()


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
    if phase == "validate":
        # Kyverno evaluates Audit rules after answering, so a policy with nothing to enforce here cannot time the
        # answer out (namespace labels are not at hand: a namespaceSelector override is taken as not matching)
        namespace, labels = override_namespace(review.kind.kind, review.operation, review.namespace, review.old_object, {})
        responses, _ = split_responses(responses, namespace, labels)
    blocked = blocking_rules(responses)
    if blocked:
        return AdmissionDecision(False, block_message(resource_label(review.subject, review), blocked), responses=responses)
    warnings = [f"policy {r.policy_name}: {r.rules[0].message}" for r in responses if r.rules]
    return AdmissionDecision(True, warnings=warnings, responses=responses)


RuleSummary = list[Any]  # name, rule type, status, message, failure action, started_ns, duration_ns, exceptions, image checks
PolicySummary = list[Any]  # key, kind, namespace, name, [RuleSummary, ...]


def summarize(responses: list[EngineResponse], with_unmatched: bool = False) -> list[PolicySummary]:
    """What the parent needs of the engine responses (metrics, Events, PolicyReports, spans) as plain lists (JSON on
    the wire: cheaper both ways than pickling tuples); ``with_unmatched`` adds why rules did not match (debug logs)."""
    return [
        [
            *_POLICY_HEADERS.get(r.policy, _policy_header),
            [
                [
                    rule.name,
                    rule.rule_type,
                    rule.status,
                    rule.message,
                    rule.failure_action,
                    rule.started_ns,
                    rule.duration_ns,
                    rule.exceptions,
                    [[c.image, c.digest, c.source, c.status, c.started_ns, c.duration_ns, c.http_calls] for c in rule.image_checks] if rule.image_checks else [],
                    rule.properties,
                ]
                for rule in r.rules
            ],
            *([[[name, reasons] for name, reasons in r.unmatched]] if with_unmatched else []),
        ]
        for r in responses
    ]


def _policy_header(policy: Any) -> tuple[str, str, str, str]:
    """A summary's policy fields (key, kind, namespace, name), the same for every review of that policy."""
    name = str(getattr(policy, "name", ""))
    return str(getattr(policy, "key", name)), str(getattr(policy, "kind", "")), str(getattr(policy, "namespace", "") or ""), name


_POLICY_HEADERS: IdentityMemo[Any, tuple[str, str, str, str]] = IdentityMemo(4096)


@dataclass(frozen=True)
class PolicyReference:
    """Stands in for a policy the parent's snapshot no longer has (the worker answered from an older one)."""

    key: str
    kind: str
    namespace: str
    name: str
    spec: dict[str, Any] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


def rebuild_responses(summaries: list[PolicySummary], policies: dict[str, Any], subject: dict[str, Any]) -> list[EngineResponse]:
    """The engine responses a worker summarized, on the server's side of every review: RuleResponses are built with
    every field given in declaration order (half the cost of keywords and default factories); the decoded summary
    is fresh and owned by this call, so its lists and dicts are taken over rather than copied."""
    responses = []
    for key, kind, namespace, name, rules, *unmatched in summaries:
        policy = policies.get(key) or PolicyReference(key, kind, namespace, name)
        rebuilt = [
            # name, rule_type, status, message, generated_resources, patched_target, target_subresource, exceptions,
            # properties, pod_security_checks, failure_action, started_ns, duration_ns, image_checks, precondition_error
            RuleResponse(n, t, s, m, [], None, "", e, p, None, a, b, d, [ImageCheck(*c) for c in checks] if checks else [], False)
            for n, t, s, m, a, b, d, e, checks, p in rules
        ]
        response = EngineResponse(policy, subject, subject, rebuilt)
        if unmatched:
            response.unmatched = [(str(rule), list(reasons)) for rule, reasons in unmatched[0]]
        responses.append(response)
    return responses


# -- worker side --------------------------------------------------------------------------------------------------


def logging_worker_main(log_level: int, json_lines: bool, *arguments: Any) -> None:
    """``worker_main`` logging like the server (text or JSON lines, level): a forkserver child inherits no logging
    setup."""
    from stockade.webhook.logs import configure_logging

    configure_logging(logging.getLevelName(log_level), json_lines, LOG_FORMAT)
    worker_main(*arguments)


class DocumentsSource:
    """The policy documents (and run-time Engine settings) the parent last sent; the generation is the fingerprint."""

    def __init__(self) -> None:
        self.generation = -1
        self.current: list[Document] = []
        self.engine_settings: dict[str, Any] = {}
        self.held: dict[bytes, Document] = {}

    def update(self, update: PolicyUpdate) -> None:
        self.current = update.apply(self.held)
        self.held = dict(zip(update.keys, self.current))
        self.generation = update.generation
        self.engine_settings = update.engine_settings

    def fingerprint(self) -> Hashable:
        return self.generation

    def documents(self) -> list[Document]:
        return list(self.current)


WorkerSetup = Callable[[], dict[str, Any]]
"""Picklable; called once in each worker and returns the PolicyStore keyword arguments (engine factory with cluster
providers, image verifier and cache, namespace labels, evaluator options, exception namespaces)."""


# -- wire format ----------------------------------------------------------------------------------------------------
# Every message is a frame: payload length and message kind (_FRAME), then the payload.  Reviews and results, the
# per-request traffic, are a fixed struct header plus raw bytes: no pickling of request bodies or answers.  Only the
# rare policy set travels pickled.

_FRAME = struct.Struct("!QB")  # payload length, message kind
MESSAGE_POLICIES, MESSAGE_READY, MESSAGE_REVIEW, MESSAGE_RESULT = 1, 2, 3, 4
_REVIEW = struct.Struct("!QBBdqH")  # request id, phase, failurePolicy, arrival (monotonic), policy generation needed, scope length; the scope then the raw body follow
_RESULT = struct.Struct("!QBQq")  # request id, flags, answer length, policy generation used; answer bytes then summary JSON or error text follow
_READY = struct.Struct("!q")  # generation of the policy set now built
RESULT_ALLOWED, RESULT_RETIRE, RESULT_ERROR = 1, 2, 4
PHASES = ("validate", "mutate")
FAILURE_POLICIES: tuple[str | None, ...] = (None, FAILURE_POLICY_FAIL, FAILURE_POLICY_IGNORE)


def frame(kind: int, *parts: bytes) -> bytes:
    return b"".join((_FRAME.pack(sum(len(part) for part in parts), kind), *parts))


def encode_scope(scope: PolicyScope) -> bytes:
    return "\n".join((scope.family, *scope.names)).encode()


def decode_scope(data: bytes) -> PolicyScope:
    family, *names = data.decode().split("\n")
    return PolicyScope(family, tuple(names))


def review_frame(
    request_id: int, phase: str, failure: str | None, arrived: float, body: bytes, generation: int = 0, scope: PolicyScope = PolicyScope()
) -> bytes:
    encoded = encode_scope(scope)  # bounded by the request line limit: the names come from the path
    header = _REVIEW.pack(request_id, PHASES.index(phase), FAILURE_POLICIES.index(failure), arrived, generation, len(encoded))
    return b"".join((_FRAME.pack(len(header) + len(encoded) + len(body), MESSAGE_REVIEW), header, encoded, body))  # ``frame``, unrolled


def result_frame(
    request_id: int, answer: bytes | None, allowed: bool, summaries: list[PolicySummary], retire: bool, error: str, generation: int = 0
) -> bytes:
    flags = (RESULT_ALLOWED if allowed else 0) | (RESULT_RETIRE if retire else 0) | (RESULT_ERROR if error else 0)
    answer = answer or b""
    tail = error.encode("utf-8", "replace") if error else _dumps(summaries)
    return frame(MESSAGE_RESULT, _RESULT.pack(request_id, flags, len(answer), generation), answer, tail)


def parse_result(payload: bytes) -> tuple[int, WorkerAnswer]:
    request_id, flags, answer_length, generation = _RESULT.unpack_from(payload)
    answer_end = _RESULT.size + answer_length
    tail = payload[answer_end:]
    if flags & RESULT_ERROR:
        return request_id, WorkerAnswer(None, False, [], bool(flags & RESULT_RETIRE), tail.decode("utf-8", "replace"), generation)
    return request_id, WorkerAnswer(payload[_RESULT.size : answer_end], bool(flags & RESULT_ALLOWED), _loads(tail), bool(flags & RESULT_RETIRE), "", generation)


@dataclass(frozen=True)
class WorkerAnswer:
    answer: bytes | None
    allowed: bool
    summaries: list[PolicySummary]
    retire: bool
    error: str
    generation: int = 0  # the policy generation the worker evaluated with


class StalePolicies(StockadeError):
    """A worker was asked to evaluate with a policy generation it has not received (a bug in the ordering)."""


@dataclass(frozen=True)
class PolicyUpdate:
    """One policy frame: the generation's documents as content keys in order, the documents a worker may not have
    yet (all of them for a new worker), and the run-time Engine settings."""

    generation: int
    keys: tuple[bytes, ...]
    documents: dict[bytes, Document]
    engine_settings: dict[str, Any]

    def apply(self, held: dict[bytes, Document]) -> list[Document]:
        """The generation's documents, taking the unchanged ones from ``held`` (same objects: the worker's store
        then recognises them without hashing); raises KeyError when the frame refers to one it never received."""
        return [self.documents[key] if key in self.documents else held[key] for key in self.keys]


def worker_main(connection: Any, setup: WorkerSetup | None, memory_bytes: int | None) -> None:
    """Entry point of a worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the server decides when we go
    # What the forkserver holds (the engine, the cluster client) stays shared: a collection walking those objects
    # would write to their pages and copy each into this process.
    gc.freeze()
    if memory_bytes:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))
    raise_recursion_limit()
    channel = socket.socket(fileno=os.dup(connection.fileno()))  # the duplex Pipe is a socketpair on POSIX
    connection.close()
    done = threading.Event()
    start_deep_stack_thread(lambda: _serve_worker(channel, setup, done), "stockade-evaluation")
    done.wait()


def _serve_worker(channel: socket.socket, setup: WorkerSetup | None, done: threading.Event) -> None:
    from stockade.webhook.policystore import PolicyStore

    try:
        source = DocumentsSource()
        options = setup() if setup is not None else {}
        build_engine = options.pop("engine_factory", None) or Engine
        options["engine_factory"] = lambda **kwargs: build_engine(**source.engine_settings, **kwargs)
        options["log_rejections"] = False  # the server's own store names every policy left out, and why
        store = PolicyStore(sources=[source], **options)
        incoming = channel.makefile("rb", buffering=1 << 16)  # usually one read() per review
        while True:
            header = incoming.read(_FRAME.size)
            if len(header) < _FRAME.size:
                return
            size, kind = _FRAME.unpack(header)
            payload = incoming.read(size)
            if len(payload) < size:
                return
            if kind == MESSAGE_POLICIES:
                source.update(pickle.loads(payload))
                store.load()
                channel.sendall(frame(MESSAGE_READY, _READY.pack(source.generation)))
            elif kind == MESSAGE_REVIEW:
                request_id, phase, failure, arrived, needed, scope_size = _REVIEW.unpack_from(payload)
                scope = decode_scope(payload[_REVIEW.size : _REVIEW.size + scope_size])
                assert store.snapshot is not None
                if needed > source.generation:
                    stale = f"worker holds policy generation {source.generation}, the review needs {needed}"
                    channel.sendall(result_frame(request_id, None, False, [], False, stale, source.generation))
                    continue
                evaluator = store.snapshot.evaluator.scoped(scope)
                outcome = _evaluate_in_worker(evaluator, payload[_REVIEW.size + scope_size :], PHASES[phase], FAILURE_POLICIES[failure], arrived)
                channel.sendall(result_frame(request_id, *outcome, source.generation))
                if outcome[3]:
                    return  # state after a MemoryError is not trusted: the parent starts a fresh worker
    finally:
        done.set()


def _evaluate_in_worker(evaluator: AdmissionEvaluator, body: bytes, phase: str, failure: str | None, arrived: float) -> tuple[bytes | None, bool, list[PolicySummary], bool, str]:
    """(answer bytes, allowed, rule summaries, retire this worker, error); with an error the parent answers."""
    try:
        review = parse_review(decode_review_body(body))
        decision = evaluate_review(evaluator, review, phase, failure, arrived)
        return _dumps(review_response(review, decision)), decision.allowed, summarize(decision.responses, log.isEnabledFor(logging.DEBUG)), False, ""
    except MemoryError:
        return None, False, [], True, "evaluation exceeded the worker memory limit"
    except RecursionError:
        return None, False, [], False, f"object nests too deeply to evaluate (limit {MAX_JSON_DEPTH} levels)"
    except InvalidAdmissionReview as exc:
        return None, False, [], False, str(exc)
    except Exception as exc:  # an engine bug must not take the worker down; failurePolicy decides
        log.exception("evaluation failed")
        return None, False, [], False, f"{type(exc).__name__}: {exc}"


# -- parent side --------------------------------------------------------------------------------------------------


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) or 1


def cgroup_memory_limit() -> int | None:
    """The container's memory limit (cgroup v2, then v1), or None when unlimited or unreadable."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as limit_file:
                text = limit_file.read().strip()
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


class _Job:
    """One review on its way: queued for a worker, then running on ``worker`` until ``future`` is settled."""

    __slots__ = ("request_id", "frame", "future", "worker", "timer", "expired")

    def __init__(self, request_id: int, frame: bytes, future: asyncio.Future[WorkerAnswer]) -> None:
        self.request_id = request_id
        self.frame = frame
        self.future = future
        self.worker: _Worker | None = None
        self.timer: asyncio.TimerHandle | None = None  # the review's deadline; armed until its result or its worker's end
        self.expired = False


class _Worker(asyncio.Protocol):
    """One worker process and the parent's end of its socketpair; frames are parsed as they arrive, with no reader
    task in between."""

    def __init__(self, pool: EvaluationPool, process: Any) -> None:
        self.pool = pool
        self.process = process
        self.transport: asyncio.Transport | None = None
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.jobs: collections.deque[_Job] = collections.deque()  # sent, unanswered, in order: the first one runs
        self.dead = False
        self.generation = -1  # the policy generation the worker last reported built
        self._buffer = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio.Transport subclasses

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        if not buffer and len(data) >= _FRAME.size:  # the usual case: exactly one whole frame
            size, kind = _FRAME.unpack_from(data)
            if len(data) == _FRAME.size + size:
                self.pool._received(self, kind, data[_FRAME.size :])
                return
        buffer += data
        offset = 0
        while len(buffer) - offset >= _FRAME.size:
            size, kind = _FRAME.unpack_from(buffer, offset)
            end = offset + _FRAME.size + size
            if len(buffer) < end:
                break
            payload = bytes(buffer[offset + _FRAME.size : end])
            offset = end
            self.pool._received(self, kind, payload)
            if self.dead:
                return
        del buffer[:offset]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.dead:
            log.warning("evaluation worker %s exited (code %s); starting another", self.process.pid, self.process.exitcode)
        self.pool._replace(self)

    def send(self, payload: bytes) -> None:
        if self.transport is not None and not self.dead:
            self.transport.write(payload)

    def kill(self) -> None:
        self.dead = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self.process.kill()
        if self.transport is not None:
            self.transport.abort()


def _process_context(start_method: str) -> ForkServerContext | SpawnContext | ForkContext:
    """The multiprocessing context of a start method (typed: each method's context can start processes)."""
    if start_method == "forkserver":
        return multiprocessing.get_context("forkserver")
    if start_method == "spawn":
        return multiprocessing.get_context("spawn")
    if start_method == "fork":
        return multiprocessing.get_context("fork")
    raise ValueError(f"cannot find context for {start_method!r}")


class EvaluationPool:
    """Up to ``size`` worker processes (``min_size`` from the start), each evaluating one review at a time with up to
    PIPELINE_DEPTH - 1 more sent ahead while every worker is busy; see the module docstring."""

    def __init__(
        self,
        size: int,
        setup: WorkerSetup | None = None,
        memory_bytes: int | None = None,
        start_method: str = "forkserver",
        preload: Sequence[str] = (),
        min_size: int | None = None,
    ) -> None:
        self.size = size
        # workers started with the pool; more, up to ``size``, start when a review finds every worker busy (each
        # worker holds the compiled policies, 40-60 MiB: an idle webhook keeps only what its load has needed)
        self.min_size = size if min_size is None else max(1, min(min_size, size))
        self._starting = 0  # workers being started and not yet in ``_workers``
        self.setup = setup
        self.memory_bytes = memory_bytes
        self.log_level = logging.getLogger().getEffectiveLevel()  # workers log at the server's level and format
        from stockade.webhook.logs import JsonFormatter

        self.log_json = any(isinstance(handler.formatter, JsonFormatter) for handler in logging.getLogger().handlers)
        self.context = _process_context(start_method)
        if start_method == "forkserver":
            # workers fork from a server that has the engine imported already: a replacement is ready in milliseconds
            # (``preload``: what ``setup`` imports besides, e.g. the cluster client; imported once there, its pages
            # are shared by every worker instead of private to each)
            self.context.set_forkserver_preload(["stockade.webhook.isolation", "stockade.webhook.policystore", "stockade.celpolicy", *preload])
        self._generation = 0
        self._keys: tuple[bytes, ...] = ()
        self._held: dict[bytes, Document] = {}  # the current generation's documents by content key
        self._engine_settings: dict[str, Any] = {}
        self._full_frame: bytes | None = None  # everything, for a worker that starts now; built when one does
        self._pending: tuple[list[Document], dict[str, Any], int | None, tuple[bytes, ...] | None] | None = None
        self._pending_lock = threading.Lock()
        self._idle: collections.deque[_Worker] = collections.deque()
        self._queued: collections.deque[_Job] = collections.deque()  # reviews waiting for an idle worker
        self._workers: set[_Worker] = set()
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self._spawning: set[asyncio.Task[Any]] = set()
        self.replaced = 0  # workers killed and started anew (budget, memory, crash)

    # lifecycle
    async def start(
        self, documents: list[Document], engine_settings: dict[str, Any] | None = None, generation: int | None = None, keys: tuple[bytes, ...] | None = None
    ) -> None:
        """Start ``min_size`` workers and wait until each has built the given policies."""
        self._loop = asyncio.get_running_loop()
        self._set_documents(documents, engine_settings or {}, generation, keys)
        workers = await asyncio.gather(*(self._spawn() for _ in range(self.min_size)))
        await asyncio.gather(*(asyncio.wait_for(asyncio.shield(w.ready), 120) for w in workers))

    @property
    def generation(self) -> int:
        """The newest policy generation written to the workers' pipes."""
        return self._generation

    def publish(
        self, documents: list[Document], engine_settings: dict[str, Any] | None = None, generation: int | None = None, keys: tuple[bytes, ...] | None = None
    ) -> None:
        """A new policy set (called from any thread, e.g. the store before it installs a snapshot); every worker
        rebuilds its snapshot.  ``engine_settings`` are Engine keyword arguments decided at run time (Kyverno's
        ConfigMap registry settings); ``generation`` numbers the set (the store's snapshot generation; by default the
        next number) and ``keys`` are the documents' content keys when the caller has them.  Publications not yet
        written are coalesced: only the newest is sent, at the latest just before the next review."""
        if self._loop is None or self._closing:
            return
        with self._pending_lock:
            self._pending = (list(documents), dict(engine_settings or {}), generation, keys)
        self._loop.call_soon_threadsafe(self._flush_pending)

    def _flush_pending(self) -> None:
        """Write the pending publication, if any, to every worker (on the event loop)."""
        if self._pending is None:  # every review calls this; a publication sets it before its snapshot is installed
            return
        with self._pending_lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return
        update = self._set_documents(*pending)
        payload = frame(MESSAGE_POLICIES, pickle.dumps(update, protocol=pickle.HIGHEST_PROTOCOL))
        for worker in list(self._workers):
            worker.send(payload)

    def _set_documents(
        self, documents: list[Document], engine_settings: dict[str, Any], generation: int | None = None, keys: tuple[bytes, ...] | None = None
    ) -> PolicyUpdate:
        """Make ``documents`` the current set; returns the update that carries the documents new since the last set."""
        from stockade.webhook.policystore import content_key

        if keys is None or len(keys) != len(documents):
            keys = tuple(content_key(document) for document in documents)
        self._generation = max(self._generation + 1, generation or 0)
        fresh = {key: document for key, document in zip(keys, documents) if key not in self._held}
        self._keys, self._held, self._engine_settings = tuple(keys), dict(zip(keys, documents)), engine_settings
        self._full_frame = None
        return PolicyUpdate(self._generation, self._keys, fresh, engine_settings)

    def _full_update_frame(self) -> bytes:
        if self._full_frame is None:
            update = PolicyUpdate(self._generation, self._keys, self._held, self._engine_settings)
            self._full_frame = frame(MESSAGE_POLICIES, pickle.dumps(update, protocol=pickle.HIGHEST_PROTOCOL))
        return self._full_frame

    @property
    def worker_count(self) -> int:
        """Workers running or being started."""
        return len(self._workers) + self._starting

    def _starting_up(self) -> bool:
        """A worker is on its way: reviews then wait in the pool for whichever worker frees first, rather than in a
        busy worker's pipe behind a review that may run to its budget."""
        return self._starting > 0 or any(not worker.ready.done() for worker in self._workers)

    def _grow(self) -> None:
        """A review found every worker busy: start one more worker if the pool is below its size."""
        if self._closing or self.worker_count >= self.size:
            return
        self._starting += 1  # counted now: the review that asked waits in the pool, not in a busy worker's pipe
        task = asyncio.create_task(self._start_worker())
        self._spawning.add(task)
        task.add_done_callback(self._spawned)

    def _spawned(self, task: asyncio.Task[Any]) -> None:
        self._spawning.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("starting another evaluation worker failed: %s", task.exception())

    async def _spawn(self) -> _Worker:
        self._starting += 1
        return await self._start_worker()

    async def _start_worker(self) -> _Worker:
        """Start a worker already counted in ``_starting`` and send it the policies."""
        try:
            parent_end, child_end = self.context.Pipe(duplex=True)
            process = self.context.Process(
                target=logging_worker_main, args=(self.log_level, self.log_json, child_end, self.setup, self.memory_bytes), name="stockade-evaluator", daemon=True
            )
            await asyncio.to_thread(process.start)
            child_end.close()
            sock = socket.socket(fileno=os.dup(parent_end.fileno()))
            parent_end.close()
            worker = _Worker(self, process)
            await asyncio.get_running_loop().create_unix_connection(lambda: worker, sock=sock)
            self._flush_pending()
            self._workers.add(worker)
        finally:
            self._starting -= 1
        worker.send(self._full_update_frame())
        return worker

    def _received(self, worker: _Worker, kind: int, payload: bytes) -> None:
        if kind == MESSAGE_RESULT:
            request_id, answer = parse_result(payload)
            jobs = worker.jobs
            if not jobs or jobs[0].request_id != request_id:
                log.warning("evaluation worker %s answered an unknown review; replacing it", worker.process.pid)
                self._replace(worker)
                return
            job = jobs.popleft()
            if job.timer is not None:
                job.timer.cancel()
            if not job.future.done():
                job.future.set_result(answer)
            if answer.retire or (jobs and jobs[0].expired):
                self._replace(worker)  # the next review already ran out of time while it waited in the pipe
            elif jobs:
                self._feed(worker)
            else:
                self._make_idle(worker)
        elif kind == MESSAGE_READY:
            (worker.generation,) = _READY.unpack(payload)
            if not worker.ready.done():
                worker.ready.set_result(None)
                self._make_idle(worker)

    def _make_idle(self, worker: _Worker) -> None:
        """Hand ``worker`` the queued reviews it can take, or park it."""
        self._feed(worker)
        if not worker.jobs:
            self._idle.append(worker)

    def _feed(self, worker: _Worker) -> None:
        while self._queued and len(worker.jobs) < PIPELINE_DEPTH:
            job = self._queued.popleft()
            if not job.future.done():
                self._run(worker, job)

    def _run(self, worker: _Worker, job: _Job) -> None:
        job.worker = worker
        worker.jobs.append(job)
        worker.send(job.frame)

    def _busy_worker_with_room(self) -> _Worker | None:
        """With every worker busy, the one with the shortest pipe, if it has room: the worker then reads the next
        review as soon as it finishes one, without waiting to be woken (one context switch less per review)."""
        best: _Worker | None = None
        for worker in self._workers:
            if worker.ready.done() and not worker.dead and len(worker.jobs) < PIPELINE_DEPTH and (best is None or len(worker.jobs) < len(best.jobs)):
                best = worker
        return best

    def _replace(self, worker: _Worker) -> None:
        """Kill ``worker`` (if still alive) and start its successor right away."""
        if worker not in self._workers:
            return
        worker.kill()
        self._workers.discard(worker)
        with contextlib.suppress(ValueError):
            self._idle.remove(worker)
        if worker.jobs:
            running = worker.jobs.popleft()  # the review it was evaluating: the endpoint's failurePolicy answers
            if running.timer is not None:
                running.timer.cancel()
            if not running.future.done():
                running.future.set_exception(WorkerUnavailable("evaluation worker exited"))
            for job in reversed(worker.jobs):  # reviews still waiting in its pipe go to another worker
                job.worker = None
                if not job.future.done():
                    self._queued.appendleft(job)
                elif job.timer is not None:
                    job.timer.cancel()
            worker.jobs.clear()
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

    async def close(self, drain_seconds: float = SHUTDOWN_DRAIN_SECONDS) -> None:
        """Let running evaluations finish for up to ``drain_seconds``, then kill every worker (their reviews get the
        failurePolicy answer)."""
        deadline = time.monotonic() + drain_seconds
        while (self._queued or any(w.jobs for w in self._workers)) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        self._closing = True
        for task in list(self._spawning):
            task.cancel()
        for worker in list(self._workers):
            self._replace(worker)
        while self._queued:
            job = self._queued.popleft()
            if job.timer is not None:
                job.timer.cancel()
            if not job.future.done():
                job.future.set_exception(WorkerUnavailable("server is shutting down"))
        await asyncio.to_thread(self._reap)

    def _reap(self) -> None:
        for child in self.context.active_children():
            child.join(2)

    # requests
    async def evaluate(
        self, body: bytes, phase: str, failure: str | None, arrived: float, deadline: float, generation: int = 0, scope: PolicyScope = PolicyScope()
    ) -> WorkerAnswer:
        """Evaluate on an idle worker with policy ``generation`` or newer; raises TimeoutError when ``deadline``
        (monotonic) passes first (the worker is then killed and replaced) and WorkerUnavailable when the worker died
        or the pool closes.  One timer covers both the wait for a worker and the evaluation."""
        if self._closing:
            raise WorkerUnavailable("server is shutting down")
        self._flush_pending()  # a set published from another thread goes into every pipe before this review
        if generation > self._generation:
            raise StalePolicies(f"policy generation {generation} was never published to the workers (newest: {self._generation})")
        loop = asyncio.get_running_loop()
        request_id = next(self._ids)
        job = _Job(request_id, review_frame(request_id, phase, failure, arrived, body, generation, scope), loop.create_future())
        job.timer = loop.call_at(loop.time() + (deadline - time.monotonic()), self._expire, job)
        if self._idle:
            self._run(self._idle.popleft(), job)
        else:
            self._grow()
            if self._queued or self._starting_up() or (worker := self._busy_worker_with_room()) is None:
                self._queued.append(job)
            else:
                self._run(worker, job)
        try:
            return await job.future
        except asyncio.CancelledError:
            self._abandon(job)
            raise

    def _expire(self, job: _Job) -> None:
        """The review's deadline passed: it gets TimeoutError; if its worker is evaluating it, the worker goes."""
        if not job.future.done():
            job.future.set_exception(TimeoutError())
        worker = job.worker
        if worker is None:
            with contextlib.suppress(ValueError):
                self._queued.remove(job)
        elif worker.jobs and worker.jobs[0] is job:
            log.warning("evaluation ran past its budget; replacing worker %s", worker.process.pid)
            self._replace(worker)
        else:
            job.expired = True  # still waiting in the worker's pipe: replaced if it gets to run

    def _abandon(self, job: _Job) -> None:
        """The client went away: a running evaluation leaves the worker in an unknown state; a review still
        waiting in a pipe keeps its deadline timer and is bounded like any other."""
        if job.worker is not None and job.worker.jobs and job.worker.jobs[0] is job:
            self._replace(job.worker)
        elif job.worker is None:
            if job.timer is not None:
                job.timer.cancel()
            with contextlib.suppress(ValueError):
                self._queued.remove(job)


class IsolatedEvaluations:
    """The server's view of the pool: budgets, failurePolicy answers and rebuilt responses for one review."""

    def __init__(self, pool: EvaluationPool) -> None:
        self.pool = pool
        self._snapshot: Any = None  # held, not its id: a new snapshot could reuse a collected one's id
        self._policy_index: dict[str, Any] = {}
        self._in_play: dict[tuple[str, str | None, PolicyScope], tuple[list[Any], float]] = {}

    def _for_snapshot(self, snapshot: Any) -> None:
        """Per-snapshot lookups (policies by key, policies in play and their budget per endpoint), built once."""
        if self._snapshot is not snapshot:
            self._policy_index = {str(p.key): p for p in [*snapshot.policies, *snapshot.cel_policies]}
            self._in_play = {}
            self._snapshot = snapshot

    async def decide(
        self,
        snapshot: Any,
        review: AdmissionRequest,
        body: bytes,
        phase: str,
        failure: str | None,
        arrived: float,
        scope: PolicyScope = PolicyScope(),
        evaluator: AdmissionEvaluator | None = None,
    ) -> tuple[AdmissionDecision, bytes | None]:
        """(decision, serialized answer or None when the caller must serialize ``decision`` itself); ``evaluator``:
        the snapshot's view for ``scope`` when the caller already has it."""
        if evaluator is None:
            evaluator = snapshot.evaluator.scoped(scope)
        self._for_snapshot(snapshot)
        cached = self._in_play.get((phase, failure, scope))
        if cached is None:
            in_play = evaluator.policies_in_play(phase, failure)
            cached = (in_play, evaluator.budget(in_play))
            if len(self._in_play) < MAX_SCOPED_VIEWS * 4:  # scopes come from request paths: bounded
                self._in_play[(phase, failure, scope)] = cached
        in_play, budget = cached
        if not in_play:
            return evaluate_review(evaluator, review, phase, failure, arrived), None
        deadline = arrived + budget - min(DEADLINE_MARGIN_SECONDS, budget / 10)
        try:
            answer = await self.pool.evaluate(body, phase, failure, arrived, deadline, int(getattr(snapshot, "generation", 0)), scope)
        except TimeoutError:
            return deadline_decision(review, in_play, budget, phase), None
        except (WorkerUnavailable, StalePolicies) as exc:
            return _failure_for(review, in_play, failure, str(exc)), None
        if answer.error or answer.answer is None:
            return _failure_for(review, in_play, failure, answer.error or "no answer"), None
        responses = rebuild_responses(answer.summaries, self._policy_index, review.subject)
        return AdmissionDecision(answer.allowed, responses=responses), answer.answer


def _failure_for(review: AdmissionRequest, in_play: list[Any], failure: str | None, reason: str) -> AdmissionDecision:
    """On the catch-all endpoint the policies in play decide: Fail when any of them says Fail."""
    if failure is None:
        failure = FAILURE_POLICY_FAIL if any(failure_policy(p) == FAILURE_POLICY_FAIL for p in in_play) else FAILURE_POLICY_IGNORE
    return failure_decision(review, failure, reason)
