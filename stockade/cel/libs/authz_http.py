"""Kyverno-authz's HTTP authorization library (``http.Allowed()``, ``http.Denied(reason)``, ``.Response()``,
``object.attributes.Header(name)``, ``object.attributes.QueryParam(name)``) for ValidatingPolicies in HTTP mode.

Responses are maps carrying the type marker (see :mod:`stockade.cel.functions`) so the caller can tell an allow
from a deny and reject outputs of any other type, as Kyverno's type checker does.
"""

from __future__ import annotations

from typing import Any

from stockade.cel.functions import TYPE_KEY, Library, describe, tag_of

RESPONSE_TYPE = "http.CheckResponse"
RESPONSE_OK_TYPE = "http.CheckResponseOk"
RESPONSE_DENIED_TYPE = "http.CheckResponseDenied"


def _allowed() -> dict[str, Any]:
    return {TYPE_KEY: RESPONSE_OK_TYPE}


def _denied(reason: str) -> dict[str, Any]:
    return {TYPE_KEY: RESPONSE_DENIED_TYPE, "reason": reason}


def _response(decision: Any) -> dict[str, Any]:
    tag = tag_of(decision)
    if tag == RESPONSE_OK_TYPE:
        return {TYPE_KEY: RESPONSE_TYPE, "ok": {}, "denied": None}
    if tag == RESPONSE_DENIED_TYPE:
        return {TYPE_KEY: RESPONSE_TYPE, "ok": None, "denied": {"reason": decision.get("reason", "")}}
    raise TypeError(f"no such overload: Response() on {describe(decision)}")


def canonical_header_key(name: str) -> str:
    """Go's textproto canonical form (``x-user-id`` -> ``X-User-Id``); keys with odd characters stay as they are."""
    if not name or any(not (c.isalnum() or c == "-") or ord(c) > 127 for c in name):
        return name
    return "-".join(part[:1].upper() + part[1:].lower() for part in name.split("-"))


def _header(attributes: Any, name: str) -> list[str]:
    headers = attributes.get("header") if isinstance(attributes, dict) else None
    values = (headers or {}).get(canonical_header_key(name))
    return [str(v) for v in values] if isinstance(values, list) else []


def _query_param(attributes: Any, name: str) -> list[str]:
    query = attributes.get("query") if isinstance(attributes, dict) else None
    values = (query or {}).get(name)
    return [str(v) for v in values] if isinstance(values, list) else []


def build_authz_http() -> Library:
    library = Library("kyverno.authz.http")
    library.add("http.Allowed", (), "dyn", _allowed)
    library.add("http.Denied", ("string",), "dyn", _denied)
    library.add("Response", ("map",), "dyn", _response, member=True)
    library.add("Header", ("map", "string"), "list", _header, member=True)
    library.add("QueryParam", ("map", "string"), "list", _query_param, member=True)
    return library
