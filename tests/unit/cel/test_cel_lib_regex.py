"""Kubernetes regex library (find/findAll) plus Kyverno's regex.replace, with RE2 semantics."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.cel import CelEvalError


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("'abc 123'.find('[0-9]+')", "123"),
        ("'abc 123'.find('xyz')", ""),
        ("'123 abc 456'.findAll('[0-9]+')", ["123", "456"]),
        ("'123 abc 456'.findAll('[0-9]+', 1)", ["123"]),
        ("'123 abc 456'.findAll('xyz')", []),
        ("'123 abc 456'.findAll('[0-9]+', 0)", []),
        ("'123 abc 456'.findAll('[0-9]+', -1)", ["123", "456"]),
        ("'aaa'.findAll('a*')", ["aaa"]),
        # Go skips an empty match that abuts the previous match
        ("'abaa'.findAll('a*')", ["a", "aa"]),
        # RE2's \\d is ASCII-only
        ("'x\u0663 7'.findAll('\\\\d')", ["7"]),
        ("'key=value'.find('^[a-z]+')", "key"),
        ("regex.replace('a1b22', '[0-9]+', '#')", "a#b#"),
        ("regex.replace('john smith', '(\\\\w+) (\\\\w+)', '$2 $1')", "smith john"),
        ("regex.replace('x', 'y', 'z')", "x"),
    ],
)
def test_documented_examples(ev: Any, expression: str, expected: Any) -> None:
    assert ev(expression) == expected


def test_invalid_pattern_is_an_evaluation_error(ev: Any) -> None:
    with pytest.raises(CelEvalError, match="error parsing regexp"):
        ev("'abc'.find('[')")


def test_standard_matches_is_available(ev: Any) -> None:
    assert ev("'v1.2.3'.matches('^v[0-9]+\\\\.')") is True
