"""Admission spans reach an OTLP/HTTP receiver (stdlib HTTP server decoding the protobuf with opentelemetry-proto):
the request span joins the caller's W3C trace, with spans per policy, rule and image check under it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from webhook_helpers import RunningServer, pod, review, start_server

from stockade.engine.handlers.verify_images import VerificationCache
from stockade.engine.response import EngineResponse, ImageCheck, RuleResponse
from stockade.images.verifier_api import SignatureOptions
from stockade.webhook.certs import CertificateManager
from stockade.webhook.isolation import rebuild_responses, summarize
from stockade.webhook.policystore import PolicyStore
from stockade.webhook.server import ServerConfig, ServerState, WebhookServer
from stockade.webhook.tracing import Tracing, TracingConfigurationError, TracingSettings, parse_headers

APP = "ghcr.io/acme/app:1.0"
SIDECAR = "ghcr.io/acme/sidecar:2.0"
DIGESTS = {APP: "sha256:" + "a" * 64, SIDECAR: "sha256:" + "b" * 64}
KEY = "-----BEGIN PUBLIC KEY-----\nK\n-----END PUBLIC KEY-----\n"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN_ID = "00f067aa0ba902b7"

POLICIES = f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: add-owner
spec:
  rules:
  - name: owner-label
    match:
      any:
      - resources:
          kinds: [Pod]
    mutate:
      patchStrategicMerge:
        metadata:
          labels:
            owner: platform
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: signed-images
spec:
  webhookTimeoutSeconds: 15
  rules:
  - name: verify-acme
    match:
      any:
      - resources:
          kinds: [Pod]
    verifyImages:
    - imageReferences: ["ghcr.io/acme/*"]
      failureAction: Enforce
      attestors:
      - entries:
        - keys:
            publicKeys: |-
{"".join("              " + line + chr(10) for line in KEY.strip().splitlines())}
  - name: only-for-deployments
    match:
      any:
      - resources:
          kinds: [Deployment]
    verifyImages:
    - imageReferences: ["*"]
      attestors:
      - entries:
        - keys:
            publicKeys: |-
{"".join("              " + line + chr(10) for line in KEY.strip().splitlines())}
"""


class CountingVerifier:
    """Every image is signed by KEY; records which images reached the 'registry'."""

    def __init__(self) -> None:
        self.verified: list[str] = []

    def resolve_digest(self, image: str) -> str:
        return DIGESTS[image]

    def verify_signature(self, image: str, digest: str, attestor: Mapping[str, Any], options: SignatureOptions) -> None:
        self.verified.append(image)

    def fetch_attestations(self, *args: Any) -> list[dict[str, Any]]:
        return []


