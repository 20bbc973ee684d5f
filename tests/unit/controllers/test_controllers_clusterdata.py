"""ClusterData against a fake API connection: apiCall/configMap providers, clone lookups, caching and errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from stockade.controllers.clusterdata import ClusterData
from stockade.kube.errors import NotFound
from stockade.controllers.webhookconfig import ApiResource
from stockade.engine.contextloader import ContextLoadError


class _Response:
    """What `ApiConnection.request` returns (a urllib3 response): status, reason, headers and the read body."""

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.reason = "x"
        self.headers: dict[str, str] = {}
        self.data = json.dumps(body).encode()


class FakeApiClient:
    def __init__(self, objects: dict[str, Any]) -> None:
        self.objects = objects
        self.calls: list[tuple[str, str]] = []

    def request(self, method: str, path: str, *, query: Any = (), headers: Any = None, body: bytes | None = None, timeout: Any = None, stream: bool = False) -> _Response:
        """`ApiConnection.request`: the URL (path and query) and the decoded JSON body go to `answer`."""
        pairs = "&".join(f"{k}={v}" for k, v in query or [])
        return self.answer(method, path + ("?" + pairs if pairs else ""), headers, json.loads(body) if body is not None else None)

    def answer(self, method: str, url: str, header_params: Any = None, body: Any = None) -> _Response:
        self.calls.append((method, url))
        if url in self.objects:
            return _Response(200, self.objects[url])
        return _Response(404, {"kind": "Status", "message": f"{url} not found"})


RESOURCES = [ApiResource("", "v1", "configmaps", "ConfigMap"), ApiResource("", "v1", "namespaces", "Namespace", namespaced=False)]


def make(objects: dict[str, Any], ttl: float = 60.0) -> tuple[ClusterData, FakeApiClient]:
    client = FakeApiClient(objects)
    return ClusterData(client, ttl_seconds=ttl, resources=RESOURCES), client


def test_configmap_and_lookup_and_list_kinds() -> None:
    cm = {"metadata": {"name": "c", "namespace": "ns"}, "data": {"k": "v"}}
    data, _ = make({"/api/v1/namespaces/ns/configmaps/c": cm, "/api/v1/namespaces/ns/configmaps": {"items": [cm]}})
    assert data.configmap("ns", "c") == cm
    assert data.configmap("ns", "missing") is None
    assert data.lookup("v1", "ConfigMap", "ns", "c") == [cm]
    listed = data.lookup("", "ConfigMap", "ns", None)
    assert listed[0]["kind"] == "ConfigMap" and listed[0]["apiVersion"] == "v1"
    assert data.lookup("v1", "Unknown", "ns", "c") == []


def test_api_call_url_path_with_query_and_errors() -> None:
    data, client = make({"/api/v1/namespaces?labelSelector=a=b": {"items": [1, 2]}})
    assert data.api_call({"urlPath": "/api/v1/namespaces?labelSelector=a=b"}) == {"items": [1, 2]}
    data.api_call({"urlPath": "/api/v1/namespaces?labelSelector=a=b"})
    # Kyverno's apiCall reads the API server on every evaluation: a list cached for a moment would miss an object
    # created just before (mutate/e2e/jmespath-logic reads a ConfigMap its namespace got a second earlier)
    assert len(client.calls) == 2
    with pytest.raises(ContextLoadError, match="/api/v1/nothing not found"):
        data.api_call({"urlPath": "/api/v1/nothing"})
    with pytest.raises(ContextLoadError, match="not supported"):
        data.api_call({"urlPath": "/api/v1/x", "method": "DELETE"})
    with pytest.raises(NotFound) as info:
        data.request("GET", "/api/v1/nothing")
    assert info.value.status == 404 and info.value.method == "GET" and info.value.path == "/api/v1/nothing"


def test_resources_for_selector_and_namespace_labels() -> None:
    data, _ = make({"/api/v1/namespaces/team": {"metadata": {"name": "team", "labels": {"env": "prod"}}}})
    assert [r.kind for r in data.resources_for_selector("ConfigMap")] == ["ConfigMap"]
    assert data.resources_for_selector("v1/Pod/status") == []
    assert data.namespace_labels("team") == {"env": "prod"}
    assert data.namespace_labels("other") == {"kubernetes.io/metadata.name": "other"}


def test_validate_cel_cluster_facts_namespace_object_and_discovered_kind_scope() -> None:
    """Kyverno's validate.cel reads namespaceObject with client.GetNamespace and paramKind scope with
    client.IsNamespaced; the providers answer both from the API server and discovery."""
    team = {"metadata": {"name": "team", "labels": {"kubernetes.io/metadata.name": "team"}}}
    client = FakeApiClient({"/api/v1/namespaces/team": team})
    resources = [*RESOURCES, ApiResource("rules.example.com", "v1", "namespaceconstraints", "NamespaceConstraint", namespaced=False)]
    providers = ClusterData(client, resources=resources).providers()
    assert providers.namespaces is not None and providers.kind_namespaced is not None
    assert providers.namespaces("team") == team
    assert providers.namespaces("gone") is None
    assert providers.kind_namespaced("rules.example.com/v1", "NamespaceConstraint") is False
    assert providers.kind_namespaced("v1", "ConfigMap") is True
    assert providers.kind_namespaced("example.com/v1", "Unknown") is None


def test_cel_http_client_trusts_the_given_ca_bundle(tmp_path: Any) -> None:
    """``http.Client(caBundle)`` in the admission path: a server with a self-signed certificate is refused by the
    default client and answered through a client given that certificate as its bundle."""
    import http.server
    import ssl
    import threading

    from stockade.cel import CelActivation, CelEnvironment, CelEvalError
    from stockade.controllers.clusterdata import ClusterCelHttp
    from stockade.testing.registry import write_self_signed_certificate

    cert_path, key_path = write_self_signed_certificate(tmp_path, "server")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            payload = json.dumps({"allowed": True}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            return None

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(str(cert_path), str(key_path))
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}/check"
        env = CelEnvironment(["object"])
        activation = CelActivation({"object": {"ca": cert_path.read_text(), "url": url}}, providers={"http": ClusterCelHttp(timeout_seconds=10)})
        assert env.compile("http.Client(object.ca).Get(object.url)").evaluate(activation) == {"allowed": True, "statusCode": 200}
        with pytest.raises(CelEvalError, match="request failed"):
            env.compile("http.Get(object.url)").evaluate(activation)
    finally:
        server.shutdown()
        server.server_close()


def test_cel_to_gvr_uses_the_served_resources() -> None:
    """``resource.ToGVR`` in the admission path maps a kind through discovery, then Get reads the object."""
    from stockade.cel import CelActivation, CelEnvironment, CelEvalError
    from stockade.controllers.clusterdata import ClusterCelResources

    cm = {"metadata": {"name": "c", "namespace": "ns"}, "data": {"k": "v"}}
    data, _ = make({"/api/v1/namespaces/ns/configmaps/c": cm})
    env = CelEnvironment(["object"])
    activation = CelActivation({"object": {}}, providers={"resource": ClusterCelResources(data)})
    assert env.compile("resource.Get(resource.ToGVR('v1', 'ConfigMap'), 'ns', 'c').data.k").evaluate(activation) == "v"
    with pytest.raises(CelEvalError, match="failed to map kind to resource"):
        env.compile("resource.ToGVR('v1', 'Unknown')").evaluate(activation)


def test_a_wildcard_api_version_finds_the_served_kind() -> None:
    """A mutate target with ``apiVersion: '*'`` names the kind in whatever version the server serves it."""
    cm = {"metadata": {"name": "c", "namespace": "ns"}}
    data, _ = make({"/api/v1/namespaces/ns/configmaps": {"items": [cm]}})
    assert data.resolve_kind("*", "ConfigMap") == RESOURCES[0]
    assert [o["metadata"]["name"] for o in data.lookup("*", "ConfigMap", "ns", None)] == ["c"]


def test_authorizer_checks_are_subject_access_reviews() -> None:
    """CEL ``authorizer`` checks of validate.cel rules: a SubjectAccessReview for the user and attributes; allowed,
    denied and neither map to Kubernetes' allow, deny and noOpinion decisions."""
    answers = [{"status": {"allowed": True, "reason": "RBAC: allowed"}}, {"status": {"allowed": False, "denied": True}}, {"status": {"allowed": False}}]
    bodies: list[Any] = []

    class Reviewer(FakeApiClient):
        def answer(self, method: str, url: str, header_params: Any = None, body: Any = None) -> _Response:
            bodies.append(body)
            return _Response(201, answers[len(bodies) - 1])

    data = ClusterData(Reviewer({}), resources=RESOURCES)
    attributes = {"group": "", "resource": "pods", "subresource": "", "namespace": "default", "name": "", "verb": "delete"}
    assert data.authorize({"username": "system:serviceaccount:default:sa"}, attributes) == ("allow", "RBAC: allowed")
    assert bodies[0]["spec"] == {"user": "system:serviceaccount:default:sa", "resourceAttributes": {"resource": "pods", "namespace": "default", "verb": "delete"}}
    assert data.authorize({"username": "alice", "groups": ["devs"]}, {"path": "/healthz", "verb": "get"})[0] == "deny"
    assert bodies[1]["spec"] == {"user": "alice", "groups": ["devs"], "nonResourceAttributes": {"path": "/healthz", "verb": "get"}}
    assert data.authorize({"username": "bob"}, attributes)[0] == "noOpinion"


