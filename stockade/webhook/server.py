"""The HTTPS admission webhook: routes of our HTTP/1.1 layer (stockade.webhook.httpserver) around AdmissionEvaluator.

Endpoints follow Kyverno's layout (``/validate``, ``/validate/fail``, ``/validate/ignore``, the same for
``/mutate``, and ``/policyvalidate`` for policy documents themselves), plus ``/health/liveness``,
``/health/readiness`` and ``/metrics``.  With ``state.evaluations`` set (as `stockade serve` does) policies are
evaluated in worker processes that are killed when a review's budget runs out (stockade.webhook.isolation);
without it, in-process on the event loop (embedding and tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any, cast

from stockade.webhook.admission import (
    mutation_report_responses,
    CEL_ROUTES,
    IMAGE_ROUTES,
    POLICY_MUTATION_PATH,
    VERIFY_MUTATION_PATH,
    FAILURE_POLICY_FAIL,
    FAILURE_POLICY_IGNORE,
    AdmissionDecision,
    AdmissionRequest,
    InvalidAdmissionReview,
    SCOPE_ALL,
    Route,
    kind_lookup_pending,
    labels_namespace,
    parse_review,
    parse_route,
    review_response,
    top_level_kind,
)
from stockade.webhook.certs import CertificateFileError, CertificateManager
from stockade.webhook.logs import log_denial, log_unmatched
from stockade.webhook.configfilter import configuration_skip_reason, needs_io
from stockade.webhook.isolation import failure_decision, read_review_body
from stockade.webhook.httplimits import ConnectionGuard, HttpLimits
from stockade.webhook.httpserver import HttpServer, Listener, Request, Response, Router, json_response
from stockade.webhook.metrics import WebhookMetrics
from stockade.lint.kyverno_warnings import kind_deprecation
from stockade.policy.model import KYVERNO_GROUP
from stockade.webhook.policystore import PolicyStore

try:
    import orjson

    def _dumps(value: Any) -> bytes:
        return orjson.dumps(value)

except ImportError:  # pragma: no cover - orjson is part of the server extra

    def _dumps(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode()


log = logging.getLogger("stockade.webhook")

MAX_BODY_BYTES = 8 * 1024 * 1024  # the apiserver caps objects at ~3 MiB; a review carries two of them
# The fixed endpoints; the CEL policy kinds' and fine-grained webhooks add their policy names to the path
# (``parse_route``).  Metrics label requests by these bounded prefixes, never by the full path.
WEBHOOK_PATHS: tuple[str, ...] = ("/validate", "/validate/fail", "/validate/ignore", "/mutate", "/mutate/fail", "/mutate/ignore")
POLICY_VALIDATION_PATH = "/policyvalidate"
SHUTDOWN_TIMEOUT_SECONDS = 5.0  # how long requests being handled may take to finish when the server stops


@dataclass
class ServerState:
    """Everything the handlers share; ``ready`` flips once policies are loaded and the listener is up."""

    store: PolicyStore
    metrics: WebhookMetrics = field(default_factory=WebhookMetrics)
    ready: bool = False
    shutting_down: bool = False
    readiness_checks: list[Callable[[], str]] = field(default_factory=list)
    tracing: Any = None  # stockade.webhook.tracing.Tracing when --tracing-endpoint is set
    decision_log: Any = None  # stockade.webhook.decisionlog.DecisionLog when --decision-log is set
    reports: Any = None  # stockade.controllers.reports.ReportWriter when reporting to a cluster
    events: Any = None  # stockade.controllers.events.EventRecorder (record_denial) unless --no-events
    # anything with submit(AdmissionRequest): called for allowed, non-dry-run validations; a callable it returns
    # (recording the work in the API server) is run off the event loop and awaited before the review is answered
    generator: Any = None
    scanner: Any = None  # anything with notify(apiVersion, kind, namespace, name): background scan of admitted objects
    kyverno_config: Any = None  # () -> stockade.engine.kyvernoconfig.KyvernoConfig: Kyverno's ConfigMap in force
    evaluations: Any = None  # stockade.webhook.isolation.IsolatedEvaluations: evaluate in worker processes
    # anything with check(policy, old_policy) -> (errors, warnings): the policy checks that ask the cluster
    # (stockade.controllers.policychecks.ClusterPolicyChecks), run after the static ones pass
    policy_checker: Any = None


def _notify_scanner(scanner: Any, review: AdmissionRequest) -> None:
    """An admitted CREATE/UPDATE of an object (not a subresource) is rescanned in the background, as Kyverno's
    background controller rescans changed resources."""
    name = str((review.object.get("metadata") or {}).get("name") or review.name or "")
    if review.operation not in ("CREATE", "UPDATE") or review.sub_resource or not name:
        return
    group, version = review.kind.group, review.kind.version
    scanner.notify(f"{group}/{version}" if group else version, review.kind.kind, review.namespace if review.kind.kind != "Namespace" else "", name)


def _submit_mutating(generator: Any, route: Route, review: AdmissionRequest) -> Callable[[], None] | None:
    """A review a MutatingPolicy webhook admitted may trigger mutateExisting policies: the path names them (the
    catch-all /mutate names none, so any may).  Returns what records the work before the answer, as ``submit``."""
    submit = getattr(generator, "submit_mutating", None)
    if submit is None:
        return None
    family = route.scope.family
    if family in ("mpol", "nmpol"):
        return cast("Callable[[], None] | None", submit(review, route.scope.names, family == "nmpol"))
    if family == SCOPE_ALL:
        return cast("Callable[[], None] | None", submit(review, None, None))
    return None


def _bad_request(reason: str) -> Response:
    return json_response({"error": "invalid AdmissionReview", "reason": reason}, status=400)


async def _read_review(http_request: Request, state: ServerState, path: str) -> tuple[AdmissionRequest, bytes] | Response:
    """Decode: the request's AdmissionReview and raw body, or the 400/413/415 answer that names what is wrong with it
    (counted as a bad request).  JSON nested too deeply for orjson is decoded on a large-stack thread (up to
    MAX_JSON_DEPTH)."""
    content_type = http_request.content_type
    if content_type not in ("application/json", ""):
        state.metrics.bad_requests.labels(path).inc()
        return _bad_request(f"content type must be application/json, got {content_type}")
    refused = http_request.refused
    if refused is not None:  # the connection did not read the body (compressed, or over MAX_BODY_BYTES)
        state.metrics.bad_requests.labels(path).inc()
        return json_response({"error": "request body refused", "reason": refused.reason}, status=refused.status, close=True)
    body = http_request.body
    try:
        return parse_review(await read_review_body(body)), body
    except (InvalidAdmissionReview, ValueError, TypeError) as exc:
        state.metrics.bad_requests.labels(path).inc()
        return _bad_request(str(exc) if isinstance(exc, InvalidAdmissionReview) else f"body is not valid JSON: {exc}")


def make_handler(state: ServerState, path: str, fixed: Route | None = None) -> Callable[[Request], Awaitable[Response]]:
    """The admission endpoint for ``fixed`` (or, for dynamic paths, the route the request path names); ``path``
    is the bounded label metrics and spans use.  A review goes through stages: decode (``_read_review``), filter
    (``_filtered``: Kyverno's resourceFilters), evaluate (``_evaluate``, with the observers that see the decision
    inside its span), record (``_record_outcome``: reports and Events), background work (``_background_work``),
    then metrics and the answer."""

    async def handle(http_request: Request) -> Response:
        started = time.perf_counter()
        route = fixed or parse_route(http_request.path)
        if route is None:
            return json_response({"error": f"no webhook at {http_request.path[:200]}"}, status=404)
        phase = route.phase
        read = await _read_review(http_request, state, path)
        if isinstance(read, Response):
            return read
        review, body = read
        snapshot = state.store.snapshot
        if snapshot is None:
            return json_response({"error": "policies are not loaded yet"}, status=503)
        arrived = time.monotonic()  # policy timeouts count from here
        evaluator = snapshot.evaluator.scoped(route.scope)
        if await _filtered(state, review, evaluator):
            return _answer(_dumps(review_response(review, AdmissionDecision(True))))
        engine_started = time.perf_counter()
        decision, answer_bytes = await _evaluate(state, path, http_request, snapshot, evaluator, route, review, body, arrived)
        engine_seconds = time.perf_counter() - engine_started
        _record_outcome(state, phase, review, decision)
        if decision.allowed and not review.dry_run:
            await _background_work(state, route, review, evaluator)
        kind = review.kind.kind
        state.metrics.observe_rules(decision.responses, kind, review.operation, engine_seconds)
        state.metrics.observe_request(path, kind, review.namespace, review.operation, decision.allowed, time.perf_counter() - started)
        return _answer(answer_bytes if answer_bytes is not None else _dumps(review_response(review, decision)))

    return handle


async def _filtered(state: ServerState, review: AdmissionRequest, evaluator: Any) -> bool:
    """Filter: True when Kyverno's resourceFilters or excluded requesters admit the request before any policy runs.
    In-process evaluation also fetches here, off the event loop, what the (synchronous) evaluation will look up;
    workers look namespace labels, kinds and roles up themselves, inside the review's budget."""
    in_process = state.evaluations is None
    if in_process:
        await _warm_lookups(state, review, evaluator)
    if state.kyverno_config is not None and await _skipped_by_configuration(state.kyverno_config(), review, evaluator.role_resolver):
        return True
    if in_process:
        await _warm_roles(review, evaluator)
    return False


