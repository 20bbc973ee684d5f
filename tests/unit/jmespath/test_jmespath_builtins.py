"""Standard JMESPath functions with go-jmespath's results and type errors."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.jmespath import JMESPathError, search

PEOPLE: dict[str, Any] = {
    "people": [{"name": "b", "age": 30}, {"name": "a", "age": 20}, {"name": "c", "age": 40}],
    "labels": {"x": "1", "y": "2"},
}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("abs(`-3`)", 3),
        ("avg(`[1, 2, 3]`)", 2),
        ("avg(`[1, 2]`)", 1.5),
        ("ceil(`1.2`)", 2),
        ("floor(`1.8`)", 1),
        ("contains(`[1, 2]`, `2`)", True),
        ("contains('foobar', 'oba')", True),
        ("contains('foobar', `1`)", False),
        ("starts_with('foobar', 'foo')", True),
        ("ends_with('foobar', 'bar')", True),
        ("join(', ', `[\"a\", \"b\"]`)", "a, b"),
        ("length('héllo')", 5),
        ("length(labels)", 2),
        ("max(`[1, 5, 3]`)", 5),
        ("min(`[\"b\", \"a\"]`)", "a"),
        ("max(`[]`)", None),
        ("merge(`{\"a\": 1}`, `{\"a\": 2, \"b\": 3}`)", {"a": 2, "b": 3}),
        ("not_null(`null`, 'x')", "x"),
        ("reverse('abc')", "cba"),
        ("reverse(`[1, 2]`)", [2, 1]),
        ("sort(`[3, 1, 2]`)", [1, 2, 3]),
        ("to_array('a')", ["a"]),
        ("to_array(`[1]`)", [1]),
        ("to_number('12')", 12),
        ("to_number('1.5')", 1.5),
        ("to_number('abc')", None),
        ("to_number(' 12')", None),
        ("to_string(`{\"b\": 1, \"a\": \"<x>\"}`)", '{"a":"\\u003cx\\u003e","b":1}'),
        ("to_string('s')", "s"),
        ("to_string(`1.5`)", "1.5"),
        ("type(`true`)", "boolean"),
        ("type(`1`)", "number"),
        ("type(labels)", "object"),
        ("keys(labels)", ["x", "y"]),
        ("values(labels)", ["1", "2"]),
        ("map(&name, people)", ["b", "a", "c"]),
        ("sort_by(people, &age)[].name", ["a", "b", "c"]),
        ("sort_by(people, &name)[].age", [20, 30, 40]),
        ("max_by(people, &age).name", "c"),
        ("min_by(people, &name).name", "a"),
    ],
)
def test_builtin_results(expression: str, expected: Any) -> None:
    assert search(expression, PEOPLE) == expected


def test_sum_of_numbers_uses_kyverno_override() -> None:
    assert search("sum(`[1, 2, 3.5]`)", {}) == 6.5


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("abs('x')", 'Invalid type for: x, expected: []jmespath.JpType{"number"}'),
        ("sort(`[1, \"a\"]`)", 'Invalid type for: [1 a], expected: []jmespath.JpType{"array[string]", "array[number]"}'),
        ("keys(`[1]`)", 'Invalid type for: [1], expected: []jmespath.JpType{"object"}'),
        ("join(',', `[1]`)", 'Invalid type for: [1], expected: []jmespath.JpType{"array[string]"}'),
        ("merge(`{}`, `1`)", 'Invalid type for: 1, expected: []jmespath.JpType{"object"}'),
        ("sort_by(people, &foo)", "invalid type, must be number of string"),
        ("sort_by(`[{\"a\": 1}, {\"a\": \"x\"}]`, &a)", "error in sort_by comparison"),
        ("max_by(`[{\"a\": 1}, {\"a\": \"x\"}]`, &a)", "invalid type, must be number"),
        ("map('a', people)", 'Invalid type for: a, expected: []jmespath.JpType{"expref"}'),
        ("starts_with(`{\"a\": 1}`, 'a')", 'Invalid type for: map[a:1], expected: []jmespath.JpType{"string"}'),
    ],
)
def test_builtin_type_errors(expression: str, message: str) -> None:
    with pytest.raises(JMESPathError) as caught:
        search(expression, PEOPLE)
    assert str(caught.value) == message
