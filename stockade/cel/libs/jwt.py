"""Kyverno-authz's ``jwt.Decode(token, secret)``: verify an HMAC-signed JWT and expose its claims.

Like Kyverno, the string key is a raw symmetric secret (HS256/HS384/HS512); a bad signature or a malformed token
is an evaluation error, while expiry / not-before / issued-at problems only make ``Valid`` false.  Time claims
are whole Unix seconds, other numbers doubles (claims are a protobuf Struct in Kyverno).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from typing import Any, Callable

from stockade.cel.functions import TYPE_KEY, Library
from stockade.errors import StockadeError

TOKEN_TYPE = "jwt.Token"
_HMAC: dict[str, Any] = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}
_TIME_CLAIMS = ("exp", "nbf", "iat")
MAX_TOKEN_LENGTH = 64 * 1024


class JwtError(StockadeError, ValueError):
    """The token cannot be decoded or its signature does not verify."""


def _b64url(segment: str, what: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    except (binascii.Error, ValueError):
        raise JwtError(f"invalid JWT: {what} is not base64url") from None


def _json_segment(segment: str, what: str) -> dict[str, Any]:
    try:
        decoded = json.loads(_b64url(segment, what))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise JwtError(f"invalid JWT: {what} is not JSON") from None
    if not isinstance(decoded, dict):
        raise JwtError(f"invalid JWT: {what} is not a JSON object")
    return decoded


def _struct_value(value: Any) -> Any:
    """JSON numbers become doubles, as in a protobuf Struct."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, list):
        return [_struct_value(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _struct_value(item) for key, item in value.items()}
    return value


def decode(token: str, secret: str, now: Callable[[], float] = time.time) -> dict[str, Any]:
    """Verify ``token`` with ``secret`` and return the ``jwt.Token`` value (``Claims``, ``Valid``)."""
    if len(token) > MAX_TOKEN_LENGTH:
        raise JwtError("invalid JWT: token too long")
    parts = token.split(".")
    if len(parts) != 3:
        raise JwtError("invalid JWT: expected three dot-separated segments")
    header = _json_segment(parts[0], "header")
    payload = _json_segment(parts[1], "payload")
    digest = _HMAC.get(str(header.get("alg", "")))
    if digest is None:
        raise JwtError(f"could not verify JWT: algorithm {header.get('alg')!r} does not fit a symmetric key")
    expected = hmac.new(secret.encode(), f"{parts[0]}.{parts[1]}".encode(), digest).digest()
    if not hmac.compare_digest(expected, _b64url(parts[2], "signature")):
        raise JwtError("could not verify JWT signature with the given key")
    claims: dict[str, Any] = {}
    for key, value in payload.items():
        if key in _TIME_CLAIMS:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise JwtError(f"invalid JWT: claim {key} is not a number")
            claims[key] = int(value)
        else:
            claims[key] = _struct_value(value)
    current = int(now())
    valid = True
    if "exp" in claims and current >= claims["exp"]:
        valid = False
    if "nbf" in claims and current < claims["nbf"]:
        valid = False
    if "iat" in claims and current < claims["iat"]:
        valid = False
    return {TYPE_KEY: TOKEN_TYPE, "Claims": claims or None, "Valid": valid}


def build_jwt() -> Library:
    library = Library("kyverno.jwt")
    library.add("jwt.Decode", ("string", "string"), "dyn", lambda token, secret: decode(token, secret))
    return library
