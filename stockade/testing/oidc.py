"""A tiny OpenID Connect issuer on 127.0.0.1 for keyless-signing tests.

It serves the two documents a relying party (Fulcio) reads — the discovery document at
``/.well-known/openid-configuration`` and the JWKS it points to — and mints RS256 ID tokens locally with `token`.
There is no login flow: the test asks for a token for an e-mail address and hands it to ``cosign --identity-token``.

    with OidcIssuer() as issuer:
        token = issuer.token("alice@example.test")
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from stockade.testing.localhttp import LocalHttpServer

__all__ = ["OidcIssuer"]

DISCOVERY_PATH = "/.well-known/openid-configuration"
JWKS_PATH = "/keys"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64url_uint(value: int) -> str:
    return _b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))


class OidcIssuer(LocalHttpServer):
    """Discovery + JWKS over plain HTTP on 127.0.0.1 and an RS256 signing key; `url` is the issuer (``iss``)."""

    thread_name = "oidc-issuer"

    def __init__(self, audience: str = "sigstore") -> None:
        self.audience = audience
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.key_id = secrets.token_hex(8)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.url,
            "jwks_uri": self.url + JWKS_PATH,
            "authorization_endpoint": self.url + "/auth",
            "token_endpoint": self.url + "/token",
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "claims_supported": ["iss", "sub", "aud", "exp", "iat", "email", "email_verified"],
        }

    def jwks(self) -> dict[str, Any]:
        numbers = self._key.public_key().public_numbers()
        return {"keys": [{"kty": "RSA", "alg": "RS256", "use": "sig", "kid": self.key_id, "n": _b64url_uint(numbers.n), "e": _b64url_uint(numbers.e)}]}

    def token(self, email: str, *, subject: str | None = None, lifetime_seconds: int = 600, email_verified: bool = True, audience: str | None = None) -> str:
        """A signed ID token for `email` (the subject defaults to the address, as for many e-mail issuers)."""
        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "kid": self.key_id}
        claims = {
            "iss": self.url,
            "sub": subject or email,
            "aud": audience or self.audience,
            "iat": now,
            "nbf": now - 5,
            "exp": now + lifetime_seconds,
            "email": email,
            "email_verified": email_verified,
        }
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = self._key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64url(signature)}"

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                return

            def do_GET(self) -> None:  # noqa: N802 - http.server naming
                documents = {DISCOVERY_PATH: issuer.discovery, JWKS_PATH: issuer.jwks}
                produce = documents.get(self.path.split("?", 1)[0])
                body = json.dumps(produce() if produce else {"error": "not found"}).encode()
                self.send_response(200 if produce else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler
