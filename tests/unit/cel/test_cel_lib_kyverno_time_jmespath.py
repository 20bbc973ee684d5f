"""Kyverno's string-based time functions (``time_add`` ...) and ``jmespath(query, data)``."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.cel import CelEvalError


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("time_add('2024-01-01T00:00:00Z', '1h30m')", "2024-01-01T01:30:00Z"),
        ("time_add('2024-01-01T00:00:00+02:00', '-2h')", "2023-12-31T22:00:00+02:00"),
        ("time_diff('2024-01-01T00:00:00Z', '2024-01-01T01:30:00Z')", "1h30m0s"),
        ("time_diff('2024-01-01T01:00:00Z', '2024-01-01T00:00:00Z')", "-1h0m0s"),
        ("time_before('2024-01-01T00:00:00Z', '2024-01-01T01:30:00Z')", True),
        ("time_after('2024-01-01T00:00:00Z', '2024-01-01T01:30:00Z')", False),
        ("time_parse('2006-01-02', '2024-03-05')", "2024-03-05T00:00:00Z"),
        # a numeric layout means "the value is a Unix epoch in seconds"
        ("time_parse('1136214245', '1700000000')", "2023-11-14T22:13:20Z"),
        ("time_now_utc().endsWith('Z')", True),
        ("time_before(time_now(), time_add(time_now(), '1h'))", True),
    ],
)
def test_time_functions(ev: Any, expression: str, expected: Any) -> None:
    assert ev(expression) == expected


def test_time_errors_name_the_function(ev: Any) -> None:
    with pytest.raises(CelEvalError, match="time_add"):
        ev("time_add('yesterday', '1h')")


def test_jmespath_queries_cel_data(ev: Any) -> None:
    data = {"items": [{"n": 1, "name": "a"}, {"n": 2, "name": "b"}]}
    assert ev("jmespath('items[?n > `1`].name', object)", object=data) == ["b"]
    assert ev("jmespath('length(@)', [1, 2, 3])") == 3
    assert ev("jmespath('a', {'a': 'x'})") == "x"
    with pytest.raises(CelEvalError, match="jmespath evaluation failed"):
        ev("jmespath('items[', object)", object=data)