async def _background_work(state: ServerState, route: Route, review: AdmissionRequest, evaluator: Any) -> None:
    """What an allowed, non-dry-run review starts: generate/mutate-existing work (stored before the answer) and the
    background rescan of the admitted object."""
    phase = route.phase
    if state.generator is not None and phase in ("validate", "mutate"):
        background_review = review
        if evaluator.needs_roles and evaluator.role_resolver is not None:
            # background work is matched like the admission was: exclude/match by the requester's (Cluster)Roles needs
            # them recorded (a trigger DELETE by a cluster-admin the rule excludes must not clean up)
            try:
                background_review = await asyncio.to_thread(evaluator.with_roles, review)
            except Exception:
                log.exception("looking up the roles of %s failed", review.user_info.username)
        if phase == "validate":  # the work of this webhook's own policies (Kyverno's handlers are per webhook)
            record = state.generator.submit(background_review, served=evaluator.policies_for(route.failure), route=route)
        else:
            record = _submit_mutating(state.generator, route, background_review)
        if callable(record):  # generate/mutate-existing work is stored (UpdateRequests) before we answer
            try:
                await asyncio.to_thread(record)
            except Exception:
                log.exception("recording background work for %s failed", review.uid)
    if state.scanner is not None and (phase == "validate" or route.scope.family in ("mpol", "nmpol")):
        _notify_scanner(state.scanner, review)  # MutatingPolicies report through scans of what they admitted


