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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from stockade.errors import StockadeError

__all__ = ["SemverError", "Version", "parse_version", "Constraint", "select_highest"]

_UINT64_MAX = 2**64 - 1
_IDENT = r"[0-9A-Za-z\-]++"
# Masterminds' loose (coercing) grammar: `1`, `1.2`, `v1.2.3-pre+meta`, leading zeros allowed. The groups are
# major, minor, patch, prerelease and metadata without their separators; the grammar is written once here and
# anchored two ways below (one version, or every line of a newline-joined tag list). Every quantifier is possessive
# (never gives back what it took), which changes no match of the anchored grammar: what follows each part can never
# begin with a character that part could have given back (digits end at `.`/`-`/`+`, identifiers at `.`/`+`), and an
# optional part given back leaves its `.`/`-`/`+` for parts that cannot take it (a minor given back to the patch
# part leaves fewer ways on, not more), so backtracking into a part could never succeed.
_LOOSE_BODY = (
    rf"v?+([0-9]++)(?:\.([0-9]++))?+(?:\.([0-9]++))?+"
    rf"(?:-({_IDENT}(?:\.{_IDENT})*+))?+(?:\+({_IDENT}(?:\.{_IDENT})*+))?+"
)
_LOOSE = re.compile(_LOOSE_BODY)
# fluxcd/pkg/version.ParseVersion: the tag must split into three parts on its first two dots (a lookahead for two
# dots on the same line) before the loose grammar reads it.
_STRICT_LINES = re.compile(rf"^(?=[^.\n]*+\.[^.\n]*+\.)({_LOOSE_BODY})$", re.MULTILINE)
# Masterminds >= 3.5 refuses longer version strings and constraints, and more `||` groups.
_MAX_VERSION_LENGTH = 256
_MAX_CONSTRAINT_LENGTH = 512
_MAX_CONSTRAINT_GROUPS = 32
# A numeric prerelease identifier with a leading zero, which Masterminds rejects.
_LEADING_ZERO_PART = re.compile(r"(?:^|\.)0[0-9]+(?:\.|$)")

# Precedence keys. A version's key is (major, minor, patch, prerelease key), so comparing keys is comparing
# versions. A prerelease key has one entry per identifier: (0, n) for an identifier Go's ParseUint reads as a
# number, (1, text) otherwise (numbers rank below text, text compares bytewise, a shorter list ranks lower); the
# first items differ whenever the types would, so ints never meet strings. A release ranks above every
# prerelease of the same numbers through its single (2,) entry.
PrereleaseKey = tuple[tuple[int, int] | tuple[int, str] | tuple[int], ...]
VersionKey = tuple[int, int, int, PrereleaseKey]
_RELEASE: PrereleaseKey = ((2,),)


class SemverError(StockadeError, ValueError):
    """A version or constraint string that Masterminds/semver would reject."""


def _prerelease_valid(pre: str) -> bool:
    """The loose grammar already limits identifiers to [0-9A-Za-z-]+; Masterminds also refuses `01`-style numbers."""
    return _LEADING_ZERO_PART.search(pre) is None


def _prerelease_key(pre: str) -> PrereleaseKey:
    if not pre:
        return _RELEASE
    parts: list[tuple[int, int] | tuple[int, str]] = []
    for part in pre.split("."):
        if part.isascii() and part.isdigit() and int(part) <= _UINT64_MAX:
            parts.append((0, int(part)))
        else:
            parts.append((1, part))
    return tuple(parts)


def _segment(text: str | None) -> int:
    if not text:
        return 0
    value = int(text)
    if value > _UINT64_MAX:
        raise SemverError(f"error parsing version segment: {text!r} out of range")
    return value


@dataclass(frozen=True, order=False)
class Version:
    """A parsed version; `original` keeps the text as written (e.g. the `v` prefix).

    `==` is structural (dataclass); use `compare()` or `<`/`>` for semver
    precedence, which ignores build metadata and the `v` prefix (`key` orders the same way).
    """

    major: int
    minor: int
    patch: int
    prerelease: str = ""
    metadata: str = ""
    original: str = ""
    key: VersionKey = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", (self.major, self.minor, self.patch, _prerelease_key(self.prerelease)))

    def compare(self, other: Version) -> int:
        """Return -1, 0 or 1 following semver 2.0 precedence."""
        mine, theirs = self.key, other.key
        return (mine > theirs) - (mine < theirs)

    def same_precedence(self, other: Version) -> bool:
        return self.key == other.key

    def __lt__(self, other: Version) -> bool:
        return self.key < other.key

    def __le__(self, other: Version) -> bool:
        return self.key <= other.key

    def __gt__(self, other: Version) -> bool:
        return self.key > other.key

    def __ge__(self, other: Version) -> bool:
        return self.key >= other.key

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += f"-{self.prerelease}"
        if self.metadata:
            text += f"+{self.metadata}"
        return text


