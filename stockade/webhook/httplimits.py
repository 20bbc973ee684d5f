"""Time and size limits for the webhook's HTTP listeners, so slow or hostile clients cannot hold the server.

aiohttp bounds only the idle time between keep-alive requests.  The rest is done here:

* ``GuardedSite`` accepts connections itself, counts each from the moment it is accepted (TLS handshake included)
  against ``max_connections`` (closing it at once when over), and hands it to the event loop's TLS
  (``loop.connect_accepted_socket``) with a handshake timeout;
* each connection is a ``_GuardedConnection`` that hands the bytes to aiohttp's own ``RequestHandler`` and
  keeps one deadline per phase: the request line and headers (from the connection's start, or from the first byte
  after an idle keep-alive pause), and the body (from the end of the headers until the last body byte arrived); a
  response the client does not read (writing paused) gets the body timeout too;
* ``read_body`` reads a request body without ever holding more than the size limit and refuses compressed bodies;
  a client that goes away mid-body (or is cut off by a deadline) ends its request quietly: ``ClientDisconnected``,
  answered by the middleware with nothing logged above debug, instead of aiohttp's ERROR traceback.

The connection learns that a request's headers were parsed from ``ConnectionGuard.middleware`` (aiohttp calls the
application, and so the middleware, exactly then), which finds the connection by ``request.protocol``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import hdrs, web
from stockade.errors import StockadeError

log = logging.getLogger("stockade.webhook.http")

IDENTITY_CODINGS = frozenset({"", "identity"})


@dataclass(frozen=True)
class HttpLimits:
    """Defaults fit an apiserver client (it sends a whole review at once and reuses connections for up to 90s)."""

    tls_handshake_timeout: float = 10.0
    header_timeout: float = 10.0  # request line and headers; the first request's clock starts at the TCP accept
    body_timeout: float = 30.0  # end of headers -> last body byte; also how long an unread response may block
    idle_timeout: float = 120.0  # keep-alive pause between requests (longer than the apiserver's 90s, so it closes first)
    max_connections: int = 1000  # open connections over all listeners, TLS handshakes included

    def __post_init__(self) -> None:
        for name in ("tls_handshake_timeout", "header_timeout", "body_timeout", "idle_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {self.max_connections}")


class BodyRefused(StockadeError):
    """A request body we will not read: ``status`` is the HTTP answer (413 too large, 415 compressed)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class ClientDisconnected(StockadeError):
    """The client's connection closed before its request body was complete: nobody is left to answer."""


def _codings(request: web.BaseRequest, header: str) -> list[str]:
    return [token.strip().lower() for value in request.headers.getall(header, []) for token in value.split(",")]


