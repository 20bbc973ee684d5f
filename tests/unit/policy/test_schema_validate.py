"""The structural check: unknown fields with "did you mean", invalid values, kinds and versions, as the API server
would judge them, on a small kind written for the tests."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.policy.schema.registry import SchemaRegistry
from stockade.policy.schema.types import KindSchema, any_value, array, boolean, int_or_string, integer, map_of, obj, string
from stockade.policy.schema.validate import UnknownKind, check_document, field_path, one_edit_away, prune_unknown, resolve_kind

RESOURCES = obj({"kinds": array(string()), "names": array(string())})
RULE = obj(
    {
        "name": string(max_length=63),
        "match": obj({"resources": RESOURCES}),
        "validate": obj({"pattern": any_value(), "message": string()}),
        "weight": int_or_string(),
        "labels": map_of(string()),
    },
    required=["name"],
)
SPEC = obj(
    {
        "validationFailureAction": string(enum=["Audit", "Enforce", "audit", "enforce"]),
        "background": boolean(),
        "rules": array(RULE),
        "timeout": integer(minimum=1, maximum=30),
    }
)
WIDGET = KindSchema(group="example.io", kind="WidgetPolicy", plural="widgetpolicies", scope="Cluster", versions={"v1": SPEC, "v2": SPEC}, spec_required=True)
REGISTRY = SchemaRegistry([WIDGET])


def document(spec: Any, version: str = "v1", kind: str = "WidgetPolicy") -> dict[str, Any]:
    return {"apiVersion": f"example.io/{version}", "kind": kind, "metadata": {"name": "p"}, "spec": spec}


def messages(spec: Any) -> list[str]:
    return [str(problem) for problem in check_document(document(spec), REGISTRY)]


def test_a_valid_document_has_no_problem() -> None:
    spec = {"validationFailureAction": "Enforce", "rules": [{"name": "r", "match": {"resources": {"kinds": ["Pod"]}}, "validate": {"pattern": {"x": {"y": 1}}}, "weight": 3}]}
    assert messages(spec) == []


def test_unknown_fields_are_named_by_full_path_with_the_near_miss() -> None:
    spec = {"validationFailureActionn": "Enforce", "rules": [{"name": "r", "match": {"resources": {"kind": ["Pod"]}}, "validate": {"patern": {}}}]}
    problems = check_document(document(spec), REGISTRY)
    assert [str(p) for p in problems] == [
        'unknown field "spec.rules[0].match.resources.kind" (did you mean "kinds"?)',
        'unknown field "spec.rules[0].validate.patern" (did you mean "pattern"?)',
        'unknown field "spec.validationFailureActionn" (did you mean "validationFailureAction"?)',
    ]
    assert all(p.unknown for p in problems)


def test_an_unknown_field_far_from_every_known_one_gets_no_suggestion() -> None:
    problems = check_document(document({"rulez_and_more": []}), REGISTRY)
    assert [(p.path, p.suggestion) for p in problems] == [("spec.rulez_and_more", "")]


def test_enum_typos_are_refused_with_the_supported_values() -> None:
    problems = check_document(document({"validationFailureAction": "Enforcee"}), REGISTRY)
    assert len(problems) == 1 and not problems[0].unknown
    assert problems[0].path == "spec.validationFailureAction"
    assert '"Enforcee"' in problems[0].message and '"Audit"' in problems[0].message and problems[0].suggestion == "Enforce"


def test_a_mapping_where_a_list_belongs_is_an_invalid_value_not_a_crash() -> None:
    problems = check_document(document({"rules": {"name": "r"}}), REGISTRY)
    assert [(p.path, p.unknown) for p in problems] == [("spec.rules", False)]
    assert "must be a list, found mapping" in problems[0].message


def test_required_limits_and_int_or_string() -> None:
    spec = {"timeout": 31, "rules": [{"match": {}}, {"name": "x" * 64, "weight": [1]}]}
    found = {p.path: p.message for p in check_document(document(spec), REGISTRY)}
    assert found["spec.rules[0].name"] == "Required value"
    assert "less than or equal to 30" in found["spec.timeout"]
    assert "longer than 63" in found["spec.rules[1].name"]
    assert "spec.rules[1].weight" in found


def test_nulls_are_accepted_as_the_api_server_drops_them() -> None:
    assert messages({"background": None, "rules": [{"name": "r", "match": None, "validate": {"pattern": None}}]}) == []


def test_a_missing_spec_is_required_when_the_kind_requires_it() -> None:
    problems = check_document({"apiVersion": "example.io/v1", "kind": "WidgetPolicy", "metadata": {"name": "p"}}, REGISTRY)
    assert [str(p) for p in problems] == ["spec: Required value"]


def test_map_values_are_checked() -> None:
    problems = check_document(document({"rules": [{"name": "r", "labels": {"a": "b", "c": 1}}]}), REGISTRY)
    assert [p.path for p in problems] == ["spec.rules[0].labels.c"]


def test_misspelt_kinds_and_unserved_versions_of_a_known_group() -> None:
    with pytest.raises(UnknownKind) as caught:
        resolve_kind("example.io/v1", "WidgetPolcy", REGISTRY)
    assert caught.value.suggestion == "WidgetPolicy"
    assert 'did you mean "WidgetPolicy"' in str(caught.value)
    with pytest.raises(UnknownKind) as caught:
        resolve_kind("example.io/v3", "WidgetPolicy", REGISTRY)
    assert "example.io/v1, example.io/v2" in str(caught.value)
    assert resolve_kind("v1", "Pod", REGISTRY) is None
    assert resolve_kind("example.io/v2", "WidgetPolicy", REGISTRY) == (WIDGET, "v2")


def test_prune_drops_what_the_api_server_would() -> None:
    spec = {"validationFailureActionn": "Enforce", "rules": [{"name": "r", "match": {"resources": {"kind": ["Pod"]}}, "validate": {"pattern": {"keep": {"every": "thing"}}}}]}
    pruned = prune_unknown(document(spec), REGISTRY)
    assert pruned["spec"] == {"rules": [{"name": "r", "match": {"resources": {}}, "validate": {"pattern": {"keep": {"every": "thing"}}}}]}
    assert pruned["metadata"] == {"name": "p"}


@pytest.mark.parametrize(
    ("word", "candidates", "expected"),
    [
        ("patern", ["pattern", "anyPattern"], "pattern"),
        ("kind", ["kinds", "names"], "kinds"),
        ("nmae", ["name"], "name"),
        ("Name", ["name"], "name"),
        ("validatons", ["validate"], ""),
        ("name", ["name"], ""),
    ],
)
def test_one_edit_away(word: str, candidates: list[str], expected: str) -> None:
    assert one_edit_away(word, candidates) == expected


def test_field_path_is_kubectl_notation() -> None:
    assert field_path(["spec", "rules", 0, "validate", "foreach", 2]) == "spec.rules[0].validate.foreach[2]"
