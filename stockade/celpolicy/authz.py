"""ValidatingPolicies in the authorization modes (``spec.evaluation.mode: HTTP`` or ``Envoy``), as Kyverno-authz
evaluates them and as ``kyverno test`` reports them for ``httpPayloads`` / ``envoyPayloads``.

``object`` is the authorization request (an HTTP CheckRequest, or Envoy's ``envoy.service.auth.v3.CheckRequest``);
each validation yields a response or ``null``, the first non-null response decides.  An allow reports ``pass``, a
deny ``fail``, no decision (unmatched, or every validation null) ``skip``, an evaluation failure ``error`` (or
``skip`` with ``failurePolicy: Ignore``).  Payload normalisation fills in the defaults a typed request has in
Kyverno (absent strings are ``""``, absent maps ``{}``), so policies can read any field without ``has()``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any, Mapping

from stockade.cel import DEFAULT_LIBRARIES, CelEnvironment, CelError
from stockade.cel.functions import describe, tag_of
from stockade.cel.libs.authz_envoy import CHECK_RESPONSE_TYPE
from stockade.cel.libs.authz_http import RESPONSE_TYPE as HTTP_RESPONSE_TYPE
from stockade.celpolicy.compiler import PolicyCompiler
from stockade.celpolicy.model import CelPolicy
from stockade.celpolicy.scope import Scope
from stockade.engine.response import ERROR, FAIL, PASS, SKIP, EngineResponse, RuleResponse
from stockade.errors import StockadeError

HTTP_MODE = "HTTP"
ENVOY_MODE = "Envoy"
AUTHZ_MODES = (HTTP_MODE, ENVOY_MODE)
VALIDATION = "Validation"

_LIBRARIES = {HTTP_MODE: ("kyverno.authz.http", "kyverno.jwt"), ENVOY_MODE: ("kyverno.authz.envoy", "kyverno.jwt")}
_RESPONSE_TYPES = {HTTP_MODE: HTTP_RESPONSE_TYPE, ENVOY_MODE: CHECK_RESPONSE_TYPE}


class AuthzPayloadError(StockadeError, ValueError):
    """An authorization payload does not have the shape of the request its mode expects; names the field."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}" if field else reason)


def evaluation_mode(document: Mapping[str, Any]) -> str:
    """``spec.evaluation.mode`` (``Kubernetes`` when absent); ``spec.evaluationMode`` is accepted as an alias."""
    spec = document.get("spec") or {}
    mode = (spec.get("evaluation") or {}).get("mode") or spec.get("evaluationMode") or "Kubernetes"
    return str(mode)


# -- payloads ------------------------------------------------------------------------------------------------------

def _camel_to_snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


# Envoy's AttributeContext messages: field -> type (a message name, or a scalar kind).  Only messages a policy
# navigates are listed; Address, HeaderMap and metadata are kept as given (free-form maps).
_ENVOY_MESSAGES: dict[str, dict[str, str]] = {
    "CheckRequest": {"attributes": "AttributeContext"},
    "AttributeContext": {
        "source": "Peer",
        "destination": "Peer",
        "request": "Request",
        "context_extensions": "map",
        "metadata_context": "struct",
        "route_metadata_context": "struct",
        "tls_session": "TLSSession",
    },
    "Peer": {"address": "struct", "service": "string", "labels": "map", "principal": "string", "certificate": "string"},
    "Request": {"time": "string", "http": "HttpRequest"},
    "HttpRequest": {
        "id": "string",
        "method": "string",
        "headers": "map",
        "header_map": "struct",
        "path": "string",
        "host": "string",
        "scheme": "string",
        "query": "string",
        "fragment": "string",
        "size": "int",
        "protocol": "string",
        "body": "string",
        "raw_body": "bytes",
    },
    "TLSSession": {"sni": "string"},
}
_DEFAULTS: dict[str, Any] = {"string": "", "int": 0, "map": {}, "struct": {}, "bytes": b""}


