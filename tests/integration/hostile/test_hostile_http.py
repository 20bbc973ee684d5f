"""Hostile HTTP clients: slow and idle connections (case 6), a compression bomb (case 7), label-spoofing review floods
against /metrics (case 8)."""

from __future__ import annotations

import json
import random
import socket
import ssl
import string
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from hostile_server import Findings, Probe, ServeProcess, cluster_policy, pod, review, serving

REQUIRE_TEAM = {"p.yaml": cluster_policy("require-team", """
validate:
  message: "label team is required"
  pattern:
    metadata:
      labels:
        team: "?*"
""")}

# The case's server runs with short limits (the defaults, 10 s handshake/headers and 30 s body, suit an apiserver);
# every slow client must be dropped within its limit plus a margin for a loaded machine.
PHASE_LIMIT_SECONDS = 3
SHORT_LIMITS = ("--tls-handshake-timeout", str(PHASE_LIMIT_SECONDS), "--header-timeout", str(PHASE_LIMIT_SECONDS),
                "--body-timeout", str(PHASE_LIMIT_SECONDS), "--idle-timeout", "5")
DISCONNECT_SECONDS = PHASE_LIMIT_SECONDS + 5.0
SLOW_KINDS = ("idle-tcp", "idle-tls", "drip-headers", "drip-body")
CLIENTS_PER_KIND = 20


