"""Trace context end to end: kube-apiserver with its TracingConfiguration calls `stockade serve`, and the request
span stockade exports is a child of the apiserver's webhook call span, in the apiserver's trace."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from webhook_cluster import Kube, Serve, pod

from stockade.testing.apiserver import ControlPlane, free_port


@dataclass
class GrpcTraceReceiver(trace_service_pb2_grpc.TraceServiceServicer):
    """OTLP/gRPC trace receiver: kube-apiserver exports only over gRPC."""

    spans: list[Any] = field(default_factory=list)

    def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - the generated service's name
        self.spans.extend(s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans)
        return trace_service_pb2.ExportTraceServiceResponse()


@dataclass
class TracedControlPlane(ControlPlane):
    tracing_config: Path | None = None

    def apiserver_args(self) -> list[str]:
        assert self.tracing_config is not None
        return [*super().apiserver_args(), f"--tracing-config-file={self.tracing_config}"]


@pytest.fixture(scope="module")
def apiserver_spans(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TracedControlPlane, GrpcTraceReceiver]]:
    receiver = GrpcTraceReceiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    workdir = tmp_path_factory.mktemp("traced-kube")
    config = workdir / "tracing-configuration.yaml"
    # the shape of ../shared/e2e/kyverno-config/kube-apiserver/tracing-configuration.yaml, pointed at our receiver
    config.write_text(f"apiVersion: apiserver.config.k8s.io/v1beta1\nkind: TracingConfiguration\nendpoint: 127.0.0.1:{port}\nsamplingRatePerMillion: 1000000\n")
    plane = TracedControlPlane(workdir=workdir / "plane", tracing_config=config)
    plane.start()
    try:
        yield plane, receiver
    finally:
        plane.stop()
        server.stop(grace=None)


@pytest.fixture()
def http_receiver() -> Iterator[tuple[str, list[Any]]]:
    spans: list[Any] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server naming
            request = trace_service_pb2.ExportTraceServiceRequest()
            request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
            spans.extend(s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", spans
    finally:
        server.shutdown()
        server.server_close()


def test_request_span_is_a_child_of_the_apiserver_trace(apiserver_spans: tuple[TracedControlPlane, GrpcTraceReceiver], http_receiver: tuple[str, list[Any]], policy_dir: Path, tmp_path: Path) -> None:
    plane, apiserver = apiserver_spans
    url, stockade_spans = http_receiver
    kube = Kube(plane)
    serve = Serve(plane, policy_dir, tmp_path, extra_args=("--tracing-endpoint", url, "--log-format", "json"))
    try:
        serve.wait_registered(kube)
        deadline = time.monotonic() + 60
        status = 0
        while time.monotonic() < deadline:  # the webhook answers once its configuration is in the apiserver's cache
            status, body, _ = kube.request("POST", "/api/v1/namespaces/default/pods", pod("traced-denied"))
            if status == 400 and "team" in str(body):
                break
            if status in (200, 201):
                kube.request("DELETE", "/api/v1/namespaces/default/pods/traced-denied")
            time.sleep(0.5)
        assert status == 400, body
        ours: list[Any] = []
        joined: list[tuple[Any, Any]] = []
        while time.monotonic() < deadline + 30 and not joined:  # both sides export in batches
            time.sleep(1)
            ours = [s for s in stockade_spans if s.name.startswith("admission /validate")]
            by_id = {s.span_id: s for s in apiserver.spans}
            joined = [(s, by_id[s.parent_span_id]) for s in ours if s.parent_span_id in by_id]
    finally:
        serve.stop()
    assert ours, f"no admission spans exported:\n{serve.log()[-2000:]}"
    assert joined, f"no stockade span has an apiserver parent ({len(apiserver.spans)} apiserver spans)"
    span, parent = joined[-1]
    assert span.trace_id == parent.trace_id
    rules = [s for s in stockade_spans if s.trace_id == span.trace_id and s.name == "rule check-team"]
    assert rules, "the rule spans share the apiserver's trace"
    lines = [json.loads(line) for line in serve.log().splitlines() if line.startswith("{")]
    denials = [line for line in lines if line.get("rule") == "check-team" and line.get("resource") == "Pod/default/traced-denied"]
    assert denials and denials[-1]["trace_id"] in {s.trace_id.hex() for s in ours}, "the denial log line names the request's trace"
    assert denials[-1]["policy"] == "require-team-label" and "team" in denials[-1]["reason"]
