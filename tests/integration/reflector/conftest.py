"""Real `docker-registry` processes for reflector tests, plus a tiny paginating tags server.

A missing binary fails the fixtures with an install hint (see stockade.testing.registry), never skips.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from stockade.images.reference import parse_reference
from stockade.images.registry import RegistryClient
from stockade.testing.registry import LocalRegistry

_counter = itertools.count()


@pytest.fixture(scope="session")
def anonymous_registry() -> Iterator[LocalRegistry]:
    with LocalRegistry("anonymous") as registry:
        yield registry


@pytest.fixture(scope="session")
def private_registry() -> Iterator[LocalRegistry]:
    """Token-auth registry that refuses anonymous pulls."""
    with LocalRegistry("token", users={"alice": "s3cret"}, anonymous_pull=False) as registry:
        yield registry


@pytest.fixture()
def push() -> Callable[..., Callable[[str], str]]:
    """`push(registry)` returns (repository image, push_tag(tag) -> digest); every push makes a new digest."""

    def make(registry: LocalRegistry, credentials: Any = None) -> tuple[str, Callable[[str], str]]:
        image = f"{registry.host}/reflector/app-{next(_counter)}"
        client = RegistryClient(**registry.client_options(), credentials=credentials)

        def push_tag(tag: str) -> str:
            return client.push_image(parse_reference(f"{image}:{tag}"), [os.urandom(32)])

        return image, push_tag

    return make  # type: ignore[return-value]


@pytest.fixture()
def paginating_registry() -> Iterator[tuple[str, list[str], list[str]]]:
    """Serves `tags` two per page with `Link` headers; yields (host, tags, requested paths)."""
    tags = [f"1.{minor}.0" for minor in range(7)]
    requested: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:  # noqa: N802
            url = urlsplit(self.path)
            headers: dict[str, str] = {}
            if url.path == "/v2/":
                body = b"{}"
                status = 200
            elif url.path == "/v2/paged/app/tags/list":
                requested.append(self.path)
                query = parse_qs(url.query)
                start = tags.index(query["last"][0]) + 1 if "last" in query else 0
                page = tags[start : start + 2]
                if start + 2 < len(tags):
                    headers["Link"] = f'</v2/paged/app/tags/list?last={page[-1]}&n=2>; rel="next"'
                body, status = json.dumps({"name": "paged/app", "tags": page}).encode(), 200
            else:
                body, status = b'{"errors":[{"code":"NAME_UNKNOWN"}]}', 404
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", tags, requested
    finally:
        server.shutdown()
        server.server_close()
