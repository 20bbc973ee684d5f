"""Optional OpenTelemetry tracing of admission requests (OTLP over HTTP).

Off by default and imported only when enabled, so the server carries no tracing cost or dependency otherwise.
"""

from __future__ import annotations

from typing import Any


class Tracing:
    """A tracer plus the provider that must be flushed on shutdown."""

    def __init__(self, endpoint: str, service_name: str = "stockade", insecure_headers: dict[str, str] | None = None) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        url = endpoint.rstrip("/")
        if not url.endswith("/v1/traces"):
            url += "/v1/traces"
        # a private provider: never touch the process-global one, tests and embedders may have their own
        self.provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url, headers=insecure_headers or {})))
        self.tracer = self.provider.get_tracer("stockade.webhook")

    def span(self, name: str, attributes: dict[str, Any]) -> Any:
        return self.tracer.start_as_current_span(name, attributes=attributes)

    def flush(self) -> None:
        self.provider.force_flush()

    def shutdown(self) -> None:
        self.provider.shutdown()