def slow_client(server: ServeProcess, kind: str, outcome: dict[str, float | str]) -> None:
    """Holds one connection open the hostile way; records how long until the server dropped it (or 'never')."""
    started = time.monotonic()
    pending = b""
    sock: socket.socket | None = None
    try:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        if kind != "idle-tcp":
            raw, sock = sock, None
            try:
                sock = server.ssl_context().wrap_socket(raw, server_hostname="127.0.0.1")
            finally:
                if sock is None:
                    raw.close()
        if kind == "drip-headers":
            pending = b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 4000
        elif kind == "drip-body":
            sock.sendall(b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
            pending = b"{" + b" " * 99_999
        sock.settimeout(0.5)
        while time.monotonic() - started < DISCONNECT_SECONDS:
            if pending:
                sock.sendall(pending[:1])
                pending = pending[1:]
            try:
                data = sock.recv(4096)
            except TimeoutError:
                continue
            if not data:
                outcome[kind] = max(float(outcome.get(kind, 0.0)), time.monotonic() - started)
                return
        outcome[kind] = "never"
    except (OSError, ssl.SSLError):  # reset, broken pipe or a failed handshake: disconnected
        if outcome.get(kind) != "never":
            outcome[kind] = max(float(outcome.get(kind, 0.0)), time.monotonic() - started)
    finally:
        if sock is not None:
            sock.close()


def test_idle_and_dripping_clients_are_disconnected_and_others_unaffected(tmp_path: Path) -> None:
    """Case 6: idle TCP (no handshake), idle after the handshake, headers dripped a byte at a time, a body dripped a
    byte at a time: each is dropped by the server within its limit (+ margin), while other clients keep being answered
    within 1 s; a client cut off mid-body is a normal disconnect, not an error with a traceback in the log."""
    with serving(tmp_path, REQUIRE_TEAM, SHORT_LIMITS) as server:
        findings = Findings()
        outcome: dict[str, float | str] = {}
        clients = [threading.Thread(target=slow_client, args=(server, kind, outcome), daemon=True) for kind in SLOW_KINDS for _ in range(CLIENTS_PER_KIND)]
        with Probe(server, findings):
            for client in clients:
                client.start()
            for client in clients:
                client.join(DISCONNECT_SECONDS + 10)
        for kind in SLOW_KINDS:
            findings.check(isinstance(outcome.get(kind), float), f"{kind} clients were not disconnected within {DISCONNECT_SECONDS:g}s ({outcome.get(kind)})")
        hold = [threading.Thread(target=slow_client, args=(server, "idle-tls", {}), daemon=True) for _ in range(5)]
        for client in hold:
            client.start()
        time.sleep(0.5)
        server.sigterm_during(findings)  # idle connections must not hold up the shutdown either
        log = server.log()
        findings.check("Traceback" not in log and " ERROR " not in log, "slow clients left errors in the server log")
        findings.assert_none(log)


def compression_bomb(encoding: str, inflated: int = 1 << 30) -> bytes:
    """``inflated`` bytes of JSON whitespace, compressed (about 1 MB for 1 GiB)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
    chunk = b" " * (1 << 20)
    parts = [compressor.compress(chunk) for _ in range(inflated // len(chunk))]
    parts.append(compressor.flush())
    return b"".join(parts)


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compressed_body_is_refused_with_415(tmp_path: Path, encoding: str) -> None:
    """Case 7: a body that inflates 1000-fold is refused for its Content-Encoding (415), quickly, memory flat."""
    bomb = compression_bomb(encoding)
    assert len(bomb) < 2 << 20
    with serving(tmp_path, REQUIRE_TEAM) as server:
        findings = Findings()
        baseline = server.rss_bytes()
        with Probe(server, findings) as probe:
            started = time.monotonic()
            try:
                status, body = server.request("POST", "/validate", bomb, headers={"Content-Encoding": encoding}, timeout=10)
                elapsed = time.monotonic() - started
                findings.check(status == 415, f"Content-Encoding {encoding}: HTTP {status}, expected 415: {body[:200]!r}")
                findings.check(elapsed < 2.0, f"Content-Encoding {encoding}: answered after {elapsed:.1f}s")
            except OSError as exc:
                findings.add(f"Content-Encoding {encoding}: {exc!r}")
            time.sleep(0.5)
        growth = probe.peak_rss - baseline
        findings.check(growth < 64 << 20, f"RSS grew by {growth >> 20} MiB while refusing a compressed body")
        server.sigterm_during(findings, lambda: server.request("POST", "/validate", bomb, headers={"Content-Encoding": encoding}, timeout=30))
        findings.assert_none(server.log())


SPOOFED_REVIEWS = 20_000
MAX_SERIES = 5_000  # far below one series per spoofed kind/namespace, far above what fixed label sets need
MAX_METRICS_BYTES = 1 << 20


def spoofed_review(rng: random.Random) -> dict[str, Any]:
    body = review(pod("spoofed", labels={"team": "a"}))
    request = body["request"]
    word = lambda n: "".join(rng.choices(string.ascii_lowercase, k=n))  # noqa: E731
    request["kind"] = {"group": word(8) + ".example", "version": "v1", "kind": word(12).capitalize()}
    request["resource"] = {"group": request["kind"]["group"], "version": "v1", "resource": word(12)}
    request["namespace"] = word(10)
    request["object"]["metadata"]["namespace"] = request["namespace"]
    return body


def series_count(exposition: bytes) -> int:
    return sum(1 for line in exposition.splitlines() if line and not line.startswith(b"#"))


def test_spoofed_kinds_and_namespaces_keep_metrics_bounded(tmp_path: Path) -> None:
    """Case 8: 20k reviews, each with a random kind and namespace; /metrics stays small, and scraping it all the
    while does not delay admission."""
    with serving(tmp_path, REQUIRE_TEAM) as server:
        findings = Findings()
        stop = threading.Event()
        scrapes: list[float] = []

        def scrape() -> None:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    server.metrics(timeout=10)
                    server.get("/metrics", timeout=10)
                except OSError:
                    pass
                scrapes.append(time.monotonic() - started)

        errors: list[str] = []

        def flood(seed: int, count: int) -> None:
            rng = random.Random(seed)
            client = server.client(timeout=10)
            try:
                for _ in range(count):
                    status, body = client.request("POST", "/validate", json.dumps(spoofed_review(rng)).encode())
                    if status != 200:
                        errors.append(f"HTTP {status}: {body[:200]!r}")
            except OSError as exc:
                errors.append(repr(exc))
            finally:
                client.close()

        flooders = [threading.Thread(target=flood, args=(seed, SPOOFED_REVIEWS // 4), daemon=True) for seed in range(4)]
        scraper = threading.Thread(target=scrape, daemon=True)
        with Probe(server, findings):
            scraper.start()
            for thread in flooders:
                thread.start()
            for thread in flooders:
                thread.join(300)
            stop.set()
            scraper.join(30)
        findings.check(not errors, f"flood answers: {errors[:3]}")
        exposition = server.metrics()
        findings.check(series_count(exposition) < MAX_SERIES, f"/metrics has {series_count(exposition)} series after {SPOOFED_REVIEWS} spoofed reviews (bound {MAX_SERIES})")
        findings.check(len(exposition) < MAX_METRICS_BYTES, f"/metrics is {len(exposition) >> 10} KiB after {SPOOFED_REVIEWS} spoofed reviews")
        findings.check(bool(scrapes), "no scrape completed")
        server.sigterm_during(findings, lambda: [server.metrics(timeout=30) for _ in range(5)])
        findings.assert_none(server.log())