def test_a_service_call_is_read_up_to_kyvernos_response_limit_and_a_bad_ca_bundle_is_a_load_error() -> None:
    """Kyverno's maxAPICallResponseLength (2 MB by default) bounds what a service apiCall reads; an unusable caBundle
    is the entry's load error, never an exception out of the caller (a GlobalContextEntry's status says why)."""
    import http.server
    import threading

    from stockade.controllers.clusterdata import MAX_SERVICE_RESPONSE_BYTES
    from stockade.engine.contextloader import ContextLoadError

    sizes = {"/small": 1000, "/big": MAX_SERVICE_RESPONSE_BYTES + 10}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            size = sizes[self.path]
            body = b'{"k": "' + b"x" * (size - 10) + b'"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:
                pass

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    data, _client = make({})
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert len(data.api_call({"service": {"url": f"{base}/small"}})["k"]) == 990
        with pytest.raises(ContextLoadError, match=f"max allowed response length of {MAX_SERVICE_RESPONSE_BYTES}"):
            data.api_call({"service": {"url": f"{base}/big"}})
        with pytest.raises(ContextLoadError, match="invalid caBundle"):
            data.api_call({"service": {"url": "https://127.0.0.1:1/", "caBundle": "not a certificate"}})
    finally:
        server.shutdown()
        server.server_close()


