"""Real sigstore services on 127.0.0.1 for keyless tests: Fulcio (built by .ci/build-sigstore.sh) issuing
certificates to identities from the local `OidcIssuer`.

Fulcio runs as a file-backed CA (``--ca=fileca``) over a root → intermediate chain made here, so the trust root is
known before any service starts; tests still read it back from Fulcio's own API (`root_pem`).
A missing binary raises `SigstoreUnavailable` (tests turn it into a failure, never a skip).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from stockade.errors import StockadeError
from stockade.images.keys import encrypt_cosign_private_key
from stockade.testing.apiserver import REPO_ROOT, free_port, program_name
from stockade.testing.oidc import OidcIssuer
from stockade.testing.sigstore import FakeFulcio

__all__ = ["Fulcio", "SigstoreUnavailable", "find_sigstore_binary"]

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

    def spawn(self, argv: list[str]) -> None:
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.workdir)

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

    def __init__(self, workdir: Path, issuer: OidcIssuer, *, ct_log_url: str = "", ct_log_public_key: Path | None = None) -> None:
        super().__init__(workdir, "fulcio")
        self.issuer = issuer
        self.ct_log_url = ct_log_url
        self.ct_log_public_key = ct_log_public_key
        self.ca = FakeFulcio(name="stockade-test-fulcio", code_signing_intermediate=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Fulcio:
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
            f"--ct-log-url={self.ct_log_url}",
        ]
        if self.ct_log_public_key is not None:
            argv.append(f"--ct-log-public-key-path={self.ct_log_public_key}")
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
