"""Slow, idle, compressed and oversized clients, and metric labels clients cannot multiply.

Timeouts are short (0.5s) so the tests are quick; every wait on the network has a 10s socket timeout, so a
connection the server fails to close makes a test fail instead of hang."""

from __future__ import annotations

import json
import logging
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from webhook_helpers import RunningServer, closed_by_server, pod, review, start_server

from stockade.engine.response import EngineResponse, RuleResponse
from stockade.policy.model import KyvernoPolicy
from stockade.webhook.certs import CertificateManager
from stockade.webhook.httplimits import HttpLimits
from stockade.webhook.metrics import OTHER, WebhookMetrics
from stockade.webhook.server import MAX_BODY_BYTES

SHORT = 0.5
LONG = 60.0


def serve(policy_dir: Path, tmp_path: Path, **limits: float) -> RunningServer:
    settings = {"tls_handshake_timeout": LONG, "header_timeout": LONG, "body_timeout": LONG, "idle_timeout": LONG, **limits}
    certs = CertificateManager(hosts=["localhost", "127.0.0.1"], directory=tmp_path / "certs")
    return start_server(policy_dir, certs, limits=HttpLimits(**settings), metrics_namespaces=("team-a",))


@pytest.fixture()
def make_server(policy_dir: Path, tmp_path: Path) -> Iterator[Callable[..., RunningServer]]:
    started: list[RunningServer] = []

    def make(**limits: float) -> RunningServer:
        started.append(serve(policy_dir, tmp_path, **limits))
        return started[-1]

    yield make
    for running in started:
        running.stop()


def tls_connect(running: RunningServer) -> ssl.SSLSocket:
    context = ssl.create_default_context(cadata=running.server.certs.ca_bundle.decode())
    raw = socket.create_connection(("127.0.0.1", running.server.port), timeout=10)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def response_status(sock: ssl.SSLSocket) -> tuple[int, bytes]:
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), rest


def eventually(condition: Callable[[], bool]) -> bool:
    give_up = time.monotonic() + 10
    while time.monotonic() < give_up:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_idle_client_is_dropped_after_the_tls_handshake_timeout(make_server: Callable[..., RunningServer]) -> None:
    running = make_server(tls_handshake_timeout=SHORT)
    idle = socket.create_connection(("127.0.0.1", running.server.port), timeout=10)  # never sends a ClientHello
    assert eventually(lambda: running.server.guard.open_connections == 1)
    assert closed_by_server(idle)
    assert eventually(lambda: running.server.guard.open_connections == 0)  # its slot is given back
    idle.close()


def test_idle_client_after_the_handshake_is_dropped_after_the_header_timeout(make_server: Callable[..., RunningServer]) -> None:
    running = make_server(header_timeout=SHORT)
    with tls_connect(running) as sock:
        assert closed_by_server(sock)


def test_header_drip_is_dropped_after_the_header_timeout(make_server: Callable[..., RunningServer]) -> None:
    running = make_server(header_timeout=SHORT)
    with tls_connect(running) as sock:
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        assert closed_by_server(sock, drip=b"X")  # one byte of a header every 0.1s, never the end of the headers
        assert time.monotonic() - started < 10


def test_body_drip_is_dropped_after_the_body_timeout(make_server: Callable[..., RunningServer], caplog: pytest.LogCaptureFixture) -> None:
    """Cutting the connection off mid-body is a normal disconnect: nothing logged at ERROR (no traceback)."""
    running = make_server(body_timeout=SHORT)
    with caplog.at_level(logging.DEBUG):
        with tls_connect(running) as sock:
            sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
            assert closed_by_server(sock, drip=b" ")
        assert eventually(lambda: any("connection closed after" in r.getMessage() for r in caplog.records))
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_each_phase_keeps_its_own_deadline_on_a_reused_connection(make_server: Callable[..., RunningServer]) -> None:
    """The phase deadline is one lazily re-armed timer per connection: a body deadline later than the header one
    is waited out (not cut at the header deadline), and a header deadline earlier than the previous request's body
    deadline still holds."""
    body_timeout = 1.5
    running = make_server(header_timeout=0.3, body_timeout=body_timeout)
    with tls_connect(running) as sock:
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
        started = time.monotonic()
        assert closed_by_server(sock, drip=b" ", interval=0.05)  # headers done in time; the body never ends
        assert time.monotonic() - started >= body_timeout - 0.2
    running = make_server(header_timeout=SHORT, body_timeout=LONG)
    with tls_connect(running) as sock:
        body = json.dumps(review(pod(labels={"team": "a"}))).encode()
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
        time.sleep(SHORT + 0.3)  # the body comes after the header deadline: the timer now waits for the body deadline
        sock.sendall(body)
        assert response_status(sock)[0] == 200
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\n")  # the next request's headers drip: the header deadline, not the body one
        assert closed_by_server(sock, drip=b"X")


