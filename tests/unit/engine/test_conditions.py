"""Condition operators as Kyverno evaluates them in preconditions and deny blocks (kyverno.md §2.2)."""

from typing import Any

import pytest

from stockade.engine.conditions import CONDITION_OPERATORS, ConditionError, evaluate_condition


def test_unknown_operator_is_an_error() -> None:
    with pytest.raises(ConditionError) as raised:
        evaluate_condition("a", "Contains", "a")
    assert "failed to create handler for condition operator" in str(raised.value)


@pytest.mark.parametrize("operator", ["equals", "EQUALS", "Equal", "equal", "NotEquals", "anyin", "DurationLessThan"])
def test_operator_names_are_case_insensitive(operator: str) -> None:
    evaluate_condition("a", operator, "a")  # must not raise


def test_every_schema_operator_is_accepted() -> None:
    for operator in CONDITION_OPERATORS:
        evaluate_condition("1", operator, "1")


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("CREATE", "CREATE", True),
        ("CREATE", "UPDATE", False),
        ("nginx:latest", "*:latest", True),  # the value is the wildcard pattern
        ("*:latest", "nginx:latest", False),  # ...not the key
        ("1h", "60m", True),  # durations
        ("1h", 3600, True),  # a number on the other side counts as seconds
        ("1h", "3600", False),  # but a numeric string is not a duration
        ("1Gi", "1024Mi", True),  # quantities
        ("1Gi", "1G", False),
        ("100", "1e2", True),
        ("1", "1*", False),  # a quantity key with a non-quantity string value is simply unequal
        ("", "", True),
        ("abc", 1, False),
        (3, 3, True),
        (3, 3.0, True),
        (3, "3", True),  # numeric strings are parsed for numeric keys
        (3, "3.0", True),
        (3.5, "3.5", True),
        (3, "three", False),
        (3, True, False),
        (True, True, True),
        (True, "true", False),
        ({"a": [1, "x"]}, {"a": [1.0, "x"]}, True),  # deep equality
        ({"a": 1}, {"a": True}, False),
        ([1, 2], [1, 2], True),
        ([1, 2], [2, 1], False),
        ([1], "1", False),
        (None, None, False),  # Kyverno has no handler for a nil key
    ],
)
def test_equals(key: Any, value: Any, expected: bool) -> None:
    assert evaluate_condition(key, "Equals", value) is expected


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("CREATE", "CREATE", False),
        ("CREATE", "DELETE", True),
        ("nginx:latest", "*:latest", False),
        ("2h", "120m", False),
        ("1Gi", "2Gi", True),
        ("1Gi", "", True),
        ("1Gi", "junk", True),
        (3, 3, False),
        (3, 4, True),
        (3, "x", True),
        (True, 1, True),
        ({"a": 1}, {"a": 1}, False),
        ({"a": 1}, "x", True),
        (None, "x", False),  # no handler for a nil key: false in both directions
    ],
)
def test_not_equals(key: Any, value: Any, expected: bool) -> None:
    assert evaluate_condition(key, "NotEquals", value) is expected


@pytest.mark.parametrize(
    ("key", "operator", "value", "expected"),
    [
        (5, "GreaterThan", 3, True),
        (5, "GreaterThan", 5, False),
        (5, "GreaterThanOrEquals", 5, True),
        (5, "LessThan", "10", True),
        ("5", "LessThan", 10, True),
        ("5", "LessThanOrEquals", "5", True),
        ("2Gi", "GreaterThan", "1Gi", True),
        ("500m", "LessThan", "1", True),
        ("1.5", "GreaterThan", 1, True),
        ("2h", "GreaterThan", "90m", True),  # durations are understood by the numeric operators
        ("2h", "GreaterThan", 3600, True),  # ...with numbers as seconds
        (7200, "GreaterThanOrEquals", "2h", True),
        ("1.10.0", "GreaterThan", "1.9.3", True),  # semantic versions as a last resort
        ("1.0.0-alpha", "LessThan", "1.0.0", True),
        ("1.0.0-alpha.1", "LessThan", "1.0.0-alpha.beta", True),
        ("v1.0.0", "GreaterThan", "0.1.0", False),  # strict semver: no "v" prefix
        ("abc", "GreaterThan", "abb", False),
        (True, "GreaterThan", 0, False),
        (5, "GreaterThan", True, False),
        (None, "LessThan", 1, False),
    ],
)
def test_numeric_operators(key: Any, operator: str, value: Any, expected: bool) -> None:
    assert evaluate_condition(key, operator, value) is expected


