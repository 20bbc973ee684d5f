"""Metadata wildcard expansion, ``$(…)`` references and Go value rendering."""

from typing import Any

import pytest

from stockade.engine.pattern import PatternReferenceError, expand_metadata_wildcards, resolve_references
from stockade.gofmt import go_float_e, go_float_g, go_sprint, go_type_name

RESOURCE = {"metadata": {"labels": {"app.kubernetes.io/name": "web", "team": "a"}, "annotations": {"x/y": "1"}}}


def test_expand_label_key_with_wildcard() -> None:
    pattern = {"metadata": {"labels": {"app.kubernetes.io/*": "?*"}}}
    assert expand_metadata_wildcards(pattern, RESOURCE) == {"metadata": {"labels": {"app.kubernetes.io/name": "?*"}}}
    assert pattern == {"metadata": {"labels": {"app.kubernetes.io/*": "?*"}}}  # input untouched


def test_expand_keeps_anchor_around_expanded_key() -> None:
    pattern = {"metadata": {"=(annotations)": {"X(x/*)": "null"}}}
    assert expand_metadata_wildcards(pattern, RESOURCE) == {"metadata": {"=(annotations)": {"X(x/y)": "null"}}}


def test_expand_without_resource_metadata_or_wildcards_returns_same_object() -> None:
    pattern = {"metadata": {"labels": {"team": "a"}}}
    assert expand_metadata_wildcards(pattern, RESOURCE) is pattern
    assert expand_metadata_wildcards({"metadata": {"labels": {"t*": "a"}}}, {"spec": {}}) == {
        "metadata": {"labels": {"t*": "a"}}
    }


def test_expand_drops_non_string_label_values_like_kyverno() -> None:
    pattern = {"metadata": {"labels": {"team": None, "t*": "a"}}}
    assert expand_metadata_wildcards(pattern, RESOURCE) == {"metadata": {"labels": {"team": "a"}}}


def test_relative_reference_with_operator() -> None:
    pattern = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"memory": "$(<=./../../limits/memory)"}, "limits": {"memory": "2Gi"}}}
            ]
        }
    }
    resolved = resolve_references(pattern)
    assert resolved["spec"]["containers"][0]["resources"]["requests"]["memory"] == "<=2Gi"
    assert pattern["spec"]["containers"][0]["resources"]["requests"]["memory"] == "$(<=./../../limits/memory)"


def test_reference_ignores_anchors_in_paths() -> None:
    pattern = {"spec": {"=(limits)": {"memory": "1Gi"}, "requests": {"memory": "$(./../../limits/memory)"}}}
    assert resolve_references(pattern)["spec"]["requests"]["memory"] == "1Gi"


def test_absolute_reference_and_embedded_text() -> None:
    pattern = {"metadata": {"name": "web"}, "spec": {"host": "prefix-$(/metadata/name)"}}
    assert resolve_references(pattern)["spec"]["host"] == "prefix-web"


def test_numeric_reference_with_operator_uses_six_decimals() -> None:
    pattern = {"a": 3, "b": "$(>=./../a)"}
    assert resolve_references(pattern)["b"] == ">=3.000000"


def test_escaped_reference_loses_backslash() -> None:
    assert resolve_references({"a": "\\$(./x)"}) == {"a": "$(./x)"}


def test_document_without_references_is_returned_as_is() -> None:
    pattern = {"a": ["b", {"c": 1}]}
    assert resolve_references(pattern) is pattern


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ({"a": "$(./../missing)"}, "got nil resolved variable $(./../missing) at path /a: <nil>"),
        ({"a": 3, "b": "$(./../a)"}, "NotResolvedReferenceErr,reference $(./../a) not resolved at path /b"),
        (
            {"a": True, "b": "$(>./../a)"},
            "failed to resolve $(>./../a) at path /b: incorrect expression: operator > does not match with value true",
        ),
    ],
)
def test_reference_errors(pattern: Any, message: str) -> None:
    with pytest.raises(PatternReferenceError) as raised:
        resolve_references(pattern)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("value", "g", "e"),
    [
        (1.0, "1", "1E+00"),
        (1.5, "1.5", "1.5E+00"),
        (123456.0, "123456", "1.23456E+05"),
        (1e6, "1e+06", "1E+06"),
        (0.0001, "0.0001", "1E-04"),
        (0.00001, "1e-05", "1E-05"),
        (-2.5, "-2.5", "-2.5E+00"),
    ],
)
def test_go_float_rendering(value: float, g: str, e: str) -> None:
    assert go_float_g(value) == g
    assert go_float_e(value) == e


def test_go_sprint_and_type_names() -> None:
    assert go_sprint({"b": [1, 2.5, None], "a": True}) == "map[a:true b:[1 2.5 <nil>]]"
    assert go_sprint(1000000) == "1000000"
    assert go_sprint(1000000, numbers_are_floats=True) == "1e+06"
    assert go_type_name(1) == "int64"
    assert go_type_name(1, numbers_are_floats=True) == "float64"
    assert go_type_name([]) == "[]interface {}"
    assert go_type_name(None) == "<nil>"