def test_client_leaving_mid_body_is_a_quiet_disconnect(make_server: Callable[..., RunningServer], caplog: pytest.LogCaptureFixture) -> None:
    running = make_server()
    with caplog.at_level(logging.DEBUG):
        with tls_connect(running) as sock:
            sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
            time.sleep(0.2)
        assert eventually(lambda: any("connection closed after" in r.getMessage() for r in caplog.records))
        assert eventually(lambda: running.server.guard.open_connections == 0)
    client = running.client()
    try:  # and the server goes on answering
        assert client.post_review("/validate", review(pod(labels={"team": "a"})))["response"]["allowed"] is True
    finally:
        client.close()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_prompt_requests_are_answered_under_short_timeouts(make_server: Callable[..., RunningServer]) -> None:
    running = make_server(tls_handshake_timeout=SHORT, header_timeout=SHORT, body_timeout=SHORT)
    client = running.client()
    try:
        for _ in range(3):  # keep-alive: the later requests come after a pause longer than nothing, shorter than idle
            assert client.post_review("/validate", review(pod(labels={"team": "a"})))["response"]["allowed"] is True
            time.sleep(0.2)
    finally:
        client.close()


def test_keep_alive_pause_is_bounded_by_the_idle_timeout(make_server: Callable[..., RunningServer]) -> None:
    running = make_server(idle_timeout=SHORT)
    with tls_connect(running) as sock:
        sock.sendall(b"GET /health/liveness HTTP/1.1\r\nHost: x\r\n\r\n")
        assert response_status(sock)[0] == 200
        assert closed_by_server(sock)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "identity, gzip"])
def test_compressed_body_is_refused_before_it_is_read(make_server: Callable[..., RunningServer], encoding: str) -> None:
    running = make_server()
    with tls_connect(running) as sock:
        # the body is announced but never sent: an answer proves the server did not wait for (or inflate) it
        sock.sendall(
            b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Encoding: {encoding}\r\nContent-Length: 1000000\r\n\r\n".encode()
        )
        status, body = response_status(sock)
    assert status == 415
    assert b"Content-Encoding" in body


def test_oversized_content_length_is_refused_before_the_body_is_read(make_server: Callable[..., RunningServer]) -> None:
    running = make_server()
    with tls_connect(running) as sock:
        sock.sendall(
            b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode()
        )
        status, body = response_status(sock)
    assert status == 413
    assert str(MAX_BODY_BYTES).encode() in body


def test_chunked_body_over_the_limit_is_refused_while_streaming(make_server: Callable[..., RunningServer]) -> None:
    running = make_server()
    chunk = b"x" * 65536
    with tls_connect(running) as sock:
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        sent = 0
        try:
            while sent <= MAX_BODY_BYTES + len(chunk):  # the server may stop reading as soon as the limit is passed
                sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                sent += len(chunk)
        except (ConnectionError, ssl.SSLError):
            pass
        status, _ = response_status(sock)
    assert status == 413


def test_connections_over_the_cap_are_closed_at_once(make_server: Callable[..., RunningServer]) -> None:
    running = make_server(max_connections=2)
    held = [socket.create_connection(("127.0.0.1", running.server.port), timeout=10) for _ in range(2)]
    assert eventually(lambda: running.server.guard.open_connections == 2)
    extra = socket.create_connection(("127.0.0.1", running.server.port), timeout=10)
    assert closed_by_server(extra)
    assert running.server.guard.refused >= 1
    extra.close()
    held.pop().close()
    assert eventually(lambda: running.server.guard.open_connections == 1)
    client = running.client()  # a slot is free again
    try:
        assert client.request("GET", "/health/liveness")[0] == 200
    finally:
        client.close()
        for sock in held:
            sock.close()


def spoofed_review(rng: random.Random) -> dict[str, object]:
    body = review(pod(labels={"team": "a"}))
    request = body["request"]
    assert isinstance(request, dict)
    request["kind"] = {"group": "x.io", "version": "v1", "kind": f"Kind{rng.randrange(10**9)}"}
    request["namespace"] = f"ns-{rng.randrange(10**9)}"
    return body


def series(exposition: str) -> list[str]:
    return [line for line in exposition.splitlines() if line and not line.startswith("#")]


def test_spoofed_kinds_and_namespaces_do_not_grow_metrics_over_http(make_server: Callable[..., RunningServer]) -> None:
    running = make_server()
    client = running.client()
    rng = random.Random(7)
    try:
        client.post_review("/validate", review(pod(labels={"team": "a"})))
        baseline = len(series(client.request("GET", "/metrics")[1].decode()))
        for _ in range(200):
            client.post_review("/validate", spoofed_review(rng))
        text = client.request("GET", "/metrics")[1].decode()
    finally:
        client.close()
    assert 'resource_kind="other"' in text and 'resource_namespace="other"' in text
    assert "Kind" not in text and "ns-" not in text
    assert len(series(text)) <= 2 * baseline  # one more kind and namespace value ("other"), not 200 of each


