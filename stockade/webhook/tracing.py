"""Optional OpenTelemetry tracing of admission requests (OTLP over HTTP or gRPC).

Off by default and imported only when enabled, so the server carries no tracing cost or dependency otherwise.

Span tree of one review::

    admission /validate/fail          (SERVER; child of the apiserver's span when it sent ``traceparent``)
      policy <name>                   (one per policy that produced rule results, in evaluation order)
        rule <name>                   (rule type, result, message, PolicyException hits)
          registry verify <host>      (signatures/attestations checked against the registry)
            GET / HEAD                (CLIENT, HTTP semantic conventions: one per registry round trip)
          image cache <image>         (answered from the verification cache; a tag still costs a HEAD)

Where spans are built: evaluation runs in worker processes that can be SIGKILLed mid-review (isolation.py), so the
worker never exports anything.  It records wall-clock start and duration per rule and per image check in the engine
responses it already returns, and the parent builds the child spans afterwards with those timestamps.  That keeps one
exporter and one sampling decision per server, loses no spans when a worker is killed (the request span still ends,
with the failurePolicy answer), and costs nothing beyond a few integers per rule when a request is not sampled.
"""

from __future__ import annotations

from stockade.errors import StockadeError
import base64
import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from stockade.engine.response import ERROR, FAIL, PASS, EngineResponse, RuleResponse

PROTOCOL_HTTP = "http/protobuf"
PROTOCOL_GRPC = "grpc"
PROTOCOLS = (PROTOCOL_HTTP, PROTOCOL_GRPC)
MAX_ATTRIBUTE_CHARS = 1024  # a rule message can quote a whole object; spans stay small
_PROPAGATOR = TraceContextTextMapPropagator()
_UNSET = Status(StatusCode.UNSET)
_ERROR = Status(StatusCode.ERROR)


class TracingConfigurationError(StockadeError, ValueError):
    """A tracing flag has a value that cannot work (unknown protocol, malformed header, ratio outside 0..1)."""


@dataclass(frozen=True)
class TracingSettings:
    """Where and how much to export; mirrors the Helm chart's ``tracing`` values."""

    endpoint: str
    protocol: str = PROTOCOL_HTTP
    headers: dict[str, str] = field(default_factory=dict)
    sampling_ratio: float = 1.0
    service_name: str = "stockade"
    insecure: bool = True  # gRPC only: plaintext to an in-cluster collector unless the endpoint is https


