"""Kubernetes semver library, from the documented examples."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.cel import CelEvalError


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("isSemver('1.0.0')", True),
        ("isSemver('1.0.0-rc.1+build.5')", True),
        ("isSemver('v1.0')", False),
        ("isSemver('v1.0', true)", True),
        ("isSemver('1.02.3')", False),
        ("isSemver('1.02.3', true)", True),
        ("isSemver('hello')", False),
        ("semver('1.0.0')", {"__stockade_cel_type__": "kubernetes.Semver", "value": "1.0.0"}),
        ("semver('v1.0', true) == semver('1.0.0')", True),
        ("semver('1.2.3').major()", 1),
        ("semver('1.2.3').minor()", 2),
        ("semver('1.2.3').patch()", 3),
        ("semver('1.0.0').isGreaterThan(semver('0.1.0'))", True),
        ("semver('1.0.0').isLessThan(semver('0.1.0'))", False),
        ("semver('1.0.0').compareTo(semver('2.0.0'))", -1),
        ("semver('2.0.0').compareTo(semver('2.0.0'))", 0),
        ("semver('1.0.0-alpha').isLessThan(semver('1.0.0-alpha.1'))", True),
        ("semver('1.0.0-alpha.beta').isLessThan(semver('1.0.0-beta'))", True),
        ("semver('1.0.0-beta.2').isLessThan(semver('1.0.0-beta.11'))", True),
        ("semver('1.0.0-rc.1').isLessThan(semver('1.0.0'))", True),
        # build metadata never matters (SemVer 2.0, section 10)
        ("semver('1.2.3+a') == semver('1.2.3+b')", True),
        ("semver('1.2.3+a').compareTo(semver('1.2.3'))", 0),
    ],
)
def test_documented_examples(ev: Any, expression: str, expected: Any) -> None:
    assert ev(expression) == expected


@pytest.mark.parametrize("text", ["v1.0.0", "1.0", "01.0.0", "1.0.0-", "hello"])
def test_invalid_versions_are_errors(ev: Any, text: str) -> None:
    with pytest.raises(CelEvalError, match="invalid semver"):
        ev(f"semver('{text}')")


@pytest.mark.parametrize("text", ["1.0.0\\n", "1.0.0-a\\n", "1.0.0+b\\n", "\\n1.0.0"])
def test_a_newline_is_not_part_of_a_version(ev: Any, text: str) -> None:
    """blang rejects any character outside the grammar, a trailing newline too (the old regex let "$" match it)."""
    assert ev(f"isSemver('{text}')") is False
    assert ev(f"isSemver('{text}', true)") is False


def test_cel_and_jmespath_share_one_blang_parser() -> None:
    """One blang implementation: the CEL library accepts exactly what semver_compare's parser accepts."""
    from stockade.cel.libs import semver as cel_semver
    from stockade.jmespath import semver as blang

    assert cel_semver.parse_version is blang.parse_version