def _answer(body: bytes) -> Response:
    return Response(200, body)


async def _warm_lookups(state: ServerState, review: AdmissionRequest, evaluator: Any) -> None:
    """In-process evaluation only: namespace labels and the kind's discovery entry are fetched off the event loop
    before the (synchronous) evaluation needs them."""
    labels = state.store.namespace_labels
    if labels_namespace(review) and labels is not None and getattr(labels, "needs_fetch", lambda _ns: False)(review.namespace):
        await asyncio.to_thread(labels, review.namespace)  # warm the cache off the event loop
    if kind_lookup_pending(review, evaluator.kind_resolver):
        await asyncio.to_thread(top_level_kind, review, evaluator.kind_resolver)  # a discovery lookup, off the event loop


async def _warm_roles(review: AdmissionRequest, evaluator: Any) -> None:
    """In-process evaluation only: the requester's (Cluster)Roles, listed off the event loop when policies need them."""
    roles = evaluator.role_resolver
    if roles is not None and evaluator.needs_roles and getattr(roles, "needs_fetch", lambda _ns: False)(review.namespace):
        await asyncio.to_thread(roles, review.user_info, review.namespace)  # list bindings off the event loop


async def _evaluate(
    state: ServerState, path: str, http_request: Request, snapshot: Any, evaluator: Any, route: Route, review: AdmissionRequest, body: bytes, arrived: float
) -> tuple[AdmissionDecision, bytes | None]:
    """The decision, and the serialized answer when a worker made it; the observers that need the request span
    (trace attributes, decision log, denial and debug lines) see the decision inside it."""
    phase, failure = route.phase, route.failure
    span = contextlib.nullcontext() if state.tracing is None else state.tracing.request_span(
        f"admission {path}",
        {
            "admission.uid": review.uid,
            "admission.operation": review.operation,
            "resource.kind": review.kind.kind,
            "resource.namespace": review.namespace,
            "resource.name": review.name,
        },
        http_request.headers,
    )
    with span as active:
        answer_bytes: bytes | None = None
        try:
            evaluate = evaluator.mutate if phase == "mutate" else evaluator.validate
            if state.evaluations is not None:
                decision, answer_bytes = await state.evaluations.decide(snapshot, review, body, phase, failure, arrived, route.scope, evaluator)
            elif evaluator.needs_network:
                decision = await asyncio.to_thread(evaluate, review, failure, arrived)  # registry calls must not stall other reviews
            else:
                decision = evaluate(review, failure, arrived)
        except Exception as exc:  # an engine bug must not take the webhook down; failurePolicy decides
            log.exception("evaluation failed for %s", review.uid)
            decision = failure_decision(review, failure, str(exc))
        if active is not None and active.is_recording():
            active.set_attribute("admission.allowed", decision.allowed)
            active.set_attribute("admission.policies", sorted({r.policy_name for r in decision.responses}))
            state.tracing.record_evaluation(active, decision.responses, answer_bytes, decision.patch)
        if state.decision_log is not None:
            context = active.get_span_context() if active is not None else None
            state.decision_log.record(review, decision, f"{context.trace_id:032x}" if context is not None and context.is_valid else "")
        if not decision.allowed:
            log_denial(review, decision)
        log_unmatched(review, decision)
    return decision, answer_bytes


