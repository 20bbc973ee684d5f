"""Run Debian's `docker-registry` (distribution 2.8) on 127.0.0.1 for tests, plus a tiny bearer-token server.

Three variants mirror what clusters meet in the wild: an anonymous plain-HTTP registry, an htpasswd (basic auth)
registry behind TLS with a throw-away CA, and a registry that delegates to a token server (the Docker Hub / Harbor
flow). Use `LocalRegistry` as a context manager, e.g. from a pytest fixture:

    with LocalRegistry("token") as registry:
        client = RegistryClient(**registry.client_options(), credentials=registry.credentials())

Needs the Debian packages `docker-registry` and (for the htpasswd variant) `apache2-utils`.
"""

from __future__ import annotations

import base64
import datetime
import http.client
import ipaddress
import json
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Literal, Mapping
from urllib.parse import parse_qs, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from stockade.images.auth import CredentialStore
from stockade.testing.localhttp import LocalHttpServer
from stockade.errors import StockadeError

__all__ = [
    "LocalRegistry",
    "MissingToolError",
    "TokenServer",
    "find_registry_binary",
    "free_port",
    "write_self_signed_certificate",
]

RegistryMode = Literal["anonymous", "htpasswd", "token"]
_READY_TIMEOUT_SECONDS = 15.0
_TOKEN_LIFETIME_SECONDS = 300


class MissingToolError(StockadeError, RuntimeError):
    """A system tool the registry harness needs is not installed."""


def find_registry_binary() -> str:
    """Path of `docker-registry`; a clear install hint instead of a skip when it is missing."""
    path = shutil.which("docker-registry")
    if path is None:
        raise MissingToolError(
            "the 'docker-registry' binary is not installed; registry integration tests need it: "
            "run `apt-get install -y docker-registry apache2-utils` (Debian/Ubuntu)"
        )
    return path


