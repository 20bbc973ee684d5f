"""Real sigstore services on 127.0.0.1 for keyless tests, all built by .ci/build-sigstore.sh: Fulcio issuing
certificates to identities from the local `OidcIssuer`, a TesseraCT log (files on disk) that Fulcio submits its
precertificates to (so certificates embed real SCTs), and Rekor v1 on Trillian over a throw-away PostgreSQL.

Fulcio runs as a file-backed CA (``--ca=fileca``) over a root → intermediate chain made here, so the trust root is
known before any service starts; tests still read it back from Fulcio's own API (`root_pem`).
A missing binary raises `SigstoreUnavailable` (tests turn it into a failure, never a skip).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from stockade.errors import StockadeError
from stockade.images.keys import encrypt_cosign_private_key
from stockade.testing.apiserver import REPO_ROOT, free_port, program_name
from stockade.testing.oidc import OidcIssuer
from stockade.testing.sigstore import FakeFulcio

__all__ = ["CtLog", "Fulcio", "Rekor", "SigstoreUnavailable", "find_sigstore_binary"]

_READY_TIMEOUT_SECONDS = 60.0


class SigstoreUnavailable(StockadeError, RuntimeError):
    """A sigstore service binary is missing or did not come up."""


def find_sigstore_binary(name: str) -> str:
    """`.cache/bin/<name>` (or ``$STOCKADE_<NAME>``); built by .ci/build-sigstore.sh."""
    env_var = "STOCKADE_" + name.upper().replace("-", "_")
    for candidate in (os.environ.get(env_var, ""), str(REPO_ROOT / ".cache" / "bin" / name), shutil.which(name) or ""):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SigstoreUnavailable(f"{name} not found (set {env_var} or run .ci/build-sigstore.sh {name})")


def find_postgres_binary(name: str) -> str:
    """A PostgreSQL server program: ``$STOCKADE_POSTGRES_BIN/<name>``, PATH, or Debian's versioned directory (newest)."""
    directory = os.environ.get("STOCKADE_POSTGRES_BIN", "")
    debian = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), key=lambda path: int(path.parts[-3]) if path.parts[-3].isdigit() else 0)
    for candidate in (str(Path(directory) / name) if directory else "", shutil.which(name) or "", *(str(path) for path in reversed(debian))):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SigstoreUnavailable(f"PostgreSQL's {name} not found (apt-get install postgresql, or set STOCKADE_POSTGRES_BIN)")


