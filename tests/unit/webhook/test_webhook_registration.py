"""WebhookRegistrar and discovery through the real kubernetes client, against a small in-memory API server."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from stockade.controllers.registration import WebhookRegistrar, discover_resources, discovery_resolver
from stockade.kube.connection import load_api_client
from stockade.controllers.webhookconfig import WebhookTarget, build_configurations, static_resolver
from stockade.policy.model import KyvernoPolicy

GROUP_PATH = "/apis/admissionregistration.k8s.io/v1"


class FakeApiServer:
    """Discovery for core/v1 and apps/v1 plus CRUD on webhook configurations; records bearer tokens seen."""

    STATIC: dict[str, dict[str, Any]] = {
        "/api": {"kind": "APIVersions", "versions": ["v1"]},
        "/api/v1": {"resources": [
            {"name": "pods", "kind": "Pod", "namespaced": True}, {"name": "pods/exec", "kind": "PodExecOptions", "namespaced": True},
            {"name": "namespaces", "kind": "Namespace", "namespaced": False}]},
        "/apis": {"groups": [{"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}]}]},
        "/apis/apps/v1": {"resources": [{"name": "deployments", "kind": "Deployment", "namespaced": True}]},
    }
    NOT_FOUND = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, dict[str, Any]]] = {"mutatingwebhookconfigurations": {}, "validatingwebhookconfigurations": {}}
        self.tokens: set[str] = set()
        self.version = 0
        self.lock = threading.Lock()

    def handle(self, method: str, target: str, token: str, body: bytes) -> tuple[int, dict[str, Any]]:
        """The status and JSON answer of one API request."""
        with self.lock:
            self.tokens.add(token)
            url = urllib.parse.urlsplit(target)
            if method == "GET" and url.path in self.STATIC:
                return 200, self.STATIC[url.path]
            if not url.path.startswith(GROUP_PATH + "/"):
                return 404, self.NOT_FOUND
            plural, _, name = url.path[len(GROUP_PATH) + 1:].partition("/")
            if plural not in self.objects:
                return 404, self.NOT_FOUND
            stored = self.objects[plural]
            if not name and method == "GET":
                key, _, value = urllib.parse.parse_qs(url.query).get("labelSelector", [""])[0].partition("=")
                items = [o for o in stored.values() if not key or o["metadata"].get("labels", {}).get(key) == value]
                return 200, {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": items}
            if not name and method == "POST":
                return 201, self._store(plural, json.loads(body))
            current = stored.get(name)
            if current is None:
                return 404, self.NOT_FOUND
            if method == "GET":
                return 200, current
            if method == "PUT":
                replacement = json.loads(body)
                assert replacement["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]
                return 200, self._store(plural, replacement)
            if method == "DELETE":
                del stored[name]
                return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
            return 405, {"kind": "Status", "code": 405}

    def _store(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)
        self.objects[plural][body["metadata"]["name"]] = body
        return body


def _request_handler(fake: FakeApiServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the API server

        def _answer(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, answer = fake.handle(self.command, self.path, self.headers.get("Authorization", ""), body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture()
def fake_api(tmp_path: Path) -> Iterator[tuple[FakeApiServer, Any]]:
    fake = FakeApiServer()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _request_handler(fake))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        f"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'http://127.0.0.1:{port}'}}\n"
        "users:\n- name: u\n  user: {token: secret-token}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"
    )
    client = load_api_client(str(kubeconfig))
    yield fake, client
    client.close()  # its connection pool's sockets
    server.shutdown()
    server.server_close()
    thread.join(10)


POLICY = KyvernoPolicy(yaml.safe_load("""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: p}
spec:
  rules:
  - name: r
    match: {any: [{resources: {kinds: [Deployment]}}]}
    validate: {message: m, pattern: {metadata: {name: "?*"}}}
