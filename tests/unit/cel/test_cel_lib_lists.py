"""Kubernetes lists library and cel-go ext.Lists, from their documented examples."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.cel import CelEvalError

DOCUMENTED = [
    ("[1, 2, 3].isSorted()", True),
    ("['a', 'b', 'b', 'c'].isSorted()", True),
    ("[2.0, 1.0].isSorted()", False),
    ("[1].isSorted()", True),
    ("[].isSorted()", True),
    ("[1, 3].sum()", 4),
    ("[1.0, 3.0].sum()", 4.0),
    ("[1u, 2u].sum()", 3),
    ("[].sum()", 0),
    ("[1, 3].min()", 1),
    ("[1, 3].max()", 3),
    ("[1].min()", 1),
    ("['b', 'a', 'c'].max()", "c"),
    ("[1, 2, 2, 3].indexOf(2)", 1),
    ("['a', 'b', 'b', 'c'].lastIndexOf('b')", 2),
    ("[1.0].indexOf(1.1)", -1),
    ("[].indexOf('string')", -1),
    ("[1, 2, 3].includes(2)", True),
    ("[1, 2, 3].includes(4)", False),
    ("'model-a'.includes('model-a')", True),
    ("'model-a'.includes('model-b')", False),
    # cel-go ext.Lists
    ("[1, 2, 3, 4].slice(1, 3)", [2, 3]),
    ("[1, 2, 3, 4].slice(2, 2)", []),
    ("[1, [2, 3], [4]].flatten()", [1, 2, 3, 4]),
    ("[1, [2, [3, 4]]].flatten()", [1, 2, [3, 4]]),
    ("[1, [2, [3, [4]]]].flatten(2)", [1, 2, 3, [4]]),
    ("[1, 2, 2, 3, 3, 3].distinct()", [1, 2, 3]),
    ("['b', 'b', 'c', 'a', 'c'].distinct()", ["b", "c", "a"]),
    ("[1, 'b', 2, 'b'].distinct()", [1, "b", 2]),
    ("[5, 3, 1, 2].reverse()", [2, 1, 3, 5]),
    ("[4, 3, 2, 1].sort()", [1, 2, 3, 4]),
    ("['b', 'c', 'a'].sort()", ["a", "b", "c"]),
    ("lists.range(4)", [0, 1, 2, 3]),
    ("lists.range(0)", []),
]


@pytest.mark.parametrize(("expression", "expected"), DOCUMENTED)
def test_documented_examples(ev: Any, expression: str, expected: Any) -> None:
    result = ev(expression)
    assert result == expected and type(result) is type(expected)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("[].min()", "min called on empty list"),
        ("[].max()", "max called on empty list"),
        ("[1, 'a'].isSorted()", "single comparable type"),
        ("[1].slice(-1, 1)", "negative indexes"),
        ("[1, 2].slice(2, 1)", "start index must be less than or equal to end index"),
        ("[1].slice(0, 3)", "list is length 1"),
        ("[[1]].flatten(-1)", "non-negative"),
        ("[1, 'a'].sort()", "single comparable type"),
        ("[9223372036854775807, 1].sum()", "overflow"),
    ],
)
def test_documented_errors(ev: Any, expression: str, message: str) -> None:
    with pytest.raises(CelEvalError, match=message):
        ev(expression)


def test_cel_equality_not_python_equality(ev: Any) -> None:
    # Python says True == 1; CEL never equates bools and numbers, but does equate 1 and 1.0.
    assert ev("[true, 1].indexOf(1)") == 1
    assert ev("[true].includes(1)") is False
    assert ev("[1, 1.0, 2].distinct()") == [1, 2]


def test_dynamic_lists_from_objects(ev: Any) -> None:
    pod = {"spec": {"containers": [{"name": "b"}, {"name": "a"}]}}
    assert ev("object.spec.containers.map(c, c.name).sort()", object=pod) == ["a", "b"]
    assert ev("object.spec.containers.map(c, c.name).isSorted()", object=pod) is False


def test_temporal_aggregates_as_in_kubernetes_lists(ev: Any) -> None:
    # Kubernetes' lists library lists timestamps and durations among its comparable types, durations among summable.
    assert ev("[timestamp('2024-01-01T00:00:00Z'), timestamp('2023-01-01T00:00:00Z')].min() == timestamp('2023-01-01T00:00:00Z')") is True
    assert ev("[duration('1s'), duration('1m')].max() == duration('60s')") is True
    assert ev("[duration('1s'), duration('1m')].sum() == duration('61s')") is True
    assert ev("[duration('1s'), duration('1m')].isSorted()") is True