def _envoy_message(data: Any, message: str, where: str) -> dict[str, Any]:
    fields = _ENVOY_MESSAGES[message]
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise AuthzPayloadError(where, f"expected an object ({message}), got {describe(data)}")
    given: dict[str, Any] = {}
    for key, value in data.items():
        name = key if key in fields else _camel_to_snake(str(key))
        if name not in fields:
            raise AuthzPayloadError(f"{where}.{key}" if where else str(key), f"unknown field of {message}")
        given[name] = value
    out: dict[str, Any] = {}
    for name, kind in fields.items():
        value = given.get(name)
        path = f"{where}.{name}" if where else name
        if kind in _ENVOY_MESSAGES:
            out[name] = _envoy_message(value, kind, path)
        elif value is None:
            out[name] = _DEFAULTS[kind] if kind not in ("map", "struct") else {}
        elif kind == "string":
            if not isinstance(value, str):
                raise AuthzPayloadError(path, f"expected a string, got {describe(value)}")
            out[name] = value
        elif kind == "int":
            try:
                out[name] = int(value)  # protojson writes int64 as a string
            except (TypeError, ValueError):
                raise AuthzPayloadError(path, f"expected an integer, got {value!r}") from None
        elif kind == "bytes":
            out[name] = _base64(value, path)
        elif kind == "map":
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise AuthzPayloadError(path, "expected an object of strings")
            out[name] = dict(value)
        else:
            if not isinstance(value, dict):
                raise AuthzPayloadError(path, f"expected an object, got {describe(value)}")
            out[name] = value
    return out


def _base64(value: Any, where: str) -> bytes:
    if not isinstance(value, str):
        raise AuthzPayloadError(where, f"expected base64 text, got {describe(value)}")
    try:
        return base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_" if ("-" in value or "_" in value) else None)
    except (binascii.Error, ValueError):
        raise AuthzPayloadError(where, "invalid base64") from None


def envoy_request(data: Any) -> dict[str, Any]:
    """An Envoy ``CheckRequest`` from its protobuf JSON form (camelCase or proto field names; unknown fields are
    errors, as with protojson), with every message and scalar field present."""
    return _envoy_message(data, "CheckRequest", "")


_HTTP_ATTRIBUTES = ("method", "header", "host", "protocol", "contentLength", "body", "scheme", "path", "query", "fragment")