def rule_responses(policy: KyvernoPolicy, rule_names: list[str]) -> list[EngineResponse]:
    return [EngineResponse(policy, {}, {}, rules=[RuleResponse(name, "Validation", "pass") for name in rule_names])]


def policy(name: str, kinds: list[str]) -> KyvernoPolicy:
    rule = {"name": "r", "match": {"any": [{"resources": {"kinds": kinds}}]}, "validate": {"pattern": {}}}
    return KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": name}, "spec": {"rules": [rule]}})


def test_twenty_thousand_spoofed_reviews_leave_a_small_metrics_page() -> None:
    metrics = WebhookMetrics(report_namespaces=["team-a"])
    pods = policy("pods", ["Pod"])
    metrics.retain([pods, policy("anything", ["*"])])
    rng = random.Random(11)
    for _ in range(20_000):
        kind, namespace = f"Kind{rng.randrange(10**9)}", f"ns-{rng.randrange(10**9)}"
        operation = rng.choice(["CREATE", "UPDATE", "DELETE", "CONNECT", f"OP{rng.randrange(10**6)}"])
        metrics.observe_rules(rule_responses(pods, ["r"]), kind, operation, 0.001)
        metrics.observe_request("/validate", kind, namespace, operation, rng.random() < 0.5, 0.001)
    for namespace in ("team-a", ""):
        metrics.observe_request("/validate", "Pod", namespace, "CREATE", True, 0.001)
    text = metrics.exposition().decode()
    lines = series(text)
    # requests: kinds {Pod, other} x namespaces {team-a, "", other} x 5 operations x 2 outcomes, each a counter and
    # a histogram (buckets + sum + count + created); rules: 1 rule x kinds x operations
    request_sets, rule_sets = 2 * 3 * 5 * 2, 2 * 5
    per_set = 2 + (16 + 2)  # counter total+created, histogram 14 buckets (+Inf) + count + sum + created
    assert len(lines) <= (request_sets + rule_sets) * per_set + 10
    assert len(text) < 200_000
    kinds = {line.split('resource_kind="')[1].split('"')[0] for line in lines if "resource_kind=" in line}
    namespaces = {line.split('resource_namespace="')[1].split('"')[0] for line in lines if "resource_namespace=" in line}
    operations = {line.split('resource_request_operation="')[1].split('"')[0] for line in lines if "resource_request_operation=" in line}
    assert kinds == {"Pod", OTHER} and namespaces == {"team-a", "", OTHER}
    assert operations == {"CREATE", "UPDATE", "DELETE", "CONNECT", OTHER}


def test_series_of_removed_policies_and_kinds_are_dropped_on_reload() -> None:
    metrics = WebhookMetrics()
    pods, services = policy("pods", ["Pod"]), policy("services", ["Service"])
    metrics.retain([pods, services])
    metrics.observe_rules(rule_responses(pods, ["r"]), "Pod", "CREATE", 0.001)
    metrics.observe_rules(rule_responses(services, ["r"]), "Service", "CREATE", 0.001)
    metrics.observe_request("/validate", "Service", "", "CREATE", True, 0.001)
    text = metrics.exposition().decode()
    assert 'policy_name="services"' in text and 'resource_kind="Service"' in text
    metrics.retain([pods])
    text = metrics.exposition().decode()
    assert 'policy_name="services"' not in text and 'resource_kind="Service"' not in text
    assert 'policy_name="pods"' in text


def test_a_scrape_does_not_hold_up_admission(make_server: Callable[..., RunningServer]) -> None:
    running = make_server()
    metrics = running.server.state.metrics
    rendering, release = threading.Event(), threading.Event()
    render = metrics.exposition

    def slow_render() -> bytes:
        rendering.set()
        release.wait(20)  # a scrape that takes as long as the test lets it
        return render()

    metrics.exposition = slow_render  # type: ignore[method-assign]
    scraper, client = running.client(), running.client()
    scrape = threading.Thread(target=lambda: scraper.request("GET", "/metrics"), daemon=True)
    try:
        scrape.start()
        assert rendering.wait(10)
        answer = client.post_review("/validate", review(pod(labels={"team": "a"})))  # answered while the scrape renders
        assert answer["response"]["allowed"] is True
        assert not release.is_set() and scrape.is_alive()
    finally:
        release.set()
        scrape.join(10)
        scraper.close()
        client.close()


def test_limits_reject_nonsense() -> None:
    with pytest.raises(ValueError, match="header_timeout"):
        HttpLimits(header_timeout=0)
    with pytest.raises(ValueError, match="max_connections"):
        HttpLimits(max_connections=0)


def test_refused_body_is_reported_as_json_with_the_reason(make_server: Callable[..., RunningServer]) -> None:
    running = make_server()
    with tls_connect(running) as sock:
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: 10\r\n\r\n")
        status, rest = response_status(sock)
    assert status == 415
    assert json.loads(rest)["error"] == "request body refused"
