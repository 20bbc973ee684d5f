"""Which destinations policies' HTTP calls may reach: Kyverno's ``--httpBlocklist`` for the CEL ``http`` library and
apiCall ``service.url`` context entries.

An entry with a ``/`` is an address range (CIDR; host bits may be set, as Go's ParseCIDR allows), any other entry a
host name matched exactly (case-insensitive, trailing dot ignored).  Kyverno's rules, applied to every request and
every redirect hop:

- a URL whose host name is on the list is refused before anything is sent;
- with ranges on the list, a direct connection resolves the name itself, refuses it when *any* address falls in a
  blocked range, and connects only to the addresses it checked (a second resolution cannot swap in another one);
  an IPv4 range also covers the IPv4 address an IPv6 spelling carries (IPv4-mapped, IPv4-compatible, NAT64 64:ff9b::/96,
  6to4 2002::/16);
- through a proxy (``HTTP_PROXY``/``HTTPS_PROXY``, ``NO_PROXY`` honoured) the destination is resolved here and
  checked the same way; one that does not resolve here is refused, since it cannot be checked.

Without ``--httpBlocklist`` Kyverno blocks its built-in list (`KYVERNO_DEFAULT_BLOCKLIST`: the cloud metadata
endpoints and loopback); an explicit list replaces it, and an empty one blocks nothing.  Errors never name the
address a host name resolved to, so a denial cannot serve as a resolver for arbitrary names.  Resolution is bounded
by the call's timeout.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from stockade.errors import StockadeError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Kyverno's built-in list (pkg/toggle): cloud metadata services and loopback
KYVERNO_DEFAULT_BLOCKLIST: tuple[str, ...] = (
    "169.254.169.254/32",
    "169.254.169.253/32",
    "fd00:ec2::254/128",
    "metadata.google.internal",
    "127.0.0.0/8",
    "::1/128",
)
MAX_RESOLVED_ADDRESSES = 64  # a name answering with more is checked and dialled on its first 64


class BlocklistError(StockadeError, ValueError):
    """A blocklist entry is neither a host name nor a CIDR range; the message names it."""


class EgressBlocked(StockadeError, OSError):
    """The call's destination is on the blocklist (or cannot be checked against it); the message says which."""


def split_entries(values: Iterable[str]) -> tuple[str, ...]:
    """Entries from repeated and/or comma-separated values, trimmed, empty ones dropped (Kyverno's flag parsing)."""
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


def normalize_host(host: str) -> str:
    return host.lower().rstrip(".")


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries: IPv4-mapped, IPv4-compatible (::a.b.c.d), NAT64 (64:ff9b::/96) or
    6to4 (2002::/16); None for an IPv4 address or an IPv6 one carrying none."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    packed = address.packed
    if packed[:12] == bytes(12) or (packed[:4] == b"\x00\x64\xff\x9b" and packed[4:12] == bytes(8)):
        return ipaddress.IPv4Address(packed[12:])
    return address.sixtofour


@dataclass(frozen=True)
class EgressPolicy:
    """A parsed blocklist (see the module docstring); ``EgressPolicy()`` blocks nothing."""

    networks: tuple[IPNetwork, ...] = ()
    hosts: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> "EgressPolicy":
        networks: list[IPNetwork] = []
        hosts: set[str] = set()
        for entry in split_entries(entries):
            if "/" in entry:
                try:
                    networks.append(ipaddress.ip_network(entry, strict=False))
                except ValueError as exc:
                    raise BlocklistError(f"invalid CIDR {entry!r} in httpBlocklist: {exc}") from None
            else:
                hosts.add(normalize_host(entry))
        return cls(tuple(networks), frozenset(hosts))

    @property
    def empty(self) -> bool:
        return not self.networks and not self.hosts

    def blocked_range(self, address: IPAddress) -> IPNetwork | None:
        """The blocked range holding ``address`` or the IPv4 address it carries; None when there is none."""
        candidates = [address]
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            candidates.append(embedded)
        for candidate in candidates:
            for network in self.networks:
                if network.version == candidate.version and candidate in network:
                    return network
        return None

    def check_url(self, url: str) -> None:
        """Refuse a URL whose host name is on the list (Kyverno's check before any request is sent)."""
        if not self.hosts:
            return
        host = urllib.parse.urlsplit(url).hostname or ""
        if normalize_host(host) in self.hosts:
            raise EgressBlocked(f'URL "{url}" is blocked: hostname "{host}" is on the blocklist')

    def checked_addresses(self, host: str, timeout: float) -> list[IPAddress]:
        """The addresses ``host`` resolves to (itself when it is an address), every one checked; EgressBlocked when
        one falls in a blocked range or the name cannot be resolved within ``timeout`` seconds."""
        literal = _literal_address(host)
        if literal is not None:
            network = self.blocked_range(literal)
            if network is not None:
                raise EgressBlocked(f"connection to {host} blocked: IP {literal} falls in blocked range {network}")
            return [literal]
        addresses = resolve(host, timeout)
        for address in addresses:
            network = self.blocked_range(address)
            if network is not None:
                raise EgressBlocked(f"connection to {host} blocked: it resolves into blocked range {network}")
        return addresses

    def check_proxied(self, host: str, timeout: float) -> None:
        """A destination reached through a proxy: the proxy resolves it again, but it must resolve here to be checked."""
        if not self.networks:
            return
        try:
            self.checked_addresses(host, timeout)
        except _Unresolvable:
            raise EgressBlocked(f"{host!r} cannot be resolved to verify it is not in a blocked range") from None


class _Unresolvable(EgressBlocked):
    """A destination that does not resolve (or not in time): blocked, since it cannot be checked."""


def _literal_address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]").partition("%")[0])
    except ValueError:
        return None


