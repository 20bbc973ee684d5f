"""Kubernetes IP library, from the documented examples."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.cel import CelEvalError


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("isIP('127.0.0.1')", True),
        ("isIP('::1')", True),
        ("isIP('127.0.0.256')", False),
        ("isIP(':::1')", False),
        ("isIP('::ffff:1.2.3.4')", False),
        ("isIP('fe80::1%eth0')", False),
        ("isIP('127.0.0.01')", False),
        ("ip.isCanonical('127.0.0.1')", True),
        ("ip.isCanonical('2001:db8::abcd')", True),
        ("ip.isCanonical('2001:DB8::ABCD')", False),
        ("ip.isCanonical('2001:db8::0:0:0:abcd')", False),
        ("ip('127.0.0.1').family()", 4),
        ("ip('::1').family()", 6),
        ("ip('0.0.0.0').isUnspecified()", True),
        ("ip('127.0.0.1').isUnspecified()", False),
        ("ip('::').isUnspecified()", True),
        ("ip('::1').isUnspecified()", False),
        ("ip('127.0.0.1').isLoopback()", True),
        ("ip('192.168.0.1').isLoopback()", False),
        ("ip('::1').isLoopback()", True),
        ("ip('2001:db8::abcd').isLoopback()", False),
        ("ip('224.0.0.1').isLinkLocalMulticast()", True),
        ("ip('224.0.1.1').isLinkLocalMulticast()", False),
        ("ip('ff02::1').isLinkLocalMulticast()", True),
        ("ip('fd00::1').isLinkLocalMulticast()", False),
        ("ip('169.254.169.254').isLinkLocalUnicast()", True),
        ("ip('192.168.0.1').isLinkLocalUnicast()", False),
        ("ip('fe80::1').isLinkLocalUnicast()", True),
        ("ip('fd80::1').isLinkLocalUnicast()", False),
        ("ip('192.168.0.1').isGlobalUnicast()", True),
        ("ip('255.255.255.255').isGlobalUnicast()", False),
        ("ip('2001:db8::abcd').isGlobalUnicast()", True),
        ("ip('ff00::1').isGlobalUnicast()", False),
        ("string(ip('2001:DB8::ABCD'))", "2001:db8::abcd"),
        ("ip('10.0.0.1') == ip('10.0.0.1')", True),
        ("ip('::1') == ip('0:0::1')", True),
    ],
)
def test_documented_examples(ev: Any, expression: str, expected: Any) -> None:
    assert ev(expression) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("127.0.0.256", "parse error"),
        (":::1", "parse error"),
        ("::ffff:1.2.3.4", "IPv4-mapped IPv6 address"),
        ("fe80::1%eth0", "zone"),
    ],
)
def test_invalid_addresses_are_errors(ev: Any, text: str, message: str) -> None:
    with pytest.raises(CelEvalError, match=message):
        ev(f"ip('{text}')")
