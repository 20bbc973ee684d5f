"""Authenticated HTTPS connections to one API server, pooled: the transport under `stockade.kube.client.KubeClient`.

An `ApiConnection` holds a urllib3 pool built from a `stockade.kube.config.RestConfig` (CA, client certificate, TLS
server name, proxy) and adds the credential's ``Authorization`` header to each request.  A credential that changes
(a token file, an exec plugin) is asked for on every request; when it carries a client certificate that differs
from the one the pool was built with, the pool is rebuilt.  A 401 answer makes the credential fetch anew next time.

urllib3 is used directly (it is what the official client wraps): pooling, keep-alive, TLS and chunked streaming are
its job; what is ours is the kubeconfig semantics (``config``) and the REST calls (``client``).
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
import threading
import urllib.parse
import warnings
from collections.abc import Sequence
from typing import Any, Union

import urllib3

from stockade.kube.config import Credential, RestConfig, load_rest_config

Timeout = Union[float, tuple[float, float], None]

log = logging.getLogger("stockade.kube")

DEFAULT_POOL_SIZE = (os.cpu_count() or 1) * 5  # connections kept per pool (the official client's default)
USER_AGENT = "stockade"


class ApiConnection:
    """A pooled, authenticated connection to the API server of ``config``; thread-safe."""

    def __init__(self, config: RestConfig, *, pool_size: int = DEFAULT_POOL_SIZE, user_agent: str = USER_AGENT) -> None:
        self.config = config
        self.pool_size = pool_size
        self.user_agent = user_agent
        self._lock = threading.Lock()
        self._pool: urllib3.PoolManager | None = None
        self._pool_cert: tuple[bytes, bytes] = (b"", b"")

    @property
    def host(self) -> str:
        return self.config.server

    def with_pool_size(self, pool_size: int) -> ApiConnection:
        """A connection of its own (separate sockets) to the same server with the same credentials."""
        return ApiConnection(self.config, pool_size=pool_size, user_agent=self.user_agent)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout: Timeout = None,
        stream: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        """One request; ``stream``: the body is left unread (the caller reads it and releases the connection).
        Transport failures raise urllib3's and ``ssl``'s exceptions (the client maps them to ``Unreachable``)."""
        credential = self.config.credentials.current()
        pool = self._pool_for(credential)
        sent = {"User-Agent": self.user_agent, **(headers or {})}
        authorization = credential.authorization()
        if authorization:
            sent["Authorization"] = authorization
        url = self.config.server + path
        if query:
            url += "?" + urllib.parse.urlencode(list(query))
        response = pool.request(method, url, body=body, headers=sent, timeout=_timeout(timeout), preload_content=not stream, redirect=False)
        if response.status == 401:
            self.config.credentials.invalidate()
        return response

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.clear()

    def _pool_for(self, credential: Credential) -> urllib3.PoolManager:
        cert = (credential.client_cert, credential.client_key)
        with self._lock:
            if self._pool is None or cert != self._pool_cert:
                old = self._pool
                self._pool = self._new_pool(cert)
                self._pool_cert = cert
                if old is not None:
                    old.clear()
            return self._pool

    def _new_pool(self, cert: tuple[bytes, bytes]) -> urllib3.PoolManager:
        config = self.config
        options: dict[str, Any] = {
            "maxsize": self.pool_size,
            "block": False,
            # connection setup is retried (nothing was sent); a read is retried only for idempotent methods
            "retries": urllib3.Retry(total=3, redirect=False, status=0, raise_on_status=False),
        }
        if config.server.startswith("https://"):
            options["ssl_context"] = _ssl_context(config, cert)
            if config.tls_server_name:
                options["server_hostname"] = config.tls_server_name
            if config.insecure:
                options["cert_reqs"] = ssl.CERT_NONE
                options["assert_hostname"] = False
                _warn_insecure_once(config)
        if config.proxy_url:
            return urllib3.ProxyManager(config.proxy_url, **options)
        return urllib3.PoolManager(**options)


_insecure_lock = threading.Lock()
_insecure_servers: set[str] = set()


def _warn_insecure_once(config: RestConfig) -> None:
    """The kubeconfig asked for no verification: say so once per server in our log rather than letting urllib3
    warn on every request (client-go is silent)."""
    with _insecure_lock:
        if config.server in _insecure_servers:
            return
        _insecure_servers.add(config.server)
    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    log.warning("TLS verification of %s is off (insecure-skip-tls-verify in %s)", config.server, config.source)


def _ssl_context(config: RestConfig, cert: tuple[bytes, bytes]) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=config.ca_data.decode() if config.ca_data else None)
    if config.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert[0]:
        _load_client_certificate(context, *cert)
    return context


def _load_client_certificate(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """``ssl`` loads a certificate chain only from files: write both to a private directory, load, remove."""
    with tempfile.TemporaryDirectory(prefix="stockade-client-cert-") as directory:
        cert_path = os.path.join(directory, "cert.pem")
        key_path = os.path.join(directory, "key.pem")
        for path, data in ((cert_path, cert), (key_path, key)):
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as out:
                out.write(data)
        context.load_cert_chain(cert_path, key_path)


def _timeout(timeout: Timeout) -> urllib3.Timeout | None:
    if timeout is None:
        return urllib3.Timeout(connect=None, read=None)
    if isinstance(timeout, tuple):
        return urllib3.Timeout(connect=timeout[0], read=timeout[1])
    return urllib3.Timeout(total=timeout)


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> ApiConnection:
    """A connection from a kubeconfig (explicit, $KUBECONFIG, ~/.kube/config) or the in-cluster service account."""
    return ApiConnection(load_rest_config(kubeconfig, context))
