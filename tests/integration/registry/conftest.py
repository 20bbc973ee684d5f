"""Fixtures: real `docker-registry` processes (one per auth variant) and a scriptable stdlib fake registry.

A missing `docker-registry` binary makes the fixtures *fail* with an install hint — never skip — because CI installs
the package and a silent skip would hide a broken setup.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from stockade.images.reference import ImageReference, parse_reference
from stockade.testing.registry import LocalRegistry

_repository_counter = itertools.count()


@pytest.fixture(scope="session")
def anonymous_registry() -> Iterator[LocalRegistry]:
    with LocalRegistry("anonymous") as registry:
        yield registry


@pytest.fixture(scope="session")
def basic_auth_registry() -> Iterator[LocalRegistry]:
    with LocalRegistry("htpasswd", users={"alice": "s3cret", "bob": "hunter2"}) as registry:
        yield registry


@pytest.fixture(scope="session")
def token_registry() -> Iterator[LocalRegistry]:
    with LocalRegistry("token", refresh_tokens={"refresh-for-alice": "alice"}) as registry:
        yield registry


@pytest.fixture()
def unique_repository() -> Callable[[LocalRegistry, str], ImageReference]:
    """A fresh repository per call, so tests sharing a session registry never see each other's tags."""

    def make(registry: LocalRegistry, tag: str = "v1") -> ImageReference:
        return parse_reference(f"{registry.host}/tests/repo-{next(_repository_counter)}:{tag}")

    return make


# -- stdlib fake registry -----------------------------------------------------------------------------------------
@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]


Reply = tuple[int, dict[str, str], bytes]


@dataclass
class FakeRegistry:
    """A plain-HTTP server whose every answer comes from `handle(method, path, headers) -> (status, headers, body)`."""

    handle: Callable[[str, str, dict[str, str]], Reply] = lambda method, path, headers: (404, {}, b"")
    requests: list[RecordedRequest] = field(default_factory=list)
    port: int = 0

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def reference(self, text: str) -> ImageReference:
        return parse_reference(f"{self.host}/{text}")


def _start_fake() -> tuple[FakeRegistry, ThreadingHTTPServer]:
    fake = FakeRegistry()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out in separate writes

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            headers = {key.lower(): value for key, value in self.headers.items()}
            if self.path == "/v2/":  # the client's plain-HTTP probe: answered, not recorded
                status, reply_headers, body = 200, {}, b"{}"
            else:
                fake.requests.append(RecordedRequest(self.command, self.path, headers))
                status, reply_headers, body = fake.handle(self.command, self.path, headers)
            self.send_response(status)
            for key, value in reply_headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = do_PUT = do_POST = _serve  # noqa: N815 - http.server naming

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    fake.port = int(server.server_address[1])
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return fake, server


@pytest.fixture()
def fake_registry() -> Iterator[FakeRegistry]:
    fake, server = _start_fake()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture()
def second_fake_registry() -> Iterator[FakeRegistry]:
    """Another host, e.g. a blob storage backend that registries redirect to."""
    fake, server = _start_fake()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
