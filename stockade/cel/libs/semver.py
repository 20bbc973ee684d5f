"""Kubernetes' semver library (``semver('1.2.3').isLessThan(semver('1.3.0'))``), strict SemVer 2.0 parsing with
an optional normalising mode that accepts ``v1``, ``1.2`` and leading zeros."""

from __future__ import annotations

import re
from typing import Any

from stockade.cel.functions import Library, tagged, untag

SEMVER_TYPE = "kubernetes.Semver"

_SEMVER_RE = re.compile(
    r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-((?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)


def _normalize(text: str) -> str:
    text = text[1:] if text.startswith("v") else text
    core, suffix = re.match(r"^([0-9.]*)(.*)$", text, re.DOTALL).groups()  # type: ignore[union-attr]
    parts = core.split(".") if core else []
    if not parts or len(parts) > 3 or any(not part.isdigit() for part in parts):
        return text
    parts = [str(int(part)) for part in parts] + ["0"] * (3 - len(parts))
    return ".".join(parts) + suffix


def _parse(text: str, normalize: bool = False) -> str:
    candidate = _normalize(text) if normalize else text
    if not _SEMVER_RE.match(candidate):
        raise ValueError(f"invalid semver: {text}")
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


def _parts(version: Any) -> tuple[int, int, int, list[str]]:
    match = _SEMVER_RE.match(untag(version, SEMVER_TYPE))
    assert match is not None
    prerelease = match.group(4).split(".") if match.group(4) else []
    return int(match.group(1)), int(match.group(2)), int(match.group(3)), prerelease


def _compare_prerelease(left: list[str], right: list[str]) -> int:
    if not left or not right:
        return (not left) - (not right)  # a release ranks above any pre-release
    for a, b in zip(left, right):
        if a == b:
            continue
        if a.isdigit() and b.isdigit():
            return (int(a) > int(b)) - (int(a) < int(b))
        if a.isdigit() != b.isdigit():
            return -1 if a.isdigit() else 1
        return (a > b) - (a < b)
    return (len(left) > len(right)) - (len(left) < len(right))


def compare_semver(left: Any, right: Any) -> int:
    a, b = _parts(left), _parts(right)
    if a[:3] != b[:3]:
        return (a[:3] > b[:3]) - (a[:3] < b[:3])
    return _compare_prerelease(a[3], b[3])


def build_semver() -> Library:
    library = Library("k8s.semver")
    library.add("semver", ("string",), "map", _semver)
    library.add("semver", ("string", "bool"), "map", _semver)
    library.add("isSemver", ("string",), "bool", _is_semver)
    library.add("isSemver", ("string", "bool"), "bool", _is_semver)
    library.add("major", ("map",), "int", lambda v: _parts(v)[0], member=True)
    library.add("minor", ("map",), "int", lambda v: _parts(v)[1], member=True)
    library.add("patch", ("map",), "int", lambda v: _parts(v)[2], member=True)
    return library
