"""Host pod runner for the e2e control plane: Pods whose container runs a ``python`` image run on this host instead.

KWOK's nodes run no containers and the suite's images cannot be pulled here, yet a few of Kyverno's tests start a
small HTTP server in a ``python:3.9-slim`` Pod behind a Service and have a policy call it.  This runner watches Pods;
for one scheduled to a node whose container image is a python image it runs the container's command and args
(Kubernetes semantics: ``command`` replaces the entrypoint, ``args`` the image's CMD, which is ``python3``) in a
scratch directory, with ``python``, ``python3`` and ``pip`` from a venv that has flask preinstalled (so a script's own
``pip install flask`` is satisfied without a network).  The process is stopped when the Pod is deleted.

Each Pod's process runs in a network namespace of its own, as a Pod has its own network: the ports a script picks
(5000, 8080, ...) never clash with the host's listeners, with another e2e run's Pods on the same machine, or with a
second Pod of the same cluster.  A host-wide port lock would instead make a Pod wait for another run's Pod to go,
and would still collide with unrelated host services on common ports such as 8080.  The namespace is created by a
short-lived thread (the network namespace is per thread on Linux) that brings its loopback up and forks the process
from there, and it is kept open by a descriptor the runner holds, through which the forward proxy
(``serviceproxy.py``, same process) opens sockets to the Pod's ports.  Needs CAP_SYS_ADMIN (root here).

The Pods this host runs are listed in ``STATE_DIR/host-pods.json`` (pod → pid, network namespace, ports, log).

    python -m stockade.testing.hostpods --kubeconfig K --state-dir D --proxy-port P --pod-python DIR

Test tooling.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import fcntl
import json
import logging
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stockade.errors import StockadeError

log = logging.getLogger("stockade.hostpods")

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = struct.Struct("16sh14x")  # struct ifreq: the name, then ifr_flags in the union

# a python image of any registry and tag: python:3.9-slim, docker.io/library/python, public.ecr.aws/.../python@sha256:...
_PYTHON_IMAGE = re.compile(r"(?:^|/)python(?::[\w][\w.-]*)?(?:@sha256:[0-9a-f]+)?$")
# the python image's CMD, which runs when a container gives neither command nor args
PYTHON_IMAGE_CMD = ("python3",)
POD_PYTHON_PACKAGES = ("flask",)
STOP_GRACE_SECONDS = 5.0


class HostPodError(StockadeError, RuntimeError):
    """The host cannot run Pods this way (no network namespaces, or the Pod python venv cannot be made)."""


def is_python_image(image: str) -> bool:
    return bool(_PYTHON_IMAGE.search(image.strip()))


def container_argv(container: Mapping[str, Any]) -> list[str]:
    """What the container runs: ``command`` + ``args``; ``args`` alone (the python image has no entrypoint); else
    the image's CMD."""
    command = [str(part) for part in container.get("command") or []]
    args = [str(part) for part in container.get("args") or []]
    return command + args if command else args or list(PYTHON_IMAGE_CMD)


