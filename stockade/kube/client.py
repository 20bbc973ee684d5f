"""The one way Stockade talks to the API server: raw REST calls, objects as plain dicts.

`KubeClient` sends a request over an authenticated, pooled `stockade.kube.connection.ApiConnection` (kubeconfig or
in-cluster credentials, TLS) and hands back the decoded JSON body; a non-2xx answer, or none at all, raises the
`stockade.kube.errors.KubeError` subclass for it (``NotFound``, ``Conflict``, ``AlreadyExists``, ``Unreachable``
...).  Objects stay plain dicts: typed models cost 1.7-3x the memory per object and list 2.5-3x slower
(``bench/bench_kube_clients.py``), and every controller and the engine see objects as dictionaries anyway.

``timeout`` is the client's default per-request timeout in seconds (``None``: none); a call may pass its own.  ``impersonate`` makes every request as that user (``Impersonate-User``).
`KubeClient.open` is the same call without reading the body, for watch streams.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from typing import Any, Union

from stockade.kube.connection import ApiConnection
from stockade.kube.errors import Unreachable, as_kube_error, from_response

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

Timeout = Union[float, tuple[float, float], None]
Query = Union[Mapping[str, str], Iterable[tuple[str, str]], None]


class _Default(enum.Enum):
    TIMEOUT = "the client's timeout"


CLIENT_TIMEOUT = _Default.TIMEOUT


class KubeClient:
    """Raw REST over an `ApiConnection`; see the module docstring."""

    def __init__(self, api_client: ApiConnection, *, timeout: Timeout = 10.0, impersonate: str = "") -> None:
        self.api_client = api_client
        self.timeout = timeout
        self.impersonate = impersonate

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Query = None,
        content_type: str = JSON,
        accept: str = JSON,
        timeout: Timeout | _Default = CLIENT_TIMEOUT,
    ) -> Any:
        """One REST call; returns the decoded JSON body ({} when empty), raises the `KubeError` subclass of a non-2xx
        answer (`Unreachable` when there was no answer)."""
        response = self._send(method, path, body, query, content_type, accept, timeout)
        raw = response.data
        status = int(response.status)
        if not 200 <= status < 300:
            raise from_response(status, raw, response.headers, reason=str(response.reason or ""), method=method, path=path)
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace") if isinstance(raw, bytes) else raw

    def open(self, path: str, *, query: Query = None, accept: str = JSON, timeout: Timeout | _Default = CLIENT_TIMEOUT) -> Any:
        """A GET whose body is left unread: the transport's response (``.data``, ``.stream()``, ``release_conn()``)
        on 2xx, the `KubeError` subclass otherwise.  The caller releases the connection."""
        raw = self._send("GET", path, None, query, JSON, accept, timeout, stream=True)
        status = int(raw.status)
        if not 200 <= status < 300:
            try:
                data = raw.data
            finally:
                raw.release_conn()
            raise from_response(status, data, raw.headers, reason=str(raw.reason or ""), method="GET", path=path)
        return raw

    def _send(self, method: str, path: str, body: Any, query: Query, content_type: str, accept: str, timeout: Timeout | _Default, stream: bool = False) -> Any:
        headers = {"Accept": accept}
        if self.impersonate:
            headers["Impersonate-User"] = self.impersonate
        payload: bytes | None = None
        if body is not None:
            headers["Content-Type"] = content_type
            payload = body if isinstance(body, bytes) else body.encode() if isinstance(body, str) else json.dumps(body).encode()
        pairs = list((query.items() if isinstance(query, Mapping) else query) or ())
        request_timeout = self.timeout if isinstance(timeout, _Default) else timeout
        try:
            return self.api_client.request(method, path, query=pairs, headers=headers, body=payload, timeout=request_timeout, stream=stream)
        except Exception as exc:  # connection refused, TLS, timeouts, a credential plugin that failed
            raise (as_kube_error(exc, method=method, path=path) or Unreachable(str(exc), method=method, path=path)) from None
