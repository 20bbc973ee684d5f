"""Kyverno's --httpBlocklist (stockade.controllers.egress) on real HTTP exchanges with a server on 127.0.0.1: host
names refused before sending, ranges checked against every resolved address, redirects checked hop by hop, the
connection pinned to the checked address."""

from __future__ import annotations

import ipaddress
import json
import urllib.request
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from stockade.celpolicy.providers import ProviderError
from stockade.controllers.clusterdata import ClusterCelHttp, ClusterData
from stockade.controllers.egress import (
    KYVERNO_DEFAULT_BLOCKLIST,
    BlocklistError,
    EgressBlocked,
    EgressPolicy,
    configure,
    open_url,
    split_entries,
)
from stockade.engine.contextloader import ContextLoadError
from stockade.testing.localhttp import LocalHttpServer


class _Server(LocalHttpServer):
    """Answers with the path and Host header it received; ``/redirect?to=URL`` answers 302 to URL."""

    thread_name = "egress-test"

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                seen.append((self.path, str(self.headers.get("Host"))))
                if self.path.startswith("/redirect?to="):
                    self.send_response(302)
                    self.send_header("Location", urllib.parse.unquote(self.path.partition("=")[2]))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                payload = json.dumps({"path": self.path, "host": self.headers.get("Host")}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                return None

        return Handler


@pytest.fixture
def server() -> Any:
    with _Server() as running:
        yield running


def test_entries_parse_as_kyverno_parses_its_flag() -> None:
    """Repeated and comma-separated values, blanks dropped; '/' makes a CIDR (host bits allowed, as Go's
    ParseCIDR), anything else a host name compared case-insensitively without its trailing dot."""
    assert split_entries(["a.example, 10.0.0.0/8", " ", "b.example,,"]) == ("a.example", "10.0.0.0/8", "b.example")
    policy = EgressPolicy.parse(["Metadata.Google.Internal.", "10.1.2.3/8", "fd00::1/64"])
    assert policy.hosts == frozenset({"metadata.google.internal"})
    assert policy.networks == (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("fd00::/64"))
    assert EgressPolicy.parse([""]).empty
    with pytest.raises(BlocklistError, match="invalid CIDR '10.0.0.0/33'"):
        EgressPolicy.parse(["10.0.0.0/33"])


@pytest.mark.parametrize(
    ("address", "blocked"),
    [
        ("169.254.169.254", "169.254.169.254/32"),
        ("::ffff:169.254.169.254", "169.254.169.254/32"),  # IPv4-mapped
        ("::a9fe:a9fe", "169.254.169.254/32"),  # IPv4-compatible
        ("64:ff9b::a9fe:a9fe", "169.254.169.254/32"),  # NAT64
        ("2002:a9fe:a9fe::", "169.254.169.254/32"),  # 6to4
        ("127.0.0.53", "127.0.0.0/8"),
        ("::1", "::1/128"),
        ("fd00:ec2::254", "fd00:ec2::254/128"),
        ("10.96.0.10", None),  # a cluster Service address: Kyverno's default list lets it through
        ("2001:db8::1", None),
    ],
)
def test_the_default_list_covers_every_spelling_of_a_blocked_address(address: str, blocked: str | None) -> None:
    policy = EgressPolicy.parse(KYVERNO_DEFAULT_BLOCKLIST)
    found = policy.blocked_range(ipaddress.ip_address(address))
    assert (str(found) if found else None) == blocked


def test_cel_http_refuses_a_blocked_host_name_before_sending(server: _Server) -> None:
    http = ClusterCelHttp(timeout_seconds=5, egress=EgressPolicy.parse(["LOCALHOST."]))
    url = f"http://localhost:{server.port}/x"
    with pytest.raises(ProviderError) as refused:
        http.get(url, {})
    assert str(refused.value) == f'URL "{url}" is blocked: hostname "localhost" is on the blocklist'
    assert server.seen == []
    # the address itself is not on the list
    assert http.get(f"http://127.0.0.1:{server.port}/y", {})["path"] == "/y"


def test_a_range_refuses_literal_and_resolved_addresses_without_naming_the_resolved_one(server: _Server) -> None:
    http = ClusterCelHttp(timeout_seconds=5, egress=EgressPolicy.parse(["127.0.0.0/8", "::1/128"]))
    with pytest.raises(ProviderError, match=r"connection to 127\.0\.0\.1 blocked: IP 127\.0\.0\.1 falls in blocked range 127\.0\.0\.0/8"):
        http.get(f"http://127.0.0.1:{server.port}/", {})
    with pytest.raises(ProviderError) as refused:
        http.post(f"http://localhost:{server.port}/", {"a": 1}, {})
    message = str(refused.value)
    assert message.startswith("connection to localhost blocked: it resolves into blocked range ")
    assert "127.0.0.1" not in message.partition("range")[0]
    assert server.seen == []


def test_redirect_hops_are_checked_like_the_first_request(server: _Server) -> None:
    """An allowed URL may not redirect to a blocked one: Kyverno re-applies the check on every hop."""
    http = ClusterCelHttp(timeout_seconds=5, egress=EgressPolicy.parse(["localhost"]))
    target = urllib.parse.quote(f"http://localhost:{server.port}/secret", safe="")
    with pytest.raises(ProviderError, match='hostname "localhost" is on the blocklist'):
        http.get(f"http://127.0.0.1:{server.port}/redirect?to={target}", {})
    assert [path for path, _ in server.seen] == [f"/redirect?to={target}"]
    # a redirect to an allowed destination is followed
    allowed = urllib.parse.quote(f"http://127.0.0.1:{server.port}/fine", safe="")
    assert http.get(f"http://127.0.0.1:{server.port}/redirect?to={allowed}", {})["path"] == "/fine"


def test_a_checked_name_is_dialled_at_its_checked_address_with_its_own_host_header(server: _Server) -> None:
    """With ranges on the list the connection goes to an address that was checked, not to a second resolution;
    the request still names the host (Host header), as the server expects."""
    http = ClusterCelHttp(timeout_seconds=5, egress=EgressPolicy.parse(["10.0.0.0/8", "169.254.0.0/16"]))
    answer = http.get(f"http://localhost:{server.port}/pinned", {})
    assert answer == {"path": "/pinned", "host": f"localhost:{server.port}", "statusCode": 200}


def test_an_api_call_service_url_is_refused_under_the_process_policy(server: _Server) -> None:
    """apiCall ``service.url`` follows the policy `stockade serve` configures for the whole process."""
    data = ClusterData(api_client=None)
    configure(EgressPolicy.parse(KYVERNO_DEFAULT_BLOCKLIST))
    try:
        with pytest.raises(ContextLoadError, match=r"failed to call service .*: connection to 127\.0\.0\.1 blocked"):
            data.api_call({"service": {"url": f"http://127.0.0.1:{server.port}/data"}})
        configure(EgressPolicy.parse(["metadata.google.internal"]))
        assert data.api_call({"service": {"url": f"http://127.0.0.1:{server.port}/data"}})["path"] == "/data"
    finally:
        configure(EgressPolicy())
    assert [path for path, _ in server.seen] == ["/data"]


def test_an_unresolvable_name_is_refused_when_ranges_must_be_checked() -> None:
    policy = EgressPolicy.parse(["10.0.0.0/8"])
    with pytest.raises(EgressBlocked, match="failed to resolve no-such-host.invalid"):
        open_url(urllib.request.Request("http://no-such-host.invalid/"), 5, policy=policy)
