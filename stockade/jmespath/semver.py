"""blang/semver v4 versions and ranges, as Kyverno's ``semver_compare`` uses them.

Ranges are space-separated comparators (AND) joined by ``||`` (OR): ``>=1.0.0 <2.0.0 || 3.x``. Comparators are
``= == > >= < <= ! !=`` or none; ``x`` wildcards expand the way blang does (including its odd ``!=1.x``).
There are no ``^``/``~`` ranges and no ``v`` prefix: blang parses versions strictly.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from stockade.errors import StockadeError


class SemverError(StockadeError, ValueError):
    """A version or range blang would reject."""


# \Z, not $: "$" also matches before a trailing newline, and blang rejects "1.0.0-a" plus a newline.
_NUMERIC = re.compile(r"^(0|[1-9][0-9]*)\Z")
_IDENTIFIER = re.compile(r"^[0-9A-Za-z-]+\Z")


@dataclass(frozen=True, slots=True)
class Version:
    major: int
    minor: int
    patch: int
    prerelease: tuple[int | str, ...] = ()

    def compare(self, other: Version) -> int:
        for mine, theirs in ((self.major, other.major), (self.minor, other.minor), (self.patch, other.patch)):
            if mine != theirs:
                return -1 if mine < theirs else 1
        if not self.prerelease and not other.prerelease:
            return 0
        if not self.prerelease:
            return 1
        if not other.prerelease:
            return -1
        for mine_part, theirs_part in zip(self.prerelease, other.prerelease):
            result = _compare_identifier(mine_part, theirs_part)
            if result:
                return result
        if len(self.prerelease) == len(other.prerelease):
            return 0
        return -1 if len(self.prerelease) < len(other.prerelease) else 1


def _compare_identifier(left: int | str, right: int | str) -> int:
    if isinstance(left, int) and isinstance(right, int):
        return (left > right) - (left < right)
    if isinstance(left, int):
        return -1
    if isinstance(right, int):
        return 1
    return (left > right) - (left < right)


def parse_version(text: str) -> Version:
    """blang ``semver.Parse``: strict ``MAJOR.MINOR.PATCH[-pre][+build]``."""
    if not text:
        raise SemverError("Version string empty")
    core, _, build = text.partition("+")
    if "+" in text:
        for identifier in build.split("."):
            if not identifier or not _IDENTIFIER.match(identifier):
                raise SemverError(f"Invalid character(s) found in build meta data {identifier!r}")
    core, dash, prerelease_text = core.partition("-")
    parts = core.split(".")
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    numbers = []
    for name, part in zip(("major", "minor", "patch"), parts):
        if not part.isdigit() or not part.isascii():
            raise SemverError(f"Invalid character(s) found in {name} number {part!r}")
        if len(part) > 1 and part.startswith("0"):
            raise SemverError(f"{name.capitalize()} number must not contain leading zeroes {part!r}")
        numbers.append(int(part))
    prerelease: list[int | str] = []
    if dash:
        for identifier in prerelease_text.split("."):
            if not identifier or not _IDENTIFIER.match(identifier):
                raise SemverError(f"Invalid character(s) found in prerelease {identifier!r}")
            if identifier.isdigit():
                if not _NUMERIC.match(identifier):
                    raise SemverError(f"Numeric PreRelease version must not contain leading zeroes {identifier!r}")
                prerelease.append(int(identifier))
            else:
                prerelease.append(identifier)
    return Version(numbers[0], numbers[1], numbers[2], tuple(prerelease))


def parse_version_or_zero(text: str) -> Version:
    """Kyverno ignores the parse error and compares the zero version instead."""
    try:
        return parse_version(text)
    except SemverError:
        return Version(0, 0, 0)


Matcher = Callable[[Version], bool]

_COMPARATORS: dict[str, Callable[[int], bool]] = {
    "": lambda result: result == 0,
    "=": lambda result: result == 0,
    "==": lambda result: result == 0,
    ">": lambda result: result > 0,
    ">=": lambda result: result >= 0,
    "<": lambda result: result < 0,
    "<=": lambda result: result <= 0,
    "!": lambda result: result != 0,
    "!=": lambda result: result != 0,
}


def _split_and_trim(text: str) -> list[str]:
    """blang's tokenizer, quirks included: a space right after ``>``, ``<`` or ``=`` does not split."""
    result: list[str] = []
    last = 0
    last_character = ""
    for index, character in enumerate(text):
        if character == " " and last_character not in (">", "<", "="):
            if last < index - 1:
                result.append(text[last:index])
            last = index + 1
        elif character != " ":
            last_character = character
    if last < len(text) - 1:
        result.append(text[last:])
    return [token.replace(" ", "") for token in result]


