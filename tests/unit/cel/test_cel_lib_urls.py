"""Kubernetes URL library, from the documented examples."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.cel import CelEvalError

FULL = "'https://user:pass@example.com:80/path?query=val#fragment'"


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (f"isURL({FULL})", True),
        ("isURL('/absolute-path')", True),
        ("isURL('https://a:b:c/')", False),
        ("isURL('../relative-path')", False),
        ("isURL('')", False),
        (f"url({FULL}).getHost()", "example.com:80"),
        ("url('/path').getScheme()", ""),
        ("url('https://example.com/').getScheme()", "https"),
        ("url('https://example.com:80/').getHost()", "example.com:80"),
        ("url('https://example.com/').getHost()", "example.com"),
        ("url('https://[::1]:80/').getHost()", "[::1]:80"),
        ("url('https://[::1]/').getHost()", "[::1]"),
        ("url('/path').getHost()", ""),
        ("url('https://example.com:80/').getHostname()", "example.com"),
        ("url('https://127.0.0.1:80/').getHostname()", "127.0.0.1"),
        ("url('https://[::1]:80/').getHostname()", "::1"),
        ("url('/path').getHostname()", ""),
        ("url('https://example.com:80/').getPort()", "80"),
        ("url('https://example.com/').getPort()", ""),
        ("url('/path').getPort()", ""),
        ("url('https://example.com/path').getEscapedPath()", "/path"),
        ("url('https://example.com/path with spaces/').getEscapedPath()", "/path%20with%20spaces/"),
        ("url('https://example.com').getEscapedPath()", ""),
        ("url('https://example.com/path?k1=a&k2=b&k2=c').getQuery()", {"k1": ["a"], "k2": ["b", "c"]}),
        ("url('https://example.com/path?key with spaces=value with spaces').getQuery()",
         {"key with spaces": ["value with spaces"]}),
        ("url('https://example.com/path?').getQuery()", {}),
        ("url('https://example.com/path').getQuery()", {}),
    ],
)
def test_documented_examples(ev: Any, expression: str, expected: Any) -> None:
    assert ev(expression) == expected


@pytest.mark.parametrize("text", ["https://a:b:c/", "../relative-path"])
def test_invalid_urls_are_errors(ev: Any, text: str) -> None:
    with pytest.raises(CelEvalError, match="URL parse error"):
        ev(f"url('{text}')")
