"""A small HTTP server on 127.0.0.1 for test peers (a registry token service, an OIDC issuer): an ephemeral port,
served from a daemon thread, started and stopped by the test (or used as a context manager)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class LocalHttpServer:
    """Subclasses give the request handler (`_handler_class`) and a thread name; `port` once started."""

    thread_name = "local-http"
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError(f"{self.thread_name} not started")
        return int(self._server.server_address[1])

    def start(self) -> Self:
        server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
