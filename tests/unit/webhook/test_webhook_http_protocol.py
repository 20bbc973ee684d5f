"""The webhook's HTTP/1.1 layer on the wire: routing answers, keep-alive and Connection: close, pipelining, malformed
requests, Expect, graceful shutdown and slow readers.

The webhook tests talk to the admission listener over TLS on the standard library's event loop; the tests of the
layer alone (``HttpServer`` with a few routes) run it on uvloop, as `stockade serve` does, over plain TCP.  Every
socket wait has a timeout, so a server that fails to answer or to close makes a test fail instead of hang."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import socket
import ssl
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvloop
from webhook_helpers import RunningServer, closed_by_server, pod, review, start_server

from stockade.webhook.certs import CertificateManager
from stockade.webhook.httplimits import ConnectionGuard, HttpLimits
from stockade.webhook.httpserver import HttpServer, Request, Response, Router, json_response


# -- raw HTTP over a socket --------------------------------------------------------------------------------------
class Reply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes, version: str) -> None:
        self.status, self.headers, self.body, self.version = status, headers, body, version


def read_reply(sock: socket.socket, buffered: bytearray, head_only: bool = False) -> Reply:
    """One response from ``sock`` (bytes past it stay in ``buffered``)."""
    while b"\r\n\r\n" not in buffered:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {bytes(buffered)!r}"
        buffered += chunk
    head, _, rest = bytes(buffered).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    version, status = lines[0].split(" ")[0], int(lines[0].split(" ")[1])
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    length = 0 if head_only or status in (100, 304) else int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside a response body"
        rest += chunk
    buffered[:] = rest[length:]
    return Reply(status, headers, rest[:length], version)


# -- the admission listener (TLS) --------------------------------------------------------------------------------
@pytest.fixture()
def tls(webhook: RunningServer) -> Callable[[], ssl.SSLSocket]:
    context = ssl.create_default_context(cadata=webhook.server.certs.ca_bundle.decode())

    def connect() -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", webhook.server.port), timeout=10)
        return context.wrap_socket(raw, server_hostname="127.0.0.1")

    return connect


def post(path: str, body: bytes, extra: str = "") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}Content-Length: {len(body)}\r\n\r\n".encode() + body


def get(path: str, method: str = "GET", extra: str = "", version: str = "1.1") -> bytes:
    return f"{method} {path} HTTP/{version}\r\nHost: x\r\n{extra}\r\n".encode()


def allowed_review(uid: str) -> bytes:
    body = review(pod(labels={"team": "a"}))
    body["request"]["uid"] = uid  # type: ignore[index]
    return json.dumps(body).encode()


def test_head_answers_a_get_route_without_its_body(tls: Callable[[], ssl.SSLSocket]) -> None:
    with tls() as sock:
        buffered = bytearray()
        sock.sendall(get("/health/readiness"))
        full = read_reply(sock, buffered)
        sock.sendall(get("/health/readiness", method="HEAD") + get("/health/liveness"))
        head = read_reply(sock, buffered, head_only=True)
        after = read_reply(sock, buffered)  # the HEAD answer carried no body: the next answer follows at once
    assert full.status == head.status == 200 and json.loads(full.body)["status"] == "ok"
    assert head.body == b"" and head.headers["content-length"] == str(len(full.body))
    assert head.headers["content-type"] == full.headers["content-type"] == "application/json; charset=utf-8"
    assert after.status == 200 and json.loads(after.body) == {"status": "ok"}


@pytest.mark.parametrize(
    ("request_bytes", "status", "allow"),
    [
        (post("/health/liveness", b"{}"), 405, "GET,HEAD"),
        (get("/validate"), 405, "POST"),
        (get("/policyvalidate", method="PUT"), 405, "POST"),
        (get("/nope"), 404, None),
        (post("/validate/", b"{}"), 404, None),  # no route ends in a slash
        (post("/validate/fail/finegrained/", b"{}"), 404, None),  # a fine-grained path names a policy
    ],
)
def test_unknown_paths_and_methods(tls: Callable[[], ssl.SSLSocket], request_bytes: bytes, status: int, allow: str | None) -> None:
    with tls() as sock:
        buffered = bytearray()
        sock.sendall(request_bytes + get("/health/liveness"))
        reply = read_reply(sock, buffered)
        assert read_reply(sock, buffered).status == 200  # the connection stays usable
    assert reply.status == status
    assert reply.headers.get("allow") == allow
    assert reply.headers["content-type"] == "text/plain; charset=utf-8"
    assert reply.body == (b"405: Method Not Allowed" if status == 405 else b"404: Not Found")


def test_pipelined_requests_are_answered_in_order(tls: Callable[[], ssl.SSLSocket]) -> None:
    uids = [f"uid-{n}" for n in range(20)]
    with tls() as sock:
        sock.sendall(b"".join(post("/validate?timeout=10s", allowed_review(uid)) + get("/nope") for uid in uids))
        buffered = bytearray()
        answers = [(read_reply(sock, buffered), read_reply(sock, buffered)) for _ in uids]
    assert [json.loads(review_reply.body)["response"]["uid"] for review_reply, _ in answers] == uids
    assert all(review_reply.status == 200 and missing.status == 404 for review_reply, missing in answers)


def test_connection_close_answers_then_closes_and_reads_nothing_after(tls: Callable[[], ssl.SSLSocket]) -> None:
    with tls() as sock:
        sock.sendall(post("/validate", allowed_review("first"), "Connection: close\r\n") + post("/validate", allowed_review("second")))
        buffered = bytearray()
        reply = read_reply(sock, buffered)
        assert reply.headers["connection"] == "close" and json.loads(reply.body)["response"]["uid"] == "first"
        assert closed_by_server(sock, interval=0.2)
        assert b"second" not in buffered


def test_http_1_0_closes_unless_asked_to_keep_alive(tls: Callable[[], ssl.SSLSocket]) -> None:
    with tls() as sock:
        sock.sendall(get("/health/liveness", version="1.0"))
        reply = read_reply(sock, bytearray())
        assert reply.version == "HTTP/1.0" and reply.status == 200
        assert closed_by_server(sock, interval=0.2)
    with tls() as sock:
        buffered = bytearray()
        sock.sendall(get("/health/liveness", version="1.0", extra="Connection: keep-alive\r\n"))
        assert read_reply(sock, buffered).headers["connection"] == "keep-alive"
        sock.sendall(get("/health/liveness"))
        assert read_reply(sock, buffered).status == 200


def test_chunked_review_and_expect_continue(tls: Callable[[], ssl.SSLSocket]) -> None:
    body = allowed_review("chunked")
    chunked = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (10, body[:10], len(body) - 10, body[10:])
    with tls() as sock:
        buffered = bytearray()
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
        assert json.loads(read_reply(sock, buffered).body)["response"]["uid"] == "chunked"
        second = allowed_review("continued")
        sock.sendall(f"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: {len(second)}\r\n\r\n".encode())
        assert read_reply(sock, buffered).status == 100  # before the body was sent
        sock.sendall(second)
        assert json.loads(read_reply(sock, buffered).body)["response"]["uid"] == "continued"


@pytest.mark.parametrize(
    "malformed",
    [
        b"GARBAGE\r\n\r\n",
        b"GET /health/liveness HTTP/1.1\r\n\r\n",  # HTTP/1.1 without Host
        b"GET /health/liveness HTTP/1.1\r\nHost x\r\n\r\n",
        b"GET /health/liveness HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n",
        b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /health/liveness HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(129)) + b"\r\n",
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",  # smuggling
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    ],
)
def test_malformed_requests_get_400_and_a_quiet_close(tls: Callable[[], ssl.SSLSocket], malformed: bytes, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        with tls() as sock:
            sock.sendall(get("/health/liveness") + malformed + get("/health/liveness"))
            buffered = bytearray()
            assert read_reply(sock, buffered).status == 200  # what came before is answered first
            reply = read_reply(sock, buffered)
            assert reply.status == 400 and reply.headers["connection"] == "close"
            assert closed_by_server(sock, interval=0.2)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_client_that_sends_too_many_headers_fast_is_cut_at_the_limit(tls: Callable[[], ssl.SSLSocket]) -> None:
    """Headers are bounded in number and size, so one request's head cannot grow without bound inside the header
    deadline."""
    with tls() as sock:
        sock.sendall(b"GET /health/liveness HTTP/1.1\r\nHost: x\r\n")
        try:
            for n in range(10_000):
                sock.sendall(b"X-Filler-%d: %s\r\n" % (n, b"v" * 100))
        except (ConnectionError, ssl.SSLError):
            pass
        assert closed_by_server(sock, interval=0.2)


# -- the layer alone, on uvloop ----------------------------------------------------------------------------------
class Layer:
    """An HttpServer on uvloop in a thread, with a route whose answer waits for ``release``, a large answer and a
    liveness route."""

    def __init__(self, limits: HttpLimits, loop_factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop, certs: CertificateManager | None = None) -> None:
        self.loop = loop_factory()
        self.certs = certs
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.release = threading.Event()
        self.started = threading.Event()
        self.server = HttpServer(ConnectionGuard(limits))
        router = Router()

        async def slow(request: Request) -> Response:
            self.started.set()
            await asyncio.to_thread(self.release.wait, 20)
            return json_response({"waited": request.path})

        async def large(_: Request) -> Response:
            return Response(200, b"x" * (32 << 20), "application/octet-stream")

        async def live(_: Request) -> Response:
            return json_response({"status": "ok"})

        router.add("GET", "/slow", slow)
        router.add("GET", "/large", large)
        router.add("GET", "/live", live)

        async def listen() -> int:
            return self.server.listen(router, "127.0.0.1", 0, ssl_context=certs.start() if certs else None).port

        self.port: int = self.call(listen())

    def call(self, coroutine: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def connect(self) -> socket.socket:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        if self.certs is None:
            return raw
        return ssl.create_default_context(cadata=self.certs.ca_bundle.decode()).wrap_socket(raw, server_hostname="127.0.0.1")

    def stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def stop(self) -> None:
        self.release.set()
        if self.thread.is_alive():
            self.call(self.server.shutdown(5))
            self.stop_loop()
        else:
            self.loop.run_until_complete(self.server.shutdown(5))
        self.loop.close()


@pytest.fixture()
def layer() -> Iterator[Callable[..., Layer]]:
    made: list[Layer] = []

    def make(**limits: float) -> Layer:
        made.append(Layer(HttpLimits(**limits)))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for running in made:
        running.stop()


def test_shutdown_finishes_requests_in_flight_and_closes_idle_connections(layer: Callable[..., Layer]) -> None:
    running = layer()
    idle, busy = running.connect(), running.connect()
    buffered = bytearray()
    idle.sendall(get("/live"))
    assert read_reply(idle, buffered).status == 200
    busy.sendall(get("/slow"))
    assert running.started.wait(10)
    stopping = asyncio.run_coroutine_threadsafe(running.server.shutdown(10), running.loop)
    assert closed_by_server(idle, interval=0.2, within=5)  # an idle keep-alive connection is closed at once
    assert not stopping.done()  # the request in flight holds the shutdown
    running.release.set()
    reply = read_reply(busy, bytearray())
    assert reply.status == 200 and json.loads(reply.body) == {"waited": "/slow"}
    assert reply.headers["connection"] == "close"
    assert closed_by_server(busy, interval=0.2)
    stopping.result(10)
    assert running.server.guard.open_connections == 0
    with pytest.raises(OSError):  # no longer listening
        running.connect().close()
    idle.close()
    busy.close()


@pytest.mark.parametrize("loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"])
def test_connections_are_closed_when_shutdown_returns(loop_factory: Callable[[], asyncio.AbstractEventLoop], tmp_path: Path) -> None:
    """A caller may stop and close the event loop as soon as ``shutdown`` returns: every connection must be closed
    by then (a TLS close waits for the client's close_notify), not left half-closed for the garbage collector, whose
    warning comes at a random moment (on CPython 3.11, inside an ``ast.parse`` it corrupts)."""
    running = Layer(HttpLimits(), loop_factory, CertificateManager(hosts=["127.0.0.1"], directory=tmp_path / "certs"))
    clients = [running.connect() for _ in range(3)]
    for client in clients[:2]:
        client.sendall(get("/live"))
        assert read_reply(client, bytearray()).status == 200
    clients[1].sendall(b"GET /live HTTP/1.1\r\nHost: x\r\n")  # half a request
    answering = threading.Thread(target=lambda: [closed_by_server(client, interval=0.2, within=5) for client in clients], daemon=True)
    answering.start()  # the clients read (and answer the server's close_notify) meanwhile
    running.call(running.server.shutdown(5))
    running.stop_loop()
    running.loop.close()
    answering.join(10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
    for client in clients:
        client.close()


def test_a_client_that_does_not_read_its_answer_is_cut_off(layer: Callable[..., Layer]) -> None:
    running = layer(body_timeout=0.5)
    sock = running.connect()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.sendall(get("/large"))  # 32 MiB that the client never reads: writing pauses, the response deadline runs
    give_up = time.monotonic() + 10
    while running.server.guard.open_connections and time.monotonic() < give_up:
        time.sleep(0.05)
    assert running.server.guard.open_connections == 0
    other = running.connect()  # the server goes on answering
    other.sendall(get("/live"))
    assert read_reply(other, bytearray()).status == 200
    other.close()
    sock.close()


def test_many_pipelined_requests_are_all_answered_in_order(layer: Callable[..., Layer]) -> None:
    running = layer()
    sock = running.connect()
    sock.sendall(b"".join(get(f"/live?n={n}") + get(f"/missing-{n}") for n in range(300)))
    buffered = bytearray()
    statuses = [read_reply(sock, buffered).status for _ in range(600)]
    assert statuses == [200, 404] * 300
    sock.close()


def test_a_handler_that_fails_is_answered_500_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    loop = uvloop.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = HttpServer(ConnectionGuard(HttpLimits()))
    router = Router()

    async def broken(_: Request) -> Response:
        raise RuntimeError("handler bug")

    router.add("GET", "/broken", broken)

    async def listen() -> int:
        return server.listen(router, "127.0.0.1", 0).port

    try:
        port = asyncio.run_coroutine_threadsafe(listen(), loop).result(10)
        with caplog.at_level(logging.ERROR), socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(get("/broken"))
            reply = read_reply(sock, bytearray())
            assert reply.status == 500 and reply.headers["connection"] == "close"
        assert any(r.exc_info is not None and str(r.exc_info[1]) == "handler bug" for r in caplog.records)
    finally:
        asyncio.run_coroutine_threadsafe(server.shutdown(5), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_metrics_listener_serves_only_metrics(policy_dir: Path, tmp_path: Path) -> None:
    running = start_server(policy_dir, CertificateManager(hosts=["127.0.0.1"], directory=tmp_path / "c"), metrics_port=0)
    try:
        port = running.server.metrics_port
        assert port
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            buffered = bytearray()
            sock.sendall(get("/metrics", method="HEAD") + get("/health/liveness") + post("/metrics", b"{}"))
            head = read_reply(sock, buffered, head_only=True)
            assert head.status == 200 and head.headers["content-type"].startswith("text/plain") and int(head.headers["content-length"]) > 0
            assert read_reply(sock, buffered).status == 404
            assert read_reply(sock, buffered).status == 405
    finally:
        running.stop()
