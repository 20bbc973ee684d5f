"""Registry answers that must never turn into a pass: oversized, endless, slow, truncated, HTML, 5xx, tampered.

A raw-socket server scripts answers the stdlib fake cannot give (no Content-Length, chunked streams without end,
bytes dripped slowly, connections that never answer). Every case is checked twice: the client raises the typed
error naming the image and limit, and `CosignVerifier` turns it into a failure or an error, never a return.
"""

from __future__ import annotations

import hashlib
import json
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from stockade.images.cosign import fetch_layers, signature_tag
from stockade.images.reference import parse_reference
from stockade.images.registry import (
    DigestMismatchError,
    RegistryClient,
    RegistryError,
    RegistryLimitError,
    RegistryLimits,
    RegistryProtocolError,
    bypasses_proxy,
)
from stockade.images.verifier_api import SignatureOptions, VerificationFailure, VerificationUnavailable
from stockade.images.verify import CosignVerifier
from stockade.testing.registry import LocalRegistry

if TYPE_CHECKING:
    from conftest import FakeRegistry

Script = Callable[[socket.socket, str, str], None]  # (connection, method, path) writes the whole answer
DIGEST = "sha256:" + "d" * 64
KEY = (
    ec.generate_private_key(ec.SECP256R1())
    .public_key()
    .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    .decode()
)


