"""Kubernetes CIDR library, from the documented examples."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.cel import CelEvalError


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("isCIDR('192.168.0.0/16')", True),
        ("isCIDR('::1/128')", True),
        ("isCIDR('192.168.0.0/33')", False),
        ("isCIDR('::1/129')", False),
        ("isCIDR('::ffff:1.2.3.4/24')", False),
        ("cidr('192.168.0.0/24').containsIP(ip('192.168.0.1'))", True),
        ("cidr('192.168.0.0/24').containsIP(ip('192.168.1.1'))", False),
        ("cidr('192.168.0.0/24').containsIP('192.168.0.1')", True),
        ("cidr('192.168.0.0/24').containsIP('192.168.1.1')", False),
        ("cidr('10.0.0.0/8').containsIP('::1')", False),
        ("cidr('192.168.0.0/16').containsCIDR(cidr('192.168.10.0/24'))", True),
        ("cidr('192.168.1.0/24').containsCIDR(cidr('192.168.2.0/24'))", False),
        ("cidr('192.168.0.0/16').containsCIDR('192.168.10.0/24')", True),
        ("cidr('192.168.1.0/24').containsCIDR('192.168.2.0/24')", False),
        ("cidr('192.168.10.0/24').containsCIDR('192.168.0.0/16')", False),
        ("cidr('192.168.0.1/24').ip() == ip('192.168.0.1')", True),
        ("cidr('192.168.0.1/24').ip().family()", 4),
        ("cidr('::1/128').ip() == ip('::1')", True),
        ("cidr('::1/128').ip().family()", 6),
        ("cidr('192.168.0.0/24').masked() == cidr('192.168.0.0/24')", True),
        ("cidr('192.168.0.1/24').masked() == cidr('192.168.0.0/24')", True),
        ("cidr('192.168.0.0/24') == cidr('192.168.0.0/24').masked()", True),
        ("cidr('192.168.0.1/24') == cidr('192.168.0.1/24').masked()", False),
        ("cidr('192.168.0.0/16').prefixLength()", 16),
        ("cidr('::1/128').prefixLength()", 128),
        ("string(cidr('192.168.0.1/24').masked())", "192.168.0.0/24"),
    ],
)
def test_documented_examples(ev: Any, expression: str, expected: Any) -> None:
    assert ev(expression) == expected


@pytest.mark.parametrize("text", ["192.168.0.0/33", "::1/129", "::ffff:1.2.3.4/24", "10.0.0.0"])
def test_invalid_cidrs_are_errors(ev: Any, text: str) -> None:
    with pytest.raises(CelEvalError):
        ev(f"cidr('{text}')")