def python_container(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The first container of the Pod that runs a python image (the one this host can run), if any."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if isinstance(container, dict) and is_python_image(str(container.get("image", ""))):
            return container
    return None


def container_env(container: Mapping[str, Any]) -> dict[str, str]:
    """The container's literal environment variables (``valueFrom`` needs a kubelet and is left out)."""
    return {str(item["name"]): str(item.get("value", "")) for item in container.get("env") or [] if isinstance(item, dict) and "value" in item and item.get("name")}


# -- the venv Pods' python comes from -------------------------------------------------------------------------------
def ensure_pod_python(directory: Path, python: str = sys.executable) -> Path:
    """A venv at ``directory`` with flask installed (from the package index), made once and reused; concurrent
    harnesses wait for each other on a lock file beside it.  Returns its ``bin`` directory."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    complete = directory / ".complete"
    with open(directory.parent / f".{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not complete.is_file():
            shutil.rmtree(directory, ignore_errors=True)
            steps = ([python, "-m", "venv", str(directory)], [str(directory / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", *POD_PYTHON_PACKAGES])
            for step in steps:
                result = subprocess.run(step, capture_output=True, text=True, timeout=600)
                if result.returncode != 0:
                    raise HostPodError(f"making the Pod python venv failed: {' '.join(step[:3])}: {result.stderr.strip()[-1000:]}")
            complete.write_text(" ".join(POD_PYTHON_PACKAGES) + "\n")
    return directory / "bin"


# -- network namespaces ---------------------------------------------------------------------------------------------
def _libc_call(name: str, *args: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}: {os.strerror(errno)}")


def _in_thread(work: Callable[[], Any]) -> Any:
    """Run ``work`` on a fresh thread and return its result: namespace changes made there die with the thread."""
    outcome: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:  # handed to the caller
            failure.append(exc)

    thread = threading.Thread(target=run, name="netns")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


class NetworkNamespace:
    """A new network namespace with its loopback up, held open by a descriptor until ``close()``."""

    def __init__(self) -> None:
        def create() -> int:
            _libc_call("unshare", CLONE_NEWNET)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                flags = _IFREQ.unpack(fcntl.ioctl(sock, _SIOCGIFFLAGS, _IFREQ.pack(b"lo", 0)))[1]
                fcntl.ioctl(sock, _SIOCSIFFLAGS, _IFREQ.pack(b"lo", flags | _IFF_UP))
            return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)

        try:
            self.fd: int = _in_thread(create)
        except OSError as exc:
            raise HostPodError(f"cannot create a network namespace (needs CAP_SYS_ADMIN): {exc}") from exc
        self.inode = os.fstat(self.fd).st_ino

    @contextmanager
    def _entered(self) -> Iterator[None]:
        _libc_call("setns", self.fd, CLONE_NEWNET)
        yield

    def spawn(self, argv: list[str], **popen: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside the namespace (it is forked from a thread that joined it)."""

        def start() -> subprocess.Popen[bytes]:
            with self._entered():
                return subprocess.Popen(argv, **popen)

        process: subprocess.Popen[bytes] = _in_thread(start)
        return process

    def socket(self) -> socket.socket:
        """A TCP socket that lives in the namespace: connecting it to 127.0.0.1 reaches the Pod's listeners."""

        def make() -> socket.socket:
            with self._entered():
                return socket.socket(socket.AF_INET, socket.SOCK_STREAM)

        sock: socket.socket = _in_thread(make)
        return sock

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# -- the runner -----------------------------------------------------------------------------------------------------
@dataclass
class HostPod:
    key: str  # namespace/name
    uid: str
    process: subprocess.Popen[bytes]
    netns: NetworkNamespace
    workdir: Path
    argv: list[str]
    ports: list[int] = field(default_factory=list)  # the container's declared ports

    def alive(self) -> bool:
        return self.process.poll() is None

    def describe(self) -> dict[str, Any]:
        return {
            "uid": self.uid, "pid": self.process.pid, "netns": f"net:[{self.netns.inode}]", "ports": self.ports,
            "workdir": str(self.workdir), "log": str(self.workdir / "container.log"), "command": self.argv,
            "exit_code": self.process.poll(),
        }


def _pod_key(pod: Mapping[str, Any]) -> str:
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


class PodRunner:
    """Starts a host process for each runnable Pod (see the module docstring) and stops it when the Pod goes.
    ``on_pod``/``on_pod_deleted`` are informer handlers; ``running(key)`` is what the forward proxy routes to."""

    def __init__(self, state_dir: Path, python_bin: Path) -> None:
        self.state_dir = state_dir
        self.python_bin = python_bin
        self._pods: dict[str, HostPod] = {}
        self._lock = threading.Lock()

    def on_pod(self, pod: Mapping[str, Any], new: Mapping[str, Any] | None = None) -> None:
        """Add or update (as ``on_update(old, new)`` the new object is the second argument)."""
        pod = new if new is not None else pod
        key, metadata, spec = _pod_key(pod), pod.get("metadata") or {}, pod.get("spec") or {}
        container = python_container(pod)
        with self._lock:
            current = self._pods.get(key)
            if current is not None and (current.uid != metadata.get("uid") or metadata.get("deletionTimestamp")):
                self._stop(key)
                current = None
            if current is not None or container is None or not spec.get("nodeName") or metadata.get("deletionTimestamp"):
                return
            self._start(key, str(metadata.get("uid", "")), container)

    def on_pod_deleted(self, pod: Mapping[str, Any]) -> None:
        with self._lock:
            self._stop(_pod_key(pod))

    def running(self, key: str) -> HostPod | None:
        with self._lock:
            return self._pods.get(key)

    def stop_all(self) -> None:
        with self._lock:
            for key in list(self._pods):
                self._stop(key)

    def _start(self, key: str, uid: str, container: Mapping[str, Any]) -> None:
        workdir = self.state_dir / "host-pods" / f"{key.replace('/', '_')}_{uid[:8]}"
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        argv = container_argv(container)
        env = {
            "PATH": f"{self.python_bin}{os.pathsep}/usr/local/bin:/usr/bin:/bin",
            "HOME": str(workdir), "HOSTNAME": key.partition("/")[2], "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1",
            **container_env(container),
        }
        try:
            netns = NetworkNamespace()
        except HostPodError as exc:
            log.warning("pod %s: not run: %s", key, exc)
            return
        try:
            with open(workdir / "container.log", "wb") as output:
                process = netns.spawn(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            netns.close()
            log.warning("pod %s: cannot run %s: %s", key, argv[:1], exc)
            return
        ports = [int(p["containerPort"]) for p in container.get("ports") or [] if isinstance(p, dict) and isinstance(p.get("containerPort"), int)]
        self._pods[key] = HostPod(key, uid, process, netns, workdir, argv, ports)
        log.info("pod %s: started pid %d in net:[%d] (ports %s): %s", key, process.pid, netns.inode, ports, " ".join(argv)[:200])
        self._write_state()

    def _stop(self, key: str) -> None:
        pod = self._pods.pop(key, None)
        if pod is None:
            return
        if pod.alive():
            with _suppress_lookup():
                os.killpg(pod.process.pid, signal.SIGTERM)
            try:
                pod.process.wait(STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                with _suppress_lookup():
                    os.killpg(pod.process.pid, signal.SIGKILL)
                pod.process.wait()
        with _suppress_lookup():  # the script's own children (sh -c runs python as one)
            os.killpg(pod.process.pid, signal.SIGKILL)
        pod.netns.close()
        log.info("pod %s: stopped (exit %s)", key, pod.process.returncode)
        self._write_state()

    def _write_state(self) -> None:
        state = {key: pod.describe() for key, pod in sorted(self._pods.items())}
        (self.state_dir / "host-pods.json").write_text(json.dumps(state, indent=2))


@contextmanager
def _suppress_lookup() -> Iterator[None]:
    try:
        yield
    except (ProcessLookupError, PermissionError):
        pass


# -- the process ------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    from stockade.kube.connection import load_api_client
    from stockade.kube.informer import Informer, RawListWatch
    from stockade.testing.serviceproxy import MAX_HEADER_BYTES, ClusterRoutes, ForwardProxy

    parser = argparse.ArgumentParser(prog="hostpods", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--proxy-port", type=int, required=True, help="the forward proxy's port on 127.0.0.1")
    parser.add_argument("--pod-python", type=Path, required=True, help="the venv Pods' python comes from (made if missing)")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    runner = PodRunner(options.state_dir, ensure_pod_python(options.pod_python))
    client = load_api_client(options.kubeconfig)
    pods = Informer(RawListWatch.for_resource(client, "v1", "pods"), name="host-pods")
    services = Informer(RawListWatch.for_resource(client, "v1", "services"), name="host-services")
    pods.add_handlers(on_add=runner.on_pod, on_update=runner.on_pod, on_delete=runner.on_pod_deleted)
    routes = ClusterRoutes(services.store, pods.store, runner.running)

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        server = await asyncio.start_server(ForwardProxy(routes).handle, "127.0.0.1", options.proxy_port, limit=MAX_HEADER_BYTES)
        async with server:
            await stop.wait()

    pods.start()
    services.start()
    try:
        asyncio.run(serve())
    finally:
        pods.stop(timeout=2)
        services.stop(timeout=2)
        runner.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
