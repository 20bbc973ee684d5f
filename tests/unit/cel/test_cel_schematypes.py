"""OpenAPI v3 schemas as CEL checking types (stockade.cel.schematypes), following Kubernetes' schema-to-CEL mapping."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.cel import DEFAULT_LIBRARIES
from stockade.cel.schematypes import SchemaTypes, type_check

COMPONENTS: dict[str, Any] = {
    "io.example.v1.Widget": {
        "type": "object",
        "x-kubernetes-group-version-kind": [{"group": "example.io", "version": "v1", "kind": "Widget"}],
        "properties": {
            "metadata": {"allOf": [{"$ref": "#/components/schemas/io.example.v1.Meta"}]},
            "spec": {
                "type": "object",
                "properties": {
                    "replicas": {"type": "integer"},
                    "ratio": {"type": "number"},
                    "port": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                    "parts": {"type": "array", "items": {"$ref": "#/components/schemas/io.example.v1.Part"}},
                    "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
                    "settings": {"type": "object", "additionalProperties": {"type": "string"}},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "timeout": {"type": "string", "format": "duration"},
                    "dashed-name": {"type": "string"},
                },
            },
        },
    },
    "io.example.v1.Meta": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "creationTimestamp": {"type": "string", "format": "date-time"},
        },
    },
    # recursive, like JSONSchemaProps
    "io.example.v1.Part": {"type": "object", "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/components/schemas/io.example.v1.Part"}}}},
}


def check(expression: str) -> str:
    found = SchemaTypes.checking_type(COMPONENTS, "io.example.v1.Widget")
    assert found is not None
    pool, type_name = found
    return type_check(expression, pool, {"object": type_name}, ("request",), DEFAULT_LIBRARIES)


@pytest.mark.parametrize(
    "expression",
    [
        "object.spec.replicas > 1 && object.spec.ratio < 0.5",
        "object.metadata.name.startsWith('a') && object.metadata.labels['team'] == 'x'",
        "object.metadata.creationTimestamp < timestamp('2030-01-01T00:00:00Z')",
        "object.spec.timeout > duration('1s')",
        "object.spec.port == 80 || object.spec.port == 'http'",
        "object.spec.parts.all(p, p.children.all(c, c.name != ''))",
        "object.spec.matrix[0][0] == 'x'",
        "object.spec.settings.exists(k, object.spec.settings[k] == 'on')",
        "object.spec.free.anything.goes == 1",
        "has(object.spec.replicas) && request.anything == 1",
    ],
)
def test_expressions_that_fit_the_schema_check(expression: str) -> None:
    assert check(expression) == ""


@pytest.mark.parametrize(
    ("expression", "issue"),
    [
        ("object.replicas > 1", "undefined field 'replicas'\n"),
        ("object.spec.parts[0].nmae == 'x'", "undefined field 'nmae'\n"),
        ("object.spec.replicas > 'two'", "found no matching overload for '_>_' applied to '(int, string)'"),
        ("object.metadata.name > 1", "found no matching overload"),
    ],
)
def test_expressions_that_do_not_fit_report_cel_go_issues(expression: str, issue: str) -> None:
    result = check(expression)
    assert result.startswith("ERROR: <input>:1:") and issue in result
    assert "not found in struct" not in result and "INVALID_ARGUMENT" not in result


def test_an_unknown_component_has_no_type() -> None:
    assert SchemaTypes.checking_type(COMPONENTS, "io.example.v1.Missing") is None


def test_schemas_past_the_message_cap_become_dyn(monkeypatch: pytest.MonkeyPatch) -> None:
    """A schema with endless nested objects (a hostile CRD) stops being typed instead of growing without bound."""
    import stockade.cel.schematypes as schematypes

    monkeypatch.setattr(schematypes, "MAX_MESSAGES", 3)
    deep: dict[str, Any] = {"type": "string"}
    for level in range(50):
        deep = {"type": "object", "properties": {f"l{level}": deep}}
    types = SchemaTypes({"Deep": deep})
    type_name = types.type_of_component("Deep")
    assert type_name is not None and len(types.file.message_type[0].nested_type) <= 3
    assert type_check("object.l49.l48.l47.l46.whatever == 1", types.pool(), {"object": type_name}, (), DEFAULT_LIBRARIES) == ""
