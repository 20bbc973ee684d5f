"""Kyverno arithmetic over numbers, quantities and durations (expected values from Kyverno's documented cases)."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.jmespath import JMESPathError, search


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("add(`12`, `13`)", 25),
        ("add(`1.5`, `1.5`)", 3),
        ("add('12Ki', '13Ki')", "25Ki"),
        ("add('1Gi', '512Mi')", "1536Mi"),
        ("add('12Ki', '13')", "12301"),
        ("add('500m', '1')", "1500m"),
        ("add('12s', '13s')", "25s"),
        ("add('1h', '30m0s')", "1h30m0s"),
        ("subtract(`12`, `13`)", -1),
        ("subtract('12Ki', '13Ki')", "-1Ki"),
        ("subtract('12Ki', '13')", "12275"),
        ("subtract('12s', '13s')", "-1s"),
        ("multiply('12Ki', `2`)", "24Ki"),
        ("multiply('12s', `2`)", "24s"),
        ("multiply(`2.5`, `2.5`)", 6.25),
        ("multiply(`2.5`, '12Ki')", "30Ki"),
        ("multiply(`2.5`, '12')", "30"),
        ("multiply(`2.5`, '40s')", "1m40s"),
        ("divide('256M', '256M')", 1),
        ("divide('512M', '256M')", 2),
        ("divide('128M', '256M')", 0.5),
        ("divide('8', '3')", 8.0 / 3.0),
        ("divide('12Ki', `3`)", "4Ki"),
        ("divide('12Ki', '2Ki')", 6),
        ("divide('12Ki', '200')", 61.44),
        ("divide('500m', `2`)", "250m"),
        ("divide('1', `3`)", "0"),
        ("divide('12s', `3`)", "4s"),
        ("divide('12s', '5s')", 2.4),
        ("divide(`14`, `3`)", 4.666666666666667),
        ("modulo('12Ki', '5Ki')", "2Ki"),
        ("modulo('13s', '2s')", "1s"),
        ("modulo(`13`, `5`)", 3),
        ("modulo(`-13`, `5`)", -3),
        ("sum([`12`])", 12),
        ("sum([`12`, `13`, `1`, `4`])", 30),
        ("sum(['12Ki'])", "12Ki"),
        ("sum(['12Ki', '13Ki', '1Ki', '4Ki'])", "30Ki"),
        ("sum(['12Ki', '13'])", "12301"),
        ("sum(['12s', '13s', '1s', '4s'])", "30s"),
        ("round(`9.414675`, `2`)", 9.41),
        ("round(`14.123`, `6`)", 14.123),
        ("round(`2.5`, `0`)", 3),
        ("round(`-2.5`, `0`)", -3),
    ],
)
def test_arithmetic(expression: str, expected: Any) -> None:
    result = search(expression, {})
    assert result == expected
    assert type(result) is type(expected)


def test_whole_float_results_come_back_as_ints() -> None:
    assert isinstance(search("divide(`6`, `3`)", {}), int)
    assert isinstance(search("add(`0.5`, `0.5`)", {}), int)


def test_minutes_suffix_is_a_quantity_not_a_duration() -> None:
    # '30m' parses as 30 milli-units first, exactly as in Kyverno, so it cannot be added to a duration.
    with pytest.raises(JMESPathError, match="Types mismatch"):
        search("add('1h', '30m')", {})
    assert search("add('30m', '30m')", {}) == "60m"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("add('12', '13s')", "JMESPath function 'add': Types mismatch"),
        ("add(`12`, '13Ki')", "JMESPath function 'add': Types mismatch"),
        ("add(`12`, '13')", "JMESPath function 'add': Types mismatch"),
        ("add('12Ki', `13`)", "JMESPath function 'add': Types mismatch"),
        ("add('abc', `1`)", "JMESPath function 'add': invalid operand"),
        ("add(`true`, `1`)", "JMESPath function 'add': invalid operand"),
        ("subtract('12s', `13`)", "JMESPath function 'subtract': Types mismatch"),
        ("multiply('12Ki', '12Ki')", "JMESPath function 'multiply': Types mismatch"),
        ("multiply('12s', '12s')", "JMESPath function 'multiply': Types mismatch"),
        ("divide('12Ki', '2s')", "JMESPath function 'divide': Types mismatch"),
        ("divide(`14`, '5Ki')", "JMESPath function 'divide': Types mismatch"),
        ("divide(`14`, `0`)", "JMESPath function 'divide': Zero divisor passed"),
        ("divide('4Ki', '0Ki')", "JMESPath function 'divide': Zero divisor passed"),
        ("divide('4Ki', `0`)", "JMESPath function 'divide': Zero divisor passed"),
        ("divide('4s', '0s')", "JMESPath function 'divide': Zero divisor passed"),
        ("divide('4s', `0`)", "JMESPath function 'divide': Zero divisor passed"),
        ("modulo('12Ki', `13`)", "JMESPath function 'modulo': Types mismatch"),
        ("modulo(`14`, `0`)", "JMESPath function 'modulo': Zero divisor passed"),
        ("modulo('4s', '0s')", "JMESPath function 'modulo': Zero divisor passed"),
        ("modulo('4', '1.5')", "JMESPath function 'modulo': Non-integer argument(s) passed for modulo"),
        ("modulo(`14.5`, `2`)", "JMESPath function 'modulo': Non-integer argument(s) passed for modulo"),
        ("sum(`[]`)", "JMESPath function 'sum': at least one element in the array is required"),
        ("sum(['12s', `13`])", "JMESPath function 'sum': Types mismatch"),
        ("sum('a')", 'Invalid type for: a, expected: []jmespath.JpType{"array"}'),
        ("round(`14`, `1.5`)", "JMESPath function 'round': Non-integer argument(s) passed for round off"),
        ("round(`14`, '12Ki')", 'Invalid type for: 12Ki, expected: []jmespath.JpType{"number"}'),
    ],
)
def test_arithmetic_errors(expression: str, message: str) -> None:
    with pytest.raises(JMESPathError) as caught:
        search(expression, {})
    assert str(caught.value) == message


def test_round_rejects_negative_digits() -> None:
    with pytest.raises(JMESPathError, match="out of bounds"):
        search("round(`14`, `-2`)", {})
