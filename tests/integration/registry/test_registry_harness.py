"""The test harness itself: a missing registry binary must fail loudly, and the token server grants correctly."""

from __future__ import annotations

import base64
import json

import pytest

import stockade.testing.registry as harness
from stockade.testing.registry import LocalRegistry, MissingToolError, TokenServer


def test_missing_registry_binary_fails_with_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness.shutil, "which", lambda name: None)
    with pytest.raises(MissingToolError, match="apt-get install -y docker-registry"):
        LocalRegistry("anonymous")


def test_token_server_grants_users_everything_and_anonymous_pull_only() -> None:
    server = TokenServer(users={"alice": "pw"}, anonymous_pull=True)
    scopes = ["repository:demo/app:pull,push"]
    assert server.grant("alice", scopes) == [{"type": "repository", "name": "demo/app", "actions": ["pull", "push"]}]
    assert server.grant(None, scopes) == [{"type": "repository", "name": "demo/app", "actions": ["pull"]}]
    assert TokenServer(users={}, anonymous_pull=False).grant(None, scopes) == []


def test_token_is_an_es256_jwt_with_x5c_and_registry_claims() -> None:
    server = TokenServer(users={}, service="svc", issuer="iss")
    header_b64, claims_b64, signature_b64 = server.issue("alice", []).split(".")

    def decode(segment: str) -> bytes:
        return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))

    header = json.loads(decode(header_b64))
    claims = json.loads(decode(claims_b64))
    assert header["alg"] == "ES256" and len(header["x5c"]) == 1
    assert (claims["iss"], claims["aud"], claims["sub"], claims["access"]) == ("iss", "svc", "alice", [])
    assert claims["exp"] > claims["iat"] >= claims["nbf"]
    assert len(decode(signature_b64)) == 64  # JWS ES256 is raw r||s, not DER