def _split_comparator(token: str) -> tuple[str, str]:
    for index, character in enumerate(token):
        if character.isdigit():
            return token[:index].strip(), token[index:]
    raise SemverError(f"Could not get version from string: {_go_quote(token)}")


def _go_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _flatten_wildcard(version: str) -> str:
    flattened = version.replace(".x.x", ".x", 1).replace(".x", ".0", 1)
    return flattened + ".0" if len(flattened.split(".")) == 2 else flattened


def _increment(version: str, position: int) -> str:
    parts = version.split(".")
    try:
        number = int(parts[position])
    except (IndexError, ValueError):
        return ""
    parts[position] = str(number + 1)
    for later in range(position + 1, len(parts)):
        parts[later] = "0"
    return ".".join(parts)


def _expand_wildcards(groups: list[list[str]]) -> list[list[str]]:
    expanded_groups = []
    for group in groups:
        expanded: list[str] = []
        for token in group:
            if "x" in token:
                operator, version = _split_comparator(token)
                parts = version.split(".")
                wildcard_position = len(parts) - 1 if parts[-1] == "x" else -1  # 1 = minor, 2 = patch
                flat = _flatten_wildcard(version)
                increment = False
                result_operator = ""
                if operator == ">":
                    result_operator, increment = ">=", True
                elif operator == ">=":
                    result_operator = ">="
                elif operator == "<":
                    result_operator = "<"
                elif operator == "<=":
                    result_operator, increment = "<", True
                elif operator in ("", "=", "=="):
                    expanded.append(">=" + flat)
                    result_operator, increment = "<", True
                elif operator in ("!=", "!"):
                    expanded.append("<" + flat)
                    result_operator, increment = ">=", True
                if increment:
                    if wildcard_position == 2:
                        result_version = _increment(flat, 1)
                    elif wildcard_position == 1:
                        result_version = _increment(flat, 0)
                    else:
                        result_version = ""
                else:
                    result_version = flat
                token = result_operator + result_version
            expanded.append(token)
        expanded_groups.append(expanded)
    return expanded_groups


def parse_range(text: str) -> Matcher:
    """blang ``semver.ParseRange``; the returned predicate answers whether a version is in the range."""
    tokens = _split_and_trim(text)
    groups: list[list[str]] = []
    last = 0
    for index, token in enumerate(tokens):
        if token == "||":
            if index == 0:
                raise SemverError("First element in range is '||'")
            groups.append(tokens[last:index])
            last = index + 1
    if last == len(tokens) and tokens:
        raise SemverError("Last element in range is '||'")
    groups.append(tokens[last:])
    alternatives: list[list[tuple[Callable[[int], bool], Version]]] = []
    for group in _expand_wildcards(groups):
        if not group:
            raise SemverError(f"Could not parse Range {_go_quote(text)}: empty range")
        comparators = []
        for token in group:
            operator, version_text = _split_comparator(token)
            check = _COMPARATORS.get(operator)
            if check is None:
                raise SemverError(f"Could not parse comparator {_go_quote(operator)} in {_go_quote(token)}")
            try:
                version = parse_version(version_text)
            except SemverError as error:
                raise SemverError(
                    f"Could not parse version {_go_quote(version_text)} in {_go_quote(token)}: {error}"
                ) from None
            comparators.append((check, version))
        alternatives.append(comparators)

    def matches(candidate: Version) -> bool:
        return any(
            all(check(candidate.compare(version)) for check, version in comparators) for comparators in alternatives
        )

    return matches
