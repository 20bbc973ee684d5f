"""KubeClient over the official client's real transport (kubeconfig, bearer token, urllib3) against a small local
HTTP server that records what it received and answers as an API server would."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stockade.kube.connection import load_api_client
from stockade.kube.client import JSON_PATCH, MERGE_PATCH, KubeClient
from stockade.kube.errors import AlreadyExists, Conflict, NotFound, Unreachable


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": message, "code": code}


class Recorded:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[tuple[Recorded, Any]]:
    recorded = Recorded()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            recorded.requests.append({
                "method": self.command, "path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": json.loads(raw) if raw else None,
            })
            path = self.path.split("?")[0]
            code, body = 200, {"kind": "ConfigMap", "metadata": {"name": "c", "resourceVersion": "3"}}
            if path.endswith("/missing"):
                code, body = 404, status(404, "NotFound", 'configmaps "missing" not found')
            elif path.endswith("/taken"):
                code, body = 409, status(409, "AlreadyExists", 'configmaps "taken" already exists')
            elif path.endswith("/stale"):
                code, body = 409, status(409, "Conflict", "the object has been modified")
            elif path.endswith("/slow"):
                time.sleep(1.5)
            elif path.endswith("/empty"):
                code, body = 200, None
            payload = json.dumps(body).encode() if body is not None else b""
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

        def log_message(self, *_: Any) -> None:
            pass

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # a client that timed out closed the connection before the late answer

    httpd = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        f"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'http://127.0.0.1:{httpd.server_address[1]}'}}\n"
        "users:\n- name: u\n  user: {token: secret-token}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"
    )
    api_client = load_api_client(str(kubeconfig))
    yield recorded, api_client
    api_client.close()
    httpd.shutdown()
    httpd.server_close()
    thread.join(10)


def test_a_call_sends_method_path_query_token_and_json_body_and_returns_the_decoded_answer(server: tuple[Recorded, Any]) -> None:
    recorded, api_client = server
    client = KubeClient(api_client)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    answer = client.request("POST", "/api/v1/namespaces/ns/configmaps", body, query={"dryRun": "All", "fieldManager": "stockade"})
    assert answer == {"kind": "ConfigMap", "metadata": {"name": "c", "resourceVersion": "3"}}
    (sent,) = recorded.requests
    assert (sent["method"], sent["path"]) == ("POST", "/api/v1/namespaces/ns/configmaps?dryRun=All&fieldManager=stockade")
    assert sent["headers"]["authorization"] == "Bearer secret-token" and sent["headers"]["content-type"] == "application/json"
    assert sent["headers"]["accept"] == "application/json" and "impersonate-user" not in sent["headers"]
    assert sent["body"] == body


def test_patch_content_types_and_impersonation(server: tuple[Recorded, Any]) -> None:
    recorded, api_client = server
    client = KubeClient(api_client, impersonate="system:serviceaccount:kyverno:kyverno-cleanup-controller")
    client.request("PATCH", "/api/v1/namespaces/ns/events/e", {"count": 2}, content_type=MERGE_PATCH)
    operations = [{"op": "test", "path": "/metadata/resourceVersion", "value": "3"}, {"op": "remove", "path": "/metadata/finalizers/0"}]
    client.request("PATCH", "/apis/image.toolkit.fluxcd.io/v1/namespaces/ns/imagepolicies/p", operations, content_type=JSON_PATCH)
    merge, json_patch = recorded.requests
    assert merge["headers"]["content-type"] == MERGE_PATCH and merge["body"] == {"count": 2}
    assert json_patch["headers"]["content-type"] == JSON_PATCH and json_patch["body"] == operations
    assert {r["headers"]["impersonate-user"] for r in recorded.requests} == {"system:serviceaccount:kyverno:kyverno-cleanup-controller"}


def test_failures_are_typed_by_the_status_reason(server: tuple[Recorded, Any]) -> None:
    _, api_client = server
    client = KubeClient(api_client)
    with pytest.raises(NotFound) as missing:
        client.request("GET", "/api/v1/namespaces/ns/configmaps/missing")
    assert missing.value.status == 404 and missing.value.path == "/api/v1/namespaces/ns/configmaps/missing"
    with pytest.raises(AlreadyExists):  # a 409 on a create: not a Conflict, retrying cannot help
        client.request("POST", "/api/v1/namespaces/ns/configmaps/taken", {"metadata": {"name": "taken"}})
    with pytest.raises(Conflict) as stale:
        client.request("PUT", "/api/v1/namespaces/ns/configmaps/stale", {"metadata": {"name": "stale"}})
    assert not isinstance(stale.value, AlreadyExists) and stale.value.message == "the object has been modified"


def test_an_empty_answer_is_an_empty_object(server: tuple[Recorded, Any]) -> None:
    _, api_client = server
    assert KubeClient(api_client).request("DELETE", "/api/v1/namespaces/ns/configmaps/empty") == {}


def test_no_answer_within_the_timeout_is_unreachable_and_a_call_may_set_its_own(server: tuple[Recorded, Any]) -> None:
    _, api_client = server
    client = KubeClient(api_client, timeout=0.2)
    with pytest.raises(Unreachable):
        client.request("GET", "/api/v1/namespaces/ns/configmaps/slow")
    assert client.request("GET", "/api/v1/namespaces/ns/configmaps/slow", timeout=30)["metadata"]["name"] == "c"


def test_a_refused_connection_is_unreachable(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        f"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'http://127.0.0.1:{port}'}}\n"
        "users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"
    )
    api_client = load_api_client(str(kubeconfig))
    try:
        with pytest.raises(Unreachable) as refused:
            KubeClient(api_client, timeout=2).request("GET", "/api/v1/namespaces")
        assert refused.value.status == 0
    finally:
        api_client.close()


def test_open_leaves_the_body_unread_for_streams_and_types_failures(server: tuple[Recorded, Any]) -> None:
    recorded, api_client = server
    client = KubeClient(api_client)
    response = client.open("/api/v1/configmaps", query=[("watch", "true"), ("resourceVersion", "3")], accept="application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")
    try:
        assert json.loads(response.data)["metadata"]["name"] == "c"
    finally:
        response.release_conn()
    assert recorded.requests[0]["path"] == "/api/v1/configmaps?watch=true&resourceVersion=3"
    assert recorded.requests[0]["headers"]["accept"] == "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
    with pytest.raises(NotFound):
        client.open("/api/v1/namespaces/ns/configmaps/missing")
