"""Kyverno-authz CEL libraries: HTTP and Envoy authorization responses, and JWT decoding."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest

from stockade.cel import DEFAULT_LIBRARIES, CelEnvironment, CelError
from stockade.cel.functions import TYPE_KEY
from stockade.cel.libs.authz_http import canonical_header_key
from stockade.cel.libs.jwt import JwtError, decode


def _env(*libraries: str) -> CelEnvironment:
    return CelEnvironment(["object", "variables"], DEFAULT_LIBRARIES + libraries)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_token(claims: dict[str, Any], secret: str = "secret", alg: str = "HS256") -> str:
    head = _b64(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    body = _b64(json.dumps(claims).encode())
    digest = {"HS256": hashlib.sha256, "HS512": hashlib.sha512}[alg]
    signature = _b64(hmac.new(secret.encode(), f"{head}.{body}".encode(), digest).digest())
    return f"{head}.{body}.{signature}"


def test_envoy_denied_with_body_becomes_permission_denied_response() -> None:
    out = _env("kyverno.authz.envoy").evaluate('envoy.Denied(403).WithBody("nope").WithHeader("x-reason", "policy").Response()', {})
    assert out[TYPE_KEY] == "envoy.service.auth.v3.CheckResponse"
    assert out["status"]["code"] == 7
    assert out["denied_response"]["status"] == {"code": 403}
    assert out["denied_response"]["body"] == "nope"
    assert out["denied_response"]["headers"][0]["header"] == {"key": "x-reason", "value": "policy"}


def test_envoy_allowed_shapes_headers_and_query_parameters() -> None:
    expression = (
        'envoy.Allowed().WithHeader(envoy.Header("x-a", "").KeepEmptyValue()).WithoutHeader("cookie")'
        '.WithResponseHeader("x-b", "2").WithQueryParam("q", "1").WithoutQueryParam("debug").Response().WithMessage("ok")'
    )
    out = _env("kyverno.authz.envoy").evaluate(expression, {})
    ok = out["ok_response"]
    assert out["status"] == {"code": 0, "message": "ok"}
    assert ok["headers"][0]["keep_empty_value"] is True
    assert ok["headers_to_remove"] == ["cookie"]
    assert ok["response_headers_to_add"][0]["header"] == {"key": "x-b", "value": "2"}
    assert ok["query_parameters_to_set"][0]["key"] == "q"
    assert ok["query_parameters_to_remove"] == ["debug"]


def test_envoy_shaping_functions_reject_the_wrong_receiver() -> None:
    with pytest.raises(CelError):
        _env("kyverno.authz.envoy").evaluate('envoy.Allowed().WithBody("x")', {})


def test_http_allowed_and_denied_responses() -> None:
    env = _env("kyverno.authz.http")
    assert env.evaluate("http.Allowed().Response()", {})["ok"] == {}
    denied = env.evaluate('http.Denied("blocked").Response()', {})
    assert denied["ok"] is None and denied["denied"] == {"reason": "blocked"}


def test_http_header_lookup_is_canonical_and_query_params_exact() -> None:
    attributes = {"header": {"X-User-Id": ["alice"]}, "query": {"page": ["1", "2"]}}
    env = _env("kyverno.authz.http")
    assert env.evaluate('object.attributes.Header("x-user-id")', {"object": {"attributes": attributes}}) == ["alice"]
    assert env.evaluate('object.attributes.Header("missing")', {"object": {"attributes": attributes}}) == []
    assert env.evaluate('object.attributes.QueryParam("page")', {"object": {"attributes": attributes}}) == ["1", "2"]
    assert canonical_header_key("content-TYPE") == "Content-Type"


def test_authz_functions_are_not_in_the_default_environment() -> None:
    with pytest.raises(CelError):
        CelEnvironment(["object"]).compile("envoy.Allowed()")


def test_jwt_decode_valid_token_exposes_claims() -> None:
    token = make_token({"role": "admin", "exp": 4_000_000_000, "count": 2})
    out = _env("kyverno.jwt").evaluate('jwt.Decode(object.t, "secret")', {"object": {"t": token}})
    assert out["Valid"] is True
    assert out["Claims"]["role"] == "admin"
    assert out["Claims"]["exp"] == 4_000_000_000 and isinstance(out["Claims"]["exp"], int)
    assert out["Claims"]["count"] == 2.0 and isinstance(out["Claims"]["count"], float)


def test_jwt_expired_or_not_yet_valid_token_is_invalid_not_an_error() -> None:
    assert decode(make_token({"exp": 100}), "secret", now=lambda: 200)["Valid"] is False
    assert decode(make_token({"nbf": 300}), "secret", now=lambda: 200)["Valid"] is False
    assert decode(make_token({"nbf": 100, "exp": 300}, alg="HS512"), "secret", now=lambda: 200)["Valid"] is True


def test_jwt_wrong_secret_or_malformed_token_fails_evaluation() -> None:
    with pytest.raises(JwtError):
        decode(make_token({"a": 1}), "other")
    with pytest.raises(JwtError):
        decode("not-a-jwt", "secret")
    with pytest.raises(JwtError):
        decode(make_token({"a": 1}).rsplit(".", 1)[0] + ".", "secret")
    with pytest.raises(CelError):
        _env("kyverno.jwt").evaluate('jwt.Decode("a.b.c", "secret")', {})
