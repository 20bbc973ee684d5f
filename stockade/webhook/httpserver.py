"""A small HTTP/1.1 server on asyncio protocols for the webhook's listeners (admission over TLS, plain /metrics).

Requests are parsed by ``httptools`` (llhttp, the parser of Node.js); the rest is here and kept to what an
admission webhook needs: exact and prefix routes, HEAD for GET routes, 404/405 answers, keep-alive,
``Connection: close``, pipelined requests answered in order, ``Expect: 100-continue``, and the limits of
stockade.webhook.httplimits.

A request reaches its handler whole: the connection reads its body first, holding at most the route's body limit
(compressed or over-long bodies are refused on their headers alone, a chunked body that grows past the limit as soon
as it does; either answer closes the connection, so the unread rest is never drained).  A connection reads on while
a request is handled, but stops as soon as a whole further request waits behind it, so a client that pipelines
cannot queue more than one read's worth of requests.

Each connection keeps one deadline for the phase it is in: the request line and headers (from the connection's
start, or from the first byte after an idle keep-alive pause), the body (from the end of the headers until the last
body byte), the keep-alive pause (idle), and the time a client may leave a response unread (writing paused).  No
deadline runs while a request is handled: evaluation has its own budgets.

Connections are plain ``asyncio.Protocol``s.  Reading into a preallocated buffer (``BufferedProtocol``) saved uvloop's
TLS an mmap, mremap and munmap of a 256 KiB bytes object per read under aiohttp; with this layer those reads come from
the heap (no such system calls under load, traced with strace) and the buffer saved no instructions either
(bench/bench_server_instructions.py: 0.596 M per review with it, 0.593 M without), so it is not used.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import http
import json
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from email.utils import formatdate
from typing import Any, cast
from urllib.parse import unquote

import httptools

from stockade.errors import StockadeError
from stockade.webhook.httplimits import BodyRefused, ConnectionGuard, body_over_limit, body_refusal

log = logging.getLogger("stockade.webhook.http")

MAX_LINE_BYTES = 8190  # request target, and each header name and value
MAX_HEADERS = 128
CLOSE_GRACE_SECONDS = 1.0  # how long a server that stops waits for a closing connection (TLS close_notify)


class Request:
    """One parsed request.  ``headers`` has lower-case names; a repeated header's values are joined with commas."""

    __slots__ = ("method", "target", "path", "query", "headers", "version", "keep_alive", "body", "refused", "endpoint", "answer", "ready", "received", "_chunks")

    def __init__(self, method: str, target: bytes, path: str, query: str, headers: dict[str, str], version: str, keep_alive: bool) -> None:
        self.method = method
        self.target = target
        self.path = path
        self.query = query
        self.headers = headers
        self.version = version
        self.keep_alive = keep_alive
        self.body = b""
        self.refused: BodyRefused | None = None  # set: the body was not read, and the handler answers why
        self.endpoint: Endpoint | None = None
        self.answer: Response | None = None  # an answer decided by the connection itself (404, 405, 400, 417)
        self.ready = False  # body complete (or refused): the request may be handled
        self.received = 0  # body bytes seen
        self._chunks: list[bytes] = []

    @property
    def content_type(self) -> str:
        """The media type, lower case and without parameters; ``application/octet-stream`` when none is given."""
        value = self.headers.get("content-type")
        if not value:
            return "application/octet-stream"
        media = value.split(";", 1)[0].strip().lower()
        return media or "application/octet-stream"

    @property
    def content_length(self) -> int | None:
        value = self.headers.get("content-length")
        return int(value) if value is not None else None  # llhttp has checked it is one non-negative number


class Response:
    """An answer; ``close`` ends the connection after it (the rest of a refused body is never read)."""

    __slots__ = ("status", "body", "content_type", "headers", "close")

    def __init__(self, status: int = 200, body: bytes = b"", content_type: str = "application/json", headers: tuple[tuple[str, str], ...] = (), close: bool = False) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = headers
        self.close = close


def json_response(value: Any, status: int = 200, close: bool = False) -> Response:
    """A JSON answer for people and probes (spaced separators, ``charset=utf-8``); reviews are answered compactly."""
    return Response(status, json.dumps(value).encode(), "application/json; charset=utf-8", close=close)


def text_response(status: int, text: str, headers: tuple[tuple[str, str], ...] = (), close: bool = False) -> Response:
    return Response(status, text.encode(), "text/plain; charset=utf-8", headers, close)


