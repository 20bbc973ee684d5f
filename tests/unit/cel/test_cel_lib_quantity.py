"""Kubernetes quantity library, from the documented examples."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.cel import CelEvalError


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("isQuantity('1.3G')", True),
        ("isQuantity('1.3Gi')", True),
        ("isQuantity('1,3G')", False),
        ("isQuantity('10000k')", True),
        ("isQuantity('200K')", False),
        ("isQuantity('Three')", False),
        ("isQuantity('Mi')", False),
        ("quantity('50000000G').isInteger()", True),
        ("quantity('50k').isInteger()", True),
        ("quantity('9999999999999999999999999999999999999G').isInteger()", False),
        ("quantity('50k').asInteger() == 50000", True),
        ("quantity('50k').sub(20000).asApproximateFloat() == 30000.0", True),
        ("quantity('50k').add(quantity('20k')) == quantity('70k')", True),
        ("quantity('50k').add(20) == quantity('50020')", True),
        ("quantity('50k').sub(quantity('20k')) == quantity('30k')", True),
        ("quantity('50k').sub(20000) == quantity('30k')", True),
        ("quantity('50k').add(20).sub(quantity('100k')).sub(-50000) == quantity('20')", True),
        ("quantity('200M').compareTo(quantity('0.2G'))", 0),
        ("quantity('50M').compareTo(quantity('50Mi'))", -1),
        ("quantity('50Mi').compareTo(quantity('50M'))", 1),
        ("quantity('150Mi').isGreaterThan(quantity('100Mi'))", True),
        ("quantity('50Mi').isGreaterThan(quantity('100Mi'))", False),
        ("quantity('50M').isLessThan(quantity('100M'))", True),
        ("quantity('100M').isLessThan(quantity('50M'))", False),
        ("quantity('-5').sign()", -1),
        ("quantity('0').sign()", 0),
        ("sign(quantity('5m'))", 1),
        ("quantity('1') == quantity('1000m')", True),
        ("quantity('1.5').asApproximateFloat()", 1.5),
    ],
)
def test_documented_examples(ev: Any, expression: str, expected: Any) -> None:
    assert ev(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("quantity('200K')", "quantities must match"),
        ("quantity('Three')", "quantities must match"),
        ("quantity('Mi')", "quantities must match"),
        ("quantity('9999999999999999999999999999999999999G').asInteger()", "cannot convert value to integer"),
        ("quantity('1.5').asInteger()", "cannot convert value to integer"),
        ("quantity('1').isLessThan(semver('1.0.0'))", "cannot compare"),
    ],
)
def test_documented_errors(ev: Any, expression: str, message: str) -> None:
    with pytest.raises(CelEvalError, match=message):
        ev(expression)


def test_quantities_from_resources(ev: Any) -> None:
    container = {"resources": {"requests": {"memory": "256Mi"}, "limits": {"memory": "1Gi"}}}
    expression = "quantity(object.resources.requests.memory).isLessThan(quantity(object.resources.limits.memory))"
    assert ev(expression, object=container) is True
