"""An HTTP CONNECT proxy for kube-apiserver's ``cluster`` egress, so service-referenced webhooks reach a local server.

Kyverno registers its webhooks with ``clientConfig.service`` (``kyverno-svc`` in ``kyverno``), and Kyverno's e2e suite
asserts exactly that.  A control plane without a pod network cannot route a Service's cluster IP, so the e2e harness
gives kube-apiserver an EgressSelectorConfiguration that sends ``cluster`` traffic (webhooks among it) through this
proxy, which maps the Service's fixed cluster IP to the ``stockade serve`` listening on 127.0.0.1.  Every other
destination is dialled as asked.  It listens on a Unix socket: kube-apiserver accepts plain HTTP CONNECT only there
(over TCP it insists on mutual TLS).  Test tooling.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging

log = logging.getLogger("stockade.connectproxy")

MAX_HEADER_BYTES = 16 * 1024
HEADER_TIMEOUT_SECONDS = 10.0
CONNECT_TIMEOUT_SECONDS = 10.0


class ConnectProxy:
    """CONNECT host:port -> the mapped (or the same) address, then bytes both ways until either side closes."""

    def __init__(self, mapping: dict[str, str]) -> None:
        self.mapping = mapping

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEADER_TIMEOUT_SECONDS)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            writer.close()
            return
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        method, _, rest = request_line.partition(" ")
        target = rest.partition(" ")[0]
        if method != "CONNECT" or ":" not in target:
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            await close_stream(writer)
            return
        destination = self.mapping.get(target, target)
        host, _, port = destination.rpartition(":")
        try:
            upstream_reader, upstream_writer = await asyncio.wait_for(asyncio.open_connection(host.strip("[]"), int(port)), CONNECT_TIMEOUT_SECONDS)
        except (OSError, ValueError, TimeoutError) as exc:
            log.warning("CONNECT %s -> %s failed: %s", target, destination, exc)
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            await close_stream(writer)
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await asyncio.gather(pipe_streams(reader, upstream_writer), pipe_streams(upstream_reader, writer))


async def pipe_streams(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy ``reader`` to ``writer`` until end of stream, then close ``writer``."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        await close_stream(writer)


async def close_stream(writer: asyncio.StreamWriter) -> None:
    """Close ``writer`` and wait for it, ignoring a connection that is already gone."""
    with contextlib.suppress(Exception):
        writer.close()
        await writer.wait_closed()


async def serve(socket_path: str, mapping: dict[str, str]) -> None:
    proxy = ConnectProxy(mapping)
    server = await asyncio.start_unix_server(proxy.handle, socket_path, limit=MAX_HEADER_BYTES)
    async with server:
        await server.serve_forever()


def parse_mapping(entries: list[str]) -> dict[str, str]:
    """``FROM=TO`` entries, both ``host:port``."""
    mapping = {}
    for entry in entries:
        source, separator, destination = entry.partition("=")
        if not separator or ":" not in source or ":" not in destination:
            raise argparse.ArgumentTypeError(f"--map expects HOST:PORT=HOST:PORT, got {entry!r}")
        mapping[source] = destination
    return mapping


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="connectproxy", description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, help="Unix socket to listen on")
    parser.add_argument("--map", dest="mappings", action="append", default=[], help="HOST:PORT=HOST:PORT redirection (repeatable)")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        mapping = parse_mapping(options.mappings)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    asyncio.run(serve(options.socket, mapping))


if __name__ == "__main__":
    main()