def _record_outcome(state: ServerState, phase: str, review: AdmissionRequest, decision: AdmissionDecision) -> None:
    """PolicyReport results of an admitted CREATE/UPDATE and the admission Events (none on dry runs)."""
    if state.reports is not None and decision.allowed and decision.responses and not review.dry_run and review.operation in ("CREATE", "UPDATE"):
        reported = decision.responses if phase == "validate" else mutation_report_responses(decision.responses) if phase == "mutate" else []
        if reported:
            state.reports.submit(review.object, reported)
    if state.events is not None and not review.dry_run:  # sideEffects: NoneOnDryRun
        (state.events.record_denial if not decision.allowed else state.events.record_success)(review, decision)


async def _skipped_by_configuration(config: Any, review: AdmissionRequest, role_resolver: Any) -> bool:
    """Kyverno's resourceFilters/excluded requesters: such requests are admitted before any policy runs."""
    if needs_io(config, role_resolver):
        return await asyncio.to_thread(configuration_skip_reason, config, review, role_resolver) is not None
    return configuration_skip_reason(config, review, role_resolver) is not None


def make_policy_validation_handler(state: ServerState, path: str = POLICY_VALIDATION_PATH) -> Callable[[Request], Awaitable[Response]]:
    """``/policyvalidate``: reject invalid policies at ``kubectl apply`` with the field and the reason."""

    async def handle(http_request: Request) -> Response:
        started = time.perf_counter()
        read = await _read_review(http_request, state, path)
        if isinstance(read, Response):
            return read
        review = read[0]
        decision = policy_validation_decision(review, state.store.exception_namespaces, state.store.allow_namespaced_http)
        if decision.allowed and state.policy_checker is not None and review.operation in ("CREATE", "UPDATE") and review.object:
            decision = await asyncio.to_thread(cluster_policy_decision, state.policy_checker, review, decision)
        state.metrics.observe_request(path, review.kind.kind, review.namespace, review.operation, decision.allowed, time.perf_counter() - started)
        return Response(200, _dumps(review_response(review, decision)))

    return handle


