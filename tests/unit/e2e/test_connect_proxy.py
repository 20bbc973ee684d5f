"""The e2e harness's CONNECT proxy: mapped destinations are redirected, others dialled as asked, bad requests refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stockade.testing.connectproxy import ConnectProxy, parse_mapping


async def _echo_server() -> tuple[asyncio.AbstractServer, int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"echo:" + await reader.readline())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _through_proxy(socket_path: Path, target: str, line: bytes) -> tuple[bytes, bytes]:
    reader, writer = await asyncio.open_unix_connection(str(socket_path))
    writer.write(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    status = await reader.readuntil(b"\r\n\r\n")
    payload = b""
    if b" 200 " in status:
        writer.write(line)
        payload = await reader.read(100)
    writer.close()
    return status, payload


def test_mapped_and_direct_destinations(tmp_path: Path) -> None:
    async def scenario() -> None:
        echo, port = await _echo_server()
        socket_path = tmp_path / "egress.sock"
        proxy = await asyncio.start_unix_server(ConnectProxy({"10.96.0.100:443": f"127.0.0.1:{port}"}).handle, str(socket_path))
        try:
            status, payload = await _through_proxy(socket_path, "10.96.0.100:443", b"hello\n")
            assert status.startswith(b"HTTP/1.1 200") and payload == b"echo:hello\n"
            status, payload = await _through_proxy(socket_path, f"127.0.0.1:{port}", b"direct\n")
            assert payload == b"echo:direct\n"
            reader, writer = await asyncio.open_unix_connection(str(socket_path))
            writer.write(b"GET / HTTP/1.1\r\n\r\n")
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 405")
            writer.close()
        finally:
            proxy.close()
            echo.close()

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_mapping_syntax_is_checked() -> None:
    assert parse_mapping(["10.0.0.1:443=127.0.0.1:9443"]) == {"10.0.0.1:443": "127.0.0.1:9443"}
    with pytest.raises(Exception, match="HOST:PORT=HOST:PORT"):
        parse_mapping(["10.0.0.1=127.0.0.1:1"])
