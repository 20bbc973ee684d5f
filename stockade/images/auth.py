"""Registry credentials: explicit basic auth, Docker `config.json` and Kubernetes pull secrets.

Lookup is by registry host, the way the Docker CLI and kubelet do it: `https://index.docker.io/v1/` and `docker.io`
both mean Docker Hub, a scheme or `/v1/` suffix on a config key is ignored, and Kubernetes-style keys may carry a
`*.` wildcard label and a repository path prefix.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import json
import os
import re
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping
from stockade.errors import StockadeError

__all__ = ["Credential", "CredentialError", "CredentialHelperError", "CredentialStore"]

_DOCKER_HUB_KEY = "index.docker.io"
_DOCKER_HUB_HOSTS = {"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"}
_IDENTITY_TOKEN_USERNAME = "<token>"  # credential helpers mark OAuth2 refresh tokens this way
# Docker's own "not found" answer (the credential-helper protocol's errCredentialsNotFound), not one of our messages.
_HELPER_NOT_FOUND = "credentials not found in native keychain"
HELPER_TIMEOUT_SECONDS = 10.0
"""How long `docker-credential-NAME get` may take before it is killed (with its children) and the lookup fails."""
HELPER_OUTPUT_LIMIT = 64 * 1024
"""Bytes a helper may print on stdout or stderr; a reply is a few hundred bytes, more means something is wrong."""
_HELPER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class CredentialError(StockadeError, ValueError):
    """Malformed credential configuration, or a credential helper that failed."""


class CredentialHelperError(CredentialError):
    """`docker-credential-NAME get` is missing, failed, hung or answered garbage; names the helper and the registry."""

    def __init__(self, program: str, registry: str, reason: str) -> None:
        super().__init__(f"credential helper {program} for registry {registry}: {reason}")
        self.program = program
        self.registry = registry
        self.reason = reason


@dataclass(frozen=True)
class Credential:
    """What to present to a registry; an identity token is an OAuth2 refresh token for the token endpoint."""

    username: str = ""
    password: str = ""
    identity_token: str = ""
    registry_token: str = ""

    def has_basic(self) -> bool:
        return bool(self.username or self.password)

    def __repr__(self) -> str:  # never leak secrets into logs or assertion messages
        return f"Credential(username={self.username!r}, password={'***' if self.password else ''!r})"


def _normalise_host(key: str) -> str:
    """Reduce a config key (`https://host:port/v1/`, `host/path`, `docker.io`) to lower-case `host[:port]`."""
    text = key.strip()
    for scheme in ("https://", "http://"):
        if text.lower().startswith(scheme):
            text = text[len(scheme) :]
    host = text.split("/", 1)[0].lower()
    return _DOCKER_HUB_KEY if host in _DOCKER_HUB_HOSTS else host


def _key_path(key: str) -> str:
    """The repository-path part of a Kubernetes-style key (`registry.io/team` → `team`); `/v1/` is not a path."""
    text = key.strip()
    for scheme in ("https://", "http://"):
        if text.lower().startswith(scheme):
            text = text[len(scheme) :]
    _, _, path = text.partition("/")
    path = path.strip("/")
    return "" if path in ("v1", "v2") else path


def _host_matches(pattern: str, host: str) -> bool:
    """Kubernetes matching: same number of labels, each label glob-matched, ports equal."""
    pattern_host, _, pattern_port = pattern.partition(":")
    actual_host, _, actual_port = host.partition(":")
    if pattern_port != actual_port:
        return False
    pattern_labels = pattern_host.split(".")
    actual_labels = actual_host.split(".")
    if len(pattern_labels) != len(actual_labels):
        return False
    return all(fnmatch.fnmatchcase(label, pat) for pat, label in zip(pattern_labels, actual_labels))


@dataclass(frozen=True)
class _Entry:
    key: str
    host: str
    path: str
    credential: Credential


def _decode_auth_entry(key: str, entry: Mapping[str, Any]) -> Credential:
    if not isinstance(entry, Mapping):
        raise CredentialError(f"auths entry for {key!r} must be an object")
    username = str(entry.get("username") or "")
    password = str(entry.get("password") or "")
    encoded = entry.get("auth")
    if encoded:
        try:
            decoded = base64.b64decode(str(encoded), validate=False).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise CredentialError(f"auths entry for {key!r}: 'auth' is not base64 of user:password") from exc
        if ":" not in decoded:
            raise CredentialError(f"auths entry for {key!r}: decoded 'auth' has no ':' between user and password")
        username, _, password = decoded.partition(":")
    return Credential(
        username=username,
        password=password,
        identity_token=str(entry.get("identitytoken") or ""),
        registry_token=str(entry.get("registrytoken") or ""),
    )


class CredentialStore:
    """Credentials by registry host; an empty store means anonymous access everywhere."""

    def __init__(self, *, helper_timeout: float = HELPER_TIMEOUT_SECONDS) -> None:
        self._entries: list[_Entry] = []
        self._helpers: dict[str, str] = {}
        self._default_helper: str | None = None
        self.helper_timeout = helper_timeout

    # -- construction -------------------------------------------------------------------------------------------
    @classmethod
    def anonymous(cls) -> CredentialStore:
        return cls()

    @classmethod
    def basic(cls, registry: str, username: str, password: str) -> CredentialStore:
        store = cls()
        store.add_basic(registry, username, password)
        return store

    @classmethod
    def from_docker_config(cls, config: Mapping[str, Any] | str | bytes) -> CredentialStore:
        store = cls()
        store.add_docker_config(config)
        return store

    @classmethod
    def from_docker_config_file(cls, path: str | os.PathLike[str] | None = None) -> CredentialStore:
        """Read `path`, else `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`; missing file = anonymous."""
        if path is None:
            directory = os.environ.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
            path = os.path.join(directory, "config.json")
        config_path = Path(path)
        store = cls()
        if config_path.exists():
            store.add_docker_config(config_path.read_bytes())
        return store

    @classmethod
    def from_pull_secrets(cls, secrets: list[Mapping[str, Any]]) -> CredentialStore:
        store = cls()
        for secret in secrets:
            store.add_pull_secret(secret)
        return store

    def add_basic(self, registry: str, username: str, password: str) -> None:
        self._add(registry, Credential(username=username, password=password))

    def add_docker_config(self, config: Mapping[str, Any] | str | bytes) -> None:
        """Docker `config.json` content (or a Kubernetes `.dockerconfigjson` value): auths, credHelpers, credsStore."""
        data = self._load_json(config, "docker config")
        auths = data.get("auths", {}) or {}
        if not isinstance(auths, Mapping):
            raise CredentialError("docker config: 'auths' must be an object")
        for key, entry in auths.items():
            self._add(key, _decode_auth_entry(key, entry))
        helpers = data.get("credHelpers", {}) or {}
        if not isinstance(helpers, Mapping):
            raise CredentialError("docker config: 'credHelpers' must be an object")
        for key, helper in helpers.items():
            self._helpers[_normalise_host(key)] = _helper_name(str(helper), f"credHelpers[{key!r}]")
        if data.get("credsStore"):
            self._default_helper = _helper_name(str(data["credsStore"]), "credsStore")

    def add_dockerconfigjson(self, data: Mapping[str, Any] | str | bytes) -> None:
        """The `.dockerconfigjson` of a pull secret, raw JSON or still base64-encoded as in `Secret.data`."""
        if isinstance(data, (str, bytes)):
            raw = data.encode() if isinstance(data, str) else data
            if not raw.lstrip().startswith(b"{"):
                try:
                    raw = base64.b64decode(raw, validate=True)
                except binascii.Error as exc:
                    raise CredentialError(".dockerconfigjson is neither JSON nor base64-encoded JSON") from exc
            data = raw
        self.add_docker_config(data)

    def add_pull_secret(self, secret: Mapping[str, Any]) -> None:
        """A Kubernetes Secret of type `kubernetes.io/dockerconfigjson` (or legacy `kubernetes.io/dockercfg`)."""
        name = (secret.get("metadata") or {}).get("name", "<unnamed>")
        string_data = secret.get("stringData") or {}
        data = secret.get("data") or {}
        if ".dockerconfigjson" in string_data:
            self.add_dockerconfigjson(str(string_data[".dockerconfigjson"]))
        elif ".dockerconfigjson" in data:
            self.add_dockerconfigjson(self._b64(data[".dockerconfigjson"], name))
        elif ".dockercfg" in string_data or ".dockercfg" in data:
            raw = string_data.get(".dockercfg") or self._b64(data[".dockercfg"], name)
            legacy = self._load_json(raw, f"secret {name} .dockercfg")
            self.add_docker_config({"auths": legacy})
        else:
            raise CredentialError(f"secret {name!r} has neither .dockerconfigjson nor .dockercfg data")

    # -- lookup -------------------------------------------------------------------------------------------------
    def lookup(self, registry: str, repository: str = "") -> Credential | None:
        """Credentials for `registry` (host[:port]), preferring credential helpers like the Docker CLI does."""
        host = _normalise_host(registry)
        helper = self._helpers.get(host) or self._default_helper
        if helper:
            found = _run_helper(helper, registry, host, self.helper_timeout)
            if found is not None:
                return found
        best: _Entry | None = None
        for entry in self._entries:
            if not _host_matches(entry.host, host):
                continue
            if entry.path and not (repository == entry.path or repository.startswith(entry.path + "/")):
                continue
            if best is None or self._specificity(entry) > self._specificity(best):
                best = entry
        return best.credential if best else None

    def __len__(self) -> int:
        return len(self._entries) + len(self._helpers) + (1 if self._default_helper else 0)

    # -- internals ----------------------------------------------------------------------------------------------
    @staticmethod
    def _specificity(entry: _Entry) -> tuple[int, int, int]:
        return (0 if "*" in entry.host else 1, len(entry.path), len(entry.host))

    def _add(self, key: str, credential: Credential) -> None:
        self._entries.append(_Entry(key, _normalise_host(key), _key_path(key), credential))

    @staticmethod
    def _b64(value: Any, secret_name: str) -> bytes:
        try:
            return base64.b64decode(str(value), validate=True)
        except binascii.Error as exc:
            raise CredentialError(f"secret {secret_name!r}: data is not valid base64") from exc

    @staticmethod
    def _load_json(source: Mapping[str, Any] | str | bytes, what: str) -> Mapping[str, Any]:
        if isinstance(source, Mapping):
            return source
        try:
            loaded = json.loads(source)
        except (ValueError, UnicodeDecodeError) as exc:
            raise CredentialError(f"{what} is not valid JSON: {exc}") from exc
        if not isinstance(loaded, Mapping):
            raise CredentialError(f"{what} must be a JSON object")
        return loaded


def _helper_name(name: str, field: str) -> str:
    """A helper is run as `docker-credential-NAME` from PATH; a name with a slash would run an arbitrary path."""
    if not _HELPER_NAME_RE.fullmatch(name):
        raise CredentialError(f"docker config: {field} = {name!r} is not a credential helper name (letters, digits, '.', '_', '-')")
    return name


def _run_helper(helper: str, registry: str, host: str, timeout: float) -> Credential | None:
    """`docker-credential-<helper> get` with the server URL on stdin; "not found" means no credentials.

    Bounded by construction: the helper runs in its own process group, which is killed after `timeout` seconds or
    once it prints more than HELPER_OUTPUT_LIMIT bytes, so neither a hung helper nor its children outlive the lookup.
    """
    program = f"docker-credential-{helper}"
    server_url = "https://index.docker.io/v1/" if host == _DOCKER_HUB_KEY else registry
    try:
        process = subprocess.Popen(
            [program, "get"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise CredentialHelperError(program, registry, "not found on PATH") from None
    except OSError as exc:
        raise CredentialHelperError(program, registry, f"cannot be run: {exc.strerror or exc}") from None
    try:
        stdout, stderr = _exchange(process, server_url.encode(), timeout, program, registry)
    finally:
        _kill_group(process)
    if process.returncode != 0:
        said = (stdout.decode(errors="replace").strip() or stderr.decode(errors="replace").strip())
        if _HELPER_NOT_FOUND in said.lower():
            return None
        first_line = said.splitlines()[0][:200] if said else "no message"
        raise CredentialHelperError(program, registry, f"exited with status {process.returncode}: {first_line}")
    try:
        payload = json.loads(stdout)
    except (ValueError, UnicodeDecodeError):
        payload = None
    if not isinstance(payload, dict) or not all(isinstance(payload.get(k, ""), str) for k in ("Username", "Secret")):
        # never echo the output: it may hold a secret
        raise CredentialHelperError(program, registry, 'printed something other than JSON {"Username": ..., "Secret": ...}')
    username, secret = payload.get("Username", ""), payload.get("Secret", "")
    if username == _IDENTITY_TOKEN_USERNAME:
        return Credential(identity_token=secret)
    return Credential(username=username, password=secret)


def _exchange(process: subprocess.Popen[bytes], request: bytes, timeout: float, program: str, registry: str) -> tuple[bytes, bytes]:
    """Send `request`, collect stdout and stderr until the helper exits; CredentialHelperError past the deadline or
    the output limit."""
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    try:
        process.stdin.write(request)
        process.stdin.close()
    except BrokenPipeError:
        pass  # it exited without reading; its status says why
    deadline = time.monotonic() + timeout
    output = {process.stdout.fileno(): bytearray(), process.stderr.fileno(): bytearray()}
    with selectors.DefaultSelector() as selector:
        for stream in (process.stdout, process.stderr):
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CredentialHelperError(program, registry, f"did not answer within {timeout:g} s (killed)")
            for key, _ in selector.select(remaining):
                chunk = os.read(key.fd, 8192)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                output[key.fd] += chunk
                if len(output[key.fd]) > HELPER_OUTPUT_LIMIT:
                    raise CredentialHelperError(program, registry, f"printed more than {HELPER_OUTPUT_LIMIT} bytes (killed)")
    try:
        process.wait(max(deadline - time.monotonic(), 0.0))
    except subprocess.TimeoutExpired:
        raise CredentialHelperError(program, registry, f"did not exit within {timeout:g} s (killed)") from None
    return bytes(output[process.stdout.fileno()]), bytes(output[process.stderr.fileno()])


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """The helper and anything it started (only while unreaped: its group id cannot have been reused yet); then reap
    it and close our ends of the pipes."""
    if process.returncode is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            stream.close()
