"""Where the API server is and how to authenticate to it: kubeconfig files and the in-cluster service account.

`load_rest_config` follows client-go's rules (``clientcmd``), which ``kubectl`` users know:

- an explicit ``--kubeconfig`` file is read alone; otherwise, inside a Pod (``KUBERNETES_SERVICE_HOST`` set and a
  service-account token mounted) the service account is used, else ``$KUBECONFIG`` (a list joined by the path
  separator) or ``~/.kube/config``;
- several files merge: the first file that names a cluster, user or context wins it, and the first file that sets
  ``current-context`` sets it; relative file paths inside a file are relative to that file's directory;
- a user authenticates with a client certificate (``client-certificate``/``-data`` + ``client-key``/``-data``), a
  bearer ``token``, a ``tokenFile`` (read again every minute, so a rotated token is picked up), basic auth, or an
  ``exec`` credential plugin (``client.authentication.k8s.io`` ``ExecCredential``; its answer is kept until its
  ``expirationTimestamp``).  The in-cluster token file is read again every minute the same way.

Everything wrong with a file raises `KubeConfigError` naming the file and the field.  The deprecated
``auth-provider`` plugins are refused with that error: client-go itself removed the gcp and azure ones.

This module replaces the official ``kubernetes`` package's config loader: importing that package loads its ~700
generated model classes (about 15 MiB resident in every process that imports it), of which Stockade uses none.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from stockade.errors import StockadeError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_FILE_PERIOD = 60.0  # seconds a token read from a file is used before the file is read again (client-go's)
EXEC_TIMEOUT = 60.0  # seconds an exec credential plugin may run
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


class KubeConfigError(StockadeError):
    """A kubeconfig (or the in-cluster environment) that cannot be used; ``file`` and ``field`` say where."""

    def __init__(self, reason: str, *, file: str | None = None, field: str | None = None) -> None:
        where = ": ".join(part for part in (file, field) if part)
        super().__init__(f"{where}: {reason}" if where else reason)
        self.file = file
        self.field = field
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class Credential:
    """What one request authenticates with: a bearer token, basic auth, and/or a client certificate (PEM bytes)."""

    token: str = ""
    username: str = ""
    password: str = ""
    client_cert: bytes = b""
    client_key: bytes = b""
    expires: float | None = None  # time.time() after which it must be fetched again (exec plugins)

    def authorization(self) -> str:
        """The ``Authorization`` header value, or "" when the credential is a certificate only."""
        if self.token:
            return f"Bearer {self.token}"
        if self.username or self.password:
            return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return ""


class CredentialSource:
    """A credential that may change over time (token files, exec plugins); `current` is cheap to call per request."""

    def current(self) -> Credential:
        raise NotImplementedError

    def invalidate(self) -> None:
        """The API server answered 401: fetch anew on the next `current` (a no-op for static credentials)."""


class StaticCredential(CredentialSource):
    def __init__(self, credential: Credential) -> None:
        self.credential = credential

    def current(self) -> Credential:
        return self.credential


class TokenFileCredential(CredentialSource):
    """A bearer token read from a file, read again when ``period`` seconds old or after a 401."""

    def __init__(self, path: str, base: Credential = Credential(), period: float = TOKEN_FILE_PERIOD, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.base = base
        self.period = period
        self.clock = clock
        self._lock = threading.Lock()
        self._credential: Credential | None = None
        self._read_at = 0.0

    def current(self) -> Credential:
        with self._lock:
            if self._credential is None or self.clock() - self._read_at >= self.period:
                token = _read_text(self.path, self.path, "token").strip()
                self._credential = dataclasses.replace(self.base, token=token)
                self._read_at = self.clock()
            return self._credential

    def invalidate(self) -> None:
        with self._lock:
            self._credential = None


@dataclasses.dataclass(frozen=True)
class ExecPlugin:
    """A kubeconfig ``users[].user.exec`` entry."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = EXEC_API_VERSIONS[0]
    provide_cluster_info: bool = False
    source: str = ""  # the kubeconfig file, for errors
    base_dir: str = ""  # a relative command (``./bin/token``) runs from the kubeconfig's directory, as in client-go


