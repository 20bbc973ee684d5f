"""An HTTP forward proxy that routes ``<service>.<namespace>.svc[.cluster.local][:port]`` to Pods run on this host.

The e2e harness runs ``stockade serve`` outside the cluster, with ``HTTP_PROXY`` pointing here (``NO_PROXY`` keeps
127.0.0.1 and localhost, the API server among them, direct).  A policy's ``http.get``/``http.post`` or apiCall
``service.url`` naming a cluster Service then reaches the server a Pod runs (``hostpods.py``) the way kube-proxy would
route it: the Service's port entry for the requested port (80 when the URL has none), its ``targetPort`` (a number,
a container port name, or the port itself), the selector's Running Pods of the Service's namespace, the first of them
(by name) whose process this host runs, connected through the Pod's own network namespace.  Other hosts are dialled
as asked, as by any forward proxy.  A name that does not resolve, a Service without that port or without a Pod, and
a Pod that refuses the connection end the client's connection without an answer: a policy sees a failed request, as
it would see a DNS or connection error in a cluster, never an HTTP status the proxy made up.

One request per connection (``Connection: close`` towards the Pod), the request line rewritten to origin form and
the ``Proxy-*`` headers dropped.  Plain HTTP only: ``CONNECT`` is refused.  Test tooling.
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from stockade.errors import StockadeError
from stockade.kube.informer import LabelSelector, Store, labels_of
from stockade.testing.connectproxy import close_stream, pipe_streams
from stockade.testing.hostpods import HostPod

log = logging.getLogger("stockade.serviceproxy")

MAX_HEADER_BYTES = 16 * 1024
HEADER_TIMEOUT_SECONDS = 10.0
CONNECT_TIMEOUT_SECONDS = 10.0
EXCHANGE_TIMEOUT_SECONDS = 120.0
# a Pod's server may still be starting when its Pod is Running (the image here starts on a busy host): refused
# connections are retried this long while its process is alive
STARTING_SECONDS = 5.0
_HOP_HEADERS = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate", "te", "upgrade"})


class NoRoute(StockadeError, LookupError):
    """The destination names a Service that cannot be reached; the message says why."""


def service_address(host: str) -> tuple[str, str] | None:
    """``(service, namespace)`` for ``<service>.<namespace>.svc`` and ``<service>.<namespace>.svc.cluster.local``
    (the cluster domain kind uses), else None."""
    labels = host.lower().rstrip(".").split(".")
    if (len(labels) == 3 and labels[2] == "svc") or (len(labels) == 5 and labels[2:] == ["svc", "cluster", "local"]):
        if labels[0] and labels[1]:
            return labels[0], labels[1]
    return None


def target_port(service: Mapping[str, Any], port: int, pod: Mapping[str, Any]) -> int | None:
    """The Pod port that ``port`` of the Service forwards to: the entry's ``targetPort`` (a number, or the name of
    one of the Pod's container ports), the port itself when it has none; None when the Service has no such port or
    the Pod no port of that name."""
    for entry in (service.get("spec") or {}).get("ports") or []:
        if not isinstance(entry, dict) or entry.get("port") != port or str(entry.get("protocol") or "TCP") != "TCP":
            continue
        target = entry.get("targetPort", port)
        if isinstance(target, int):
            return target
        if str(target).isdigit():
            return int(str(target))
        for container in (pod.get("spec") or {}).get("containers") or []:
            for declared in container.get("ports") or []:
                if declared.get("name") == target and isinstance(declared.get("containerPort"), int):
                    return int(declared["containerPort"])
        return None
    return None


def service_backends(service: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The Service's endpoints as kube-proxy would have them: Pods of its namespace that its (non-empty) selector
    matches, Running and not being deleted, ordered by name."""
    selector = (service.get("spec") or {}).get("selector") or {}
    if not selector:
        return []  # a Service without a selector has hand-made Endpoints, which this proxy does not read
    namespace = (service.get("metadata") or {}).get("namespace")
    wanted = LabelSelector.of(dict(selector))
    chosen = [
        dict(pod) for pod in pods
        if (pod.get("metadata") or {}).get("namespace") == namespace and wanted.matches(labels_of(pod))
        and (pod.get("status") or {}).get("phase") == "Running" and not (pod.get("metadata") or {}).get("deletionTimestamp")
    ]
    return sorted(chosen, key=lambda pod: str(pod["metadata"].get("name", "")))