def make_admit_handler(state: ServerState, path: str) -> Callable[[Request], Awaitable[Response]]:
    """A webhook that admits every well-formed review unchanged: Kyverno's policy mutating (``/policymutate``) and
    verify (``/verifymutate``) webhooks, which its naming registers."""

    async def handle(http_request: Request) -> Response:
        started = time.perf_counter()
        read = await _read_review(http_request, state, path)
        if isinstance(read, Response):
            return read
        review = read[0]
        state.metrics.observe_request(path, review.kind.kind, review.namespace, review.operation, True, time.perf_counter() - started)
        return Response(200, _dumps(review_response(review, AdmissionDecision(True))))

    return handle


def policy_validation_decision(
    review: AdmissionRequest, exception_namespaces: Collection[str] | None = None, allow_namespaced_http: bool = False
) -> AdmissionDecision:
    """Deny CREATE/UPDATE of an invalid policy; anything else (DELETE, unknown kinds) is allowed.

    The schema comes first: invalid values are refused in kubectl's words, unknown fields become admission warnings
    (kubectl prints them; the API server prunes them when its CRD has the full schema).  Kyverno's checks then see
    the policy as it will be stored.  Kyverno's webhook adds its warnings for the legacy kinds themselves and, for a
    kyverno.io PolicyException, where exceptions are honoured (``exception_namespaces``: None for everywhere, empty
    when exceptions are off).  ``allow_namespaced_http``: the server's --allow-http-in-namespaced-policies."""
    decision = _policy_validation_decision(review, allow_namespaced_http)
    warnings = list(decision.warnings)
    if review.kind.kind == "PolicyException" and review.operation in ("CREATE", "UPDATE"):
        warnings += exception_namespace_warnings(review.kind.group, review.namespace, exception_namespaces)
    legacy = kind_deprecation(review.kind.group, review.kind.version, review.kind.kind)
    # Kyverno's cleanup webhook names the deprecation only on policies it accepts
    if legacy and review.operation in ("CREATE", "UPDATE") and (decision.allowed or not review.kind.kind.endswith("CleanupPolicy")):
        warnings.append(legacy)
    return AdmissionDecision(decision.allowed, decision.message, warnings=list(dict.fromkeys(warnings)))


def _policy_validation_decision(review: AdmissionRequest, allow_namespaced_http: bool = False) -> AdmissionDecision:
    from stockade.lint.check import assess_policy

    if review.operation not in ("CREATE", "UPDATE") or not review.object:
        return AdmissionDecision(True)
    try:
        assessment = assess_policy(review.object, old=review.old_object if review.operation == "UPDATE" else None, allow_namespaced_http=allow_namespaced_http)
    except Exception as exc:  # a checker bug must not block policy management
        log.exception("policy validation failed for %s", review.uid)
        return AdmissionDecision(True, warnings=[f"stockade: policy validation failed: {exc}"])
    unknown = [f.message for f in assessment.unknown_fields]
    if refused := assessment.schema_errors:
        kind = review.object.get("kind", "")
        name = (review.object.get("metadata") or {}).get("name", "")
        return AdmissionDecision(False, f'{kind} "{name}" is invalid: ' + "; ".join(f.message for f in refused), warnings=unknown)
    result = assessment.validation
    if result is None:
        return AdmissionDecision(True, warnings=unknown)
    if not result.ok:
        return AdmissionDecision(False, result.message(), warnings=[*unknown, *result.warnings])
    return AdmissionDecision(True, warnings=[*unknown, *result.warnings])