class ExecCredential(CredentialSource):
    """Runs an exec plugin when no unexpired answer is held (client-go's exec authenticator, non-interactive)."""

    def __init__(self, plugin: ExecPlugin, cluster_info: Mapping[str, Any] | None = None, clock: Callable[[], float] = time.time) -> None:
        self.plugin = plugin
        self.cluster_info = dict(cluster_info or {})
        self.clock = clock
        self._lock = threading.Lock()
        self._credential: Credential | None = None

    def current(self) -> Credential:
        with self._lock:
            held = self._credential
            if held is None or (held.expires is not None and self.clock() >= held.expires):
                held = self._credential = self._run()
            return held

    def invalidate(self) -> None:
        with self._lock:
            self._credential = None

    def _run(self) -> Credential:
        plugin = self.plugin
        field = "users[].user.exec"
        spec: dict[str, Any] = {"interactive": False}
        if plugin.provide_cluster_info and self.cluster_info:
            spec["cluster"] = self.cluster_info
        environment = {**os.environ, **dict(plugin.env)}
        environment["KUBERNETES_EXEC_INFO"] = json.dumps({"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": spec})
        command = plugin.command
        if plugin.base_dir and os.sep in command and not os.path.isabs(command):
            command = os.path.join(plugin.base_dir, command)
        try:
            completed = subprocess.run(
                [command, *plugin.args], env=environment, stdin=subprocess.DEVNULL, capture_output=True, timeout=EXEC_TIMEOUT, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise KubeConfigError(f"exec plugin {plugin.command!r} could not run: {exc}", file=plugin.source, field=field) from None
        if completed.returncode != 0:
            detail = completed.stderr.decode(errors="replace").strip()[-500:]
            raise KubeConfigError(f"exec plugin {plugin.command!r} exited with {completed.returncode}: {detail}", file=plugin.source, field=field)
        try:
            answer = json.loads(completed.stdout)
        except ValueError:
            raise KubeConfigError(f"exec plugin {plugin.command!r} did not print an ExecCredential as JSON", file=plugin.source, field=field) from None
        if not isinstance(answer, dict) or answer.get("kind") != "ExecCredential":
            raise KubeConfigError(f"exec plugin {plugin.command!r} printed something other than an ExecCredential", file=plugin.source, field=field)
        if answer.get("apiVersion") != plugin.api_version:
            raise KubeConfigError(
                f"exec plugin {plugin.command!r} answered apiVersion {answer.get('apiVersion')!r}, expected {plugin.api_version!r}", file=plugin.source, field=field
            )
        status = answer.get("status")
        if not isinstance(status, dict):
            raise KubeConfigError(f"exec plugin {plugin.command!r} answered no status", file=plugin.source, field=field)
        token = status.get("token") or ""
        cert = status.get("clientCertificateData") or ""
        key = status.get("clientKeyData") or ""
        if not isinstance(token, str) or not isinstance(cert, str) or not isinstance(key, str):
            raise KubeConfigError(f"exec plugin {plugin.command!r} answered a status with non-string fields", file=plugin.source, field=field)
        if bool(cert) != bool(key):
            raise KubeConfigError(f"exec plugin {plugin.command!r} answered only one of clientCertificateData and clientKeyData", file=plugin.source, field=field)
        if not token and not cert:
            raise KubeConfigError(f"exec plugin {plugin.command!r} answered neither a token nor a client certificate", file=plugin.source, field=field)
        expires = None
        stamp = status.get("expirationTimestamp")
        if stamp:
            try:
                expires = datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
            except ValueError:
                raise KubeConfigError(f"exec plugin {plugin.command!r} answered an unreadable expirationTimestamp {stamp!r}", file=plugin.source, field=field) from None
        return Credential(token=token, client_cert=cert.encode(), client_key=key.encode(), expires=expires)


@dataclasses.dataclass(frozen=True)
class RestConfig:
    """Everything needed to open authenticated connections to one API server."""

    server: str  # https://host:port, no trailing slash
    ca_data: bytes = b""  # PEM; empty: the system's trust store
    insecure: bool = False
    tls_server_name: str = ""
    proxy_url: str = ""
    credentials: CredentialSource = dataclasses.field(default_factory=lambda: StaticCredential(Credential()))
    namespace: str = "default"
    source: str = ""  # where it came from, for messages: a kubeconfig path or "in-cluster"


def load_rest_config(kubeconfig: str | None = None, context: str | None = None, environ: Mapping[str, str] | None = None) -> RestConfig:
    """The API server to talk to, by client-go's rules (see the module docstring)."""
    environ = os.environ if environ is None else environ
    if kubeconfig:
        if not Path(kubeconfig).is_file():
            raise KubeConfigError("does not exist or is not a file", file=kubeconfig)
        return from_kubeconfig([kubeconfig], context)
    if environ.get("KUBERNETES_SERVICE_HOST") and (SERVICE_ACCOUNT_DIR / "token").exists():
        return in_cluster(environ)
    listed = [path for path in (environ.get("KUBECONFIG") or "").split(os.pathsep) if path]
    if not listed:
        default = Path(environ.get("HOME") or Path.home()) / ".kube" / "config"
        if not default.exists():
            raise KubeConfigError("no kubeconfig: not running in a cluster, $KUBECONFIG is empty and ~/.kube/config does not exist", file=str(default))
        listed = [str(default)]
    return from_kubeconfig(listed, context)


def in_cluster(environ: Mapping[str, str] | None = None, account_dir: Path = SERVICE_ACCOUNT_DIR) -> RestConfig:
    """The Pod's service account: the API server's Service address, its CA and the mounted (rotating) token."""
    environ = os.environ if environ is None else environ
    host = environ.get("KUBERNETES_SERVICE_HOST", "")
    port = environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise KubeConfigError("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set", file="in-cluster")
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    token_file = account_dir / "token"
    ca_file = account_dir / "ca.crt"
    ca = _read_bytes(str(ca_file), str(ca_file), "ca.crt")
    namespace_file = account_dir / "namespace"
    namespace = namespace_file.read_text().strip() if namespace_file.exists() else "default"
    return RestConfig(
        server=f"https://{host}:{port}", ca_data=ca, credentials=TokenFileCredential(str(token_file)), namespace=namespace or "default", source="in-cluster"
    )


def from_kubeconfig(paths: Sequence[str], context: str | None = None) -> RestConfig:
    """The config of ``context`` (default: the files' ``current-context``) from one or more merged kubeconfig files."""
    clusters: dict[str, tuple[dict[str, Any], str]] = {}
    users: dict[str, tuple[dict[str, Any], str]] = {}
    contexts: dict[str, tuple[dict[str, Any], str]] = {}
    current = ""
    for path in paths:
        document = _load_file(path)
        if document is None:
            continue
        for section, into, inner in (("clusters", clusters, "cluster"), ("users", users, "user"), ("contexts", contexts, "context")):
            entries = document.get(section) or []
            if not isinstance(entries, list):
                raise KubeConfigError("must be a list", file=path, field=section)
            for index, entry in enumerate(entries):
                if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                    raise KubeConfigError("must be a mapping with a name", file=path, field=f"{section}[{index}]")
                body = entry.get(inner) or {}
                if not isinstance(body, dict):
                    raise KubeConfigError("must be a mapping", file=path, field=f"{section}[{index}].{inner}")
                into.setdefault(entry["name"], (body, path))
        if not current and isinstance(document.get("current-context"), str):
            current = document["current-context"]
    name = context or current
    where = paths[0] if len(paths) == 1 else os.pathsep.join(paths)
    if not name:
        raise KubeConfigError("no context: current-context is not set and none was given", file=where, field="current-context")
    if name not in contexts:
        raise KubeConfigError(f"context {name!r} does not exist", file=where, field="contexts")
    context_body, context_file = contexts[name]
    cluster_name = context_body.get("cluster")
    if not isinstance(cluster_name, str) or cluster_name not in clusters:
        raise KubeConfigError(f"cluster {cluster_name!r} does not exist", file=context_file, field=f"contexts[{name}].context.cluster")
    cluster, cluster_file = clusters[cluster_name]
    user_name = context_body.get("user") or ""
    if user_name and user_name not in users:
        raise KubeConfigError(f"user {user_name!r} does not exist", file=context_file, field=f"contexts[{name}].context.user")
    user, user_file = users[user_name] if user_name else ({}, context_file)
    return _config(cluster, cluster_file, f"clusters[{cluster_name}].cluster", user, user_file, f"users[{user_name}].user", str(context_body.get("namespace") or "default"))


def _config(cluster: dict[str, Any], cluster_file: str, cluster_field: str, user: dict[str, Any], user_file: str, user_field: str, namespace: str) -> RestConfig:
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("https://", "http://")):
        raise KubeConfigError(f"must be an http(s) URL, got {server!r}", file=cluster_file, field=f"{cluster_field}.server")
    ca = _data_or_file(cluster, "certificate-authority", cluster_file, cluster_field)
    insecure = cluster.get("insecure-skip-tls-verify") is True
    if insecure and ca:
        raise KubeConfigError("insecure-skip-tls-verify cannot be combined with a certificate authority", file=cluster_file, field=cluster_field)
    base = Credential(
        client_cert=_data_or_file(user, "client-certificate", user_file, user_field),
        client_key=_data_or_file(user, "client-key", user_file, user_field),
        username=str(user.get("username") or ""),
        password=str(user.get("password") or ""),
    )
    if bool(base.client_cert) != bool(base.client_key):
        raise KubeConfigError("a client certificate needs its key and a key its certificate", file=user_file, field=user_field)
    if user.get("auth-provider"):
        provider = user["auth-provider"].get("name") if isinstance(user["auth-provider"], dict) else None
        raise KubeConfigError(f"auth-provider {provider!r} is not supported (client-go removed these plugins); use an exec credential plugin", file=user_file, field=f"{user_field}.auth-provider")
    credentials: CredentialSource
    if user.get("exec"):
        credentials = ExecCredential(_exec_plugin(user["exec"], user_file, f"{user_field}.exec"), {"server": server, "insecure-skip-tls-verify": insecure})
    elif user.get("token"):
        credentials = StaticCredential(dataclasses.replace(base, token=str(user["token"])))
    elif user.get("tokenFile"):
        credentials = TokenFileCredential(_relative(str(user["tokenFile"]), user_file), base)
    else:
        credentials = StaticCredential(base)
    return RestConfig(
        server=server.rstrip("/"),
        ca_data=ca,
        insecure=insecure,
        tls_server_name=str(cluster.get("tls-server-name") or ""),
        proxy_url=str(cluster.get("proxy-url") or ""),
        credentials=credentials,
        namespace=namespace,
        source=cluster_file,
    )


