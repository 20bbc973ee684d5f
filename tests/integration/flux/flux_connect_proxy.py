"""A CONNECT proxy for the Flux proxy tests (a module of its own: ``conftest`` names collide across test folders)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import threading


class CountingConnectProxy:
    """CONNECT-only proxy on 127.0.0.1 that counts the tunnels it opened; with `credentials` it answers 407
    unless the request carries that Proxy-Authorization (Basic)."""

    def __init__(self, credentials: tuple[str, str] | None = None) -> None:
        self.expected = "Basic " + base64.b64encode(":".join(credentials).encode()).decode() if credentials else None
        self.tunnels = 0
        self.refused = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).decode("latin-1")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            writer.close()
            return
        lines = head.split("\r\n")
        method, target = (lines[0].split(" ") + ["", ""])[:2]
        headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:] if line)}
        if method != "CONNECT":
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            writer.close()
            return
        if self.expected is not None and headers.get("proxy-authorization") != self.expected:
            self.refused += 1
            writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"test\"\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            writer.close()
            return
        host, _, port = target.rpartition(":")
        upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        self.tunnels += 1
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await asyncio.gather(self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer))

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    def __enter__(self) -> CountingConnectProxy:
        self._thread.start()
        server = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._handle, "127.0.0.1", 0), self._loop).result(10)
        self.port = server.sockets[0].getsockname()[1]
        self._server = server
        return self

    def __exit__(self, *_exc: object) -> None:
        self._loop.call_soon_threadsafe(self._server.close)  # the server belongs to the loop's thread
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