@dataclass
class Receiver:
    server: HTTPServer
    requests: list[tuple[str, bytes]]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[Any]:
        spans = []
        for path, body in self.requests:
            assert path == "/v1/traces"
            request = trace_service_pb2.ExportTraceServiceRequest()
            request.ParseFromString(body)
            spans.extend(s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans)
        return spans


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    received: list[tuple[str, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server naming
            received.append((self.path, self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield Receiver(server, received)
    server.shutdown()
    server.server_close()


def attributes(span: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for attribute in span.attributes:
        kind = attribute.value.WhichOneof("value")
        value = getattr(attribute.value, kind)
        values[attribute.key] = [getattr(v, v.WhichOneof("value")) for v in value.values] if kind == "array_value" else value
    return values


def start_with_store(store: PolicyStore, tmp_path: Path) -> RunningServer:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = WebhookServer(ServerState(store=store), CertificateManager(hosts=["127.0.0.1"], directory=tmp_path / "c"), ServerConfig(host="127.0.0.1", port=0, reload_interval=3600.0))
    running = RunningServer(server, loop, thread)
    running.call(server.start())
    return running


def two_container_pod(images: list[str]) -> dict[str, Any]:
    subject = pod(name="web", labels={"team": "a"})
    subject["spec"]["containers"] = [{"name": f"c{index}", "image": image} for index, image in enumerate(images)]
    return subject


def test_verify_images_update_span_tree(receiver: Receiver, tmp_path: Path) -> None:
    (tmp_path / "policies.yaml").write_text(POLICIES)
    verifier = CountingVerifier()
    store = PolicyStore([str(tmp_path / "policies.yaml")], image_verifier=verifier, verification_cache=VerificationCache())
    running = start_with_store(store, tmp_path)
    tracing = Tracing(TracingSettings(receiver.url))
    running.server.state.tracing = tracing
    try:
        client = running.client()
        old = two_container_pod([APP])
        client.post_review("/mutate", review(old))  # verifies APP at the registry and caches it
        tracing.flush()
        receiver.requests.clear()
        traceparent = {"traceparent": f"00-{TRACE_ID}-{PARENT_SPAN_ID}-01"}
        answer = client.post_review("/mutate", review(two_container_pod([APP, SIDECAR]), operation="UPDATE", old=old), headers=traceparent)
        client.close()
        tracing.flush()
    finally:
        running.stop()
        tracing.shutdown()
    assert answer["response"]["allowed"] is True
    assert verifier.verified == [APP, SIDECAR]  # APP once (first request), SIDECAR on the update; APP's second check hit the cache
    spans = receiver.spans()
    by_id = {span.span_id: span for span in spans}
    (request,) = [s for s in spans if s.name == "admission /mutate"]
    assert request.trace_id.hex() == TRACE_ID and request.parent_span_id.hex() == PARENT_SPAN_ID
    assert all(s.trace_id.hex() == TRACE_ID for s in spans)
    request_attributes = attributes(request)
    assert request_attributes["admission.operation"] == "UPDATE" and request_attributes["admission.allowed"] is True
    assert request_attributes["admission.patch.operations"] >= 3  # the owner label and two pinned digests
    assert "/spec/containers/1/image" in request_attributes["admission.patch.paths"]

    def children(parent: Any) -> list[Any]:
        return sorted((s for s in spans if s.parent_span_id == parent.span_id), key=lambda s: (s.start_time_unix_nano, s.name))

    policies = children(request)
    assert [s.name for s in policies] == ["policy add-owner", "policy signed-images"]  # evaluation order
    assert all(by_id[s.parent_span_id] is request for s in policies)
    (owner_rule,) = children(policies[0])
    assert owner_rule.name == "rule owner-label" and attributes(owner_rule)["kyverno.rule.type"] == "Mutation"
    (verify_rule,) = children(policies[1])  # only-for-deployments does not match a Pod: no span
    rule_attributes = attributes(verify_rule)
    assert verify_rule.name == "rule verify-acme"
    assert rule_attributes["kyverno.rule.type"] == "ImageVerify" and rule_attributes["kyverno.rule.result"] == "pass"
    checks = {attributes(s)["oci.image.reference"]: s for s in children(verify_rule)}
    assert set(checks) == {APP, SIDECAR}
    assert checks[APP].name == f"image cache {APP}" and attributes(checks[APP])["stockade.verification.cache_hit"] is True
    sidecar = attributes(checks[SIDECAR])
    assert checks[SIDECAR].name == "registry verify ghcr.io"
    assert sidecar["stockade.verification.cache_hit"] is False and sidecar["server.address"] == "ghcr.io"
    assert sidecar["oci.manifest.digest"] == DIGESTS[SIDECAR]
    for child in policies + [owner_rule, verify_rule, *checks.values()]:  # timestamps recorded in the engine nest
        parent = by_id[child.parent_span_id]
        assert parent.start_time_unix_nano <= child.start_time_unix_nano <= child.end_time_unix_nano <= parent.end_time_unix_nano


def test_denial_span_and_request_without_traceparent(receiver: Receiver, policy_dir: Path, tmp_path: Path) -> None:
    running = start_server(policy_dir, CertificateManager(hosts=["127.0.0.1"], directory=tmp_path / "c"))
    tracing = Tracing(receiver.url)
    running.server.state.tracing = tracing
    try:
        client = running.client()
        client.post_review("/validate/fail", review(pod(name="traced")))
        client.close()
        tracing.flush()
    finally:
        running.stop()
        tracing.shutdown()
    spans = receiver.spans()
    (request,) = [s for s in spans if s.name == "admission /validate/fail"]
    assert not request.parent_span_id  # a root span of its own trace
    request_attributes = attributes(request)
    assert request_attributes["resource.name"] == "traced" and request_attributes["admission.allowed"] is False
    # a denial is made of the Enforce rules alone: Kyverno evaluates the Audit policy (disallow-latest) only after admitting
    assert request_attributes["admission.policies"] == ["require-team-label"]
    failed = [s for s in spans if s.name.startswith("rule ") and attributes(s)["kyverno.rule.result"] == "fail"]
    assert failed and all(s.status.code == s.status.STATUS_CODE_ERROR and attributes(s)["kyverno.rule.message"] for s in failed)


def test_unsampled_requests_export_nothing(receiver: Receiver, policy_dir: Path, tmp_path: Path) -> None:
    running = start_server(policy_dir, CertificateManager(hosts=["127.0.0.1"], directory=tmp_path / "c"))
    tracing = Tracing(TracingSettings(receiver.url, sampling_ratio=0.0))
    running.server.state.tracing = tracing
    try:
        client = running.client()
        client.post_review("/validate/fail", review(pod(name="a")))
        # the apiserver's sampled flag wins over the local ratio
        client.post_review("/validate/fail", review(pod(name="b")), headers={"traceparent": f"00-{TRACE_ID}-{PARENT_SPAN_ID}-01"})
        client.close()
        tracing.flush()
    finally:
        running.stop()
        tracing.shutdown()
    names = {attributes(s).get("resource.name") for s in receiver.spans() if s.name.startswith("admission")}
    assert names == {"b"}


def test_worker_summaries_keep_timings_exceptions_and_image_checks() -> None:
    rule = RuleResponse("verify", "ImageVerify", "pass", "ok", exceptions=["ns/exc"], started_ns=10, duration_ns=5, image_checks=[ImageCheck(APP, DIGESTS[APP], "cache")])
    response = EngineResponse(None, {}, {}, rules=[rule])
    (rebuilt,) = rebuild_responses(summarize([response]), {}, {})
    assert rebuilt.rules[0].started_ns == 10 and rebuilt.rules[0].duration_ns == 5 and rebuilt.rules[0].exceptions == ["ns/exc"]
    assert rebuilt.rules[0].image_checks == [ImageCheck(APP, DIGESTS[APP], "cache")] and rebuilt.unmatched == []
    response.unmatched = [("other", ["kind Pod is not selected"])]
    (with_reasons,) = rebuild_responses(summarize([response], with_unmatched=True), {}, {})
    assert with_reasons.unmatched == [("other", ["kind Pod is not selected"])]


def test_bad_tracing_settings_are_named() -> None:
    with pytest.raises(TracingConfigurationError, match="KEY=VALUE"):
        parse_headers(["no-separator"])
    assert parse_headers(["X-Api-Key = s3cr3t"]) == {"x-api-key": "s3cr3t"}
    with pytest.raises(TracingConfigurationError, match="sampling-ratio"):
        Tracing(TracingSettings("http://127.0.0.1:1", sampling_ratio=2.0))
    with pytest.raises(TracingConfigurationError, match="protocol"):
        Tracing(TracingSettings("http://127.0.0.1:1", protocol="zipkin"))


def test_registry_round_trips_become_http_client_spans(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from stockade.images.reference import parse_reference
    from stockade.images.registry import RegistryClient
    from stockade.webhook.admission import parse_review

    digest = "sha256:" + "c" * 64

    class Registry(BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:  # noqa: N802 - http.server naming
            self.send_response(200 if self.path == "/v2/acme/app/manifests/1.0" else 404)
            self.send_header("Docker-Content-Digest", digest)
            self.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_HEAD  # noqa: N815 - the /v2/ probe

        def log_message(self, *_: object) -> None:
            pass

    registry = HTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=registry.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{registry.server_address[1]}"
    image = f"{host}/acme/app:1.0"
    client = RegistryClient(allow_http_localhost=True, retries=0)

    class RegistryBackedVerifier(CountingVerifier):
        def resolve_digest(self, image: str) -> str:
            return client.resolve_digest(parse_reference(image))

    (tmp_path / "policies.yaml").write_text(POLICIES.replace("ghcr.io/acme/*", f"{host}/acme/*"))
    store = PolicyStore([str(tmp_path / "policies.yaml")], image_verifier=RegistryBackedVerifier(), verification_cache=VerificationCache())
    exporter = InMemorySpanExporter()
    tracing = Tracing("http://127.0.0.1:1", processor=SimpleSpanProcessor(exporter))
    try:
        decision = store.load().evaluator.mutate(parse_review(review(two_container_pod([image]))))
        with tracing.request_span("admission /mutate", {}, {}) as span:
            tracing.record_evaluation(span, decision.responses, None, decision.patch)
    finally:
        registry.shutdown()
        registry.server_close()
        client.close()
    spans = exporter.get_finished_spans()
    (check,) = [s for s in spans if s.name == f"registry verify {host}"]
    calls = [s for s in spans if s.parent is not None and s.parent.span_id == check.context.span_id]
    assert calls and all(s.kind.name == "CLIENT" for s in calls)
    head = next(s for s in calls if s.name == "HEAD")
    assert head.attributes["url.full"] == f"http://{host}/v2/acme/app/manifests/1.0"
    assert head.attributes["http.response.status_code"] == 200 and head.attributes["http.request.method"] == "HEAD"
    assert check.attributes["oci.manifest.digest"] == digest