@pytest.fixture(autouse=True)
def _guard() -> Iterator[None]:
    """Fail (never hang) if a bounded read is not bounded after all."""

    def expire(_signum: int, _frame: FrameType | None) -> None:
        raise TimeoutError("registry call did not finish within 20 s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class RawServer:
    """Accepts connections on 127.0.0.1 and lets `script` write whatever bytes it likes."""

    script: Script = lambda conn, method, path: None
    paths: list[str] = field(default_factory=list)
    port: int = 0
    _listener: socket.socket | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> RawServer:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.close()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            buffer = b""
            while not self._stop.is_set():
                while b"\r\n\r\n" not in buffer:
                    ready, _, _ = select.select([conn], [], [], 0.2)
                    if self._stop.is_set():
                        return
                    if not ready:
                        continue
                    try:
                        chunk = conn.recv(65536)
                    except OSError:
                        return
                    if not chunk:
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                method, path = head.split(b"\r\n")[0].decode().split(" ")[:2]
                if path == "/v2/":  # the client's plain-HTTP probe
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                    continue
                self.paths.append(path)
                try:
                    self.script(conn, method, path)
                except OSError:
                    return


@pytest.fixture()
def raw_server() -> Iterator[RawServer]:
    server = RawServer().start()
    try:
        yield server
    finally:
        server.stop()


def _client(host: str, **limits: float) -> RegistryClient:
    return RegistryClient(insecure_registries=[host], retries=0, backoff=0, timeout=1.0, limits=RegistryLimits(**limits))  # type: ignore[arg-type]


def _answer(status: str, headers: dict[str, str], body: bytes) -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _verifier_outcome(host: str, **limits: float) -> BaseException:
    """What `verify_signature` does for an image on `host`; it must raise, whatever the registry says."""
    verifier = CosignVerifier(_client(host, **limits))
    with pytest.raises((VerificationFailure, VerificationUnavailable)) as caught:
        verifier.verify_signature(f"{host}/acme/app@{DIGEST}", DIGEST, {"keys": {"publicKeys": KEY}}, SignatureOptions())
    return caught.value


# -- size caps ---------------------------------------------------------------------------------------------------------
def test_announced_oversized_manifest_is_refused_before_reading(raw_server: RawServer) -> None:
    def script(conn: socket.socket, method: str, path: str) -> None:  # claims 10 GiB, then sends nothing
        conn.sendall(_answer("200 OK", {"Content-Type": "application/vnd.oci.image.manifest.v1+json", "Content-Length": str(10 << 30)}, b""))
        time.sleep(3)

    raw_server.script = script
    ref = parse_reference(f"{raw_server.host}/acme/app:1.0")
    started = time.monotonic()
    with pytest.raises(RegistryLimitError) as caught:
        _client(raw_server.host, max_manifest_bytes=4096).get_manifest(ref)
    assert time.monotonic() - started < 2.5  # did not wait for the body
    assert caught.value.limit_name == "max_manifest_bytes" and caught.value.limit == 4096
    assert f"manifest {raw_server.host}/acme/app:1.0" in str(caught.value) and "4096 bytes" in str(caught.value)
    assert caught.value.registry == raw_server.host and caught.value.repository == "acme/app"
    assert isinstance(_verifier_outcome(raw_server.host, max_manifest_bytes=4096), VerificationFailure)


def test_endless_chunked_manifest_is_cut_at_the_cap(raw_server: RawServer) -> None:
    sent = [0]

    def script(conn: socket.socket, method: str, path: str) -> None:  # no Content-Length, chunks forever
        conn.sendall(_answer("200 OK", {"Content-Type": "application/vnd.oci.image.manifest.v1+json", "Transfer-Encoding": "chunked"}, b""))
        chunk = b"[" * 8192
        while sent[0] < 1 << 30:
            conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent[0] += len(chunk)

    raw_server.script = script
    with pytest.raises(RegistryLimitError, match="exceeds the max_manifest_bytes limit of 65536 bytes"):
        _client(raw_server.host, max_manifest_bytes=65536).get_manifest(parse_reference(f"{raw_server.host}/acme/app:1.0"))
    assert isinstance(_verifier_outcome(raw_server.host, max_manifest_bytes=65536), VerificationFailure)


def test_blob_larger_than_its_cap_is_refused_from_the_descriptor_size(fake_registry: FakeRegistry) -> None:
    client = RegistryClient(insecure_registries=[fake_registry.host], retries=0, limits=RegistryLimits(max_blob_bytes=1024))
    with pytest.raises(RegistryLimitError, match="descriptor size 5000 bytes exceeds the max_blob_bytes limit of 1024"):
        client.get_blob(fake_registry.reference("acme/app"), DIGEST, 5000)
    assert fake_registry.requests == []  # nothing was downloaded


def test_blob_streamed_past_its_cap_is_refused(fake_registry: FakeRegistry) -> None:
    fake_registry.handle = lambda method, path, headers: (200, {}, b"x" * 5000)
    client = RegistryClient(insecure_registries=[fake_registry.host], retries=0, limits=RegistryLimits(max_blob_bytes=1024))
    with pytest.raises(RegistryLimitError, match="blob .* announced 5000 bytes, more than the max_blob_bytes limit of 1024"):
        client.get_blob(fake_registry.reference("acme/app"), DIGEST)


def test_blob_whose_size_differs_from_its_descriptor_is_rejected(fake_registry: FakeRegistry) -> None:
    body = b"payload"
    fake_registry.handle = lambda method, path, headers: (200, {}, body)
    client = RegistryClient(insecure_registries=[fake_registry.host], retries=0)
    with pytest.raises(DigestMismatchError, match="7 bytes, its descriptor says 8"):
        client.get_blob(fake_registry.reference("acme/app"), "sha256:" + hashlib.sha256(body).hexdigest(), 8)


def _signature_manifest(layers: int) -> bytes:
    descriptor = {"mediaType": "application/vnd.dev.cosign.simplesigning.v1+json", "size": 10, "digest": DIGEST, "annotations": {"dev.cosignproject.cosign/signature": "AA=="}}
    return json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": descriptor, "layers": [descriptor] * layers}).encode()


def test_signature_manifest_with_too_many_layers_fetches_no_blob(fake_registry: FakeRegistry) -> None:
    manifest = _signature_manifest(10_000)
    fake_registry.handle = lambda method, path, headers: (200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, manifest) if "/manifests/" in path else (500, {}, b"")
    client = RegistryClient(insecure_registries=[fake_registry.host], retries=0)
    image = fake_registry.reference("acme/app")
    with pytest.raises(RegistryLimitError, match="has 10000 layers, more than the max_signature_layers limit of 100"):
        fetch_layers(client, image, DIGEST, "sig")
    assert not any("/blobs/" in request.path for request in fake_registry.requests)
    assert [r.path for r in fake_registry.requests] == [f"/v2/acme/app/manifests/{signature_tag(DIGEST)}"]


# -- time --------------------------------------------------------------------------------------------------------------
def test_a_dripping_registry_hits_the_response_deadline(raw_server: RawServer) -> None:
    def script(conn: socket.socket, method: str, path: str) -> None:  # one byte every 0.2 s: no socket timeout fires
        conn.sendall(_answer("200 OK", {"Content-Length": "1000"}, b""))
        for _ in range(1000):
            conn.sendall(b"{")
            time.sleep(0.2)

    raw_server.script = script
    started = time.monotonic()
    with pytest.raises(RegistryError, match="not read within 1 s"):
        _client(raw_server.host, response_seconds=1.0).get_manifest(parse_reference(f"{raw_server.host}/acme/app:1.0"))
    assert time.monotonic() - started < 5
    assert isinstance(_verifier_outcome(raw_server.host, response_seconds=1.0), VerificationUnavailable)


def test_a_registry_that_never_answers_times_out(raw_server: RawServer) -> None:
    raw_server.script = lambda conn, method, path: time.sleep(5)
    with pytest.raises(RegistryError, match="cannot reach registry"):
        _client(raw_server.host).resolve_digest(parse_reference(f"{raw_server.host}/acme/app:1.0"))
    assert isinstance(_verifier_outcome(raw_server.host), VerificationUnavailable)


# -- garbage -----------------------------------------------------------------------------------------------------------
GARBAGE: dict[str, bytes] = {
    "html page": _answer("200 OK", {"Content-Type": "text/html", "Content-Length": "31"}, b"<html><body>login</body></html>"),
    "truncated json": _answer("200 OK", {"Content-Type": "application/vnd.oci.image.manifest.v1+json", "Content-Length": "15"}, b'{"schemaVersion'),
    "body shorter than announced": _answer("200 OK", {"Content-Type": "application/json", "Content-Length": "500"}, b'{"schemaVersion": 2'),
    "json array": _answer("200 OK", {"Content-Type": "application/json", "Content-Length": "2"}, b"[]"),
    "server error": _answer("500 Internal Server Error", {"Content-Length": "4"}, b"oops"),
    "wrong content type and junk": _answer("200 OK", {"Content-Type": "image/png", "Content-Length": "4"}, b"\x89PNG"),
}


@pytest.mark.parametrize("kind", sorted(GARBAGE))
def test_garbage_answers_are_errors_and_never_a_pass(raw_server: RawServer, kind: str) -> None:
    def script(conn: socket.socket, method: str, path: str) -> None:
        conn.sendall(GARBAGE[kind])
        if kind == "body shorter than announced":
            conn.shutdown(socket.SHUT_WR)

    raw_server.script = script
    with pytest.raises(RegistryError) as caught:
        _client(raw_server.host).get_manifest(parse_reference(f"{raw_server.host}/acme/app:1.0"))
    if kind in ("html page", "truncated json", "json array", "wrong content type and junk"):
        assert isinstance(caught.value, RegistryProtocolError) and f"{raw_server.host}/acme/app:1.0" in str(caught.value)
    _verifier_outcome(raw_server.host)


def test_tampered_signature_blob_never_passes(fake_registry: FakeRegistry) -> None:
    fake_registry.handle = lambda method, path, headers: (200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, _signature_manifest(1))
    assert isinstance(_verifier_outcome(fake_registry.host), VerificationFailure)  # every blob hashes to something else


# -- proxies -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("netloc", "no_proxy", "bypass"),
    [
        ("registry.example.com", "example.com", True),
        ("registry.example.com", ".example.com", True),
        ("example.com:5000", "example.com:5000", True),
        ("example.com:5000", "example.com:443", False),
        ("notexample.com", "example.com", False),
        ("10.1.2.3:5000", "10.0.0.0/8", True),
        ("192.168.1.1", "10.0.0.0/8", False),
        ("anything", "*", True),
        ("anything", "", False),
    ],
)
def test_no_proxy_matching(netloc: str, no_proxy: str, bypass: bool) -> None:
    assert bypasses_proxy(netloc, no_proxy) is bypass