class _Service:
    """One child process with its log in the work directory."""

    def __init__(self, workdir: Path, name: str) -> None:
        self.workdir = workdir
        self.name = name
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def log(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def spawn(self, argv: list[str], *, user: str = "", cwd: Path | None = None) -> None:
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd or self.workdir, user=user or None
            )

    def wait_http(self, url: str) -> bytes:
        """The body of the first 200 answer from `url`; fails early when the process exits."""
        deadline = time.monotonic() + _READY_TIMEOUT_SECONDS
        last_error = ""
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise SigstoreUnavailable(f"{program_name(self.process)} exited with {self.process.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        body: bytes = response.read()
                        return body
            except (urllib.error.URLError, OSError) as exc:
                last_error = str(exc)
            time.sleep(0.3)
        raise SigstoreUnavailable(f"{self.name} not ready at {url} after {_READY_TIMEOUT_SECONDS}s ({last_error}):\n{self.log()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


class Fulcio(_Service):
    """`fulcio serve` (its HTTP API at `url`) trusting `issuer` as an e-mail OIDC provider."""

    def __init__(self, workdir: Path, issuer: OidcIssuer) -> None:
        super().__init__(workdir, "fulcio")
        self.issuer = issuer
        self.ca = FakeFulcio(name="stockade-test-fulcio", code_signing_intermediate=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, ct_log: CtLog | None = None) -> Fulcio:
        """Serve; with `ct_log` (started over ``self.ca.root_pem``) every certificate is logged and embeds its SCT."""
        binary = find_sigstore_binary("fulcio")
        password = "fulcio-ca"
        (self.workdir / "ca-chain.pem").write_text(self.ca.chain_pem)
        (self.workdir / "ca-key.pem").write_bytes(encrypt_cosign_private_key(self.ca.intermediate_key, password))
        config = {"OIDCIssuers": {self.issuer.url: {"IssuerURL": self.issuer.url, "ClientID": self.issuer.audience, "Type": "email"}}}
        (self.workdir / "fulcio-config.json").write_text(json.dumps(config))
        self.port = free_port()
        argv = [
            binary, "serve",
            # HTTP and gRPC on separate ports: Fulcio v1.8.8's one-port (duplex) mode panics registering its metrics twice.
            "--host=127.0.0.1", f"--port={self.port}", "--grpc-host=127.0.0.1", f"--grpc-port={free_port()}",
            f"--metrics-port={free_port()}", f"--legacy-unix-domain-socket=@stockade-fulcio-{self.port}",
            "--ca=fileca", "--fileca-cert=ca-chain.pem", "--fileca-key=ca-key.pem", f"--fileca-key-passwd={password}", "--fileca-watch=false",
            "--config-path=fulcio-config.json",
            f"--ct-log-url={ct_log.url if ct_log else ''}",
        ]
        if ct_log is not None:
            argv += [f"--ct-log-public-key-path={ct_log.public_key_path}", f"--ct-log-origin={ct_log.origin}"]
        self.spawn(argv)
        self.wait_http(self.url + "/api/v1/rootCert")
        return self

    def root_pem(self) -> str:
        """The root of the chain Fulcio serves (``/api/v1/rootCert`` lists the chain, root last)."""
        body = self.wait_http(self.url + "/api/v1/rootCert").decode()
        marker = "-----BEGIN CERTIFICATE-----"
        return marker + body.rsplit(marker, 1)[1]

    def __enter__(self) -> Fulcio:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


class CtLog(_Service):
    """A TesseraCT (static-ct-api) log accepting code-signing chains under `roots_pem`; `public_key_path` is what
    verifiers (cosign's ``SIGSTORE_CT_LOG_PUBLIC_KEY_FILE``, a policy's ctlog key) trust."""

    def __init__(self, workdir: Path, roots_pem: str) -> None:
        super().__init__(workdir, "tesseract")
        self.roots_pem = roots_pem
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.port = 0
        self.origin = "ctlog.stockade.test"  # the log's name; TesseraCT wants submissions addressed to it (Host)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def public_key_pem(self) -> str:
        return self.key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()

    @property
    def public_key_path(self) -> Path:
        return self.workdir / "ctlog-public.pem"

    def start(self) -> CtLog:
        binary = find_sigstore_binary("tesseract")
        (self.workdir / "ctlog-private.pem").write_bytes(
            self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption())
        )
        self.public_key_path.write_text(self.public_key_pem)
        (self.workdir / "ctlog-roots.pem").write_text(self.roots_pem)
        (self.workdir / "ctlog-storage").mkdir(exist_ok=True)
        self.port = free_port()
        self.spawn([
            binary, "--private_key=ctlog-private.pem", f"--origin={self.origin}", "--accept_sha1_signing_algorithms=false", "--storage_dir=ctlog-storage",
            "--roots_pem_file=ctlog-roots.pem", "--ext_key_usages=CodeSigning", f"--http_endpoint=127.0.0.1:{self.port}",
        ])
        self.wait_http(self.url + "/ct/v1/get-roots")
        return self

    def __enter__(self) -> CtLog:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


_UNPRIVILEGED_USER = "nobody"  # PostgreSQL refuses to run as root


class _Postgres(_Service):
    """A private PostgreSQL cluster (Debian's binaries) holding Trillian's schema in database ``trillian``."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir, "postgres")
        self.port = 0
        self.user = _UNPRIVILEGED_USER if os.geteuid() == 0 else ""
        # its own directory outside the (root-only) test tree when it must run as another user
        self.data_root = Path(tempfile.mkdtemp(prefix="stockade-pg-"))
        if self.user:
            shutil.chown(self.data_root, self.user)

    @property
    def uri(self) -> str:
        return f"postgresql:///trillian?host=127.0.0.1&port={self.port}&user=postgres&sslmode=disable"

    def _run(self, argv: list[str], stdin: bytes = b"") -> None:
        result = subprocess.run(argv, input=stdin, capture_output=True, timeout=120, cwd=self.data_root, user=self.user or None)
        if result.returncode != 0:
            raise SigstoreUnavailable(f"{argv[0]} failed ({result.returncode}):\n{result.stdout.decode(errors='replace')}\n{result.stderr.decode(errors='replace')}")

    def start(self, schema: Path) -> _Postgres:
        initdb, postgres = find_postgres_binary("initdb"), find_postgres_binary("postgres")
        data = self.data_root / "data"
        self._run([initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync"])
        # Single-user mode creates the database and loads the schema before the server listens; -j ends statements
        # at ";" plus a blank line, the convention of Trillian's schema file (its functions contain semicolons).
        self._run([postgres, "--single", "-D", str(data), "postgres"], b"CREATE DATABASE trillian;\n")
        self._run([postgres, "--single", "-j", "-D", str(data), "trillian"], schema.read_bytes())
        self.port = free_port()
        self.spawn([postgres, "-D", str(data), "-h", "127.0.0.1", "-p", str(self.port), "-k", str(self.data_root), "-F"], user=self.user, cwd=self.data_root)
        deadline = time.monotonic() + _READY_TIMEOUT_SECONDS
        while not (data / "postmaster.pid").exists() or "ready to accept connections" not in self.log_path.read_text(errors="replace"):
            if self.process is not None and self.process.poll() is not None:
                raise SigstoreUnavailable(f"postgres exited with {self.process.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise SigstoreUnavailable(f"postgres not ready after {_READY_TIMEOUT_SECONDS}s:\n{self.log()}")
            time.sleep(0.2)
        return self

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.data_root, ignore_errors=True)


class Rekor:
    """Rekor v1 (``rekor-server``) on a Trillian log server and signer over `_Postgres`; no search index (it would need
    Redis or MySQL), so the API has every endpoint but ``searchIndex``. `public_key_pem` is the log's key."""

    ENDPOINTS = ("getLogInfo", "getPublicKey", "getLogProof", "createLogEntry", "getLogEntryByIndex", "getLogEntryByUUID", "searchLogQuery")

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.postgres = _Postgres(workdir)
        self.log_server = _Service(workdir, "trillian_log_server")
        self.log_signer = _Service(workdir, "trillian_log_signer")
        self.server = _Service(workdir, "rekor-server")
        self.port = 0
        self.public_key_pem = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def logs(self) -> str:
        return "\n".join(f"--- {service.name}\n{service.log()}" for service in (self.postgres, self.log_server, self.log_signer, self.server))

    def start(self) -> Rekor:
        log_server, log_signer, rekor = (find_sigstore_binary(name) for name in ("trillian_log_server", "trillian_log_signer", "rekor-server"))
        schema = _trillian_schema()
        self.postgres.start(schema)
        storage = ["--storage_system=postgresql", "--quota_system=postgresql", f"--postgresql_uri={self.postgres.uri}"]
        rpc_port = free_port()
        server_http, signer_http = free_port(), free_port()
        self.log_server.spawn([log_server, *storage, f"--rpc_endpoint=127.0.0.1:{rpc_port}", f"--http_endpoint=127.0.0.1:{server_http}"])
        self.log_signer.spawn([
            log_signer, *storage, "--force_master", "--sequencer_interval=50ms", f"--rpc_endpoint=127.0.0.1:{free_port()}",
            f"--http_endpoint=127.0.0.1:{signer_http}",
        ])
        self.log_server.wait_http(f"http://127.0.0.1:{server_http}/healthz")
        self.log_signer.wait_http(f"http://127.0.0.1:{signer_http}/healthz")
        self.port = free_port()
        # With no tree id, rekor-server creates its tree in Trillian; `memory` signs with a key made at start-up.
        self.server.spawn([
            rekor, "serve", "--rekor_server.address=127.0.0.1", f"--port={self.port}", "--rekor_server.signer=memory",
            "--trillian_log_server.address=127.0.0.1", f"--trillian_log_server.port={rpc_port}",
            "--enable_retrieve_api=false", f"--enabled_api_endpoints={','.join(self.ENDPOINTS)}",
            "--rekor_server.hostname=127.0.0.1", "--log_type=dev",
        ])
        self.public_key_pem = self.server.wait_http(self.url + "/api/v1/log/publicKey").decode()
        return self

    def stop(self) -> None:
        for service in (self.server, self.log_signer, self.log_server, self.postgres):
            service.stop()

    def __enter__(self) -> Rekor:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def _trillian_schema() -> Path:
    """Trillian's PostgreSQL schema, copied next to its binaries by .ci/build-sigstore.sh from the same module."""
    schema = Path(find_sigstore_binary("trillian_log_server")).parent / "trillian-postgresql.sql"
    if not schema.is_file():
        raise SigstoreUnavailable(f"Trillian's PostgreSQL schema not found at {schema} (run .ci/build-sigstore.sh trillian_log_server)")
    return schema
