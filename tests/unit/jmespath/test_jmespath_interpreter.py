"""Grammar coverage, caching, errors and Go-flavoured truthiness/equality of the interpreter."""

from __future__ import annotations

import pytest

from stockade.jmespath import CompiledExpression, JMESPathError, compile_expression, function_names, search
from stockade.jmespath import function_signatures


def test_compile_is_cached_by_text() -> None:
    first = compile_expression("a.b")
    assert isinstance(first, CompiledExpression)
    assert compile_expression("a.b") is first
    assert first.search({"a": {"b": 1}}) == 1


def test_syntax_error_is_jmespath_error() -> None:
    with pytest.raises(JMESPathError, match="SyntaxError"):
        compile_expression("a.[")


def test_unknown_function_is_reported_at_call_time() -> None:
    assert search("'x' || nosuch(@)", {}) == "x"
    with pytest.raises(JMESPathError, match="unknown function: nosuch"):
        search("nosuch(@)", {})


def test_wrong_arity() -> None:
    with pytest.raises(JMESPathError, match="incorrect number of args"):
        search("length('a', 'b')", {})
    with pytest.raises(JMESPathError, match="Invalid arity"):
        search("not_null()", {})


def test_slices_indexes_and_negative_steps() -> None:
    data = {"a": [0, 1, 2, 3, 4]}
    assert search("a[1:3]", data) == [1, 2]
    assert search("a[::-1]", data) == [4, 3, 2, 1, 0]
    assert search("a[-1]", data) == 4
    assert search("a[::2]", data) == [0, 2, 4]
    assert search("a[1:3]", {"a": "text"}) is None


def test_flatten_and_nested_projection() -> None:
    data = {"a": [[1, 2], 3, [4]]}
    assert search("a[]", data) == [1, 2, 3, 4]
    assert search("[a, a][][]", data) == [1, 2, 3, 4, 1, 2, 3, 4]


def test_truthiness_follows_go_jmespath() -> None:
    # Numbers, including zero, are true; empty strings, arrays and objects are false.
    assert search("`0` || 'x'", {}) == 0
    assert search("'' || 'x'", {}) == "x"
    assert search("`[]` || 'x'", {}) == "x"
    assert search("`{}` && 'x'", {}) == {}
    assert search("!`0`", {}) is False


def test_equality_is_deep_and_distinguishes_booleans_from_numbers() -> None:
    assert search("`1` == `1.0`", {}) is True
    assert search("`true` == `1`", {}) is False
    assert search("`{\"a\": [1, 2]}` == `{\"a\": [1, 2.0]}`", {}) is True
    assert search("a == b", {"a": [1], "b": [2]}) is False


def test_ordering_on_non_numbers_is_null() -> None:
    assert search("'a' < 'b'", {}) is None
    assert search("`1` < `2`", {}) is True
    assert search("`2` <= `2`", {}) is True


def test_multi_select_on_null_is_null() -> None:
    assert search("missing_parent.{a: b}", {"missing_parent": None}) is None
    assert search("x.[a]", {"x": None}) is None


def test_literals_and_raw_strings() -> None:
    assert search("`\"a\"`", {}) == "a"
    assert search("'it\\'s'", {}) == "it's"
    assert search("`[1, {\"b\": true}]`", {}) == [1, {"b": True}]


def test_current_node_and_quoted_identifiers() -> None:
    assert search('"with-dash".x', {"with-dash": {"x": 1}}) == 1
    assert search("@", 5) == 5


def test_function_listing_contains_builtins_and_kyverno_functions() -> None:
    names = function_names()
    for name in ("length", "sort_by", "add", "time_now_utc", "x509_decode", "image_normalize", "sha256"):
        assert name in names
    assert names == sorted(names)
    signatures = function_signatures()
    assert any(line.startswith("truncate(string, number) string") for line in signatures)


def test_deeply_chained_fields_fast_path_matches_general_path() -> None:
    data = {"a": {"b": {"c": [{"d": 1}]}}}
    assert search("a.b.c[0].d", data) == 1
    assert search("a.b.c", data) == [{"d": 1}]
