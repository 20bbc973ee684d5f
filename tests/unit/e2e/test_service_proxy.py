"""The e2e harness's host pod runner and Service-routing forward proxy: Pods of python images run as host processes,
each in its own network namespace, and ``http://<service>.<namespace>.svc[.cluster.local]`` reaches them through the
Service's port, targetPort and selector, as kube-proxy would route it."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stockade.kube.informer import Store
from stockade.testing.hostpods import PodRunner, container_argv, is_python_image
from stockade.testing.serviceproxy import ClusterRoutes, ForwardProxy, ProxyRequest, service_address, service_backends, target_port

# what a Kyverno test's Pod runs: a server on a fixed port that answers with what it received and who it is
ECHO_SERVER = """
import http.server, json, os
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        payload = json.dumps({"pod": os.environ["HOSTNAME"], "method": self.command, "path": self.path, "body": body,
                              "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
    do_GET = do_POST = answer
    def log_message(self, *a): pass
http.server.HTTPServer(("", 8080), H).serve_forever()
"""


def _pod(name: str, namespace: str, labels: dict[str, str], *, image: str = "public.ecr.aws/docker/library/python:3.9-slim") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}", "labels": labels, "resourceVersion": "1"},
        "spec": {
            "nodeName": "kind-worker",
            "containers": [{"name": "server", "image": image, "command": ["python3", "-c"], "args": [ECHO_SERVER], "ports": [{"name": "web", "containerPort": 8080}]}],
        },
        "status": {"phase": "Running"},
    }


def _service(name: str, namespace: str, selector: dict[str, str], ports: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace, "resourceVersion": "1"}, "spec": {"selector": selector, "ports": ports}}


def test_service_names_the_proxy_routes() -> None:
    assert service_address("test-api-service.default.svc.cluster.local") == ("test-api-service", "default")
    assert service_address("json-server.test-cel-http.svc") == ("json-server", "test-cel-http")
    assert service_address("Test-Api.Default.SVC.cluster.local.") == ("test-api", "default")
    for other in ("example.com", "a.b.c.d", "api.team.svc.example.org", "127.0.0.1", "..svc"):
        assert service_address(other) is None, other


def test_service_ports_and_backends_as_kube_proxy_resolves_them() -> None:
    pod = _pod("api", "team", {"app": "api"})
    service = _service("api", "team", {"app": "api"}, [
        {"port": 80, "targetPort": 5000}, {"port": 81, "targetPort": "web"}, {"port": 82}, {"port": 83, "targetPort": "nope"},
        {"port": 84, "protocol": "UDP", "targetPort": 53},
    ])
    assert [target_port(service, port, pod) for port in (80, 81, 82, 83, 84, 85)] == [5000, 8080, 82, None, None, None]
    running, other_ns, unlabelled = pod, _pod("api", "elsewhere", {"app": "api"}), _pod("b", "team", {"app": "other"})
    pending = {**_pod("c", "team", {"app": "api"}), "status": {"phase": "Pending"}}
    deleting = _pod("d", "team", {"app": "api"})
    deleting["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    second = _pod("a0", "team", {"app": "api", "extra": "x"})
    backends = service_backends(service, [running, other_ns, unlabelled, pending, deleting, second])
    assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in backends] == [("team", "a0"), ("team", "api")]
    assert service_backends(_service("x", "team", {}, [{"port": 80}]), [running]) == []


def test_python_images_and_what_their_containers_run() -> None:
    for image in ("python", "python:3.9-slim", "docker.io/library/python:3.12", "public.ecr.aws/docker/library/python:3.9-slim", "python@sha256:" + "a" * 64):
        assert is_python_image(image), image
    for image in ("nginx", "ghcr.io/x/python-app:1", "mypython:3", "python/tool:1", "registry.k8s.io/pause:latest"):
        assert not is_python_image(image), image
    assert container_argv({"command": ["sh", "-c"], "args": ["pip install flask && python app.py"]}) == ["sh", "-c", "pip install flask && python app.py"]
    assert container_argv({"args": ["-c", "print(1)"]}) == ["-c", "print(1)"]  # args replace CMD; the image has no entrypoint
    assert container_argv({"command": ["python3", "-c", "x"]}) == ["python3", "-c", "x"]
    assert container_argv({}) == ["python3"]


def test_proxy_request_is_forwarded_in_origin_form_without_proxy_headers() -> None:
    raw = b"POST http://api.team.svc:8080/p?q=1 HTTP/1.1\r\nHost: api.team.svc:8080\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n"
    request = ProxyRequest.parse(raw)
    assert request is not None and (request.host, request.port) == ("api.team.svc", 8080)
    assert request.head == b"POST /p?q=1 HTTP/1.1\r\nHost: api.team.svc:8080\r\nContent-Length: 2\r\nConnection: close\r\n\r\n"
    for refused in (b"CONNECT api.team.svc:443 HTTP/1.1\r\n\r\n", b"GET /relative HTTP/1.1\r\n\r\n", b"GET https://a.b.svc/ HTTP/1.1\r\n\r\n", b"GET http://a:x/ HTTP/1.1\r\n\r\n"):
        assert ProxyRequest.parse(refused) is None, refused


class _ProxyThread:
    """The forward proxy on 127.0.0.1 with its own event loop, for a real HTTP client to use."""

    def __init__(self, proxy: ForwardProxy) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(asyncio.start_server(proxy.handle, "127.0.0.1", 0), self.loop).result(10)
        self.port = self.server.sockets[0].getsockname()[1]

    def close(self) -> None:
        async def stop() -> None:
            self.server.close()
            await self.server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[PodRunner, Store, Store, urllib.request.OpenerDirector]]:
    python_bin = tmp_path / "pod-python"
    python_bin.mkdir()
    (python_bin / "python3").symlink_to(sys.executable)
    runner = PodRunner(tmp_path, python_bin)
    services, pods = Store(), Store()
    proxy = _ProxyThread(ForwardProxy(ClusterRoutes(services, pods, runner.running)))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{proxy.port}"}))
    try:
        yield runner, services, pods, opener
    finally:
        proxy.close()
        runner.stop_all()


def _call(opener: urllib.request.OpenerDirector, url: str, body: bytes | None = None) -> dict[str, Any]:
    with opener.open(urllib.request.Request(url, data=body, method="POST" if body else "GET"), timeout=20) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def test_pods_behind_services_are_reached_each_in_its_own_network(cluster: tuple[PodRunner, Store, Store, urllib.request.OpenerDirector], tmp_path: Path) -> None:
    runner, services, pods, opener = cluster
    # two Pods listening on the same port at once, as two Pods of a cluster may
    for name, namespace in (("api", "team"), ("json-server", "test-cel-http")):
        pod = _pod(name, namespace, {"app": name})
        pods.upsert(pod)
        runner.on_pod(pod)
        services.upsert(_service(f"{name}-svc", namespace, {"app": name}, [{"port": 80, "targetPort": "web"}, {"port": 8080, "targetPort": 8080}]))
    first = _call(opener, "http://api-svc.team.svc.cluster.local/hello?x=1", b'{"labels": "demo"}')
    assert (first["pod"], first["method"], first["path"], first["body"]) == ("api", "POST", "/hello?x=1", '{"labels": "demo"}')
    assert first["headers"]["connection"] == "close" and "proxy-connection" not in first["headers"]
    assert first["headers"]["host"] == "api-svc.team.svc.cluster.local"
    second = _call(opener, "http://json-server-svc.test-cel-http.svc:8080/")
    assert (second["pod"], second["method"], second["path"]) == ("json-server", "GET", "/")
    state = json.loads((tmp_path / "host-pods.json").read_text())
    assert set(state) == {"team/api", "test-cel-http/json-server"}
    assert state["team/api"]["netns"] != state["test-cel-http/json-server"]["netns"] and state["team/api"]["ports"] == [8080]

    # what a cluster would not route fails as a request, with no answer made up by the proxy
    for unroutable in ("http://nothing.team.svc.cluster.local/", "http://api-svc.team.svc.cluster.local:81/", "http://api-svc.other.svc/"):
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            _call(opener, unroutable)

    # the Pod goes: its process stops and its Service has no backend left
    process = runner.running("team/api")
    assert process is not None
    runner.on_pod_deleted(pods.get("team/api") or {})
    assert process.process.poll() is not None and runner.running("team/api") is None
    assert set(json.loads((tmp_path / "host-pods.json").read_text())) == {"test-cel-http/json-server"}
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        _call(opener, "http://api-svc.team.svc.cluster.local/")


def test_only_scheduled_python_pods_run_and_a_replaced_pod_restarts(cluster: tuple[PodRunner, Store, Store, urllib.request.OpenerDirector]) -> None:
    runner, _, _, _ = cluster
    runner.on_pod(_pod("web", "team", {}, image="nginx:1.27"))
    unscheduled = _pod("later", "team", {})
    del unscheduled["spec"]["nodeName"]
    runner.on_pod(unscheduled)
    assert runner.running("team/web") is None and runner.running("team/later") is None
    first = _pod("api", "team", {})
    runner.on_pod(first)
    started = runner.running("team/api")
    assert started is not None
    runner.on_pod(first, first)  # an update of the same Pod keeps its process
    assert runner.running("team/api") is started
    replaced = _pod("api", "team", {})
    replaced["metadata"]["uid"] = "another-uid"
    runner.on_pod(first, replaced)  # deleted and created again under the same name
    again = runner.running("team/api")
    assert again is not None and again is not started and again.uid == "another-uid" and started.process.poll() is not None
    deleting = {**replaced, "metadata": {**replaced["metadata"], "deletionTimestamp": "2025-01-01T00:00:00Z"}}
    runner.on_pod(replaced, deleting)
    assert runner.running("team/api") is None and again.process.poll() is not None