def parse_headers(values: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``KEY=VALUE`` strings (the ``--tracing-header`` flag) as a dict, with a clear error for anything else."""
    headers: dict[str, str] = {}
    for value in values:
        key, separator, text = value.partition("=")
        if not separator or not key.strip():
            raise TracingConfigurationError(f"--tracing-header {value!r}: expected KEY=VALUE")
        headers[key.strip().lower()] = text.strip()
    return headers


def _exporter(settings: TracingSettings) -> SpanExporter:
    if settings.protocol == PROTOCOL_HTTP:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        url = settings.endpoint.rstrip("/")
        if not url.endswith("/v1/traces"):
            url += "/v1/traces"
        return OTLPSpanExporter(endpoint=url, headers=dict(settings.headers))
    if settings.protocol == PROTOCOL_GRPC:
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
        except ImportError as exc:
            raise TracingConfigurationError("--tracing-protocol grpc needs the opentelemetry-exporter-otlp-proto-grpc package") from exc
        insecure = settings.insecure and not settings.endpoint.startswith("https://")
        return GrpcSpanExporter(endpoint=settings.endpoint, headers=tuple(settings.headers.items()), insecure=insecure)
    raise TracingConfigurationError(f"--tracing-protocol {settings.protocol!r}: expected one of {', '.join(PROTOCOLS)}")


class Tracing:
    """A tracer plus the provider that must be flushed on shutdown."""

    def __init__(self, settings: TracingSettings | str, processor: SpanProcessor | None = None) -> None:
        if isinstance(settings, str):
            settings = TracingSettings(settings)
        if not 0.0 <= settings.sampling_ratio <= 1.0:
            raise TracingConfigurationError(f"--tracing-sampling-ratio {settings.sampling_ratio}: expected a number from 0 to 1")
        self.settings = settings
        # the apiserver's sampling decision wins when it sends one; our own ratio applies to requests without a parent
        sampler = ParentBased(TraceIdRatioBased(settings.sampling_ratio))
        # a private provider: never touch the process-global one, tests and embedders may have their own
        self.provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}), sampler=sampler)
        self._processor = processor or BatchSpanProcessor(_exporter(settings))
        self.provider.add_span_processor(self._processor)
        self.tracer = self.provider.get_tracer("stockade.webhook")
        self._ids = self.provider.id_generator
        self._scope = InstrumentationScope("stockade.webhook")

    @contextmanager
    def request_span(self, name: str, attributes: dict[str, Any], headers: Mapping[str, str]) -> Iterator[Span]:
        """The SERVER span of one admission request, a child of the caller's W3C ``traceparent`` when present."""
        parent = _PROPAGATOR.extract({key.lower(): value for key, value in headers.items() if key.lower() in ("traceparent", "tracestate")})
        with self.tracer.start_as_current_span(name, context=parent, kind=SpanKind.SERVER, attributes=attributes) as span:
            yield span

    def span(self, name: str, attributes: dict[str, Any]) -> Any:
        return self.tracer.start_as_current_span(name, attributes=attributes)

    def record_evaluation(self, parent: Span, responses: list[EngineResponse], answer: bytes | None = None, patch: list[dict[str, Any]] | None = None) -> None:
        """Child spans per policy, rule and image check from the timings the engine recorded, plus a JSON-patch
        summary on ``parent``; nothing is built when the request is not sampled.

        These spans are already finished when they are built, so they are handed to the span processor as finished
        spans with plain attribute dicts of our own making: going through ``start_span`` (sampler, attribute
        cleaning, locks) cost about four times as much per span, which at 16 spans per request was the whole
        tracing overhead (bench_admission.py)."""
        if not parent.is_recording():
            return
        operations = patch if patch else _answer_patch(answer)
        if operations:
            parent.set_attribute("admission.patch.operations", len(operations))
            parent.set_attribute("admission.patch.paths", _clip(",".join(sorted({str(op.get("path", "")) for op in operations}))))
        request_context = parent.get_span_context()
        now = time.time_ns()
        for response in responses:
            if not response.rules:
                continue
            timed = [rule for rule in response.rules if rule.started_ns]
            start = min((rule.started_ns for rule in timed), default=now)
            end = max((rule.started_ns + rule.duration_ns for rule in timed), default=now)
            policy_context = self._child_context(request_context)
            for rule in response.rules:
                self._rule_span(policy_context, rule, now)
            self._emit(
                f"policy {response.policy_name}",
                policy_context,
                request_context,
                SpanKind.INTERNAL,
                start,
                end,
                _policy_attributes(response),
                _ERROR if response.has_failures() else _UNSET,
            )

    def _child_context(self, parent: SpanContext) -> SpanContext:
        return SpanContext(parent.trace_id, self._ids.generate_span_id(), is_remote=False, trace_flags=parent.trace_flags, trace_state=parent.trace_state)

    def _emit(self, name: str, context: SpanContext, parent: SpanContext, kind: SpanKind, start: int, end: int, attributes: dict[str, Any], status: Status) -> None:
        span = ReadableSpan(
            name=name,
            context=context,
            parent=parent,
            resource=self.provider.resource,
            attributes=attributes,
            kind=kind,
            status=status,
            start_time=start,
            end_time=max(start, end),
            instrumentation_scope=self._scope,
        )
        self._processor.on_end(span)

    def _rule_span(self, policy_context: SpanContext, rule: RuleResponse, now: int) -> None:
        # attributes cost most of a span's export (one protobuf KeyValue each): a passing rule carries three
        attributes: dict[str, Any] = {"kyverno.rule.name": rule.name, "kyverno.rule.type": rule.rule_type, "kyverno.rule.result": rule.status}
        if rule.status != PASS and rule.message:
            attributes["kyverno.rule.message"] = _clip(rule.message)
        if rule.status in (FAIL, ERROR):
            attributes["kyverno.rule.failure_action"] = rule.failure_action
        if rule.exceptions:
            attributes["kyverno.policy_exceptions"] = tuple(rule.exceptions)
        start = rule.started_ns or now
        end = start + rule.duration_ns
        rule_context = self._child_context(policy_context)
        for check in rule.image_checks:
            checked_from_cache = check.source == "cache"
            host = _registry_host(check.image)
            check_attributes: dict[str, Any] = {
                "oci.image.reference": check.image,
                "oci.manifest.digest": check.digest,
                "stockade.verification.cache_hit": checked_from_cache,
                "stockade.verification.result": check.status,
            }
            if not checked_from_cache:
                check_attributes.update({"server.address": host, "url.scheme": "https"})
            check_start = check.started_ns or start
            check_context = self._child_context(rule_context)
            for method, url, status, call_start, call_duration in check.http_calls:
                self._emit(
                    str(method),
                    self._child_context(check_context),
                    check_context,
                    SpanKind.CLIENT,
                    int(call_start),
                    int(call_start) + int(call_duration),
                    {"http.request.method": str(method), "url.full": str(url), "server.address": host, "http.response.status_code": int(status)},
                    _ERROR if int(status) >= 400 else _UNSET,
                )
            self._emit(
                f"image cache {check.image}" if checked_from_cache else f"registry verify {host}",
                check_context,
                rule_context,
                SpanKind.INTERNAL,
                check_start,
                check_start + check.duration_ns,
                check_attributes,
                _UNSET,
            )
        failed = rule.status in (FAIL, ERROR)
        self._emit(f"rule {rule.name}", rule_context, policy_context, SpanKind.INTERNAL, start, end, attributes, Status(StatusCode.ERROR, _clip(rule.message)) if failed else _UNSET)

    def flush(self) -> None:
        self.provider.force_flush()

    def shutdown(self) -> None:
        self.provider.shutdown()


def _policy_attributes(response: EngineResponse) -> dict[str, Any]:
    attributes: dict[str, Any] = {"kyverno.policy.name": response.policy_name, "kyverno.policy.kind": str(getattr(response.policy, "kind", ""))}
    namespace = str(getattr(response.policy, "namespace", "") or "")
    if namespace:
        attributes["kyverno.policy.namespace"] = namespace
    return attributes


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ATTRIBUTE_CHARS else text[: MAX_ATTRIBUTE_CHARS - 1] + "…"


def _registry_host(image: str) -> str:
    """The registry an image reference names (Docker Hub when the first component is not a host)."""
    first = image.split("/", 1)[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def _answer_patch(answer: bytes | None) -> list[dict[str, Any]]:
    """The JSON patch inside a serialized AdmissionReview answer (the isolated path returns only bytes)."""
    if not answer or b'"patch"' not in answer:
        return []
    try:
        encoded = json.loads(answer)["response"]["patch"]
        operations = json.loads(base64.b64decode(encoded))
    except (ValueError, KeyError, TypeError):
        return []
    return [op for op in operations if isinstance(op, dict)] if isinstance(operations, list) else []


def current_trace_ids() -> tuple[str, str]:
    """(trace id, span id) of the active span as hex, or empty strings: for log lines."""
    from opentelemetry.trace import get_current_span

    span_context = get_current_span().get_span_context()
    if not span_context.is_valid:
        return "", ""
    return f"{span_context.trace_id:032x}", f"{span_context.span_id:016x}"
