"""A real, minimal Kubernetes control plane for integration tests: etcd + kube-apiserver on 127.0.0.1.

No controller-manager, scheduler or kubelet: objects are stored, never run, which is all an admission webhook
test needs.  Certificates, the service-account signing key, a static admin token and a kubeconfig are generated
into a scratch directory.  Binaries: ``etcd`` from PATH (Debian's etcd-server) and ``kube-apiserver`` from
``$STOCKADE_KUBE_APISERVER`` or ``.cache/bin`` (built by ``.ci/build-apiserver.sh``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from stockade.webhook.certs import generate_ca, issue_serving_cert, write_pair
from stockade.errors import StockadeError

REPO_ROOT = Path(__file__).resolve().parents[2]


class ControlPlaneUnavailable(StockadeError, RuntimeError):
    """A binary is missing; tests skip with this message."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def program_name(process: subprocess.Popen[bytes]) -> str:
    """The program a child process runs, as text (Popen types its args loosely)."""
    args = process.args
    program = args if isinstance(args, (str, bytes, os.PathLike)) else args[0]
    return os.fsdecode(program)


def find_binary(name: str, env_var: str) -> str:
    candidates = [os.environ.get(env_var, ""), str(REPO_ROOT / ".cache" / "bin" / name), shutil.which(name) or ""]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise ControlPlaneUnavailable(f"{name} not found (set {env_var}, run .ci/build-apiserver.sh, or install it)")


@dataclass
class ControlPlane:
    """Start with ``start()``, stop with ``stop()``; ``kubeconfig`` is usable by kubectl and the Python client."""

    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="stockade-kube-")))
    startup_timeout: float = 120.0
    etcd_port: int = 0
    apiserver_port: int = 0
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    admin_user: ClassVar[str] = "admin"  # the user the admin token authenticates as (group system:masters)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "ca.crt"

    def start(self) -> ControlPlane:
        etcd = find_binary("etcd", "STOCKADE_ETCD")
        apiserver = find_binary("kube-apiserver", "STOCKADE_KUBE_APISERVER")
        self.etcd_port = self.etcd_port or free_port()
        self.apiserver_port = self.apiserver_port or free_port()
        self._write_credentials()
        peer_port = free_port()
        self._spawn(
            "etcd",
            [
                etcd,
                "--name=stockade-test",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{self.etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{self.etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=stockade-test=http://127.0.0.1:{peer_port}",
                "--log-level=warn",
            ],
        )
        self._spawn("kube-apiserver", [apiserver, *self.apiserver_args()])
        try:
            self._wait_ready()
        except Exception:
            self.stop()
            raise
        return self

    def apiserver_args(self) -> list[str]:
        """kube-apiserver flags; the e2e control plane (e2ecluster.py) overrides the admission plugins and APIs."""
        return [
            *self.serving_args(),
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--disable-admission-plugins=ServiceAccount",
            "--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
            "--enable-priority-and-fairness=false",
            "--v=1",
        ]

    def serving_args(self) -> list[str]:
        """The flags every control plane here shares: where etcd is, where the API listens, and the files
        ``_write_credentials`` wrote (serving pair, token file, service-account keys)."""
        return [
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={self.workdir / 'apiserver.crt'}",
            f"--tls-private-key-file={self.workdir / 'apiserver.key'}",
            f"--token-auth-file={self.workdir / 'tokens.csv'}",
            f"--service-account-key-file={self.workdir / 'sa.pub'}",
            f"--service-account-signing-key-file={self.workdir / 'sa.key'}",
        ]

    def _write_credentials(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        ca = generate_ca("stockade-test-apiserver-ca")
        serving = issue_serving_cert(ca, ["127.0.0.1", "localhost", "kubernetes.default.svc"])
        self.ca_file.write_bytes(ca.cert_pem)
        # the CA's key, for a controller-manager that signs approved client-certificate CSRs with it
        (self.workdir / "ca.key").write_bytes(ca.key_pem)
        (self.workdir / "ca.key").chmod(0o600)
        write_pair(serving, self.workdir / "apiserver.crt", self.workdir / "apiserver.key")
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (self.workdir / "sa.key").write_bytes(
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        )
        (self.workdir / "sa.pub").write_bytes(
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        (self.workdir / "tokens.csv").write_text(f'{self.token},{self.admin_user},admin-uid,"system:masters"\n')
        self.kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: test\n  cluster:\n    server: {self.url}\n    certificate-authority: {self.ca_file}\n"
            f"users:\n- name: admin\n  user:\n    token: {self.token}\n"
            "contexts:\n- name: test\n  context:\n    cluster: test\n    user: admin\n"
            "current-context: test\n"
        )

    def _spawn(self, name: str, argv: list[str]) -> None:
        # The child holds its own copy of the descriptor, so ours closes as soon as the process has started.
        with open(self.workdir / f"{name}.log", "wb") as log:
            self.processes.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def _wait_ready(self) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        deadline = time.monotonic() + self.startup_timeout
        last_error = ""
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"{program_name(process)} exited with {process.returncode}; see {self.workdir}:\n{self.log_tail()}")
            request = urllib.request.Request(f"{self.url}/readyz", headers={"Authorization": f"Bearer {self.token}"})
            try:
                with urllib.request.urlopen(request, context=context, timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last_error = str(exc)
            time.sleep(0.5)
        raise RuntimeError(f"kube-apiserver not ready after {self.startup_timeout}s ({last_error}):\n{self.log_tail()}")

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, user: str = "") -> tuple[int, dict[str, Any], list[str]]:
        """A raw API call as the admin (or impersonating ``user``): status, decoded body and Warning headers, with
        errors returned rather than raised so tests can assert on denials."""
        import json

        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json", "Accept": "application/json"}
        if user:
            headers["Impersonate-User"] = user
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as response:
                return response.status, json.loads(response.read() or b"{}"), response.headers.get_all("Warning") or []
        except urllib.error.HTTPError as error:
            payload = error.read()
            try:
                parsed = json.loads(payload)
            except ValueError:
                parsed = {"message": payload.decode(errors="replace")}
            return error.code, parsed, error.headers.get_all("Warning") or []

    def ensure_namespace(self, name: str) -> None:
        """Create a namespace unless it exists (stockade keeps its Leases in its own namespace)."""
        status, body, _ = self.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        if status not in (201, 409):
            raise RuntimeError(f"creating namespace {name} failed ({status}): {body}")

    def log_tail(self, lines: int = 30) -> str:
        out = []
        for name in ("etcd", "kube-apiserver"):
            path = self.workdir / f"{name}.log"
            if path.exists():
                out.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(out)

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self.processes.clear()

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
