"""The one place where an API server's failure becomes a Python type.

Callers catch ``NotFound``, ``Conflict``, ``Gone`` ... and never look at HTTP status codes.  A raw non-2xx answer,
a watch stream's ``ERROR`` event (a ``Status`` object) and transport failures are all turned into a `KubeError`
subclass here: ``from_response`` for a raw non-2xx answer, ``from_status`` for ``Status`` bodies, ``as_kube_error``
for exceptions, and the ``translated()`` context manager to wrap a block of client calls.

The Status ``reason`` decides first, as apimachinery's ``errors.ReasonForError`` does (a 409 is ``AlreadyExists``
or ``Conflict`` depending on it), then the HTTP code.

``retry_on_conflict`` re-runs a read-modify-write function while the server answers 409 Conflict (an optimistic
concurrency clash on ``resourceVersion``), with a short growing backoff, like client-go's ``RetryOnConflict``.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import urllib3.exceptions

from stockade.errors import StockadeError
from stockade.kube.config import KubeConfigError

T = TypeVar("T")


class KubeError(StockadeError):
    """A failed call to the API server.  ``code`` is the HTTP status (0: no answer), ``reason`` the Status reason
    (``NotFound``, ``AlreadyExists``, ...), ``details`` the Status details, if the server sent them."""

    code: ClassVar[int] = 0  # the status a subclass stands for; an instance's own is ``status``

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        details: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
        method: str = "",
        path: str = "",
    ) -> None:
        prefix = f"{method} {path}: " if method or path else ""
        super().__init__(prefix + message)
        self.message = message
        self.status = type(self).code if status is None else status
        self.reason = reason or None
        self.details: Mapping[str, Any] = details or {}
        self.retry_after = retry_after
        self.method = method
        self.path = path


class BadRequest(KubeError):
    code = 400


class Unauthorized(KubeError):
    code = 401


class Forbidden(KubeError):
    code = 403


class NotFound(KubeError):
    code = 404


class MethodNotAllowed(KubeError):
    code = 405


class Conflict(KubeError):
    """409 on a write based on a stale ``resourceVersion``: read again, apply the change again, write again."""

    code = 409


class AlreadyExists(KubeError):
    """409 on a create: an object of that name exists.  Not a `Conflict`: retrying the same create cannot help."""

    code = 409


class Gone(KubeError):
    """410: the ``resourceVersion`` a watch or list started from has been compacted away; list again."""

    code = 410


class Invalid(KubeError):
    """422: the object failed validation (``details.causes`` says which fields)."""

    code = 422


UnprocessableEntity = Invalid


class TooManyRequests(KubeError):
    """429: throttled by API priority and fairness or an eviction budget; ``retry_after`` seconds, when known."""

    code = 429


class ServerError(KubeError):
    """5xx: the server failed or timed out; the same request may succeed later."""

    code = 500


class Unreachable(KubeError):
    """No HTTP answer at all: connection refused or reset, TLS failure, client-side timeout."""

    code = 0


_BY_REASON: dict[str, type[KubeError]] = {
    "BadRequest": BadRequest,
    "Unauthorized": Unauthorized,
    "Forbidden": Forbidden,
    "NotFound": NotFound,
    "MethodNotAllowed": MethodNotAllowed,
    "Conflict": Conflict,
    "AlreadyExists": AlreadyExists,
    "Gone": Gone,
    "Expired": Gone,
    "Invalid": Invalid,
    "TooManyRequests": TooManyRequests,
    "InternalError": ServerError,
    "ServiceUnavailable": ServerError,
    "Timeout": ServerError,
    "ServerTimeout": ServerError,
}

_BY_CODE: dict[int, type[KubeError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}

RETRIABLE: tuple[type[KubeError], ...] = (TooManyRequests, ServerError, Unreachable)


def error_class(status: int, reason: str = "") -> type[KubeError]:
    """The `KubeError` subclass for an HTTP status and Status reason."""
    by_reason = _BY_REASON.get(reason)
    if by_reason is not None:
        return by_reason
    if status in _BY_CODE:
        return _BY_CODE[status]
    if status >= 500:
        return ServerError
    if status <= 0:
        return Unreachable
    return KubeError


def _retry_after(headers: Any, details: Mapping[str, Any]) -> float | None:
    value: Any = None
    if headers is not None:
        try:
            value = headers.get("Retry-After")
        except AttributeError:
            value = None
    if value is None:
        value = details.get("retryAfterSeconds")
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def from_status(status: Mapping[str, Any], *, http_status: int = 0, headers: Any = None, method: str = "", path: str = "") -> KubeError:
    """A ``Status`` object (an error body, or the object of a watch ``ERROR`` event) as a typed error."""
    code = status.get("code")
    code = int(code) if isinstance(code, int) and code else http_status
    reason = str(status.get("reason") or "")
    details = status.get("details")
    details = details if isinstance(details, Mapping) else {}
    message = str(status.get("message") or reason or f"HTTP {code}")
    cls = error_class(code, reason)
    return cls(message, status=code, reason=reason, details=details, retry_after=_retry_after(headers, details), method=method, path=path)


def _decode_status(body: Any) -> Mapping[str, Any] | None:
    if isinstance(body, (bytes, bytearray)):
        body = bytes(body).decode(errors="replace")
    if not isinstance(body, str) or not body.strip():
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data if isinstance(data, Mapping) and data.get("kind") == "Status" else None


def from_response(status: int, body: Any, headers: Any = None, *, reason: str = "", method: str = "", path: str = "") -> KubeError:
    """A raw non-2xx answer (status code, body bytes or text, headers) as a typed error."""
    decoded = _decode_status(body)
    if decoded is not None:
        return from_status(decoded, http_status=status, headers=headers, method=method, path=path)
    text = body.decode(errors="replace") if isinstance(body, (bytes, bytearray)) else str(body or "")
    message = text.strip()[:512] or reason or f"HTTP {status}"
    return error_class(status)(message, status=status, retry_after=_retry_after(headers, {}), method=method, path=path)


def _is_transport_error(exc: BaseException) -> bool:
    return isinstance(exc, (OSError, TimeoutError, urllib3.exceptions.HTTPError))


def as_kube_error(exc: BaseException, *, method: str = "", path: str = "") -> KubeError | None:
    """``exc`` as a `KubeError` if it is a failure to talk to the API server (a transport error, or a credential
    that could not be obtained); None for anything else (a bug, a parse error, ...), which callers must let through
    unchanged."""
    if isinstance(exc, KubeError):
        return exc
    if isinstance(exc, KubeConfigError):
        return Unreachable(f"no credential: {exc}", status=0, method=method, path=path)
    if _is_transport_error(exc):
        return Unreachable(f"{type(exc).__name__}: {exc}", status=0, method=method, path=path)
    return None


@contextlib.contextmanager
def translated(*, method: str = "", path: str = "") -> Iterator[None]:
    """Re-raise API failures inside the block as `KubeError` subclasses (the original stays as ``__cause__``)."""
    try:
        yield
    except KubeError:
        raise
    except Exception as exc:
        error = as_kube_error(exc, method=method, path=path)
        if error is None:
            raise
        raise error from exc


def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` with API failures translated."""
    with translated():
        return fn(*args, **kwargs)