@dataclass
class Proxy:
    """A forwarding (absolute-form GET) and tunnelling (CONNECT) HTTP proxy on 127.0.0.1 that logs what it did."""

    requests: list[str] = field(default_factory=list)
    port: int = 0

    def start(self) -> Proxy:
        listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(listener.getsockname()[1])
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def _accept(self, listener: socket.socket) -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(65536)
            if not chunk:
                return
            head += chunk
        request_line = head.split(b"\r\n")[0].decode()
        self.requests.append(request_line)
        method, target = request_line.split(" ")[:2]
        if method == "CONNECT":
            host, port = target.rsplit(":", 1)
            upstream = socket.create_connection((host, int(port)))
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            self._relay(conn, upstream, b"")
        else:
            netloc = target.split("/")[2]
            host, port = netloc.rsplit(":", 1)
            upstream = socket.create_connection((host, int(port)))
            prefix = f"http://{netloc}".encode()
            upstream.sendall(head.replace(b" " + prefix, b" "))
            self._relay(conn, upstream, prefix)

    def _relay(self, left: socket.socket, right: socket.socket, absolute_prefix: bytes) -> None:
        """Copy both ways; in forwarding mode, log and rewrite each further absolute-form request line."""
        sockets = [left, right]
        try:
            while True:
                ready, _, _ = select.select(sockets, [], [], 5)
                if not ready:
                    return
                for source in ready:
                    data = source.recv(65536)
                    if not data:
                        return
                    if source is left and absolute_prefix:
                        self.requests.extend(line.decode() for line in data.split(b"\r\n") if b" " + absolute_prefix in line)
                        data = data.replace(b" " + absolute_prefix, b" ")
                    (right if source is left else left).sendall(data)
        finally:
            left.close()
            right.close()