def exception_namespace_warnings(group: str, namespace: str, exception_namespaces: Collection[str] | None) -> list[str]:
    """Kyverno's warnings for a PolicyException it will not honour: exceptions are off (both groups), or a
    kyverno.io exception lies outside the namespaces exceptions are honoured in (None: every namespace, which is
    Kyverno's ``--exceptionNamespace=*``)."""
    if exception_namespaces is not None and not exception_namespaces:
        return ["PolicyException resources would not be processed until it is enabled."]
    if group != KYVERNO_GROUP or exception_namespaces is None or "*" in exception_namespaces:
        return []
    return [] if namespace in exception_namespaces else ["PolicyException resource namespace must match the defined namespace."]


def cluster_policy_decision(checker: Any, review: AdmissionRequest, static: AdmissionDecision) -> AdmissionDecision:
    """The static decision (allowed) refined by the checks that ask the cluster; their failure never blocks."""
    try:
        errors, warnings = checker.check(review.object, review.old_object if review.operation == "UPDATE" else None)
    except Exception as exc:
        log.exception("cluster policy checks failed for %s", review.uid)
        return AdmissionDecision(True, warnings=[*static.warnings, f"stockade: policy validation failed: {exc}"])
    if errors:
        return AdmissionDecision(False, "; ".join(errors), warnings=[*static.warnings, *warnings])
    return AdmissionDecision(True, warnings=[*static.warnings, *warnings])


def build_router(state: ServerState) -> Router:
    """The admission listener's routes: the webhooks (POST, bodies up to MAX_BODY_BYTES), health and metrics."""
    router = Router()
    for path in WEBHOOK_PATHS:
        router.add("POST", path, make_handler(state, path, parse_route(path)), MAX_BODY_BYTES)
    for phase in ("validate", "mutate"):
        for failure in ("fail", "ignore"):
            prefix = f"/{phase}/{failure}/finegrained"
            router.add_prefix("POST", prefix + "/", make_handler(state, prefix), MAX_BODY_BYTES)
    for prefix in CEL_ROUTES:
        router.add_prefix("POST", f"/{prefix}/", make_handler(state, f"/{prefix}"), MAX_BODY_BYTES)
    for prefix in IMAGE_ROUTES:
        for phase in ("validate", "mutate"):
            router.add_prefix("POST", f"/{prefix}/{phase}/", make_handler(state, f"/{prefix}/{phase}"), MAX_BODY_BYTES)
    router.add("POST", POLICY_VALIDATION_PATH, make_policy_validation_handler(state), MAX_BODY_BYTES)
    for path in (POLICY_MUTATION_PATH, VERIFY_MUTATION_PATH):
        router.add("POST", path, make_admit_handler(state, path), MAX_BODY_BYTES)

    async def liveness(_: Request) -> Response:
        return json_response({"status": "ok"})

    async def readiness(_: Request) -> Response:
        problems = [] if state.ready and not state.shutting_down else ["not ready"]
        if store_problem := state.store.readiness_problem():
            problems.append(store_problem)
        problems.extend(p for p in (check() for check in state.readiness_checks) if p)
        if problems:
            return json_response({"status": "unready", "problems": problems}, status=503)
        snapshot = state.store.snapshot
        # policies: the Kyverno policies served; documents: everything the store holds (policies of every kind,
        # exceptions, watched admission policies), so a caller can wait for deleted ones to leave the cache
        return json_response(
            {"status": "ok", "policies": len(snapshot.policies) if snapshot else 0, "documents": len(snapshot.documents) if snapshot else 0}
        )

    router.add("GET", "/health/liveness", liveness)
    router.add("GET", "/health/readiness", readiness)
    router.add("GET", "/metrics", metrics_handler(state))
    return router


