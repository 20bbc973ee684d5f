"""stockade.gofmt against Go's documented fmt and strconv behaviour.

strconv.FormatFloat with precision -1 uses the fewest digits that read back exactly; 'g' switches to exponent
form when the exponent is below -4 or at least the precision, which for the shortest form is taken as 6 (so
%v, which is %g for floats, prints 1e+06 for a million); 'f' never uses an exponent; exponents have at least
two digits. fmt prints nil as <nil>, maps as map[k:v ...] with sorted keys, slices as [a b].
"""

from __future__ import annotations

import pytest

from stockade.gofmt import go_float_e, go_float_f, go_float_g, go_parse_float, go_parse_int, go_sprint, go_type_name


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1000000.0, "1e+06"),
        (100000.0, "100000"),
        (123456.0, "123456"),
        (1234567.0, "1.234567e+06"),
        (1e20, "1e+20"),
        (1e21, "1e+21"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (1.5, "1.5"),
        (2.0, "2"),
        (-0.0, "-0"),
        (float("nan"), "NaN"),
        (float("inf"), "+Inf"),
        (float("-inf"), "-Inf"),
    ],
)
def test_percent_v_of_a_float64(value: float, text: str) -> None:
    assert go_float_g(value) == text


@pytest.mark.parametrize(
    ("value", "bit_size", "text"),
    [(1e21, 64, "1000000000000000000000"), (1.5e-7, 64, "0.00000015"), (2.0, 64, "2"), (-0.0, 64, "-0"),
     (0.1, 32, "0.1"), (3.14159265, 32, "3.1415927"), (float("inf"), 64, "+Inf")],
)
def test_format_float_f(value: float, bit_size: int, text: str) -> None:
    assert go_float_f(value, bit_size) == text


def test_format_float_e() -> None:
    assert go_float_e(1000000.0) == "1E+06"
    assert go_float_e(0.00015, "e") == "1.5e-04"
    assert go_float_e(0.0) == "0E+00"


def test_sprint_of_decoded_json() -> None:
    assert go_sprint(None) == "<nil>"
    assert go_sprint([1, "a", True, 1000000.0]) == "[1 a true 1e+06]"
    assert go_sprint({"b": 1, "a": [2]}) == "map[a:[2] b:1]"
    assert go_sprint(3, numbers_are_floats=True) == "3"
    assert go_sprint(1000000, numbers_are_floats=True) == "1e+06"


def test_type_names() -> None:
    assert go_type_name(1) == "int64"
    assert go_type_name(1, numbers_are_floats=True) == "float64"
    assert go_type_name([]) == "[]interface {}"
    assert go_type_name({}) == "map[string]interface {}"
    assert go_type_name(None) == "<nil>"


def test_parse_like_strconv() -> None:
    assert go_parse_float("1e3") == 1000.0
    assert go_parse_float("1e400") is None  # out of range is an error in Go
    assert go_parse_float("0x10") is None
    assert go_parse_int("9223372036854775807") == 2**63 - 1
    assert go_parse_int("9223372036854775808") is None
