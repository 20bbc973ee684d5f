"""go-jmespath fork semantics: where a lookup of an absent map key is an error and where it becomes null."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.jmespath import JMESPathError, UnknownKeyError, search

DATA: dict[str, Any] = {
    "metadata": {"name": "web", "labels": {"app": "web"}, "annotations": None},
    "spec": {
        "containers": [
            {"name": "a", "image": "nginx", "securityContext": {"privileged": True}},
            {"name": "b"},
        ],
        "replicas": 3,
    },
    "list": [1, 2],
    "text": "hello",
}


def _unknown_key(expression: str) -> str:
    with pytest.raises(UnknownKeyError) as caught:
        search(expression, DATA)
    return str(caught.value)


def test_top_level_missing_key_raises_with_kyverno_message() -> None:
    assert _unknown_key("missing") == 'Unknown key "missing" in path'


def test_nested_missing_key_names_the_missing_segment() -> None:
    assert _unknown_key("metadata.labels.team") == 'Unknown key "team" in path'
    assert _unknown_key("metadata.nope.deeper") == 'Unknown key "nope" in path'


def test_unknown_key_error_is_a_jmespath_error() -> None:
    with pytest.raises(JMESPathError):
        search("metadata.nope", DATA)


def test_lookup_on_null_or_non_map_is_null() -> None:
    assert search("metadata.annotations.foo", DATA) is None
    assert search("metadata.name.foo", DATA) is None
    assert search("list.foo", DATA) is None
    assert search("spec.replicas.foo.bar", DATA) is None


def test_index_expression_propagates_missing_key() -> None:
    assert _unknown_key("nope[0]") == 'Unknown key "nope" in path'
    assert _unknown_key("spec.containers[1].image") == 'Unknown key "image" in path'


def test_out_of_range_index_is_null() -> None:
    assert search("spec.containers[5]", DATA) is None
    assert search("spec.containers[5].image", DATA) is None


def test_or_expression_turns_missing_keys_into_null() -> None:
    assert search("metadata.labels.team || 'none'", DATA) == "none"
    assert search("'first' || missing", DATA) == "first"
    assert search("missing || other", DATA) is None
    assert search("metadata.labels.app || 'none'", DATA) == "web"


def test_comparators_turn_missing_keys_into_null() -> None:
    assert search("metadata.labels.team == null", DATA) is True
    assert search("missing != 'x'", DATA) is True
    assert search("missing < `3`", DATA) is None
    assert search("`3` >= missing", DATA) is None


def test_not_expression_turns_missing_into_true() -> None:
    assert search("!(metadata.labels.team)", DATA) is True
    # As in every reference implementation, `!` binds tighter than `.`: this is (!metadata).labels.team.
    assert search("!metadata.labels.team", DATA) is None


def test_and_left_side_is_null_but_right_side_propagates() -> None:
    assert search("missing && metadata.name", DATA) is None
    assert _unknown_key("metadata.name && missing") == 'Unknown key "missing" in path'


def test_function_arguments_turn_missing_into_null() -> None:
    assert search("not_null(metadata.labels.team, 'fallback')", DATA) == "fallback"
    assert search("type(missing)", DATA) == "null"


def test_function_type_check_still_applies_to_null_from_missing_key() -> None:
    with pytest.raises(JMESPathError) as caught:
        search("length(missing)", DATA)
    assert str(caught.value) == 'Invalid type for: <nil>, expected: []jmespath.JpType{"string", "array", "object"}'


def test_projection_skips_elements_with_missing_keys() -> None:
    assert search("spec.containers[*].image", DATA) == ["nginx"]
    assert search("spec.containers[].image", DATA) == ["nginx"]
    assert search("spec.containers[*].securityContext.privileged", DATA) == [True]


def test_projection_over_missing_collection_is_null() -> None:
    assert search("spec.volumes[*].name", DATA) is None
    assert search("spec.volumes[].name", DATA) is None
    assert search("nope.*", DATA) is None


def test_filter_condition_with_missing_key_is_false() -> None:
    assert search("spec.containers[?securityContext.privileged == `true`].name", DATA) == ["a"]
    assert search("spec.containers[?image].name", DATA) == ["a"]
    assert search("spec.containers[?image == 'nginx'].tag", DATA) == []


def test_filter_over_missing_collection_is_null() -> None:
    assert search("spec.volumes[?name == 'x']", DATA) is None


def test_multi_select_entries_become_null() -> None:
    assert search("{n: metadata.name, t: metadata.team}", DATA) == {"n": "web", "t": None}
    assert search("[metadata.name, metadata.team]", DATA) == ["web", None]


def test_pipe_turns_missing_into_null_and_continues() -> None:
    assert search("metadata.team | @", DATA) is None
    assert search("metadata | team", DATA) is None
    assert search("metadata.team | length(@ || '')", DATA) == 0


def test_expression_references_turn_missing_into_null() -> None:
    assert search("map(&image, spec.containers)", DATA) == ["nginx", None]


def test_value_projection_skips_missing() -> None:
    assert search("metadata.*.app", {"metadata": {"a": {"app": 1}, "b": {}}}) == [1]


def test_lookup_of_present_key_with_null_value_is_null_not_error() -> None:
    assert search("metadata.annotations", DATA) is None


def test_flatten_swallows_function_errors_on_its_left() -> None:
    # The fork returns null for any error on the left of a flatten, not only a missing key.
    assert search("to_upper(`1`)[]", DATA) is None


def test_projection_left_side_propagates_other_errors() -> None:
    with pytest.raises(JMESPathError, match="Invalid type"):
        search("to_upper(`1`)[*]", DATA)