@dataclass(frozen=True)
class Backoff:
    """Delays that grow by ``factor`` from ``initial`` up to ``cap``, each stretched by up to ``jitter`` of itself."""

    initial: float = 0.01
    factor: float = 2.0
    cap: float = 1.0
    jitter: float = 0.1

    def delay(self, attempt: int) -> float:
        """The pause after failed attempt number ``attempt`` (0-based)."""
        base = min(self.cap, self.initial * self.factor ** max(0, attempt))
        return base * (1.0 + random.random() * self.jitter) if self.jitter > 0 else base


DEFAULT_CONFLICT_BACKOFF = Backoff()


def retry_on_conflict(
    fn: Callable[[], T],
    attempts: int = 5,
    backoff: Backoff = DEFAULT_CONFLICT_BACKOFF,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``fn`` (which must read the object afresh each time) until it does not fail with `Conflict`, at most
    ``attempts`` times; the last `Conflict` propagates.  Other API failures propagate at once, translated."""
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as exc:
            error = as_kube_error(exc)
            if error is None:
                raise
            if not isinstance(error, Conflict) or attempt == attempts - 1:
                if error is exc:
                    raise
                raise error from exc
        sleep(backoff.delay(attempt))
    raise AssertionError("unreachable")  # pragma: no cover