"""))


def test_discovery_lists_resources_without_subresources(fake_api: tuple[FakeApiServer, Any]) -> None:
    fake, client = fake_api
    found = {(r.group, r.version, r.resource, r.kind, r.namespaced) for r in discover_resources(client)}
    assert found == {("", "v1", "pods", "Pod", True), ("", "v1", "namespaces", "Namespace", False), ("apps", "v1", "deployments", "Deployment", True)}
    assert fake.tokens == {"Bearer secret-token"}


def test_discovery_resolver_resolves_subresources_the_cluster_serves(fake_api: tuple[FakeApiServer, Any]) -> None:
    """``Pod/*`` names what discovery lists under pods/ (here only pods/exec), with the parent's group/version."""
    _, client = fake_api
    resolve = discovery_resolver(client)
    assert [(r.group, r.version, r.resource, r.namespaced) for r in resolve("*", "*", "Pod", "*")] == [("", "v1", "pods/exec", True)]
    assert resolve("*", "*", "Pod", "log") == []  # not served by this cluster
    assert [r.resource for r in resolve("*", "*", "Pod", "")] == ["pods"]


def test_apply_creates_then_replaces_and_remove_all_deletes(fake_api: tuple[FakeApiServer, Any]) -> None:
    fake, client = fake_api
    registrar = WebhookRegistrar(client)
    mutating, validating = build_configurations([POLICY], WebhookTarget(url="https://127.0.0.1:9443"), b"CA1", static_resolver())
    registrar.apply(mutating, validating)
    assert list(fake.objects["validatingwebhookconfigurations"]) == ["stockade-resource-validating-webhook-cfg"]
    assert fake.objects["mutatingwebhookconfigurations"] == {}  # no mutate rules, nothing registered
    _, validating = build_configurations([POLICY], WebhookTarget(url="https://127.0.0.1:9443"), b"CA2", static_resolver())
    registrar.apply(mutating, validating)
    stored = fake.objects["validatingwebhookconfigurations"]["stockade-resource-validating-webhook-cfg"]
    assert stored["webhooks"][0]["clientConfig"]["caBundle"] == "Q0Ey"  # base64("CA2")
    fake.objects["validatingwebhookconfigurations"]["someone-else"] = {"metadata": {"name": "someone-else", "labels": {}}, "webhooks": []}
    assert registrar.remove_all() == 1
    assert list(fake.objects["validatingwebhookconfigurations"]) == ["someone-else"]


def test_a_changed_configuration_is_awaited_in_the_api_servers_cache() -> None:
    """After a write that changed a webhook configuration, the registrar reads it back at the written
    resourceVersion (answered from the API server's cache once that cache holds the write, the cache the server's
    own webhook informer is fed from); an unchanged write and a failed wait do not hold registration up."""
    import itertools

    from stockade.controllers.registration import WEBHOOKS_PATH, WebhookRegistrar
    from stockade.kube.errors import ServerError
    from tests.unit.kubefake import FakeKube

    versions = itertools.count(1)

    class VersionedKube(FakeKube):
        def _store(self, call: Any) -> Any:
            if call.method in ("POST", "PUT") and call.body.get("webhooks") != (self.objects.get(call.path) or {}).get("webhooks"):
                call.body["metadata"]["resourceVersion"] = str(next(versions))
            return super()._store(call)

    kube = VersionedKube()
    registrar = WebhookRegistrar(None)
    registrar.client = kube  # type: ignore[assignment]
    hooks = [{"name": "validate.example.io", "clientConfig": {"url": "https://127.0.0.1:1/validate"}}]
    body = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "cfg"}, "webhooks": hooks}
    path = f"{WEBHOOKS_PATH}/validatingwebhookconfigurations/cfg"
    registrar.apply_validating(body)
    [awaited] = [c for c in kube.sent("GET", path) if c.query]
    assert awaited.query == {"resourceVersion": "1"} and awaited.timeout == 3.0
    registrar.apply_validating(body)  # unchanged: the PUT keeps its version, nothing to wait for
    assert [c.query for c in kube.sent("GET", path) if c.query] == [{"resourceVersion": "1"}]
    kube.on("GET", path, lambda call: ServerError("Timeout: Too large resource version", method="GET", path=path) if call.query else kube.objects[path])
    registrar.apply_validating({**body, "webhooks": [{**hooks[0], "name": "validate2.example.io"}]})
    assert kube.objects[path]["webhooks"][0]["name"] == "validate2.example.io"


def test_a_deleted_configuration_is_awaited_gone_from_the_api_servers_cache() -> None:
    """A delete (the last webhooks of a configuration removed, or ``remove_all``) is awaited like a write: the delete's
    Status has no resourceVersion, so a list (a consistent read, at or after the delete) supplies one and the
    configuration is read at it, where the cache answers NotFound once it holds the delete; the wait has the
    write's bound, and a failed list leaves only the wait out."""
    from stockade.controllers.registration import AWAIT_SERVED_SECONDS, WEBHOOKS_PATH, WebhookRegistrar
    from stockade.kube.errors import NotFound, ServerError
    from tests.unit.kubefake import FakeKube

    collection = f"{WEBHOOKS_PATH}/validatingwebhookconfigurations"
    path = f"{collection}/cfg"
    stored = {"metadata": {"name": "cfg", "labels": {"webhook.stockade.io/managed-by": "stockade"}, "resourceVersion": "5"}, "webhooks": [{"name": "v.example.io"}]}
    kube = FakeKube({path: stored})
    kube.on("GET", collection, lambda call: {"metadata": {"resourceVersion": "9"}, "items": [stored] if path in kube.objects else []})
    kube.on("GET", path, lambda call: NotFound("gone", method="GET", path=path) if call.query or path not in kube.objects else kube.objects[path])
    kube.on("GET", f"{WEBHOOKS_PATH}/mutatingwebhookconfigurations", {"items": []})
    registrar = WebhookRegistrar(None)
    registrar.client = kube  # type: ignore[assignment]
    registrar.apply_validating({"metadata": {"name": "cfg"}, "webhooks": []})  # no webhooks left: the configuration goes
    assert path not in kube.objects
    after = [(c.method, c.path, c.query) for c in kube.calls[kube.calls.index(kube.sent("DELETE", path)[0]) :]]
    assert after == [("DELETE", path, {}), ("GET", collection, {"fieldSelector": "metadata.name=cfg"}), ("GET", path, {"resourceVersion": "9"})]
    assert 0 < kube.sent("GET", path)[-1].timeout <= AWAIT_SERVED_SECONDS
    # remove_all waits for each configuration it deletes
    kube.objects[path] = stored
    kube.calls.clear()
    assert registrar.remove_all() == 1
    assert [c.query for c in kube.sent("GET", path)] == [{"resourceVersion": "9"}]
    # a list that fails cuts the wait short; the delete stands
    kube.objects[path] = stored
    kube.calls.clear()
    kube.on("GET", collection, lambda call: ServerError("etcd is slow", method="GET", path=collection) if "fieldSelector" in call.query else {"items": [stored]})
    assert registrar.remove_all() == 1
    assert path not in kube.objects and kube.sent("GET", path) == []
