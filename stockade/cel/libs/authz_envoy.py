"""Kyverno-authz's Envoy external-authorization library for ValidatingPolicies in Envoy mode.

``envoy.Allowed()`` / ``envoy.Denied(code)`` build Envoy's OkHttpResponse / DeniedHttpResponse, the ``With*``
members shape them (headers to add or remove, query parameters, body), and ``.Response()`` wraps them into a
CheckResponse (gRPC status OK or PERMISSION_DENIED).  Field names follow the Envoy protobuf messages, so a policy
reading a response sees what it would in Kyverno.  Values are maps with the type marker of
:mod:`stockade.cel.functions`; every function returns a new map (no aliasing between CEL values).
"""

from __future__ import annotations

import copy
from typing import Any

from stockade.cel.functions import TYPE_KEY, Library, describe, tag_of

CHECK_RESPONSE_TYPE = "envoy.service.auth.v3.CheckResponse"
OK_TYPE = "envoy.service.auth.v3.OkHttpResponse"
DENIED_TYPE = "envoy.service.auth.v3.DeniedHttpResponse"
HEADER_TYPE = "envoy.config.core.v3.HeaderValueOption"
QUERY_PARAM_TYPE = "envoy.config.core.v3.QueryParameter"

GRPC_OK = 0
GRPC_PERMISSION_DENIED = 7


def _expect(value: Any, type_name: str, function: str) -> dict[str, Any]:
    if tag_of(value) != type_name:
        raise TypeError(f"no such overload: {function} on {describe(value)}")
    return copy.deepcopy(value)


def _allowed() -> dict[str, Any]:
    return {
        TYPE_KEY: OK_TYPE,
        "headers": [],
        "headers_to_remove": [],
        "response_headers_to_add": [],
        "query_parameters_to_set": [],
        "query_parameters_to_remove": [],
    }


def _denied(code: int) -> dict[str, Any]:
    return {TYPE_KEY: DENIED_TYPE, "status": {"code": int(code)}, "headers": [], "body": ""}


def _header(key: str, value: str) -> dict[str, Any]:
    return {TYPE_KEY: HEADER_TYPE, "header": {"key": key, "value": value}, "keep_empty_value": False}


def _query_param(key: str, value: str) -> dict[str, Any]:
    return {TYPE_KEY: QUERY_PARAM_TYPE, "key": key, "value": value}


def _with_body(denied: Any, body: str) -> dict[str, Any]:
    out = _expect(denied, DENIED_TYPE, "WithBody")
    out["body"] = body
    return out


def _with_header(response: Any, *args: Any) -> dict[str, Any]:
    """``WithHeader(option)`` or ``WithHeader(key, value)`` on an allow or a deny."""
    tag = tag_of(response)
    if tag not in (OK_TYPE, DENIED_TYPE):
        raise TypeError(f"no such overload: WithHeader on {describe(response)}")
    option = _header(*args) if len(args) == 2 else _expect(args[0], HEADER_TYPE, "WithHeader")
    out: dict[str, Any] = copy.deepcopy(response)
    out["headers"].append(option)
    return out


def _without_header(ok: Any, name: str) -> dict[str, Any]:
    out = _expect(ok, OK_TYPE, "WithoutHeader")
    out["headers_to_remove"].append(name)
    return out


def _with_response_header(ok: Any, *args: Any) -> dict[str, Any]:
    out = _expect(ok, OK_TYPE, "WithResponseHeader")
    out["response_headers_to_add"].append(_header(*args) if len(args) == 2 else _expect(args[0], HEADER_TYPE, "WithResponseHeader"))
    return out


def _with_query_param(ok: Any, *args: Any) -> dict[str, Any]:
    out = _expect(ok, OK_TYPE, "WithQueryParam")
    out["query_parameters_to_set"].append(_query_param(*args) if len(args) == 2 else _expect(args[0], QUERY_PARAM_TYPE, "WithQueryParam"))
    return out


def _without_query_param(ok: Any, name: str) -> dict[str, Any]:
    out = _expect(ok, OK_TYPE, "WithoutQueryParam")
    out["query_parameters_to_remove"].append(name)
    return out


def _keep_empty_value(option: Any, flag: bool = True) -> dict[str, Any]:
    out = _expect(option, HEADER_TYPE, "KeepEmptyValue")
    out["keep_empty_value"] = bool(flag)
    return out


def _response(decision: Any) -> dict[str, Any]:
    tag = tag_of(decision)
    body = {key: value for key, value in decision.items() if key != TYPE_KEY} if isinstance(decision, dict) else {}
    if tag == OK_TYPE:
        return {TYPE_KEY: CHECK_RESPONSE_TYPE, "status": {"code": GRPC_OK, "message": ""}, "ok_response": body}
    if tag == DENIED_TYPE:
        return {TYPE_KEY: CHECK_RESPONSE_TYPE, "status": {"code": GRPC_PERMISSION_DENIED, "message": ""}, "denied_response": body}
    raise TypeError(f"no such overload: Response() on {describe(decision)}")


def _with_message(response: Any, message: str) -> dict[str, Any]:
    out = _expect(response, CHECK_RESPONSE_TYPE, "WithMessage")
    out["status"]["message"] = message
    return out


def _with_metadata(response: Any, metadata: Any) -> dict[str, Any]:
    out = _expect(response, CHECK_RESPONSE_TYPE, "WithMetadata")
    out["dynamic_metadata"] = copy.deepcopy(metadata)
    return out


def build_authz_envoy() -> Library:
    library = Library("kyverno.authz.envoy")
    library.add("envoy.Allowed", (), "dyn", _allowed)
    library.add("envoy.Denied", ("int",), "dyn", _denied)
    library.add("envoy.Header", ("string", "string"), "dyn", _header)
    library.add("envoy.QueryParam", ("string", "string"), "dyn", _query_param)
    library.add("WithBody", ("map", "string"), "dyn", _with_body, member=True)
    library.add("WithHeader", ("map", "map"), "dyn", _with_header, member=True)
    library.add("WithHeader", ("map", "string", "string"), "dyn", _with_header, member=True)
    library.add("WithoutHeader", ("map", "string"), "dyn", _without_header, member=True)
    library.add("WithResponseHeader", ("map", "map"), "dyn", _with_response_header, member=True)
    library.add("WithResponseHeader", ("map", "string", "string"), "dyn", _with_response_header, member=True)
    library.add("WithQueryParam", ("map", "map"), "dyn", _with_query_param, member=True)
    library.add("WithQueryParam", ("map", "string", "string"), "dyn", _with_query_param, member=True)
    library.add("WithoutQueryParam", ("map", "string"), "dyn", _without_query_param, member=True)
    library.add("KeepEmptyValue", ("map",), "dyn", _keep_empty_value, member=True)
    library.add("KeepEmptyValue", ("map", "bool"), "dyn", _keep_empty_value, member=True)
    library.add("Response", ("map",), "dyn", _response, member=True)
    library.add("WithMessage", ("map", "string"), "dyn", _with_message, member=True)
    library.add("WithMetadata", ("map", "map"), "dyn", _with_metadata, member=True)
    return library
