"""Kubernetes' semver library (``semver('1.2.3').isLessThan(semver('1.3.0'))``).

Kubernetes parses with blang/semver, so this library uses the one blang implementation
(``stockade.jmespath.semver``) and adds only the optional normalising mode that accepts ``v1``, ``1.2`` and
leading zeros.
"""

from __future__ import annotations

import re
from typing import Any

from stockade.cel.functions import Library, tagged, untag
from stockade.jmespath.semver import SemverError, Version, parse_version

SEMVER_TYPE = "kubernetes.Semver"

_CORE_AND_SUFFIX = re.compile(r"^([0-9.]*)(.*)\Z", re.DOTALL)


def _normalize(text: str) -> str:
    """Kubernetes' normalising parse: drop a ``v``, pad to three numbers, strip leading zeros."""
    text = text[1:] if text.startswith("v") else text
    match = _CORE_AND_SUFFIX.match(text)
    assert match is not None  # the pattern matches every string
    core, suffix = match.groups()
    parts = core.split(".") if core else []
    if not parts or len(parts) > 3 or any(not part.isdigit() for part in parts):
        return text
    parts = [str(int(part)) for part in parts] + ["0"] * (3 - len(parts))
    return ".".join(parts) + suffix


def _parse(text: str, normalize: bool = False) -> str:
    candidate = _normalize(text) if normalize else text
    try:
        parse_version(candidate)
    except SemverError as exc:
        raise ValueError(f"invalid semver: {text}") from exc
    return candidate


def _semver(text: str, normalize: bool = False) -> dict[str, Any]:
    # Build metadata never takes part in comparisons or equality (SemVer 2.0 section 10), and no function exposes
    # it, so the tagged value drops it: ``semver('1.0.0+a') == semver('1.0.0+b')`` like Kubernetes.
    return tagged(SEMVER_TYPE, _parse(text, normalize).split("+", 1)[0])


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        _parse(text, normalize)
    except ValueError:
        return False
    return True


def _version(value: Any) -> Version:
    return parse_version(untag(value, SEMVER_TYPE))


def compare_semver(left: Any, right: Any) -> int:
    return _version(left).compare(_version(right))


def build_semver() -> Library:
    library = Library("k8s.semver")
    library.add("semver", ("string",), "opaque", _semver)
    library.add("semver", ("string", "bool"), "opaque", _semver)
    library.add("isSemver", ("string",), "bool", _is_semver)
    library.add("isSemver", ("string", "bool"), "bool", _is_semver)
    library.add("major", ("map",), "int", lambda v: _version(v).major, member=True)
    library.add("minor", ("map",), "int", lambda v: _version(v).minor, member=True)
    library.add("patch", ("map",), "int", lambda v: _version(v).patch, member=True)
    return library