class Routes(Protocol):
    def resolve(self, service: str, namespace: str, port: int) -> tuple[HostPod, int]:
        """The host Pod and its port that ``service.namespace:port`` reaches; raises NoRoute."""
        ...


class ClusterRoutes:
    """Routes from the informers' Services and Pods and the Pods this host runs (``running(namespace/name)``)."""

    def __init__(self, services: Store, pods: Store, running: Callable[[str], HostPod | None]) -> None:
        self.services = services
        self.pods = pods
        self.running = running

    def resolve(self, service: str, namespace: str, port: int) -> tuple[HostPod, int]:
        found = self.services.get(f"{namespace}/{service}")
        if found is None:
            raise NoRoute(f"no Service {namespace}/{service}")
        backends = service_backends(found, self.pods.list(namespace))
        if not backends:
            raise NoRoute(f"Service {namespace}/{service} selects no Running Pod")
        for pod in backends:
            metadata = pod["metadata"]
            host_pod = self.running(f"{namespace}/{metadata.get('name', '')}")
            if host_pod is None or host_pod.uid != metadata.get("uid"):
                continue
            port_in_pod = target_port(found, port, pod)
            if port_in_pod is None:
                raise NoRoute(f"Service {namespace}/{service} has no TCP port {port} (or its Pod lacks the named target port)")
            return host_pod, port_in_pod
        raise NoRoute(f"no Pod of Service {namespace}/{service} runs on this host (only python images do)")


@dataclass(frozen=True)
class ProxyRequest:
    """A forward proxy request's head, parsed: the absolute target and the head to send on, in origin form."""

    host: str
    port: int
    head: bytes

    @classmethod
    def parse(cls, raw: bytes) -> ProxyRequest | None:
        """None for what this proxy does not forward (CONNECT, origin-form targets, non-http schemes, bad heads)."""
        lines = raw.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or parts[0] == "CONNECT" or not parts[2].startswith("HTTP/1."):
            return None
        method, target, version = parts
        url = urllib.parse.urlsplit(target)
        try:
            port = url.port or 80
        except ValueError:
            return None
        if url.scheme != "http" or not url.hostname:
            return None
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        headers = [line for line in lines[1:] if line and line.partition(":")[0].strip().lower() not in _HOP_HEADERS]
        head = "\r\n".join([f"{method} {path} {version}", *headers, "Connection: close", "", ""])
        return cls(url.hostname, port, head.encode("latin-1"))


class ForwardProxy:
    """``handle`` serves one client connection (see the module docstring)."""

    def __init__(self, routes: Routes) -> None:
        self.routes = routes

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEADER_TIMEOUT_SECONDS)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            await close_stream(writer)
            return
        request = ProxyRequest.parse(raw)
        if request is None:
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await close_stream(writer)
            return
        try:
            upstream_reader, upstream_writer = await self._connect(request.host, request.port)
        except (NoRoute, OSError, TimeoutError) as exc:
            log.warning("%s:%d: %s", request.host, request.port, exc)
            await close_stream(writer)  # no answer: the caller sees a failed request
            return
        upstream_writer.write(request.head)
        try:
            await asyncio.wait_for(asyncio.gather(pipe_streams(reader, upstream_writer), pipe_streams(upstream_reader, writer)), EXCHANGE_TIMEOUT_SECONDS)
        except TimeoutError:
            await close_stream(upstream_writer)
            await close_stream(writer)

    async def _connect(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        address = service_address(host)
        if address is None:
            return await asyncio.wait_for(asyncio.open_connection(host, port, limit=MAX_HEADER_BYTES), CONNECT_TIMEOUT_SECONDS)
        host_pod, pod_port = self.routes.resolve(address[0], address[1], port)
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + STARTING_SECONDS
        while True:
            sock = host_pod.netns.socket()
            sock.setblocking(False)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, ("127.0.0.1", pod_port)), CONNECT_TIMEOUT_SECONDS)
            except ConnectionRefusedError:
                sock.close()
                if not host_pod.alive() or time.monotonic() >= deadline:
                    raise NoRoute(f"Pod {host_pod.key} refuses connections on port {pod_port}") from None
                await asyncio.sleep(0.2)
                continue
            except BaseException:
                sock.close()
                raise
            log.info("%s:%d -> Pod %s port %d", host, port, host_pod.key, pod_port)
            return await asyncio.open_connection(sock=sock, limit=MAX_HEADER_BYTES)
