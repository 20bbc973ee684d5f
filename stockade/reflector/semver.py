"""Semantic versions and range constraints with Masterminds/semver v3 behaviour.

Flux's ImagePolicy evaluates `spec.policy.semver.range` with the Go library
Masterminds/semver v3 (3.4+ prerelease rules). Neither PyPI `semver` nor
`node-semver` agree with it on x-ranges, `^`/`~` edge cases, `!=` or
prerelease opt-in, so this module re-implements that grammar and its checks,
including the quirks (e.g. `<=*` only admits 0.0.z), so that a given range picks
the same tag here as in a Flux cluster.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from stockade.errors import StockadeError

__all__ = ["SemverError", "Version", "parse_version", "Constraint"]

_UINT64_MAX = 2**64 - 1
_ALLOWED_IDENT = re.compile(r"[0-9A-Za-z-]+")
_DIGITS = re.compile(r"[0-9]+")
# Loose (coercing) grammar: `1`, `1.2`, `v1.2.3-pre+meta`, leading zeros allowed.
_LOOSE = re.compile(
    r"v?([0-9]+)(\.[0-9]+)?(\.[0-9]+)?"
    r"(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?"
    r"(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?"
)


class SemverError(StockadeError, ValueError):
    """A version or constraint string that Masterminds/semver would reject."""


def _validate_prerelease(pre: str) -> None:
    for part in pre.split("."):
        if not part:
            raise SemverError("invalid prerelease string")
        if _DIGITS.fullmatch(part):
            if len(part) > 1 and part[0] == "0":
                raise SemverError("version segment starts with 0")
        elif not _ALLOWED_IDENT.fullmatch(part):
            raise SemverError("invalid prerelease string")


def _validate_metadata(meta: str) -> None:
    for part in meta.split("."):
        if not part or not _ALLOWED_IDENT.fullmatch(part):
            raise SemverError("invalid metadata string")


def _segment(text: str) -> int:
    value = int(text)
    if value > _UINT64_MAX:
        raise SemverError(f"error parsing version segment: {text!r} out of range")
    return value


def _compare_prerelease_part(mine: str, other: str) -> int:
    if mine == other:
        return 0
    if mine == "":
        return -1
    if other == "":
        return 1
    mine_numeric = bool(_DIGITS.fullmatch(mine)) and int(mine) <= _UINT64_MAX
    other_numeric = bool(_DIGITS.fullmatch(other)) and int(other) <= _UINT64_MAX
    if mine_numeric and other_numeric:
        return 1 if int(mine) > int(other) else -1
    if mine_numeric:
        return -1
    if other_numeric:
        return 1
    return 1 if mine > other else -1


def _compare_prerelease(mine: str, other: str) -> int:
    mine_parts, other_parts = mine.split("."), other.split(".")
    for index in range(max(len(mine_parts), len(other_parts))):
        left = mine_parts[index] if index < len(mine_parts) else ""
        right = other_parts[index] if index < len(other_parts) else ""
        result = _compare_prerelease_part(left, right)
        if result:
            return result
    return 0


@dataclass(frozen=True, order=False)
class Version:
    """A parsed version; `original` keeps the text as written (e.g. the `v` prefix).

    `==` is structural (dataclass); use `compare()` or `<`/`>` for semver
    precedence, which ignores build metadata and the `v` prefix.
    """

    major: int
    minor: int
    patch: int
    prerelease: str = ""
    metadata: str = ""
    original: str = ""

    def compare(self, other: Version) -> int:
        """Return -1, 0 or 1 following semver 2.0 precedence."""
        for mine, theirs in (
            (self.major, other.major),
            (self.minor, other.minor),
            (self.patch, other.patch),
        ):
            if mine != theirs:
                return 1 if mine > theirs else -1
        if self.prerelease == other.prerelease:
            return 0
        if not self.prerelease:
            return 1
        if not other.prerelease:
            return -1
        return _compare_prerelease(self.prerelease, other.prerelease)

    def same_precedence(self, other: Version) -> bool:
        return self.compare(other) == 0

    def __lt__(self, other: Version) -> bool:
        return self.compare(other) < 0

    def __le__(self, other: Version) -> bool:
        return self.compare(other) <= 0

    def __gt__(self, other: Version) -> bool:
        return self.compare(other) > 0

    def __ge__(self, other: Version) -> bool:
        return self.compare(other) >= 0

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += f"-{self.prerelease}"
        if self.metadata:
            text += f"+{self.metadata}"
        return text


def _loose_parse(text: str) -> Version:
    """Mirror NewVersion with coercion: missing minor/patch become 0."""
    match = _LOOSE.fullmatch(text)
    if match is None:
        raise SemverError(f"invalid semantic version: {text!r}")
    major = _segment(match.group(1))
    minor = _segment(match.group(2)[1:]) if match.group(2) else 0
    patch = _segment(match.group(3)[1:]) if match.group(3) else 0
    prerelease = match.group(5) or ""
    metadata = match.group(8) or ""
    if prerelease:
        _validate_prerelease(prerelease)
    if metadata:
        _validate_metadata(metadata)
    return Version(major, minor, patch, prerelease, metadata, text)


def parse_version(text: str, strict: bool = True) -> Version:
    """Parse a tag the way Flux does (`strict`) or a version the way NewVersion does.

    Strict mode is fluxcd/pkg/version.ParseVersion (v0.10+): the tag must split
    into exactly three parts on its first two dots, and is then read by the
    coercing grammar, so CalVer tags with leading zeros (`2025.07.03`) are
    versions while `1.0` and `1.2.3.4` are not.
    """
    if strict and len(text.split(".", 2)) != 3:
        raise SemverError(f"invalid semantic version: {text!r}")
    return _loose_parse(text)


# --- constraints ---------------------------------------------------------------

_WS = r"[\t\n\f\r ]"  # Go's \s (no \v, no Unicode spaces)
_OPS = r"=||!=|>|<|>=|=>|<=|=<|~|~>|\^"
_CV = (
    r"v?([0-9|x|X|\*]+)(\.[0-9|x|X|\*]+)?(\.[0-9|x|X|\*]+)?"
    r"(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?"
    r"(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?"
)
_CV_NO_GROUPS = re.sub(r"\((?!\?)", "(?:", _CV)
_SINGLE = re.compile(rf"^{_WS}*({_OPS}){_WS}*({_CV}){_WS}*$")
_FIND = re.compile(rf"(?:{_OPS}){_WS}*(?:{_CV_NO_GROUPS})")
_VALID = re.compile(
    rf"^(?:{_WS}*(?:{_OPS}){_WS}*(?:{_CV_NO_GROUPS}){_WS}*)"
    rf"(?:(?:{_WS}+|,{_WS}*)(?:{_OPS}){_WS}*(?:{_CV_NO_GROUPS}){_WS}*)*$"
)
_HYPHEN_RANGE = re.compile(
    rf"{_WS}*((?:{_CV_NO_GROUPS})){_WS}+-{_WS}+((?:{_CV_NO_GROUPS})){_WS}*"
)
_X_MARKS = ("x", "X", "*")


@dataclass(frozen=True)
class _Comparator:
    operator: str
    text: str
    version: Version
    dirty: bool
    minor_dirty: bool
    patch_dirty: bool

    def check(self, candidate: Version, include_prerelease: bool) -> bool:
        if candidate.prerelease and not include_prerelease:
            return False
        return bool(_CHECKS[self.operator](candidate, self))


def _parse_comparator(text: str) -> _Comparator:
    match = _SINGLE.match(text)
    if match is None:
        raise SemverError(f"improper constraint: {text!r}")
    operator, written, major, minor, patch, pre_with_dash = match.group(1, 2, 3, 4, 5, 6)
    pre_with_dash = pre_with_dash or ""
    dirty = minor_dirty = patch_dirty = False
    version_text = written
    if major in _X_MARKS:
        version_text, dirty = f"0.0.0{pre_with_dash}", True
    elif not minor or minor[1:] in _X_MARKS:
        version_text, dirty, minor_dirty = f"{major}.0.0{pre_with_dash}", True, True
    elif not patch or patch[1:] in _X_MARKS:
        version_text, dirty, patch_dirty = f"{major}{minor}.0{pre_with_dash}", True, True
    try:
        version = _loose_parse(version_text)
    except SemverError as exc:
        raise SemverError(f"improper constraint: {text!r}: {exc}") from None
    return _Comparator(operator, written, version, dirty, minor_dirty, patch_dirty)


def _not_equal(v: Version, c: _Comparator) -> bool:
    con = c.version
    if c.dirty:
        if con.major != v.major:
            return True
        if c.minor_dirty:
            return False
        if con.minor != v.minor:
            return True
        if c.patch_dirty:
            if v.prerelease or con.prerelease:
                return _compare_prerelease(v.prerelease, con.prerelease) != 0
            return False
        if con.patch != v.patch:
            return True
    return v.compare(con) != 0


def _greater_than(v: Version, c: _Comparator) -> bool:
    con = c.version
    if not c.dirty:
        return v.compare(con) > 0
    if v.major != con.major:
        return v.major > con.major
    if c.minor_dirty:
        return False
    if c.patch_dirty:
        return v.minor > con.minor
    return v.compare(con) > 0


def _less_than_equal(v: Version, c: _Comparator) -> bool:
    con = c.version
    if not c.dirty:
        return v.compare(con) <= 0
    if v.major > con.major:
        return False
    return not (v.major == con.major and v.minor > con.minor and not c.minor_dirty)


def _tilde(v: Version, c: _Comparator) -> bool:
    con = c.version
    if v.compare(con) < 0:
        return False
    if (con.major, con.minor, con.patch) == (0, 0, 0) and not c.minor_dirty and not c.patch_dirty:
        return True
    if v.major != con.major:
        return False
    return v.minor == con.minor or c.minor_dirty


def _tilde_or_equal(v: Version, c: _Comparator) -> bool:
    return _tilde(v, c) if c.dirty else v.compare(c.version) == 0


def _caret(v: Version, c: _Comparator) -> bool:
    con = c.version
    if v.compare(con) < 0:
        return False
    if con.major > 0 or c.minor_dirty:
        return v.major == con.major
    if v.major > 0:
        return False
    if con.minor > 0 or c.patch_dirty:
        return v.minor == con.minor
    if v.minor > 0:
        return False
    return v.patch == con.patch


_CHECKS: dict[str, Callable[[Version, _Comparator], bool]] = {
    "": _tilde_or_equal,
    "=": _tilde_or_equal,
    "!=": _not_equal,
    ">": _greater_than,
    "<": lambda v, c: v.compare(c.version) < 0,
    ">=": lambda v, c: v.compare(c.version) >= 0,
    "=>": lambda v, c: v.compare(c.version) >= 0,
    "<=": _less_than_equal,
    "=<": _less_than_equal,
    "~": _tilde,
    "~>": _tilde,
    "^": _caret,
}


def _rewrite_hyphen_ranges(text: str) -> str:
    """`1.2 - 1.4.5` becomes `>= 1.2, <= 1.4.5 `, as Masterminds does before splitting."""
    result = text
    for match in _HYPHEN_RANGE.finditer(text):
        result = result.replace(match.group(0), f">= {match.group(1)}, <= {match.group(2)} ", 1)
    return result


class Constraint:
    """A Masterminds range: comparators ANDed by space/comma, groups ORed by `||`.

    A prerelease version only satisfies an AND group when some comparator of
    that group itself names a prerelease (Masterminds >= 3.4 rule).
    """

    def __init__(self, text: str) -> None:
        self.text = text
        groups: list[tuple[tuple[_Comparator, ...], bool]] = []
        for segment in _rewrite_hyphen_ranges(text).split("||"):
            if not _VALID.match(segment):
                raise SemverError(f"improper constraint: {segment!r}")
            pieces = [m.group(0) for m in _FIND.finditer(segment)] or [segment]
            comparators = tuple(_parse_comparator(piece) for piece in pieces)
            allows_prerelease = any(c.version.prerelease for c in comparators)
            groups.append((comparators, allows_prerelease))
        self._groups = tuple(groups)

    def check(self, version: Version) -> bool:
        return any(
            all(c.check(version, allows_prerelease) for c in comparators)
            for comparators, allows_prerelease in self._groups
        )

    def __repr__(self) -> str:
        return f"Constraint({self.text!r})"