def metrics_handler(state: ServerState) -> Callable[[Request], Awaitable[Response]]:
    async def metrics(_: Request) -> Response:
        # rendering every series takes a while: in a thread, so admission reviews are answered meanwhile
        return Response(200, await asyncio.to_thread(state.metrics.exposition), state.metrics.content_type)

    return metrics


@dataclass
class ServerConfig:
    host: str = "0.0.0.0"
    port: int = 9443
    metrics_port: int | None = None  # None: /metrics is served on the webhook port only
    reload_interval: float = 5.0
    cert_check_interval: float = 3600.0
    reuse_port: bool = False  # lets worker processes share the listening port (the kernel spreads connections)
    limits: HttpLimits = field(default_factory=HttpLimits)  # timeouts and the connection cap, for every listener
    metrics_namespaces: tuple[str, ...] = ()  # namespaces named in metric labels; the others are reported as "other"


class WebhookServer:
    """Runs the app on HTTPS and drives the periodic policy reload and certificate refresh."""

    def __init__(self, state: ServerState, certs: CertificateManager, config: ServerConfig) -> None:
        self.state = state
        self.certs = certs
        self.config = config
        self.port: int = config.port
        self.metrics_port: int | None = None
        self.guard = ConnectionGuard(config.limits)
        self.http: HttpServer | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        context: ssl.SSLContext = self.certs.start()
        metrics = self.state.metrics
        metrics.report_namespaces = frozenset(self.config.metrics_namespaces)
        self.state.store.listeners.append(lambda snapshot: metrics.retain([*snapshot.policies, *snapshot.cel_policies]))
        if self.state.store.snapshot is None:
            self.state.store.load()
        else:
            metrics.retain([*self.state.store.snapshot.policies, *self.state.store.snapshot.cel_policies])
        self.http = HttpServer(self.guard)
        listener: Listener = self.http.listen(build_router(self.state), self.config.host, self.config.port, ssl_context=context, reuse_port=self.config.reuse_port)
        self.port = listener.port
        if self.config.metrics_port is not None:
            # plain HTTP for scrapers, and nothing but /metrics on it: admission stays TLS-only
            metrics_router = Router()
            metrics_router.add("GET", "/metrics", metrics_handler(self.state))
            self.metrics_port = self.http.listen(metrics_router, self.config.host, self.config.metrics_port).port
        # policy reloads parse YAML and may re-register webhooks over the network: keep them off the event loop
        self._tasks.append(asyncio.create_task(self._every(self.config.reload_interval, self.state.store.reload_if_changed, in_thread=True)))
        self._tasks.append(asyncio.create_task(self._every(self.config.cert_check_interval, self._refresh_certs)))
        self.state.ready = True
        log.info("webhook listening on https://%s:%d", self.config.host, self.port)

    def _refresh_certs(self) -> None:
        try:
            changed = self.certs.refresh()
        except CertificateFileError as exc:  # keep serving the last good pair; say which file is wrong
            log.error("serving certificate not reloaded: %s", exc)
            return
        if changed:
            log.info("serving certificate reloaded")

    @staticmethod
    async def _every(interval: float, action: Callable[[], object], in_thread: bool = False) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                if in_thread:
                    await asyncio.to_thread(action)
                else:
                    action()
            except Exception:  # keep polling; a transient failure must not stop reloads for good
                log.exception("periodic task failed")

    async def stop(self) -> None:
        self.state.shutting_down = True
        self.state.ready = False
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self.http is not None:
            await self.http.shutdown(SHUTDOWN_TIMEOUT_SECONDS)
            self.http = None
        if self.state.tracing is not None:
            await asyncio.to_thread(self.state.tracing.shutdown)  # flushes buffered spans
        if self.state.decision_log is not None:
            await asyncio.to_thread(self.state.decision_log.close)  # writes queued records

