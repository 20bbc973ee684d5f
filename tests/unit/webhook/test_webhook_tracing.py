"""Admission spans reach an OTLP/HTTP collector (a stdlib stub on 127.0.0.1)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from webhook_helpers import pod, review, start_server

from stockade.webhook.certs import CertificateManager
from stockade.webhook.tracing import Tracing

# tracing is optional (opentelemetry-sdk + opentelemetry-exporter-otlp-proto-http); the rest of the server is not
trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")


def test_admission_request_exports_a_span(policy_dir: Path, tmp_path: Path) -> None:
    received: list[tuple[str, bytes]] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server naming
            received.append((self.path, self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    collector = HTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    running = start_server(policy_dir, CertificateManager(hosts=["127.0.0.1"], directory=tmp_path / "c"))
    tracing = Tracing(f"http://127.0.0.1:{collector.server_address[1]}")
    running.server.state.tracing = tracing
    try:
        client = running.client()
        client.post_review("/validate/fail", review(pod(name="traced")))
        client.close()
        tracing.flush()
    finally:
        running.stop()
        collector.shutdown()
        collector.server_close()
    assert received and received[0][0] == "/v1/traces"
    request = trace_service.ExportTraceServiceRequest()
    request.ParseFromString(received[0][1])
    spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert [s.name for s in spans] == ["admission /validate/fail"]
    attributes = {a.key: a.value for a in spans[0].attributes}
    assert attributes["resource.name"].string_value == "traced"
    assert attributes["admission.allowed"].bool_value is False
    assert [v.string_value for v in attributes["admission.policies"].array_value.values] == ["disallow-latest", "require-team-label"]
