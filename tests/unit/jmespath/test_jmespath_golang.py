"""Go formatting helpers that shape messages and to_string output."""

from __future__ import annotations

from stockade.jmespath.golang import format_float, format_float_g, format_value, json_marshal, normalize_number


def test_format_float_g_matches_go_percent_v() -> None:
    assert format_float_g(1.5) == "1.5"
    assert format_float_g(2.0) == "2"
    assert format_float_g(1e21) == "1e+21"
    assert format_float_g(1e20) == "100000000000000000000"
    assert format_float_g(0.00001) == "1e-05"
    assert format_float_g(0.0001) == "0.0001"


def test_format_float_32_bit_precision() -> None:
    assert format_float(3.14159265, precision_bits=32) == "3.1415927"
    assert format_float(0.1, precision_bits=32) == "0.1"
    assert format_float(1e-7, precision_bits=64) == "0.0000001"


def test_format_value_like_go() -> None:
    assert format_value(None) == "<nil>"
    assert format_value([1, "a", True]) == "[1 a true]"
    assert format_value({"b": 1, "a": [2]}) == "map[a:[2] b:1]"


def test_json_marshal_like_encoding_json() -> None:
    assert json_marshal({"b": 1.0, "a": [True, None, "<&>"]}) == '{"a":[true,null,"\\u003c\\u0026\\u003e"],"b":1}'
    assert json_marshal(1e21) == "1e+21"
    assert json_marshal(0.000001) == "0.000001"
    assert json_marshal("é") == '"é"'


def test_normalize_number_turns_whole_floats_into_ints() -> None:
    assert normalize_number(2.0) == 2 and isinstance(normalize_number(2.0), int)
    assert normalize_number(2.5) == 2.5
    assert isinstance(normalize_number(1e300), float)