def _loose_parse(text: str) -> Version:
    """Mirror NewVersion with coercion: missing minor/patch become 0."""
    if len(text) > _MAX_VERSION_LENGTH:
        raise SemverError(f"version string is too long (max {_MAX_VERSION_LENGTH} bytes)")
    match = _LOOSE.fullmatch(text)
    if match is None:
        raise SemverError(f"invalid semantic version: {text!r}")
    major, minor, patch, prerelease, metadata = match.groups()
    if prerelease and not _prerelease_valid(prerelease):
        raise SemverError("version segment starts with 0")
    return Version(_segment(major), _segment(minor), _segment(patch), prerelease or "", metadata or "", text)


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


KeyPredicate = Callable[[VersionKey], bool]


@dataclass(frozen=True)
class _Comparator:
    operator: str
    text: str
    version: Version
    dirty: bool
    minor_dirty: bool
    patch_dirty: bool


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


# Each Masterminds operator, compiled once per comparator into a test on a version key. `dirty` marks a wildcard
# somewhere (`*`, `1.x`, `1.2`); `minor_dirty` / `patch_dirty` say which part was left open.


def _not_equal(c: _Comparator) -> KeyPredicate:
    con = c.version.key
    if c.minor_dirty:
        return lambda k: k[0] != con[0]
    if c.patch_dirty:  # `!=1.2` / `!=1.2.x-pre`: a different prerelease also counts as different
        return lambda k: k[0] != con[0] or k[1] != con[1] or k[3] != con[3]
    return lambda k: k != con


def _greater_than(c: _Comparator) -> KeyPredicate:
    con = c.version.key
    if c.minor_dirty:
        return lambda k: k[0] > con[0]
    if c.patch_dirty:
        return lambda k: (k[0], k[1]) > (con[0], con[1])
    return lambda k: k > con


def _less_than(c: _Comparator) -> KeyPredicate:
    con = c.version.key
    return lambda k: k < con


def _greater_equal(c: _Comparator) -> KeyPredicate:
    con = c.version.key
    return lambda k: k >= con


def _less_than_equal(c: _Comparator) -> KeyPredicate:
    con = c.version.key
    if not c.dirty:
        return lambda k: k <= con
    if c.minor_dirty:
        return lambda k: k[0] <= con[0]
    return lambda k: (k[0], k[1]) <= (con[0], con[1])  # `<=*` therefore only admits 0.0.z


def _tilde(c: _Comparator) -> KeyPredicate:
    con = c.version.key
    if con[:3] == (0, 0, 0) and not c.minor_dirty and not c.patch_dirty:
        return lambda k: k >= con
    if c.minor_dirty:
        return lambda k: k >= con and k[0] == con[0]
    return lambda k: k >= con and k[0] == con[0] and k[1] == con[1]


def _tilde_or_equal(c: _Comparator) -> KeyPredicate:
    if c.dirty:
        return _tilde(c)
    con = c.version.key
    return lambda k: k == con


def _caret(c: _Comparator) -> KeyPredicate:
    con = c.version.key
    if con[0] > 0 or c.minor_dirty:
        return lambda k: k >= con and k[0] == con[0]
    if con[1] > 0 or c.patch_dirty:
        return lambda k: k >= con and k[0] == 0 and k[1] == con[1]
    return lambda k: k >= con and k[0] == 0 and k[1] == 0 and k[2] == con[2]


_OPERATORS: dict[str, Callable[[_Comparator], KeyPredicate]] = {
    "": _tilde_or_equal,
    "=": _tilde_or_equal,
    "!=": _not_equal,
    ">": _greater_than,
    "<": _less_than,
    ">=": _greater_equal,
    "=>": _greater_equal,
    "<=": _less_than_equal,
    "=<": _less_than_equal,
    "~": _tilde,
    "~>": _tilde,
    "^": _caret,
}


def _major_ceiling(c: _Comparator) -> int | None:
    """The largest major version the comparator can admit, read off the predicates above; None when unbounded."""
    if c.operator in ("!=", ">", ">=", "=>"):
        return None
    tilde_like = c.operator in ("~", "~>") or (c.operator in ("", "=") and c.dirty)
    if tilde_like and c.version.key[:3] == (0, 0, 0) and not c.minor_dirty and not c.patch_dirty:
        return None  # `~0.0.0` and `~*` only ask for >= 0.0.0
    return c.version.major  # `=`, `<`, `<=`, `^` and the other `~` forms never go above the named major


def _all_of(predicates: Sequence[KeyPredicate]) -> KeyPredicate:
    if len(predicates) == 1:
        return predicates[0]
    if len(predicates) == 2:
        first, second = predicates
        return lambda k: first(k) and second(k)
    return lambda k: all(predicate(k) for predicate in predicates)