def _fold(data: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """Go's encoding/json: keys match field names case-insensitively; unknown keys are ignored."""
    canonical = {name.lower(): name for name in names}
    return {canonical[str(key).lower()]: value for key, value in data.items() if str(key).lower() in canonical}


def _string_lists(value: Any, where: str) -> dict[str, list[str]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise AuthzPayloadError(where, f"expected an object of string lists, got {describe(value)}")
    out: dict[str, list[str]] = {}
    for key, items in value.items():
        if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
            raise AuthzPayloadError(f"{where}.{key}", "expected a list of strings")
        out[str(key)] = list(items)
    return out


def http_request(data: Any) -> dict[str, Any]:
    """Kyverno-authz's HTTP ``CheckRequest`` (``attributes`` + ``mcp``) from its JSON form, zero values filled in."""
    if not isinstance(data, dict):
        raise AuthzPayloadError("", f"expected an object, got {describe(data)}")
    top = _fold(data, ("attributes", "mcp"))
    raw = top.get("attributes") or {}
    if not isinstance(raw, dict):
        raise AuthzPayloadError("attributes", f"expected an object, got {describe(raw)}")
    given = _fold(raw, _HTTP_ATTRIBUTES)
    attributes: dict[str, Any] = {}
    for name in ("method", "host", "protocol", "scheme", "path", "fragment"):
        value = given.get(name)
        if value is not None and not isinstance(value, str):
            raise AuthzPayloadError(f"attributes.{name}", f"expected a string, got {describe(value)}")
        attributes[name] = value or ""
    length = given.get("contentLength")
    if length is not None and (isinstance(length, bool) or not isinstance(length, (int, float)) or length != int(length)):
        raise AuthzPayloadError("attributes.contentLength", f"expected an integer, got {length!r}")
    attributes["contentLength"] = int(length or 0)
    attributes["header"] = _string_lists(given.get("header"), "attributes.header")
    attributes["query"] = _string_lists(given.get("query"), "attributes.query")
    body = _base64(given["body"], "attributes.body") if given.get("body") is not None else b""
    attributes["body"] = body
    return {"attributes": attributes, "mcp": {"request": {"Method": _jsonrpc_method(body)}}}


def _jsonrpc_method(body: bytes) -> str:
    """The JSON-RPC ``method`` of an MCP request body ("" for other traffic), for ``object.mcp.request.Method``."""
    try:
        envelope = json.loads(body) if body else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        return ""
    method = envelope.get("method") if isinstance(envelope, dict) else None
    return method if isinstance(method, str) else ""


def request_for_mode(mode: str, data: Any) -> dict[str, Any]:
    return http_request(data) if mode == HTTP_MODE else envoy_request(data)


# -- evaluation ----------------------------------------------------------------------------------------------------

class AuthzEvaluator:
    """Evaluates authorization-mode ValidatingPolicies; one instance per policy set (compiled programs cached)."""

    def __init__(self, providers: Mapping[str, Any] | None = None) -> None:
        self.providers = dict(providers or {})
        self._compilers = {
            mode: PolicyCompiler(CelEnvironment(("object", "variables"), DEFAULT_LIBRARIES + libraries))
            for mode, libraries in _LIBRARIES.items()
        }

    def authorize(self, policy: CelPolicy, request: dict[str, Any]) -> EngineResponse:
        """Evaluate ``policy`` for a normalised request; compile errors raise
        :class:`~stockade.celpolicy.errors.PolicyCompileError`."""
        mode = evaluation_mode(policy.raw)
        if mode not in AUTHZ_MODES:
            raise ValueError(f"policy {policy.name} is not an authorization policy (mode {mode})")
        compiler = self._compilers[mode]
        self._compile_all(compiler, policy)
        status, message = self._decide(compiler, policy, mode, request)
        response = EngineResponse(policy, {}, {})
        response.rules.append(RuleResponse(policy.name, VALIDATION, status, message))
        return response

    @staticmethod
    def _compile_all(compiler: PolicyCompiler, policy: CelPolicy) -> None:
        """Kyverno compiles the whole policy before evaluating: a bad expression fails even if never reached."""
        spec = policy.spec
        for section in ("matchConditions", "variables", "validations"):
            for index, item in enumerate(spec.get(section) or []):
                compiler.compile(policy.key, f"spec.{section}[{index}].expression", str((item or {}).get("expression", "")))

    def _decide(self, compiler: PolicyCompiler, policy: CelPolicy, mode: str, request: dict[str, Any]) -> tuple[str, str]:
        spec = policy.spec
        ignore = str(spec.get("failurePolicy") or "Fail") == "Ignore"
        scope = Scope(compiler, policy.key, {"object": request, "variables": {}}, self.providers)
        errors: list[str] = []
        for index, condition in enumerate(spec.get("matchConditions") or []):
            try:
                result = scope.evaluate(f"spec.matchConditions[{index}].expression", str(condition.get("expression", "")))
            except CelError as error:
                errors.append(str(error))
                continue
            if not isinstance(result, bool):
                errors.append(f"matchConditions[{index}]: expected a bool, got {describe(result)}")
                continue
            if not result:
                return SKIP, "request does not match"
        if errors:
            return (SKIP, "request does not match") if ignore else (ERROR, "; ".join(errors))
        scope.bind_variables(spec.get("variables"))
        expected = _RESPONSE_TYPES[mode]
        for index, validation in enumerate(spec.get("validations") or []):
            try:
                result = scope.evaluate(f"spec.validations[{index}].expression", str(validation.get("expression", "")))
            except CelError as error:
                if ignore:
                    return SKIP, "request does not match"
                return ERROR, str(error)
            if result is None:
                continue
            if tag_of(result) != expected:
                if ignore:
                    return SKIP, "request does not match"
                return ERROR, f"spec.validations[{index}]: rule response output is expected to be of type {expected}, got {describe(result)}"
            return _verdict(mode, result)
        return SKIP, "request does not match"


def _verdict(mode: str, response: dict[str, Any]) -> tuple[str, str]:
    if mode == HTTP_MODE:
        if response.get("ok") is not None:
            return PASS, "request allowed"
        return FAIL, f"request denied, reason: {(response.get('denied') or {}).get('reason', '')}"
    if "ok_response" in response:
        return PASS, "request allowed"
    code = ((response.get("denied_response") or {}).get("status") or {}).get("code", 0)
    return FAIL, f"request denied with status code {code}"


__all__ = [
    "AUTHZ_MODES",
    "ENVOY_MODE",
    "HTTP_MODE",
    "AuthzEvaluator",
    "AuthzPayloadError",
    "envoy_request",
    "evaluation_mode",
    "http_request",
    "request_for_mode",
]