Handler = Callable[[Request], Awaitable[Response]]


class Endpoint:
    """A handler and the largest body it reads (None: it reads none, and any body is discarded as it arrives)."""

    __slots__ = ("handler", "body_limit")

    def __init__(self, handler: Handler, body_limit: int | None) -> None:
        self.handler = handler
        self.body_limit = body_limit


class Router:
    """Exact paths and prefixes (a prefix route matches its prefix followed by at least one character)."""

    def __init__(self) -> None:
        self._exact: dict[str, dict[str, Endpoint]] = {}
        self._prefixes: list[tuple[str, dict[str, Endpoint]]] = []

    def add(self, method: str, path: str, handler: Handler, body_limit: int | None = None) -> None:
        self._exact.setdefault(path, {})[method] = Endpoint(handler, body_limit)

    def add_prefix(self, method: str, prefix: str, handler: Handler, body_limit: int | None = None) -> None:
        for known, methods in self._prefixes:
            if known == prefix:
                methods[method] = Endpoint(handler, body_limit)
                return
        self._prefixes.append((prefix, {method: Endpoint(handler, body_limit)}))

    def resolve(self, method: str, path: str) -> Endpoint | Response:
        """The endpoint, or the 404/405 answer (HEAD is served by a GET route, without the body)."""
        methods = self._exact.get(path)
        if methods is None:
            for prefix, candidates in self._prefixes:
                if len(path) > len(prefix) and path.startswith(prefix):
                    methods = candidates
                    break
            else:
                return text_response(404, "404: Not Found")
        endpoint = methods.get(method)
        if endpoint is None and method == "HEAD":
            endpoint = methods.get("GET")
        if endpoint is None:
            allowed = set(methods) | ({"HEAD"} if "GET" in methods else set())
            return text_response(405, "405: Method Not Allowed", (("Allow", ",".join(sorted(allowed))),))
        return endpoint


_date_second = 0
_date_header = b""


def _date() -> bytes:
    """The Date header line, formatted once a second."""
    global _date_second, _date_header
    now = int(time.time())
    if now != _date_second:
        _date_second = now
        _date_header = b"Date: " + formatdate(now, usegmt=True).encode() + b"\r\n"
    return _date_header


_STATUS_LINES = {status.value: f"{status.value} {status.phrase}".encode() for status in http.HTTPStatus}


class _BadRequest(StockadeError):
    """Raised inside a parser callback: the request is malformed or over a size limit (answered 400, then closed)."""


# connection phases: which deadline runs
_IDLE, _HEADERS, _BODY, _HANDLING = "idle", "headers", "body", "handling"