class _RecordingServer:
    """An HTTP server on 127.0.0.1 that answers every request with the request target it received and the body:
    as a forward proxy it sees absolute URLs (``http://host/path``), as the destination itself the path alone."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.seen: list[str] = []
        seen = self.seen

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                seen.append(self.path)
                payload = json.dumps({"target": self.path, "body": body.decode()}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _answer  # noqa: N815 - http.server's naming

            def log_message(self, *args: Any) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def http_proxy_env(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A recording forward proxy set as HTTP_PROXY (127.0.0.1 bypassing it) for a process started now: urllib's
    shared opener reads the proxy settings when it is built, so it is rebuilt before and after the test."""
    import urllib.request

    proxy = _RecordingServer()
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.port}")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "127.0.0.1,localhost")
    urllib.request.install_opener(None)  # type: ignore[arg-type]
    yield proxy
    proxy.close()
    monkeypatch.undo()
    urllib.request.install_opener(None)  # type: ignore[arg-type]


def test_cel_http_and_api_call_services_honour_the_proxy_environment(http_proxy_env: Any) -> None:
    """The CEL ``http`` library and apiCall ``service.url`` go through HTTP_PROXY like any HTTP client (how a
    Kyverno installed behind a proxy reaches services), and NO_PROXY hosts are called directly."""
    from stockade.controllers.clusterdata import ClusterCelHttp

    proxy = http_proxy_env
    service = "http://test-api-service.default.svc.cluster.local/items?x=1"
    http = ClusterCelHttp(timeout_seconds=10)
    assert http.get(service, {}) == {"target": service, "body": "", "statusCode": 200}
    assert http.post(service, {"labels": "demo"}, {})["body"] == '{"labels": "demo"}'
    data, _ = make({})
    assert data.api_call({"service": {"url": "http://api.team.svc:8080/check"}}) == {"target": "http://api.team.svc:8080/check", "body": ""}
    assert proxy.seen == [service, service, "http://api.team.svc:8080/check"]

    direct = _RecordingServer()
    try:
        assert http.get(f"http://127.0.0.1:{direct.port}/here", {})["target"] == "/here"
        assert direct.seen == ["/here"] and len(proxy.seen) == 3
    finally:
        direct.close()


def test_through_a_proxy_a_destination_that_cannot_be_resolved_here_is_refused_when_ranges_are_blocked(http_proxy_env: Any) -> None:
    """Kyverno's rule behind a proxy: the proxy resolves the destination, so with ranges on the blocklist the name
    must resolve here to be checked; one that does not is refused before the proxy sees it.  A list of host names
    alone needs no resolution."""
    from stockade.celpolicy.providers import ProviderError
    from stockade.controllers.clusterdata import ClusterCelHttp
    from stockade.controllers.egress import EgressPolicy

    proxy = http_proxy_env
    service = "http://json-server.test-cel-http.svc.cluster.local:8080/"
    with pytest.raises(ProviderError, match="cannot be resolved to verify it is not in a blocked range"):
        ClusterCelHttp(timeout_seconds=10, egress=EgressPolicy.parse(["169.254.169.254/32"])).get(service, {})
    with pytest.raises(ProviderError, match='hostname "json-server.test-cel-http.svc.cluster.local" is on the blocklist'):
        ClusterCelHttp(timeout_seconds=10, egress=EgressPolicy.parse(["json-server.test-cel-http.svc.cluster.local"])).get(service, {})
    assert proxy.seen == []
    assert ClusterCelHttp(timeout_seconds=10, egress=EgressPolicy.parse(["metadata.google.internal"])).get(service, {})["target"] == service
    assert proxy.seen == [service]
