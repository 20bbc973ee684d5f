"""Quantities and durations print and compare the way apimachinery and Go do."""

from fractions import Fraction

import pytest

from stockade.units import DurationError, QuantityError, format_duration, parse_duration, parse_quantity


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("500m", "500m"),
        ("1.5", "1500m"),
        ("2000", "2k"),
        ("1Gi", "1Gi"),
        ("1.5Gi", "1536Mi"),
        ("1024", "1024"),
        ("1e3", "1e3"),
        ("0.1", "100m"),
        ("-1k", "-1k"),
        ("0", "0"),
        ("0.0000000001", "1n"),  # finer than nano rounds up
        ("512", "512"),
    ],
)
def test_quantity_canonical_form(text: str, canonical: str) -> None:
    assert str(parse_quantity(text)) == canonical


@pytest.mark.parametrize("text", ["", "Gi", "1 Gi", "1.2.3", "1Gb", "abc", "1e"])
def test_invalid_quantities_are_rejected(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_quantity_ordering_crosses_notations() -> None:
    assert parse_quantity("1Gi") > parse_quantity("1G")
    assert parse_quantity("1000m") == parse_quantity("1")
    assert parse_quantity("1Ki").value == Fraction(1024)


def test_quantity_arithmetic_keeps_left_notation() -> None:
    assert str(parse_quantity("1Gi") + parse_quantity("512Mi")) == "1536Mi"
    assert str(parse_quantity("1") - parse_quantity("250m")) == "750m"
    assert str(parse_quantity("0") + parse_quantity("2Ki")) == "2Ki"
    assert str(parse_quantity("1Gi").scaled(2)) == "2Gi"


@pytest.mark.parametrize(
    ("text", "nanos", "printed"),
    [
        ("1h30m", 5400 * 10**9, "1h30m0s"),
        ("1.5s", 1_500_000_000, "1.5s"),
        ("500ms", 500_000_000, "500ms"),
        ("0", 0, "0s"),
        ("-2m", -120 * 10**9, "-2m0s"),
        ("1us", 1_000, "1µs"),
        ("1µs", 1_000, "1µs"),
        ("3ns", 3, "3ns"),
        ("90m", 5400 * 10**9, "1h30m0s"),
        ("2h45m10.25s", (2 * 3600 + 45 * 60) * 10**9 + 10_250_000_000, "2h45m10.25s"),
    ],
)
def test_durations_round_trip_like_go(text: str, nanos: int, printed: str) -> None:
    assert parse_duration(text) == nanos
    assert format_duration(nanos) == printed


@pytest.mark.parametrize("text", ["", "1", "h", "1x", ".h", "--1s", "1h 30m"])
def test_invalid_durations_are_rejected(text: str) -> None:
    with pytest.raises(DurationError):
        parse_duration(text)
