"""Go formatting helpers that shape messages and to_string output."""

from __future__ import annotations

from stockade.jmespath.golang import json_marshal, normalize_number


def test_json_marshal_like_encoding_json() -> None:
    assert json_marshal({"b": 1.0, "a": [True, None, "<&>"]}) == '{"a":[true,null,"\\u003c\\u0026\\u003e"],"b":1}'
    assert json_marshal(1e21) == "1e+21"
    assert json_marshal(0.000001) == "0.000001"
    assert json_marshal(1e-7) == "1e-7"  # encoding/json drops the 0 of a negative two-digit exponent
    assert json_marshal(1e20) == "100000000000000000000"
    assert json_marshal("é") == '"é"'


def test_normalize_number_turns_whole_floats_into_ints() -> None:
    assert normalize_number(2.0) == 2 and isinstance(normalize_number(2.0), int)
    assert normalize_number(2.5) == 2.5
    assert isinstance(normalize_number(1e300), float)