def _find_htpasswd() -> str:
    path = shutil.which("htpasswd")
    if path is None:
        raise MissingToolError(
            "the 'htpasswd' tool is not installed; the basic-auth registry needs it: "
            "run `apt-get install -y apache2-utils` (Debian/Ubuntu)"
        )
    return path


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _self_signed(common_name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, certificate


def write_self_signed_certificate(directory: Path, stem: str, common_name: str = "127.0.0.1") -> tuple[Path, Path]:
    """Write `<stem>.crt` / `<stem>.key` (PEM) valid for 127.0.0.1 and localhost; returns both paths."""
    key, certificate = _self_signed(common_name)
    cert_path = directory / f"{stem}.crt"
    key_path = directory / f"{stem}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class TokenRequest:
    """What the token server was asked, so tests can check caching and scopes."""

    method: str
    username: str | None
    scopes: list[str]
    granted: bool


@dataclass
class TokenServer(LocalHttpServer):
    """A minimal Docker registry token server: ES256 JWTs with an `x5c` header the registry trusts.

    Authenticated users get every action they ask for; anonymous callers get `pull` only when `anonymous_pull`.
    `refresh_tokens` maps OAuth2 refresh tokens (docker `identitytoken`) to user names for the POST grant.
    """

    thread_name = "token-server"
    users: Mapping[str, str]
    service: str = "stockade-test-registry"
    issuer: str = "stockade-test-issuer"
    anonymous_pull: bool = True
    refresh_tokens: Mapping[str, str] = field(default_factory=dict)
    requests: list[TokenRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._key, self._certificate = _self_signed("stockade test token signer")

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def write_root_bundle(self, path: Path) -> Path:
        path.write_bytes(self._certificate.public_bytes(serialization.Encoding.PEM))
        return path

    def issue(self, subject: str, access: list[dict[str, Any]]) -> str:
        now = int(time.time())
        header = {
            "typ": "JWT",
            "alg": "ES256",
            "x5c": [base64.b64encode(self._certificate.public_bytes(serialization.Encoding.DER)).decode()],
        }
        claims = {
            "iss": self.issuer,
            "sub": subject,
            "aud": self.service,
            "exp": now + _TOKEN_LIFETIME_SECONDS,
            "nbf": now - 10,
            "iat": now,
            "jti": secrets.token_hex(8),
            "access": access,
        }
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        r, s = decode_dss_signature(self._key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
        return f"{signing_input}.{_b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    def grant(self, username: str | None, scopes: list[str]) -> list[dict[str, Any]]:
        access = []
        for scope in scopes:
            resource_type, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            wanted = [action for action in actions.split(",") if action]
            allowed = wanted if username else (["pull"] if self.anonymous_pull and "pull" in wanted else [])
            if allowed:
                access.append({"type": resource_type, "name": name, "actions": allowed})
        return access

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        token_server = self

        class Handler(BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # headers and body go out in separate writes

            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                return

            def _reply(self, status: int, payload: dict[str, Any]) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _basic_user(self) -> tuple[bool, str | None]:
                header = self.headers.get("Authorization", "")
                if not header.lower().startswith("basic "):
                    return True, None
                try:
                    username, _, password = base64.b64decode(header[6:]).decode().partition(":")
                except (ValueError, UnicodeDecodeError):
                    return False, None
                if token_server.users.get(username) != password:
                    return False, username
                return True, username

            def do_GET(self) -> None:  # noqa: N802 - http.server naming
                query = parse_qs(urlsplit(self.path).query)
                scopes = query.get("scope", [])
                ok, username = self._basic_user()
                if not ok:
                    token_server.requests.append(TokenRequest("GET", username, scopes, False))
                    self._reply(401, {"details": "invalid username or password"})
                    return
                token_server.requests.append(TokenRequest("GET", username, scopes, True))
                token = token_server.issue(username or "", token_server.grant(username, scopes))
                self._reply(
                    200,
                    {"token": token, "access_token": token, "expires_in": _TOKEN_LIFETIME_SECONDS},
                )

            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                length = int(self.headers.get("Content-Length") or 0)
                form = parse_qs(self.rfile.read(length).decode())
                scopes = form.get("scope", [])
                refresh = (form.get("refresh_token") or [""])[0]
                username = token_server.refresh_tokens.get(refresh)
                if form.get("grant_type") != ["refresh_token"] or username is None:
                    token_server.requests.append(TokenRequest("POST", None, scopes, False))
                    self._reply(401, {"error": "invalid_grant"})
                    return
                token_server.requests.append(TokenRequest("POST", username, scopes, True))
                token = token_server.issue(username, token_server.grant(username, scopes))
                self._reply(200, {"access_token": token, "expires_in": _TOKEN_LIFETIME_SECONDS})

        return Handler


class LocalRegistry:
    """A throw-away `docker-registry serve` process on 127.0.0.1 with its own storage and config."""

    def __init__(
        self,
        mode: RegistryMode = "anonymous",
        *,
        users: Mapping[str, str] | None = None,
        tls: bool | None = None,
        anonymous_pull: bool = True,
        refresh_tokens: Mapping[str, str] | None = None,
    ) -> None:
        """`tls` defaults to on for htpasswd (the registry refuses basic auth without it) and off otherwise."""
        if mode not in ("anonymous", "htpasswd", "token"):
            raise ValueError(f"unknown registry mode {mode!r}")
        self.mode: RegistryMode = mode
        self.users: dict[str, str] = dict(users if users is not None else {"alice": "s3cret"})
        self.tls = (mode == "htpasswd") if tls is None else tls
        self.anonymous_pull = anonymous_pull
        self.refresh_tokens = dict(refresh_tokens or {})
        self.port = 0
        self.ca_file: str | None = None
        self.token_server: TokenServer | None = None
        self._binary = find_registry_binary()
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None

    # -- addresses and client settings --------------------------------------------------------------------------
    @property
    def host(self) -> str:
        """`127.0.0.1:<port>`, the registry part of image references."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}"

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for `RegistryClient` that make it trust this registry (and only this one)."""
        if self.tls:
            return {"ca_file": self.ca_file}
        return {"insecure_registries": [self.host]}

    def credentials(self, username: str | None = None) -> CredentialStore:
        """A store holding one user's password for this registry (the first user by default)."""
        name = username or next(iter(self.users))
        return CredentialStore.basic(self.host, name, self.users[name])

    def log_text(self) -> str:
        return self._log_path.read_text(errors="replace") if self._log_path and self._log_path.exists() else ""

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def start(self) -> LocalRegistry:
        self._workdir = tempfile.TemporaryDirectory(prefix="stockade-registry-")
        workdir = Path(self._workdir.name)
        (workdir / "data").mkdir()
        self.port = free_port()
        config: dict[str, Any] = {
            "version": 0.1,
            "log": {"level": "error", "accesslog": {"disabled": True}},
            "storage": {
                "filesystem": {"rootdirectory": str(workdir / "data")},
                "delete": {"enabled": True},
                "cache": {"blobdescriptor": "inmemory"},
                "maintenance": {"uploadpurging": {"enabled": False}},
            },
            "http": {"addr": self.host, "secret": secrets.token_hex(16)},
        }
        if self.tls:
            cert_path, key_path = write_self_signed_certificate(workdir, "registry")
            config["http"]["tls"] = {"certificate": str(cert_path), "key": str(key_path)}
            self.ca_file = str(cert_path)
        if self.mode == "htpasswd":
            htpasswd_path = workdir / "htpasswd"
            htpasswd_path.write_text("".join(self._htpasswd_line(u, p) for u, p in self.users.items()))
            config["auth"] = {"htpasswd": {"realm": "stockade-basic-realm", "path": str(htpasswd_path)}}
        elif self.mode == "token":
            self.token_server = TokenServer(
                users=self.users, anonymous_pull=self.anonymous_pull, refresh_tokens=self.refresh_tokens
            ).start()
            bundle = self.token_server.write_root_bundle(workdir / "token-root.crt")
            config["auth"] = {
                "token": {
                    "realm": self.token_server.realm,
                    "service": self.token_server.service,
                    "issuer": self.token_server.issuer,
                    "rootcertbundle": str(bundle),
                }
            }
        config_path = workdir / "config.yml"
        config_path.write_text(json.dumps(config, indent=2))  # JSON is valid YAML
        self._log_path = workdir / "registry.log"
        with open(self._log_path, "wb") as log:
            self._process = subprocess.Popen(
                [self._binary, "serve", str(config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._process is not None:
            if self._process.poll() is None:
                self._process.terminate()
                try:
                    self._process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait(timeout=5)
            self._process = None
        if self.token_server is not None:
            self.token_server.stop()
            self.token_server = None
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def __enter__(self) -> LocalRegistry:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # -- internals ------------------------------------------------------------------------------------------------
    def _htpasswd_line(self, username: str, password: str) -> str:
        completed = subprocess.run(
            [_find_htpasswd(), "-Bbn", username, password], capture_output=True, check=True, timeout=30
        )
        return completed.stdout.decode().strip() + "\n"

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + _READY_TIMEOUT_SECONDS
        context = ssl.create_default_context(cafile=self.ca_file) if self.tls else None
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"docker-registry exited with status {self._process.returncode} before becoming ready:\n"
                    f"{self.log_text()}"
                )
            connection: http.client.HTTPConnection
            if context is not None:
                connection = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=1, context=context)
            else:
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
            try:
                connection.request("GET", "/v2/")
                status = connection.getresponse().status
                if status in (200, 401):
                    return
            except OSError:
                pass
            finally:
                connection.close()
            time.sleep(0.02)
        raise RuntimeError(f"docker-registry on {self.host} not ready after {_READY_TIMEOUT_SECONDS}s:\n{self.log_text()}")