class HttpConnection(asyncio.Protocol):
    """One client connection (after its TLS handshake) of one listener."""

    def __init__(self, server: HttpServer, router: Router) -> None:
        self._server = server
        self._router = router
        self._limits = server.guard.limits
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._queue: collections.deque[Request] = collections.deque()
        self._task: asyncio.Task[None] | None = None
        self._current: Request | None = None  # the request being parsed
        self._url = b""
        self._headers: dict[str, str] = {}
        self._header_count = 0
        self._parsing_message = False
        self._failed = False  # the parser met a malformed request: nothing after it is read
        self._closing = False  # answer what is being handled, then close
        self._reading = True
        self._continue = False  # a 100 Continue is owed once the current parse returns
        self._drained: asyncio.Future[None] | None = None
        self._phase = _HEADERS
        # The phase deadline is kept lazily: ``_due`` is when the current phase runs out (None: no deadline), and
        # one timer fires at ``_timer_at`` <= ``_due``; a later deadline leaves that timer in place and it re-arms
        # itself when it finds time left.  Every request moves the deadline a few times: this costs a timer per
        # timeout period per connection instead of several timers per request.
        self._due: float | None = None
        self._timer_at = 0.0
        self._deadline: asyncio.TimerHandle | None = None
        self._write_deadline: asyncio.TimerHandle | None = None

    # -- transport events ------------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio.Transport subclasses
        self._arm(_HEADERS, self._limits.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        current = self._current
        if current is not None and not current.ready:
            # the client left (or a deadline cut it off) mid-request: a normal end of a connection, nobody to answer
            log.debug("%s %s from %s: connection closed after %d body bytes", current.method, current.path[:200], self._peer(), current.received)
        self._current = None
        self._closing = True
        self._queue.clear()
        self._wake_writer()
        self.release()

    def data_received(self, data: bytes) -> None:
        if self._failed or self._transport is None:
            return
        if self._phase == _IDLE:  # a new request begins: its headers must arrive within the header timeout
            self._arm(_HEADERS, self._limits.header_timeout)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # we speak HTTP/1.1 only: the request that asked to switch is answered, then the connection closes
            self._failed = True
            if self._queue:
                self._queue[-1].keep_alive = False
        except (httptools.HttpParserError, _BadRequest) as error:
            self._bad_request(error)
        if self._continue:
            self._continue = False
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        self._dispatch()

    def eof_received(self) -> bool | None:
        return None  # close our side too: a half-closed client sends no further request

    def pause_writing(self) -> None:
        # the client does not read what we send: give it the body timeout to catch up
        if self._write_deadline is None:
            self._write_deadline = self._loop.call_later(self._limits.body_timeout, self._expired, "response")
        if self._drained is None:
            self._drained = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._write_deadline is not None:
            self._write_deadline.cancel()
            self._write_deadline = None
        self._wake_writer()

    def _wake_writer(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def _stop_clocks(self) -> None:
        for timer in (self._deadline, self._write_deadline):
            if timer is not None:
                timer.cancel()
        self._deadline = self._write_deadline = None
        self._due = None

    def release(self) -> None:
        """Stop the clocks and give the connection's slot back (idempotent)."""
        self._stop_clocks()
        self._server.guard.release(self)

    def _close(self) -> None:
        """Close after what was written is sent; the slot is given back when the transport reports the connection
        lost, so a server that stops waits for the socket to be really closed."""
        self._failed = self._closing = True
        self._stop_clocks()
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()
        self.release()

    def shutdown(self) -> None:
        """Close now unless a request is being handled; then after its answer (which says ``Connection: close``)."""
        self._closing = True
        if self._task is None:
            self._close()

    # -- parsing ---------------------------------------------------------------------------------------------------
    def _bad_request(self, error: Exception) -> None:
        """Answer 400 after whatever came before it, then close; nothing after a malformed request is read."""
        self._failed = True
        self._parsing_message = False
        cause = error.__context__ if isinstance(error, httptools.HttpParserCallbackError) and isinstance(error.__context__, _BadRequest) else error
        reason = str(cause) or type(cause).__name__
        log.debug("bad request from %s: %s", self._peer(), reason)
        request = self._current or Request("", b"", "", "", {}, "1.1", False)
        request.keep_alive = False
        request.answer = text_response(400, f"400: Bad Request: {reason}"[:300], close=True)
        request.ready = True
        if self._current is None or request not in self._queue:
            self._queue.append(request)
        self._current = None

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._header_count = 0
        self._parsing_message = True

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > MAX_LINE_BYTES:
            raise _BadRequest(f"request target longer than {MAX_LINE_BYTES} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > MAX_HEADERS:
            raise _BadRequest(f"more than {MAX_HEADERS} headers")
        if len(name) > MAX_LINE_BYTES or len(value) > MAX_LINE_BYTES:
            raise _BadRequest(f"header longer than {MAX_LINE_BYTES} bytes")
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        known = self._headers.get(key)
        self._headers[key] = text if known is None else f"{known}, {text}"

    def on_headers_complete(self) -> None:
        parser = self._parser
        version = parser.get_http_version()
        headers = self._headers
        if version == "1.1" and "host" not in headers:
            raise _BadRequest("missing Host header")
        path, query = _split_target(self._url)
        request = Request(parser.get_method().decode(), self._url, path, query, headers, version, parser.should_keep_alive())
        self._current = request
        self._queue.append(request)
        found = self._router.resolve(request.method, path)
        if isinstance(found, Response):
            request.answer = found
        else:
            request.endpoint = found
            if found.body_limit is not None:
                refused = body_refusal(headers, request.content_length, found.body_limit)
                if refused is not None:
                    self._refuse(request, refused)
                    return
        expect = headers.get("expect")
        if expect is not None and version == "1.1":
            if expect.lower() == "100-continue":
                self._continue = len(self._queue) == 1  # not ahead of an earlier request's answer
            else:
                request.answer = text_response(417, f"Unknown Expect: {expect}"[:300], close=True)
                request.ready = True
                return
        if self._task is None:  # a request pipelined behind one being handled gets its clock when reading resumes
            self._arm(_BODY, self._limits.body_timeout)

    def _refuse(self, request: Request, refused: BodyRefused) -> None:
        """The body is not read: the request is answered at once and the connection closes after it."""
        request.refused = refused
        request.keep_alive = False
        request.ready = True
        request._chunks = []

    def on_body(self, chunk: bytes) -> None:
        request = self._current
        if request is None:
            return
        request.received += len(chunk)
        if request.ready or request.endpoint is None or request.endpoint.body_limit is None:
            return  # refused, answered without a body, or a route that reads none: discarded as it arrives
        if request.received > request.endpoint.body_limit:
            self._refuse(request, body_over_limit(request.endpoint.body_limit))
            return
        request._chunks.append(chunk)

    def on_message_complete(self) -> None:
        self._parsing_message = False
        request = self._current
        self._current = None
        if request is None:
            return
        if not request.ready:
            chunks = request._chunks
            request.body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            request._chunks = []
            request.ready = True
        if request.refused is not None and not request.keep_alive:
            self._failed = True  # the connection ends with the refusal: what follows is never read
        self._phase = _HANDLING
        self._due = None  # a pending timer finds no deadline and lapses

    # -- handling --------------------------------------------------------------------------------------------------
    def _dispatch(self) -> None:
        queue = self._queue
        if self._task is None:
            if not queue or not queue[0].ready:
                return
            if self._phase != _HANDLING:  # a refusal is answered while its body still arrives: no deadline for it
                self._phase = _HANDLING
                self._due = None
            self._task = self._loop.create_task(self._serve(queue.popleft()))
        if queue and queue[0].ready and self._reading and self._transport is not None:
            # a whole request waits behind the one being handled: read no further until it is answered (a client
            # that pipelines holds at most one read's worth of requests here; the apiserver does not pipeline)
            self._transport.pause_reading()
            self._reading = False

    async def _serve(self, request: Request) -> None:
        transport = self._transport
        assert transport is not None
        try:
            while True:
                response = await self._respond(request)
                if transport.is_closing():
                    return
                keep_alive = request.keep_alive and not response.close and not self._closing
                transport.write(_encode(request, response, keep_alive))
                if not keep_alive:
                    self._queue.clear()
                    self._close()
                    return
                if self._drained is not None:  # the client does not read: wait (under the response deadline)
                    await self._drained
                if not self._queue or not self._queue[0].ready:
                    break
                request = self._queue.popleft()
        finally:
            self._task = None
        self._after_answers()

    async def _respond(self, request: Request) -> Response:
        if request.answer is not None:
            return request.answer
        endpoint = request.endpoint
        assert endpoint is not None
        try:
            return await endpoint.handler(request)
        except Exception:
            log.exception("error handling %s %s", request.method, request.path[:200])
            return text_response(500, "500: Internal Server Error", close=True)

    def _after_answers(self) -> None:
        """All answered: read again, under the deadline of wherever the next request is."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._closing:
            self._close()
            return
        if self._current is not None:  # a pipelined request's headers are in: its body's clock starts now
            self._arm(_BODY, self._limits.body_timeout)
        elif self._parsing_message:
            self._arm(_HEADERS, self._limits.header_timeout)
        else:
            self._arm(_IDLE, self._limits.idle_timeout)
        if not self._reading:
            self._reading = True
            transport.resume_reading()
        self._dispatch()

    # -- deadlines -------------------------------------------------------------------------------------------------
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
        elif phase == _IDLE:  # the keep-alive pause ran out: an ordinary close
            self._deadline = None
            self._close()
            return
        else:
            self._deadline = None
        log.info("closing connection from %s: %s timeout", self._peer(), phase)
        self.abort()

    def _peer(self) -> Any:
        return self._transport.get_extra_info("peername") if self._transport is not None else None


def _split_target(target: bytes) -> tuple[str, str]:
    """The decoded path and the raw query of a request target (origin or absolute form)."""
    if target[:1] != b"/":
        try:
            parsed = httptools.parse_url(target)
        except httptools.HttpParserInvalidURLError:
            raise _BadRequest("invalid request target") from None
        raw_path, raw_query = parsed.path or b"/", parsed.query or b""
    else:
        raw_path, _, raw_query = target.partition(b"?")
        raw_path = raw_path.partition(b"#")[0]
    path = raw_path.decode("utf-8", "surrogateescape")
    if "%" in path:
        path = unquote(path, errors="surrogateescape")
    return path, raw_query.decode("latin-1")


def _encode(request: Request, response: Response, keep_alive: bool) -> bytes:
    status = response.status
    lines = [
        b"HTTP/1.0 " if request.version == "1.0" else b"HTTP/1.1 ",
        _STATUS_LINES.get(status) or str(status).encode(),
        b"\r\nContent-Type: ",
        response.content_type.encode(),
        b"\r\nContent-Length: %d\r\n" % len(response.body),
        _date(),
    ]
    for name, value in response.headers:
        lines.append(f"{name}: {value}\r\n".encode("latin-1"))
    if not keep_alive:
        if request.version != "1.0":
            lines.append(b"Connection: close\r\n")
    elif request.version == "1.0":
        lines.append(b"Connection: keep-alive\r\n")
    lines.append(b"\r\n")
    if request.method != "HEAD":
        lines.append(response.body)
    return b"".join(lines)


class Listener:
    """A TCP listener that accepts connections itself, so each one is counted (and refused over the cap) before its
    TLS handshake starts, then handed to the event loop's TLS with a handshake timeout."""

    def __init__(self, server: HttpServer, router: Router, host: str, port: int, *, ssl_context: ssl.SSLContext | None = None, backlog: int = 512, reuse_port: bool = False) -> None:
        self._server = server
        self._router = router
        self._host = host
        self._requested_port = port
        self._ssl_context = ssl_context
        self._backlog = backlog
        self._reuse_port = reuse_port
        self._socket: socket.socket | None = None
        self._acceptor: asyncio.Task[None] | None = None
        self._handshakes: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        if self._socket is not None:
            return int(self._socket.getsockname()[1])
        return self._requested_port

    def start(self) -> None:
        family = socket.getaddrinfo(self._host, self._requested_port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        listener = socket.create_server((self._host, self._requested_port), family=family, backlog=self._backlog, reuse_port=self._reuse_port)
        listener.setblocking(False)
        self._socket = listener
        self._acceptor = asyncio.get_running_loop().create_task(self._accept_forever(listener))

    async def _accept_forever(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        guard = self._server.guard
        while True:
            try:
                client, _ = await loop.sock_accept(listener)
            except OSError as exc:  # EMFILE and friends: back off instead of spinning
                log.warning("accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            connection = HttpConnection(self._server, self._router)
            if not guard.admit(connection):
                client.close()
                continue
            task = loop.create_task(self._connect(client, connection))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _connect(self, client: socket.socket, connection: HttpConnection) -> None:
        loop = asyncio.get_running_loop()
        timeout = self._server.guard.limits.tls_handshake_timeout if self._ssl_context is not None else None
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
        """Accept no more connections; those still in their TLS handshake are dropped."""
        if self._acceptor is not None:
            self._acceptor.cancel()
        if self._socket is not None:
            self._socket.close()
        for task in list(self._handshakes):
            task.cancel()
        await asyncio.gather(*self._handshakes, *(t for t in [self._acceptor] if t is not None), return_exceptions=True)
        self._acceptor = None


class HttpServer:
    """The listeners of one server, sharing a connection guard (the cap counts all of them)."""

    def __init__(self, guard: ConnectionGuard) -> None:
        self.guard = guard
        self.listeners: list[Listener] = []

    def listen(self, router: Router, host: str, port: int, *, ssl_context: ssl.SSLContext | None = None, reuse_port: bool = False) -> Listener:
        listener = Listener(self, router, host, port, ssl_context=ssl_context, reuse_port=reuse_port)
        listener.start()
        self.listeners.append(listener)
        return listener

    async def shutdown(self, timeout: float) -> None:
        """Stop accepting, close idle connections, let requests being handled finish for up to ``timeout`` seconds
        (their answers close the connection), then cut off what is left.  A closing connection gets
        ``CLOSE_GRACE_SECONDS`` (a TLS close waits for the client's close_notify) before it is cut off."""
        for listener in self.listeners:
            await listener.stop()
        self.listeners.clear()
        connections = [c for c in list(self.guard.connections) if isinstance(c, HttpConnection)]
        for connection in connections:
            connection.shutdown()
        loop = asyncio.get_running_loop()
        started = loop.time()
        while True:
            remaining = [c for c in connections if c in self.guard.connections]
            elapsed = loop.time() - started
            if not remaining or elapsed >= timeout:
                break
            if elapsed >= CLOSE_GRACE_SECONDS:
                for connection in remaining:
                    if connection._task is None:  # nothing being answered: only the close is pending
                        connection.abort()
            await asyncio.sleep(0.05)
        for connection in connections:
            if connection in self.guard.connections:
                task = connection._task
                connection.abort()
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
        await asyncio.sleep(0)  # aborted transports report their loss (and close their sockets) on the next turn