def test_plain_http_registry_through_http_proxy_and_no_proxy(fake_registry: FakeRegistry) -> None:
    manifest = _signature_manifest(1)
    fake_registry.handle = lambda method, path, headers: (200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, manifest)
    proxy = Proxy().start()
    ref = fake_registry.reference("acme/app:1.0")
    proxied = RegistryClient(insecure_registries=[fake_registry.host], retries=0, proxies={"http": f"http://127.0.0.1:{proxy.port}"})
    assert proxied.get_manifest(ref)[0] == manifest
    assert f"GET http://{fake_registry.host}/v2/acme/app/manifests/1.0 HTTP/1.1" in proxy.requests
    seen = len(proxy.requests)
    bypassing = RegistryClient(insecure_registries=[fake_registry.host], retries=0, proxies={"http": f"http://127.0.0.1:{proxy.port}", "no": "127.0.0.1"})
    assert bypassing.get_manifest(ref)[0] == manifest
    assert len(proxy.requests) == seen


def test_https_registry_through_a_connect_tunnel(basic_auth_registry: LocalRegistry) -> None:
    proxy = Proxy().start()
    client = RegistryClient(
        credentials=basic_auth_registry.credentials("alice"), ca_file=basic_auth_registry.ca_file, retries=0,
        proxies={"https": f"http://127.0.0.1:{proxy.port}"},
    )
    ref = parse_reference(f"{basic_auth_registry.host}/tests/proxied:v1")
    digest = client.push_image(ref, [b"through the tunnel"])
    assert client.resolve_digest(ref) == digest
    assert proxy.requests and all(line.startswith(f"CONNECT {basic_auth_registry.host} HTTP/") for line in proxy.requests)


def test_unsupported_proxy_url_is_a_clear_error(fake_registry: FakeRegistry) -> None:
    client = RegistryClient(insecure_registries=[fake_registry.host], retries=0, proxies={"http": "socks5://127.0.0.1:1080"})
    with pytest.raises(RegistryError, match=r"only http://host:port proxies are supported"):
        client.get_manifest(fake_registry.reference("acme/app:1.0"))