def _exec_plugin(raw: Any, file: str, field: str) -> ExecPlugin:
    if not isinstance(raw, dict):
        raise KubeConfigError("must be a mapping", file=file, field=field)
    command = raw.get("command")
    if not isinstance(command, str) or not command:
        raise KubeConfigError("is required", file=file, field=f"{field}.command")
    api_version = raw.get("apiVersion") or ""
    if api_version not in EXEC_API_VERSIONS:
        raise KubeConfigError(f"must be one of {', '.join(EXEC_API_VERSIONS)}, got {api_version!r}", file=file, field=f"{field}.apiVersion")
    if raw.get("interactiveMode") == "Always":
        raise KubeConfigError("interactiveMode Always needs a terminal; a server has none", file=file, field=f"{field}.interactiveMode")
    args = raw.get("args") or []
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise KubeConfigError("must be a list of strings", file=file, field=f"{field}.args")
    env: list[tuple[str, str]] = []
    for index, entry in enumerate(raw.get("env") or []):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not isinstance(entry.get("value"), str):
            raise KubeConfigError("must be a mapping of name and value strings", file=file, field=f"{field}.env[{index}]")
        env.append((entry["name"], entry["value"]))
    return ExecPlugin(command, tuple(args), tuple(env), api_version, raw.get("provideClusterInfo") is True, file, str(Path(file).parent))


