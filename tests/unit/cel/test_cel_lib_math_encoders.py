"""cel-go ext.Math, ext.Encoders and ext.Bindings (``cel.bind``) as Kubernetes enables them."""

from __future__ import annotations

import math
from typing import Any

import pytest


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("math.greatest(1, 2, 3)", 3),
        ("math.greatest([1.5, 2.5])", 2.5),
        ("math.least(-1, 0, 1)", -1),
        ("math.least([1u, 2u])", 1),
        ("math.ceil(1.2)", 2.0),
        ("math.floor(1.8)", 1.0),
        ("math.round(1.5)", 2.0),
        ("math.trunc(-1.7)", -1.0),
        ("math.abs(-3)", 3),
        ("math.sign(-4.5)", -1.0),
        ("math.isNaN(0.0 / 0.0)", True),
        ("math.isInf(1.0 / 0.0)", True),
        ("math.isFinite(1.0)", True),
        ("math.bitOr(1, 2)", 3),
        ("math.bitAnd(3, 1)", 1),
        ("math.bitXor(3, 1)", 2),
        ("math.bitNot(0)", -1),
        ("math.bitShiftLeft(1, 3)", 8),
        ("math.bitShiftRight(8, 3)", 1),
        ("base64.encode(b'hello')", "aGVsbG8="),
        ("base64.decode('aGVsbG8=')", b"hello"),
        ("base64.decode('aGVsbG8')", b"hello"),
        ("cel.bind(x, 2, x * x)", 4),
        ("cel.bind(names, ['a', 'b'], names.size() == 2 && 'a' in names)", True),
    ],
)
def test_documented_examples(ev: Any, expression: str, expected: Any) -> None:
    assert ev(expression) == expected


def test_sqrt(ev: Any) -> None:
    assert math.isclose(ev("math.sqrt(2.0)"), math.sqrt(2.0))