def _any_of(predicates: Sequence[KeyPredicate]) -> KeyPredicate:
    if len(predicates) == 1:
        return predicates[0]
    return lambda k: any(predicate(k) for predicate in predicates)


def _group_predicate(comparators: Sequence[_Comparator]) -> KeyPredicate:
    """AND of the comparators; a prerelease passes only if one of them names a prerelease (Masterminds >= 3.4)."""
    each = _all_of([_OPERATORS[c.operator](c) for c in comparators])
    if any(c.version.prerelease for c in comparators):
        return each
    return lambda k: k[3] == _RELEASE and each(k)


def _rewrite_hyphen_ranges(text: str) -> str:
    """`1.2 - 1.4.5` becomes `>= 1.2, <= 1.4.5 `, as Masterminds does before splitting."""
    result = text
    for match in _HYPHEN_RANGE.finditer(text):
        result = result.replace(match.group(0), f">= {match.group(1)}, <= {match.group(2)} ", 1)
    return result


class Constraint:
    """A Masterminds range: comparators ANDed by space/comma, groups ORed by `||`.

    A prerelease version only satisfies an AND group when some comparator of
    that group itself names a prerelease (Masterminds >= 3.4 rule). The range is
    compiled once into `check_key`, a test on `Version.key`.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        if len(text.encode("utf-8", "surrogatepass")) > _MAX_CONSTRAINT_LENGTH:
            raise SemverError(f"constraint string is too long (max {_MAX_CONSTRAINT_LENGTH} bytes)")
        segments = _rewrite_hyphen_ranges(text).split("||")
        if len(segments) > _MAX_CONSTRAINT_GROUPS:
            raise SemverError(f"too many constraint groups (max {_MAX_CONSTRAINT_GROUPS})")
        groups: list[KeyPredicate] = []
        self.admits_prerelease = False  # whether any `||` group lets prereleases through
        ceilings: list[int | None] = []
        for segment in segments:
            if not _VALID.match(segment):
                raise SemverError(f"improper constraint: {segment!r}")
            pieces = [m.group(0) for m in _FIND.finditer(segment)] or [segment]
            comparators = [_parse_comparator(piece) for piece in pieces]
            self.admits_prerelease = self.admits_prerelease or any(c.version.prerelease for c in comparators)
            groups.append(_group_predicate(comparators))
            bounded = [ceiling for ceiling in map(_major_ceiling, comparators) if ceiling is not None]
            ceilings.append(min(bounded) if bounded else None)
        self.check_key: KeyPredicate = _any_of(groups)
        # No version with a larger major satisfies the range (a necessary condition, never a sufficient one).
        self.major_ceiling = _UINT64_MAX if None in ceilings else max(min(c, _UINT64_MAX) for c in ceilings if c is not None)

    def check(self, version: Version) -> bool:
        return self.check_key(version.key)

    def __repr__(self) -> str:
        return f"Constraint({self.text!r})"


def _highest_of_lines(joined: str, constraint: Constraint) -> str | None:
    best_key: VersionKey | None = None
    best_major = -1
    best: str | None = None
    check = constraint.check_key
    prereleases = constraint.admits_prerelease
    ceiling = constraint.major_ceiling
    for text, major_digits, minor, patch, prerelease, _ in _STRICT_LINES.findall(joined):
        if len(text) > _MAX_VERSION_LENGTH:
            continue
        major = int(major_digits)
        # Only a version above the best so far can change the outcome (Go keeps the first of equal versions, as
        # GreaterThan is strict), and none above the range's major ceiling can be in range: both cheap tests come
        # before the full range check, which gives the same result as checking the range first.
        if major < best_major or major > ceiling:
            continue
        if not prerelease:
            pre_key = _RELEASE
        elif prereleases and _prerelease_valid(prerelease):
            pre_key = _prerelease_key(prerelease)
        else:
            continue
        key = (major, int(minor) if minor else 0, int(patch) if patch else 0, pre_key)
        if best_key is not None and key <= best_key:
            continue
        if len(text) > 20 and max(key[1], key[2]) > _UINT64_MAX:  # the major is within the ceiling
            continue
        if check(key):
            best_key, best_major, best = key, major, text
    return best


def select_highest(tags: Sequence[str], constraint: Constraint) -> str | None:
    """The tag image-reflector-controller's semver policy elects: the highest version in range, as written.

    Tags are read like fluxcd/pkg/version.ParseVersion (three dot-separated parts, then Masterminds' coercing
    grammar); tags that do not parse are skipped and the first of equal-precedence versions wins. The list is
    scanned as one newline-joined text so that tags which are not versions cost no Python step at all.
    """
    joined = "\n".join(tags)
    if joined.count("\n") != max(len(tags) - 1, 0):
        # A tag holding a newline is never a version (Go's `$` is the end of the text), and here it would read as
        # two lines: leave such tags out.
        joined = "\n".join(tag for tag in tags if "\n" not in tag)
    return _highest_of_lines(joined, constraint)