def resolve(host: str, timeout: float) -> list[IPAddress]:
    """The system resolver's answer for ``host`` (at most MAX_RESOLVED_ADDRESSES, in its order), within ``timeout``
    seconds: the lookup runs on a daemon thread, abandoned when it takes longer."""
    answer: list[Any] = []
    failure: list[BaseException] = []

    def lookup() -> None:
        try:
            answer.extend(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM))
        except BaseException as exc:  # reported to the caller below
            failure.append(exc)

    worker = threading.Thread(target=lookup, name="egress-resolve", daemon=True)
    worker.start()
    worker.join(max(0.0, timeout))
    if worker.is_alive():
        raise _Unresolvable(f"failed to resolve {host}: timed out after {timeout:g}s")
    if failure:
        raise _Unresolvable(f"failed to resolve {host}: {failure[0]}")
    addresses: list[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in answer:
        address = _literal_address(str(sockaddr[0]))
        if address is not None and address not in addresses:
            addresses.append(address)
        if len(addresses) >= MAX_RESOLVED_ADDRESSES:
            break
    if not addresses:
        raise _Unresolvable(f"no usable addresses resolved for {host}")
    return addresses


# -- a urllib opener that enforces a policy -----------------------------------------------------------------------


def _connect_first(addresses: Sequence[IPAddress], port: int, timeout: Any, source: Any) -> socket.socket:
    """A connection to the first of ``addresses`` that accepts one (each was checked already)."""
    last: OSError | None = None
    for address in addresses:
        try:
            return socket.create_connection((str(address), port), timeout, source)
        except OSError as exc:
            last = exc
    raise last if last is not None else OSError("no address to connect to")


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to the checked addresses, never resolving the host name again (Host header unchanged)."""

    def __init__(self, *args: Any, addresses: Sequence[IPAddress] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._addresses = list(addresses)

    def connect(self) -> None:
        self.sock = _connect_first(self._addresses, self.port, self.timeout, getattr(self, "source_address", None))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """As _PinnedHTTPConnection, with TLS verified against the host name (SNI and certificate)."""

    def __init__(self, *args: Any, addresses: Sequence[IPAddress] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._addresses = list(addresses)

    def connect(self) -> None:
        sock = _connect_first(self._addresses, self.port, self.timeout, getattr(self, "source_address", None))
        context: ssl.SSLContext = getattr(self, "_context", None) or ssl.create_default_context()
        self.sock = context.wrap_socket(sock, server_hostname=self.host)


def _destination(request: urllib.request.Request) -> tuple[str, int, bool]:
    """(host, port, proxied) of where ``request`` really goes; ProxyHandler has rewritten host/type for a proxy."""
    target = urllib.parse.urlsplit(request.full_url)
    default_port = 443 if target.scheme == "https" else 80
    proxied = request.has_proxy() or bool(getattr(request, "_tunnel_host", None))
    return target.hostname or "", target.port or default_port, proxied


class _GuardedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, policy: EgressPolicy, timeout: float) -> None:
        super().__init__()
        self.policy, self.timeout = policy, timeout

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        addresses = _guard(self.policy, req, self.timeout)
        if addresses is None:
            return self.do_open(http.client.HTTPConnection, req)
        return self.do_open(_factory(_PinnedHTTPConnection, addresses), req)


class _GuardedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, policy: EgressPolicy, timeout: float, context: ssl.SSLContext | None) -> None:
        super().__init__(context=context)
        self.policy, self.timeout, self.tls = policy, timeout, context

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        addresses = _guard(self.policy, req, self.timeout)
        if addresses is None:
            return self.do_open(http.client.HTTPSConnection, req, context=self.tls)
        return self.do_open(_factory(_PinnedHTTPSConnection, addresses), req, context=self.tls)


def _factory(connection: type[http.client.HTTPConnection], addresses: list[IPAddress]) -> Any:
    def build(*args: Any, **kwargs: Any) -> http.client.HTTPConnection:
        return connection(*args, addresses=addresses, **kwargs)  # type: ignore[call-arg]

    return build


def _guard(policy: EgressPolicy, req: urllib.request.Request, timeout: float) -> list[IPAddress] | None:
    """Apply ``policy`` to one request (or redirect hop); the addresses to connect to, None to connect as usual."""
    policy.check_url(req.full_url)
    if not policy.networks:
        return None
    host, _port, proxied = _destination(req)
    if proxied:
        policy.check_proxied(host, timeout)
        return None
    return policy.checked_addresses(host, timeout)


def open_url(request: urllib.request.Request, timeout: float, context: ssl.SSLContext | None = None, policy: EgressPolicy | None = None) -> Any:
    """``urllib.request.urlopen`` under ``policy`` (default: the process's, see `configure`); EgressBlocked when it
    refuses the destination of the request or of a redirect."""
    policy = active_policy() if policy is None else policy
    if policy.empty:
        return urllib.request.urlopen(request, timeout=timeout, context=context)
    opener = urllib.request.build_opener(_GuardedHTTPHandler(policy, timeout), _GuardedHTTPSHandler(policy, timeout, context))
    try:
        return opener.open(request, timeout=timeout)
    except urllib.error.URLError as exc:  # the handlers' refusal arrives wrapped
        if isinstance(exc.reason, EgressBlocked):
            raise exc.reason from None
        raise


# -- the process's policy ---------------------------------------------------------------------------------------
# Kyverno's flag holds for every call a controller process makes (admission, background, cleanup): `stockade
# serve` sets it once at start-up, in the server and in every evaluation worker.  Library users and the CLI leave
# it empty (nothing blocked), as Kyverno's library default is.

_active = EgressPolicy()


def configure(policy: EgressPolicy) -> None:
    global _active
    _active = policy


def active_policy() -> EgressPolicy:
    return _active
