"""Fixtures of the Flux image automation tests: the shared control plane with the image CRDs applied, Debian's
docker-registry and a TCP relay that can simulate a registry outage (`api_client` is tests/integration/conftest.py's)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from stockade.testing.apiserver import ControlPlane
from stockade.testing.registry import LocalRegistry

CRDS = Path(__file__).resolve().parents[3] / "deploy" / "flux" / "crds.yaml"


@pytest.fixture(scope="session")
def flux_crds(control_plane: ControlPlane) -> ControlPlane:
    for document in yaml.safe_load_all(CRDS.read_text()):
        status, body, _ = control_plane.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", document)
        assert status in (201, 409), body
    deadline = time.monotonic() + 60
    for plural in ("imagerepositories", "imagepolicies", "imageupdateautomations"):
        version = "v1beta2" if plural == "imageupdateautomations" else "v1"
        while control_plane.request("GET", f"/apis/image.toolkit.fluxcd.io/{version}/{plural}")[0] != 200:
            assert time.monotonic() < deadline, f"CRD {plural} not served"
            time.sleep(0.2)
    while control_plane.request("GET", "/apis/source.toolkit.fluxcd.io/v1/gitrepositories")[0] != 200:
        assert time.monotonic() < deadline, "GitRepository CRD not served"
        time.sleep(0.2)
    return control_plane


@pytest.fixture(scope="session")
def registry() -> Iterator[LocalRegistry]:
    with LocalRegistry("anonymous") as local:
        yield local


class Relay:
    """Forwards 127.0.0.1:<port> to a target; `down()` closes the listener and live connections (an outage),
    `up()` listens on the same port again."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener: socket.socket | None = None
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()
        self.port = 0

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        with self._lock:
            if self._listener is not None:
                try:
                    self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(); close() alone does not
                except OSError:
                    pass
                self._listener.close()
                self._listener = None
            for connection in self._connections:
                try:
                    connection.close()
                except OSError:
                    pass
            self._connections.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._connections += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.close()
                except OSError:
                    pass


@pytest.fixture()
def relay(registry: LocalRegistry) -> Iterator[Relay]:
    forward = Relay(("127.0.0.1", registry.port))
    forward.up()
    try:
        yield forward
    finally:
        forward.down()


class GitServer:
    """Debian's `git daemon` on 127.0.0.1 serving bare repositories under a temporary base path, push enabled."""

    def __init__(self, base: Path) -> None:
        import subprocess

        from stockade.testing.registry import free_port

        self.base = base
        self.port = free_port()
        self._process = subprocess.Popen(
            ["git", "daemon", "--reuseaddr", "--export-all", "--enable=receive-pack", "--listen=127.0.0.1",
             f"--port={self.port}", f"--base-path={base}", str(base)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "git daemon did not start"
                time.sleep(0.1)

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=10)


@pytest.fixture(scope="session")
def git_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitServer]:
    server = GitServer(tmp_path_factory.mktemp("git-repos"))
    try:
        yield server
    finally:
        server.stop()
