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
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

__all__ = ["Credential", "CredentialError", "CredentialStore"]

_DOCKER_HUB_KEY = "index.docker.io"
_DOCKER_HUB_HOSTS = {"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"}
_IDENTITY_TOKEN_USERNAME = "<token>"  # credential helpers mark OAuth2 refresh tokens this way
_HELPER_TIMEOUT_SECONDS = 30.0


class CredentialError(ValueError):
    """Malformed credential configuration, or a credential helper that failed."""


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

    def __init__(self) -> None:
        self._entries: list[_Entry] = []
        self._helpers: dict[str, str] = {}
        self._default_helper: str | None = None

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
            self._helpers[_normalise_host(key)] = str(helper)
        if data.get("credsStore"):
            self._default_helper = str(data["credsStore"])

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
            found = self._run_helper(helper, registry, host)
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

    @staticmethod
    def _run_helper(helper: str, registry: str, host: str) -> Credential | None:
        """`docker-credential-<helper> get` with the server URL on stdin; "not found" means no credentials."""
        program = f"docker-credential-{helper}"
        server_url = "https://index.docker.io/v1/" if host == _DOCKER_HUB_KEY else registry
        try:
            completed = subprocess.run(
                [program, "get"],
                input=server_url.encode(),
                capture_output=True,
                timeout=_HELPER_TIMEOUT_SECONDS,
                check=False,
            )
        except FileNotFoundError as exc:
            raise CredentialError(f"credential helper {program!r} for {registry} is not on PATH") from exc
        except subprocess.TimeoutExpired as exc:
            raise CredentialError(f"credential helper {program!r} for {registry} timed out") from exc
        output = completed.stdout.decode(errors="replace").strip()
        if completed.returncode != 0:
            if "credentials not found" in output.lower() or "credentials not found" in completed.stderr.decode(
                errors="replace"
            ).lower():
                return None
            message = output or completed.stderr.decode(errors="replace").strip()
            raise CredentialError(f"credential helper {program!r} failed for {registry}: {message}")
        try:
            payload = json.loads(output)
        except ValueError as exc:
            raise CredentialError(f"credential helper {program!r} returned invalid JSON for {registry}") from exc
        username = str(payload.get("Username") or "")
        secret = str(payload.get("Secret") or "")
        if username == _IDENTITY_TOKEN_USERNAME:
            return Credential(identity_token=secret)
        return Credential(username=username, password=secret)
