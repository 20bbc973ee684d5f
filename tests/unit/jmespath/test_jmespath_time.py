"""Kyverno's time functions and the Go layout parser behind them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from stockade.jmespath import JMESPathError, search, set_clock
from stockade.jmespath.gotime import GoTimeError, parse

FIXED_NOW = 1_700_000_000 * 1_000_000_000  # 2023-11-14T22:13:20Z


@pytest.fixture()
def frozen_clock() -> Iterator[None]:
    set_clock(lambda: FIXED_NOW)
    yield
    set_clock(None)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("time_add('2021-01-01T00:00:00Z', '1h30m')", "2021-01-01T01:30:00Z"),
        ("time_add('2021-01-01T00:00:00+02:00', '-3h')", "2020-12-31T21:00:00+02:00"),
        ("time_parse('2006-01-02', '2021-03-04')", "2021-03-04T00:00:00Z"),
        ("time_parse('Mon Jan _2 15:04:05 MST 2006', 'Thu Mar  4 10:20:30 UTC 2021')", "2021-03-04T10:20:30Z"),
        ("time_parse('Jan 2, 2006 at 3:04pm (MST)', 'Feb 3, 2013 at 7:54pm (PST)')", "2013-02-03T19:54:00Z"),
        ("time_parse('2006-01-02T15:04:05Z07:00', '2021-03-04T10:20:30.5-07:00')", "2021-03-04T10:20:30-07:00"),
        ("time_parse('02/01/06 15:04', '25/12/99 08:00')", "1999-12-25T08:00:00Z"),
        ("time_parse('15:04', '10:30')", "0000-01-01T10:30:00Z"),
        ("time_parse('1136239445', '1136239445')", "2006-01-02T22:04:05Z"),
        ("time_utc('2021-01-02T18:04:05+05:30')", "2021-01-02T12:34:05Z"),
        ("time_to_cron('2021-01-02T18:04:05Z')", "4 18 2 1 6"),
        ("time_diff('2021-01-01T00:00:00Z', '2021-01-01T01:30:00Z')", "1h30m0s"),
        ("time_diff('2021-01-01T00:00:00Z', '2021-01-01T00:00:00.5Z')", "500ms"),
        ("time_diff('2021-01-01T01:00:00Z', '2021-01-01T00:00:00Z')", "-1h0m0s"),
        ("time_before('2021-01-01T00:00:00Z', '2021-01-01T00:00:01Z')", True),
        ("time_before('2021-01-01T00:00:00Z', '2021-01-01T00:00:00Z')", False),
        ("time_after('2021-01-01T02:00:00+01:00', '2021-01-01T00:30:00Z')", True),
        ("time_between('2021-01-01T12:00:00Z', '2021-01-01T00:00:00Z', '2021-01-02T00:00:00Z')", True),
        ("time_between('2021-01-01T00:00:00Z', '2021-01-01T00:00:00Z', '2021-01-02T00:00:00Z')", False),
        ("time_truncate('2021-01-01T10:35:59Z', '1h')", "2021-01-01T10:00:00Z"),
        ("time_truncate('2021-01-01T10:35:59Z', '15m')", "2021-01-01T10:30:00Z"),
        ("time_truncate('2021-01-01T10:35:59Z', '0s')", "2021-01-01T10:35:59Z"),
        ("time_since('', '2021-01-01T00:00:00Z', '2021-01-02T00:00:00Z')", "24h0m0s"),
        ("time_since('2006-01-02', '2021-01-01', '2021-01-03')", "48h0m0s"),
    ],
)
def test_time_functions(expression: str, expected: Any) -> None:
    assert search(expression, {}) == expected


def test_time_now_and_since_use_the_clock(frozen_clock: None) -> None:
    assert search("time_now_utc()", {}) == "2023-11-14T22:13:20Z"
    assert search("time_since('', '2023-11-14T21:13:20Z', '')", {}) == "1h0m0s"
    now = search("time_now()", {})
    assert search(f"time_utc('{now}')", {}) == "2023-11-14T22:13:20Z"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("time_add('2021-01-01', '1h')",
         'parsing time "2021-01-01" as "2006-01-02T15:04:05Z07:00": cannot parse "" as "T"'),
        ("time_add('2021-01-01T00:00:00Z', 'soon')", 'time: invalid duration "soon"'),
        ("time_utc('2021-13-01T00:00:00Z')", 'parsing time "2021-13-01T00:00:00Z": month out of range'),
        ("time_parse('2006-01-02', '2021-02-30')", 'parsing time "2021-02-30": day out of range'),
        ("time_parse('2006-01-02', '2021-02-03x')", 'parsing time "2021-02-03x": extra text: "x"'),
        ("time_parse('123', 'abc')", 'strconv.ParseInt: parsing "abc": invalid syntax'),
        ("time_before(`1`, 'x')", 'Invalid type for: 1, expected: []jmespath.JpType{"string"}'),
    ],
)
def test_time_errors(expression: str, message: str) -> None:
    with pytest.raises(JMESPathError) as caught:
        search(expression, {})
    assert str(caught.value) == message


def test_layout_parser_pm_and_fractions() -> None:
    parsed = parse("2006-01-02 03:04:05.000 PM", "2020-06-01 12:30:00.250 AM")
    assert parsed.fields()[3] == 0
    assert parsed.nanos == 250_000_000
    with pytest.raises(GoTimeError, match="cannot parse"):
        parse("2006-01-02 15:04:05.000", "2020-01-01 10:00:00.5")