@pytest.mark.parametrize(
    ("key", "operator", "value", "expected"),
    [
        ("2h", "DurationGreaterThan", "1h", True),
        ("30m", "DurationGreaterThan", "1h", False),
        ("1h", "DurationGreaterThanOrEquals", "60m", True),
        ("1h", "DurationLessThanOrEquals", 3600, True),
        (59, "DurationLessThan", "1m", True),
        (1.9, "DurationLessThan", 2, True),  # numbers are whole seconds (fractions truncated)
        ("0", "DurationLessThan", "1s", True),
        ("bogus", "DurationLessThan", "1s", False),
        ("1s", "DurationLessThan", "bogus", False),
    ],
)
def test_duration_operators(key: Any, operator: str, value: Any, expected: bool) -> None:
    assert evaluate_condition(key, operator, value) is expected


@pytest.mark.parametrize(
    ("key", "operator", "value", "expected"),
    [
        # scalar keys
        ("kube-system", "AnyIn", ["default", "kube-*"], True),
        ("kube-*", "AnyIn", ["kube-system"], True),  # wildcards work in both directions
        ("prod", "AnyIn", ["default", "kube-*"], False),
        ("prod", "AnyNotIn", ["default", "kube-*"], True),
        ("kyverno", "AnyIn", "kyverno", True),
        ("kyverno", "AnyNotIn", "kyverno", False),
        ("b", "AnyIn", '["a", "b"]', True),  # JSON-array strings
        ("c", "AnyIn", '["a", "b"]', False),
        ("c", "AnyIn", '["a", 1]', False),  # JSON, but not a list of strings: invalid, so false
        ("c", "AnyNotIn", '["a", 1]', False),
        ("5", "AnyIn", "1-10", True),  # range strings
        ("50", "AnyIn", "1-10", False),
        ("50", "AnyNotIn", "1-10", True),
        (5, "AnyIn", "1-10", True),
        (64, "AnyIn", "64", True),
        (64, "AnyNotIn", "default", True),
        (1, "AnyIn", [1, 2, 3], True),
        (2.2, "AnyIn", [1.1, 2.2], True),
        (True, "AnyIn", True, False),  # a non-string value for a scalar key is invalid
        ("5", "AnyIn", 5, False),
        # list keys
        (["kube-system", "kube-public"], "AnyIn", "kube-*", True),
        (["kube-system", "default"], "AnyNotIn", "kube-system", True),
        (["default", "kyverno"], "AnyNotIn", "kube-*", True),
        (["a", "b"], "AnyNotIn", ["a", "b", "c"], False),
        ([1, 2, 3], "AnyNotIn", 2, True),
        ([1, 2, 3], "AnyIn", 2, True),
        (["3", "20"], "AnyIn", "1-10", True),
        (["30", "20"], "AnyIn", "1-10", False),
        (["3", "20"], "AnyNotIn", "1-10", True),
        (["3", "4"], "AnyNotIn", "1-10", False),
        (["a"], "AnyIn", "a", True),
        (["a"], "AnyNotIn", "a", False),
        (["a", "b"], "AllIn", ["a", "b", "c"], True),
        (["a", "d"], "AllIn", ["a", "b", "c"], False),
        (["a*"], "AllIn", ["abc"], True),
        (["x", "y"], "AllNotIn", ["a", "b"], True),
        (["x", "a"], "AllNotIn", ["a", "b"], False),
        (["3", "4"], "AllIn", "1-10", True),
        (["3", "40"], "AllIn", "1-10", False),
        (["30", "40"], "AllNotIn", "1-10", True),
        (["3", "40"], "AllNotIn", "1-10", False),
        ([1, 2], "AllIn", 2, False),  # All* has no scalar-number value form
        (["a", "b"], "AllIn", '["a","b"]', True),
        ("a", "AllIn", ["a"], True),
        ("z", "AllNotIn", ["a"], True),
        (None, "AnyIn", ["a"], False),
    ],
)
def test_set_operators(key: Any, operator: str, value: Any, expected: bool) -> None:
    assert evaluate_condition(key, operator, value) is expected


@pytest.mark.parametrize(
    ("key", "operator", "value", "expected"),
    [
        ("a", "In", ["a", "b"], True),
        ("a*", "In", ["abc"], True),
        ("c", "In", ["a", "b"], False),
        ("c", "NotIn", ["a", "b"], True),
        ("a", "In", '["a","b"]', True),
        ("a", "In", "x", False),  # not JSON: invalid for the deprecated operators
        ("a", "NotIn", "x", False),
        (["a", "b"], "In", ["a", "b", "c"], True),
        (["a", "z"], "In", ["a", "b", "c"], False),
        (["a", "z"], "NotIn", ["a", "b", "c"], True),
        (["a"], "NotIn", "a", True),  # Kyverno's single-element shortcut answers true for NotIn too
        (["a"], "In", [1], False),
        (1000000, "In", ["1e+06"], True),  # numbers render as Go float64 does
    ],
)
def test_deprecated_in_operators(key: Any, operator: str, value: Any, expected: bool) -> None:
    assert evaluate_condition(key, operator, value) is expected


def test_deprecated_in_with_non_string_list_key_is_an_error() -> None:
    with pytest.raises(ConditionError):
        evaluate_condition([1], "In", ["1"])