async def read_body(request: web.BaseRequest, limit: int) -> bytes:
    """The body, read in chunks and refused as soon as it would pass ``limit`` bytes.

    Compressed bodies are refused before a byte is read: a small gzip body can inflate a thousandfold, and the
    apiserver never compresses admission reviews."""
    headers = request.headers
    if hdrs.CONTENT_ENCODING in headers:  # the apiserver sends neither header: the usual review skips both parses
        encodings = [c for c in _codings(request, hdrs.CONTENT_ENCODING) if c not in IDENTITY_CODINGS]
        if encodings:
            raise BodyRefused(415, f"Content-Encoding {', '.join(encodings)} is not accepted: send the body uncompressed")
    if hdrs.TRANSFER_ENCODING in headers:
        transfer = [c for c in _codings(request, hdrs.TRANSFER_ENCODING) if c not in IDENTITY_CODINGS | {"chunked"}]
        if transfer:
            raise BodyRefused(415, f"Transfer-Encoding {', '.join(transfer)} is not accepted")
    declared = request.content_length
    if declared is not None and declared > limit:
        raise BodyRefused(413, f"request body of {declared} bytes is over the {limit}-byte limit")
    body = bytearray()
    try:
        chunk = await request.content.readany()
        if declared is not None and len(chunk) == declared:
            return chunk  # the whole body at once (a Content-Length body never runs past its length): no copy
        while chunk:
            if len(body) + len(chunk) > limit:
                raise BodyRefused(413, f"request body is over the {limit}-byte limit")
            body += chunk
            chunk = await request.content.readany()
    except ConnectionResetError as lost:  # aiohttp's "Connection lost": the client left, or a deadline cut it off
        raise ClientDisconnected(f"connection closed after {len(body)} body bytes") from lost
    return bytes(body)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ConnectionGuard:
    """Open connections of one server (all its listeners) and the limits they live under."""

    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits
        self.connections: set[_GuardedConnection] = set()
        self._by_handler: dict[Any, _GuardedConnection] = {}
        self.refused = 0
        self._refusal_logged = 0.0

    @property
    def open_connections(self) -> int:
        return len(self.connections)

    def _admit(self, connection: _GuardedConnection) -> bool:
        if len(self.connections) >= self.limits.max_connections:
            self.refused += 1
            now = time.monotonic()
            if now - self._refusal_logged > 60:
                self._refusal_logged = now
                log.warning("refusing connections: %d are open (--max-connections)", len(self.connections))
            return False
        self.connections.add(connection)
        return True

    def _release(self, connection: _GuardedConnection) -> None:
        self.connections.discard(connection)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Runs once aiohttp has parsed a request's headers: switches its connection to the body deadline."""
        connection = self._by_handler.get(request.protocol)
        if connection is not None:
            connection.request_started(request)
        try:
            return await handler(request)
        except ClientDisconnected as gone:
            # a normal end of a connection, not a server error: the answer below is never delivered
            log.debug("%s %s from %s: %s", request.method, request.path, request.remote, gone)
            answer = web.Response(status=400, text="client disconnected")
            answer.force_close()
            return answer
        finally:
            if connection is not None:
                connection.request_finished()