def _load_file(path: str) -> dict[str, Any] | None:
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None  # client-go skips missing files of $KUBECONFIG; an explicit one is checked by the caller
    except OSError as exc:
        raise KubeConfigError(f"cannot be read: {exc.strerror or exc}", file=path) from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KubeConfigError(f"is not YAML: {exc}", file=path) from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise KubeConfigError("must be a mapping (kind: Config)", file=path)
    return document


def _relative(path: str, file: str) -> str:
    return path if os.path.isabs(path) else str(Path(file).parent / path)


def _data_or_file(section: dict[str, Any], key: str, file: str, field: str) -> bytes:
    """``key-data`` (base64 PEM) or ``key`` (a file path, relative to ``file``'s directory); b"" when neither."""
    data = section.get(f"{key}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True)
        except ValueError:
            raise KubeConfigError("is not base64", file=file, field=f"{field}.{key}-data") from None
    path = section.get(key)
    if path:
        return _read_bytes(_relative(str(path), file), file, f"{field}.{key}")
    return b""


def _read_bytes(path: str, file: str, field: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise KubeConfigError(f"{path} cannot be read: {exc.strerror or exc}", file=file, field=field) from None


def _read_text(path: str, file: str, field: str) -> str:
    return _read_bytes(path, file, field).decode(errors="replace")
