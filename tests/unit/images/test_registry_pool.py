"""The registry client's keep-alive pool owns its sockets: close() and dropping the client both close them."""

from __future__ import annotations

import gc
import json
import threading
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from stockade.images.reference import parse_reference
from stockade.images.registry import RegistryClient


class _Registry(BaseHTTPRequestHandler):
    """Anonymous plain-HTTP registry with one repository; counts the connections still open."""

    protocol_version = "HTTP/1.1"  # keep-alive, so the client pools the connection
    open_connections = 0
    lock = threading.Lock()
    closed = threading.Condition(lock)

    def setup(self) -> None:
        super().setup()
        with self.lock:
            type(self).open_connections += 1

    def finish(self) -> None:
        super().finish()
        with self.lock:
            type(self).open_connections -= 1
            self.closed.notify_all()

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        body = b"{}" if self.path == "/v2/" else json.dumps({"name": "team/app", "tags": ["1.0", "1.1"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def registry() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _wait_all_closed(timeout: float = 5.0) -> bool:
    with _Registry.closed:
        return _Registry.closed.wait_for(lambda: _Registry.open_connections == 0, timeout)


def _list_tags(host: str) -> RegistryClient:
    client = RegistryClient(allow_http_localhost=True, retries=0)
    assert client.list_tags(parse_reference(f"{host}/team/app")) == ["1.0", "1.1"]
    return client


def test_close_closes_the_pooled_connections(registry: str) -> None:
    client = _list_tags(registry)
    assert _Registry.open_connections > 0  # the keep-alive connection is pooled, still open
    client.close()
    assert _wait_all_closed()


def test_a_dropped_client_closes_its_sockets_without_leaking_them(registry: str) -> None:
    client = _list_tags(registry)
    assert _Registry.open_connections > 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del client
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []  # closed, not left to socket.__del__
    assert _wait_all_closed()