class _GuardedConnection(asyncio.Protocol):
    """One client connection (after its TLS handshake): aiohttp's RequestHandler under phase deadlines."""

    def __init__(self, guard: ConnectionGuard, handler_factory: Callable[[], Any]) -> None:
        self._guard = guard
        self._handler_factory = handler_factory
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._handler: Any = None
        self._phase = "headers"
        self._request: web.BaseRequest | None = None
        # The phase deadline is kept lazily: ``_due`` is when the current phase runs out (None: no deadline), and
        # one timer fires at ``_timer_at`` <= ``_due``; a later deadline leaves that timer in place and it re-arms
        # itself when it finds time left.  Every request moves the deadline twice (headers, body) and ends it once:
        # this costs a timer per timeout period per connection instead of two timers per request.
        self._due: float | None = None
        self._timer_at = 0.0
        self._deadline: asyncio.TimerHandle | None = None
        self._write_deadline: asyncio.TimerHandle | None = None

    @property
    def attached(self) -> bool:
        return self._handler is not None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio.Transport subclasses
        self._handler = self._handler_factory()
        self._guard._by_handler[self._handler] = self
        self._handler.connection_made(transport)
        self._arm("headers", self._guard.limits.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self.release()
        if self._handler is not None:
            handler, self._handler = self._handler, None
            self._guard._by_handler.pop(handler, None)
            handler.connection_lost(exc)

    def release(self) -> None:
        """Stop the clocks and give the connection's slot back (idempotent)."""
        for timer in (self._deadline, self._write_deadline):
            if timer is not None:
                timer.cancel()
        self._deadline = self._write_deadline = None
        self._due = None
        self._request = None
        self._guard._release(self)

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()
        self.release()

    # -- bytes -----------------------------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self._handler is None:
            return
        if self._phase == "idle":  # a new request begins: its headers must arrive within the header timeout
            self._arm("headers", self._guard.limits.header_timeout)
        self._handler.data_received(data)

    def eof_received(self) -> bool | None:
        return None if self._handler is None else self._handler.eof_received()

    def pause_writing(self) -> None:
        # the client does not read what we send: give it the body timeout to catch up
        if self._write_deadline is None:
            self._write_deadline = self._loop.call_later(self._guard.limits.body_timeout, self._expired, "response")
        if self._handler is not None:
            self._handler.pause_writing()

    def resume_writing(self) -> None:
        if self._write_deadline is not None:
            self._write_deadline.cancel()
            self._write_deadline = None
        if self._handler is not None:
            self._handler.resume_writing()

    # -- phases ----------------------------------------------------------------------------------------------------
    def request_started(self, request: web.BaseRequest) -> None:
        self._request = request
        self._arm("body", self._guard.limits.body_timeout)

    def request_finished(self) -> None:
        """Idle until the next request's first byte: aiohttp's keep-alive timeout bounds that pause."""
        self._request = None
        self._phase = "idle"
        self._due = None  # a pending timer finds no deadline and lapses

    def _arm(self, phase: str, seconds: float) -> None:
        self._phase = phase
        due = self._due = self._loop.time() + seconds
        if self._deadline is not None:
            if self._timer_at <= due:
                return  # the timer fires first and waits again for what is left
            self._deadline.cancel()
        self._timer_at = due
        self._deadline = self._loop.call_at(due, self._phase_timer)

    def _phase_timer(self) -> None:
        self._deadline = None
        due = self._due
        if due is None:
            return
        if due > self._loop.time():
            self._timer_at = due
            self._deadline = self._loop.call_at(due, self._phase_timer)
            return
        self._due = None
        self._expired(self._phase)

    def _expired(self, phase: str) -> None:
        if phase == "response":
            self._write_deadline = None
        else:
            self._deadline = None
            if phase == "body" and self._request is not None and self._request.content.is_eof():
                self._phase = "handling"  # the whole body is in; evaluation has its own budgets
                return
        peer = self._transport.get_extra_info("peername") if self._transport is not None else None
        log.info("closing connection from %s: %s timeout", peer, phase)
        self.abort()


class GuardedSite(web.BaseSite):
    """A TCP listener that accepts connections itself, so each one is counted (and refused over the cap) before its
    TLS handshake starts, then handed to the event loop's TLS with a handshake timeout."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        guard: ConnectionGuard,
        *,
        ssl_context: ssl.SSLContext | None = None,
        backlog: int = 512,
        reuse_port: bool = False,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._host = host
        self._requested_port = port
        self._guard = guard
        self._reuse_port = reuse_port
        self._socket: socket.socket | None = None
        self._acceptor: asyncio.Task[None] | None = None
        self._handshakes: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context else 'http'}://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        if self._socket is not None:
            return int(self._socket.getsockname()[1])
        return self._requested_port

    async def start(self) -> None:
        await super().start()
        family = socket.getaddrinfo(self._host, self._requested_port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        listener = socket.create_server(
            (self._host, self._requested_port), family=family, backlog=self._backlog, reuse_port=self._reuse_port
        )
        listener.setblocking(False)
        self._socket = listener
        self._acceptor = asyncio.get_running_loop().create_task(self._accept_forever(listener))

    async def _accept_forever(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                client, _ = await loop.sock_accept(listener)
            except OSError as exc:  # EMFILE and friends: back off instead of spinning
                log.warning("accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            connection = _GuardedConnection(self._guard, self._runner_server())
            if not self._guard._admit(connection):
                client.close()
                continue
            task = loop.create_task(self._connect(client, connection))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    def _runner_server(self) -> Callable[[], Any]:
        server = self._runner.server
        assert server is not None
        return server

    async def _connect(self, client: socket.socket, connection: _GuardedConnection) -> None:
        loop = asyncio.get_running_loop()
        timeout = self._guard.limits.tls_handshake_timeout if self._ssl_context is not None else None
        try:
            await loop.connect_accepted_socket(lambda: connection, client, ssl=self._ssl_context, ssl_handshake_timeout=timeout)
        except (OSError, asyncio.TimeoutError) as exc:  # handshake failed or timed out (ConnectionAbortedError)
            log.debug("TLS handshake failed: %s", exc)
            client.close()
            connection.release()
        except BaseException:
            client.close()
            connection.release()
            raise

    async def stop(self) -> None:
        if self._acceptor is not None:
            self._acceptor.cancel()
        if self._socket is not None:
            self._socket.close()
        for task in list(self._handshakes):  # aiohttp does not know connections still in their TLS handshake
            task.cancel()
        await asyncio.gather(*self._handshakes, *(t for t in [self._acceptor] if t is not None), return_exceptions=True)
        self._acceptor = None
        await super().stop()
