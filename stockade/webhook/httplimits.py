"""Time and size limits for the webhook's HTTP listeners, so slow or hostile clients cannot hold the server.

The limits are enforced by the HTTP layer (stockade.webhook.httpserver); this module holds what they are:

* ``HttpLimits``: the TLS handshake, header, body and idle deadlines and the connection cap;
* ``ConnectionGuard``: the open connections of one server (all its listeners), counted from the moment each is
  accepted (TLS handshake included) and refused over ``max_connections``;
* ``body_refusal``: a request body that is refused before a byte of it is read (compressed, or declared larger than
  the limit); a chunked body that grows past the limit is refused by the connection while it streams, without ever
  holding more than the limit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

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


def _codings(value: str) -> list[str]:
    return [token.strip().lower() for token in value.split(",")]


def body_refusal(headers: Mapping[str, str], declared: int | None, limit: int) -> BodyRefused | None:
    """Why a body must not be read at all, judged on the headers alone (``headers``: lower-case names, repeated
    headers joined with commas; ``declared``: its Content-Length, None when chunked).

    Compressed bodies are refused before a byte is read: a small gzip body can inflate a thousandfold, and the
    apiserver never compresses admission reviews."""
    encoding = headers.get("content-encoding")
    if encoding is not None:  # the apiserver sends neither header: the usual review skips both parses
        encodings = [c for c in _codings(encoding) if c not in IDENTITY_CODINGS]
        if encodings:
            return BodyRefused(415, f"Content-Encoding {', '.join(encodings)} is not accepted: send the body uncompressed")
    transfer_encoding = headers.get("transfer-encoding")
    if transfer_encoding is not None:
        transfer = [c for c in _codings(transfer_encoding) if c not in IDENTITY_CODINGS | {"chunked"}]
        if transfer:
            return BodyRefused(415, f"Transfer-Encoding {', '.join(transfer)} is not accepted")
    if declared is not None and declared > limit:
        return BodyRefused(413, f"request body of {declared} bytes is over the {limit}-byte limit")
    return None


def body_over_limit(limit: int) -> BodyRefused:
    """A body (chunked, so of no declared length) that grew past ``limit`` while it was read."""
    return BodyRefused(413, f"request body is over the {limit}-byte limit")


class Closable(Protocol):
    """What the guard needs of a connection: nothing but its identity (it is only counted)."""

    def abort(self) -> None: ...


class ConnectionGuard:
    """Open connections of one server (all its listeners) and the limits they live under."""

    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits
        self.connections: set[Closable] = set()
        self.refused = 0
        self._refusal_logged = 0.0

    @property
    def open_connections(self) -> int:
        return len(self.connections)

    def admit(self, connection: Closable) -> bool:
        """Count ``connection`` (from its accept), or refuse it when ``max_connections`` are open."""
        if len(self.connections) >= self.limits.max_connections:
            self.refused += 1
            now = time.monotonic()
            if now - self._refusal_logged > 60:
                self._refusal_logged = now
                log.warning("refusing connections: %d are open (--max-connections)", len(self.connections))
            return False
        self.connections.add(connection)
        return True

    def release(self, connection: Closable) -> None:
        self.connections.discard(connection)
