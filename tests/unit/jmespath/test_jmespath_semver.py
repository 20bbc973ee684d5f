"""blang/semver strict parsing, from blang's grammar (SemVer 2.0 with no "v" prefix)."""

from __future__ import annotations

import pytest

from stockade.jmespath.semver import SemverError, Version, parse_version


@pytest.mark.parametrize("text", ["1.0.0\n", "1.0.0-a\n", "1.0.0+b\n", "1.0.0-a.01", "1.0", "v1.0.0", "01.0.0", "1.0.0-", ""])
def test_rejects_what_blang_rejects(text: str) -> None:
    with pytest.raises(SemverError):
        parse_version(text)


def test_parses_prerelease_identifiers_by_kind() -> None:
    assert parse_version("1.2.3-rc.11+build.5") == Version(1, 2, 3, ("rc", 11))
