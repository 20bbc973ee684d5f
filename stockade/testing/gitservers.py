"""Real git servers on 127.0.0.1 for tests, started and stopped by the tests (test tooling).

- `SshGitServer`: Debian's OpenSSH `sshd` with a configuration in a temporary directory (its own host key,
  authorized_keys, pid file; no PAM, keys only), serving the bare repositories under ``base`` through
  ``git-upload-pack``/``git-receive-pack`` as the current user.  Root or not: privilege separation needs
  ``/run/sshd`` only when run as root, and it is created then.
- `HttpGitServer`: ``git http-backend`` (smart HTTP, push enabled) behind a threaded HTTP server, optionally
  over TLS with a self-signed certificate for 127.0.0.1, with HTTP Basic credentials when given.
"""

from __future__ import annotations

import base64
import getpass
import http.server
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from stockade.errors import StockadeError
from stockade.testing.registry import free_port, write_self_signed_certificate

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/bin/sshd")


class MissingSshdError(StockadeError, RuntimeError):
    """OpenSSH's server is not installed (Debian: openssh-server)."""


def find_sshd() -> str:
    for candidate in SSHD_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("sshd")
    if found:
        return found
    raise MissingSshdError("sshd not found: install Debian's openssh-server")


def _wait_for_port(port: int, process: subprocess.Popen[bytes] | None, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what} exited with status {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port}") from None
            time.sleep(0.05)


def generate_ssh_key(path: Path, passphrase: str = "", kind: str = "ed25519") -> tuple[bytes, bytes]:
    """``ssh-keygen`` a key pair at ``path`` (+ ``.pub``); returns (private, public) bytes."""
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", passphrase, "-C", "stockade-test", "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL)
    return path.read_bytes(), Path(f"{path}.pub").read_bytes()


class SshGitServer:
    def __init__(self, base: Path, authorized_keys: list[bytes]) -> None:
        self.base = base
        self.dir = base / ".sshd"
        self.dir.mkdir(mode=0o700)
        self.port = free_port()
        self.user = getpass.getuser()
        _, host_public = generate_ssh_key(self.dir / "host_ed25519")
        self.host_public_key = host_public.decode().split()[0:2]
        (self.dir / "authorized_keys").write_bytes(b"".join(key.rstrip(b"\n") + b"\n" for key in authorized_keys))
        config = self.dir / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {self.dir / 'host_ed25519'}",
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}",
            f"PidFile {self.dir / 'sshd.pid'}",
            "StrictModes no",
            "UsePAM no",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            "PermitRootLogin prohibit-password",
            f"AllowUsers {self.user}",
            f"SetEnv PATH={os.environ.get('PATH', '/usr/bin:/bin')}",
            "LogLevel ERROR",
            "",
        ]))
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        self.log = open(self.dir / "sshd.log", "wb")
        self._process = subprocess.Popen([find_sshd(), "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL,
                                         stdout=self.log, stderr=subprocess.STDOUT)
        try:
            _wait_for_port(self.port, self._process, "sshd")
        except Exception:
            self.stop()
            raise

    def url(self, name: str) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}{self.base / name}"

    def known_hosts(self) -> bytes:
        """The line a user gets from `ssh-keyscan -p PORT 127.0.0.1` (Flux's `known_hosts` key)."""
        return f"[127.0.0.1]:{self.port} {' '.join(self.host_public_key)}\n".encode()

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=10)
        self.log.close()


class HttpGitServer:
    """Smart-HTTP git over ``git http-backend``; ``requests`` counts the requests served."""

    def __init__(self, base: Path, *, tls: bool = False, credentials: tuple[str, str] | None = None) -> None:
        self.base = base
        self.requests = 0
        self.ca_pem = b""
        expected = "Basic " + base64.b64encode(":".join(credentials).encode()).decode() if credentials else None
        server_self = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _serve(self) -> None:
                server_self.requests += 1
                if expected is not None and self.headers.get("Authorization") != expected:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="git"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                path, _, query = self.path.partition("?")
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                env = {
                    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                    "GIT_PROJECT_ROOT": str(server_self.base),
                    "GIT_HTTP_EXPORT_ALL": "1",
                    "REMOTE_USER": "tester",
                    "REMOTE_ADDR": "127.0.0.1",
                    "REQUEST_METHOD": self.command,
                    "PATH_INFO": path,
                    "QUERY_STRING": query,
                    "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                    "CONTENT_LENGTH": str(len(body)),
                    "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                    "GIT_CONFIG_NOSYSTEM": "1",
                    "GIT_CONFIG_GLOBAL": os.devnull,
                }
                if self.headers.get("Content-Encoding") == "gzip":
                    env["HTTP_CONTENT_ENCODING"] = "gzip"
                completed = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, timeout=60)
                head, _, payload = completed.stdout.partition(b"\r\n\r\n")
                status = 200
                headers: list[tuple[str, str]] = []
                for line in head.decode("latin-1").split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.lower() == "status":
                        status = int(value.strip().split()[0])
                    elif name:
                        headers.append((name, value.strip()))
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = _serve  # noqa: N815 - http.server naming
            do_POST = _serve  # noqa: N815

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.scheme = "http"
        if tls:
            cert, key = write_self_signed_certificate(base, ".https-server")
            self.ca_pem = cert.read_bytes()
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert, key)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            self.scheme = "https"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, name: str) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
