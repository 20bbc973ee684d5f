"""Masterminds/semver v3 compatible versions and constraints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stockade.reflector.semver import Constraint, SemverError, Version, parse_version, select_highest

VECTORS = json.loads((Path(__file__).parent / "data" / "go_oracle_vectors.json").read_text(encoding="utf-8"))


def satisfies(constraint: str, version: str) -> bool:
    return Constraint(constraint).check(parse_version(version))


# --- parsing -------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1.2.3", (1, 2, 3, "", "")),
        ("v1.2.3", (1, 2, 3, "", "")),
        ("1.2.3-rc.1+build.5", (1, 2, 3, "rc.1", "build.5")),
        ("0.0.0", (0, 0, 0, "", "")),
        ("1.2.3+meta-with-dash", (1, 2, 3, "", "meta-with-dash")),
        ("1.0.0-0a", (1, 0, 0, "0a", "")),
    ],
)
def test_strict_parse_accepts_complete_versions(text: str, expected: tuple[object, ...]) -> None:
    version = parse_version(text)
    assert (version.major, version.minor, version.patch, version.prerelease, version.metadata) == expected
    assert version.original == text


@pytest.mark.parametrize(
    "text",
    ["1.0", "v1", "1.2.3.4", "1.0.0p", "v1.2.beta", "v1.2-5", "\nv1.2", "b1.2.3", "", "vv1.2.3", "V1.2.3", "1.2.3-01", "1.2.3+", "1.2.3-",
     "1.2.3-a..b", "18446744073709551616.0.0", " 1.2.3", "1.2.3 "],
)
def test_strict_parse_rejects_what_flux_ignores(text: str) -> None:
    with pytest.raises(SemverError):
        parse_version(text)


@pytest.mark.parametrize(
    "text, expected",
    [("2025.07.03", (2025, 7, 3)), ("v2025.02.03-rc.1", (2025, 2, 3)), ("01.02.03", (1, 2, 3)),
     ("v1.2.0-x.Y.0+metadata-width-hypen", (1, 2, 0)), ("v1.2.3-rc1-with-hypen", (1, 2, 3))],
)
def test_strict_parse_accepts_calver_with_leading_zeros(text: str, expected: tuple[int, int, int]) -> None:
    """fluxcd/pkg version.ParseVersion (v0.10+) only asks for three dot-separated parts."""
    version = parse_version(text)
    assert (version.major, version.minor, version.patch) == expected
    assert version.original == text


def test_loose_parse_coerces_missing_parts_and_leading_zeros() -> None:
    assert str(parse_version("1", strict=False)) == "1.0.0"
    assert str(parse_version("v1.2-beta", strict=False)) == "1.2.0-beta"
    assert str(parse_version("01.02.03", strict=False)) == "1.2.3"
    with pytest.raises(SemverError):
        parse_version("1.2.3.4", strict=False)


def test_semver_spec_precedence_chain() -> None:
    chain = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11",
             "1.0.0-rc.1", "1.0.0", "1.0.1", "1.1.0", "2.0.0"]
    versions = [parse_version(text) for text in chain]
    for lower, higher in zip(versions, versions[1:]):
        assert lower < higher and higher > lower and lower.compare(higher) == -1
    assert sorted(reversed(versions)) == versions


def test_precedence_ignores_metadata_and_v_prefix_but_equality_is_structural() -> None:
    plain, prefixed, with_meta = parse_version("1.0.0"), parse_version("v1.0.0"), parse_version("1.0.0+a")
    assert plain.same_precedence(prefixed) and plain.same_precedence(with_meta)
    assert plain != prefixed
    assert isinstance(hash(plain), int)


@pytest.mark.parametrize(
    "lower, higher",
    [("1.0.1-1-abcd", "1.0.1"), ("1.0.0-rc.9", "1.0.0-rc.10"), ("1.0.0-rc10", "1.0.0-rc9"),
     ("1.0.0-1", "1.0.0-a"), ("1.0.0-SNAPSHOT.feature.a", "1.0.0-SNAPSHOT.feature.b")],
)
def test_prerelease_identifier_ordering(lower: str, higher: str) -> None:
    assert parse_version(lower) < parse_version(higher)


def test_version_is_immutable() -> None:
    version = parse_version("1.2.3")
    with pytest.raises(AttributeError):
        version.major = 2  # type: ignore[misc]
    assert isinstance(version, Version)


# --- constraints -----------------------------------------------------------------


@pytest.mark.parametrize(
    "constraint, matching, not_matching",
    [
        ("~1.2.3", ["1.2.3", "1.2.9"], ["1.3.0", "1.2.2"]),
        ("~1.2", ["1.2.0", "1.2.99"], ["1.3.0"]),
        ("~1", ["1.0.0", "1.9.9"], ["2.0.0", "0.9.9"]),
        ("~>2.0", ["2.0.5"], ["2.1.0"]),
        ("^1.2.3", ["1.2.3", "1.9.0"], ["2.0.0", "1.2.2"]),
        ("^0.2.3", ["0.2.3", "0.2.9"], ["0.3.0"]),
        ("^0.0.3", ["0.0.3"], ["0.0.4"]),
        ("^0.0", ["0.0.7"], ["0.1.0"]),
        ("^0", ["0.9.9"], ["1.0.0"]),
        ("1.2.x", ["1.2.0", "1.2.7"], ["1.3.0"]),
        ("1.x", ["1.0.0", "1.99.0"], ["2.0.0"]),
        ("*", ["0.0.1", "100.0.0"], ["1.0.0-rc.1"]),
        ("=1.0.0", ["1.0.0", "v1.0.0", "1.0.0+build"], ["1.0.1"]),
        ("!=1.2.3", ["1.2.4"], ["1.2.3"]),
        ("!=1.2.x", ["1.3.0", "2.2.0"], ["1.2.5"]),
        (">1.x", ["2.0.0"], ["1.9.0"]),
        (">1.2", ["1.3.0"], ["1.2.9"]),
        ("<=1.2", ["1.2.9", "0.1.0"], ["1.3.0"]),
        ("<=*", ["0.0.5"], ["0.1.0", "1.0.0"]),
        ("^*", ["0.0.0"], ["0.0.1", "1.0.0"]),
        (">=1.0.0 <2.0.0", ["1.0.0", "1.9.9"], ["2.0.0", "0.9.9"]),
        (">=1.0.0, <2.0.0", ["1.5.0"], ["2.0.0"]),
        (">=1.0.0,<2.0.0", ["1.5.0"], ["2.5.0"]),
        ("<1.0.0 || >=3.0.0", ["0.5.0", "3.1.0"], ["2.0.0"]),
        ("1.2 - 1.4.5", ["1.2.0", "1.4.5"], ["1.4.6", "1.1.9"]),
        ("1.2.3 - 2", ["2.0.0", "2.9.9"], ["3.0.0"]),
        ("v1.0.x", ["1.0.1", "v1.0.2"], ["1.1.0"]),
        ("=>1.0, =<1.1", ["1.0.5", "1.1.9"], ["1.2.0", "0.9.0"]),  # `<=1.1` covers all of 1.1.x
    ],
)
def test_constraint_operators(constraint: str, matching: list[str], not_matching: list[str]) -> None:
    for version in matching:
        assert satisfies(constraint, version), (constraint, version)
    for version in not_matching:
        assert not satisfies(constraint, version), (constraint, version)


def test_prereleases_need_a_prerelease_comparator_in_the_same_and_group() -> None:
    assert not satisfies("1.0.x", "1.1.0-alpha")
    assert not satisfies(">=1.0.0", "1.5.0-beta")
    assert satisfies(">=1.0.0-0", "1.5.0-beta")
    assert satisfies("^1.x-0", "1.2.0-rc.1")
    assert satisfies("~3.3.x-0", "3.3.1-alpha")
    # One prerelease comparator opens the whole AND group (Masterminds >= 3.4) ...
    assert satisfies(">=1.0.0-0 <2.0.0", "1.5.0-beta")
    # ... but never a different `||` branch.
    assert not satisfies(">=5.0.0-0 || >=1.0.0 <2.0.0", "1.5.0-beta")
    assert satisfies(">=5.0.0-0 || >=1.0.0 <2.0.0", "5.1.0-beta")


@pytest.mark.parametrize("constraint", ["1.0.x", "^1.0", "=1.0.0", "~1.0", ">=1.0", ">0,<2.0", "v1.x", "x", "1.2.3-beta.1"])
def test_valid_constraints_parse(constraint: str) -> None:
    Constraint(constraint)


@pytest.mark.parametrize("constraint", ["1.0.0p", "1x", "x1", "-1", "a", "", "*-*", ">=1.0<2.0", "1.0 ||", "1.2.3-01", "||"])
def test_invalid_constraints_raise(constraint: str) -> None:
    with pytest.raises(SemverError):
        Constraint(constraint)


def test_differential_vectors_from_masterminds() -> None:
    """Every row was produced by running Masterminds/semver itself (see data/README.md)."""
    mismatches = []
    for constraint_text, versions, expected in VECTORS["checks"]:
        try:
            constraint = Constraint(constraint_text)
        except SemverError:
            actual: object = "error"
        else:
            actual = []
            for text in versions:
                try:
                    actual.append(constraint.check(parse_version(text)))
                except SemverError:
                    actual.append(None)
        if actual != expected:
            mismatches.append((constraint_text, versions, expected, actual))
    assert not mismatches, mismatches[:5]
    assert len(VECTORS["checks"]) >= 600


def test_differential_strict_parse_vectors() -> None:
    def accepted(text: str) -> bool:
        try:
            parse_version(text)
        except SemverError:
            return False
        return True

    mismatches = [(text, expected) for text, expected in VECTORS["strict"] if accepted(text) != expected]
    assert not mismatches, mismatches[:5]


# --- Masterminds 3.5 limits ----------------------------------------------------------


def test_versions_longer_than_256_bytes_are_refused() -> None:
    at_limit = "1.2.3-" + "a" * 250
    assert len(at_limit) == 256 and parse_version(at_limit).prerelease == "a" * 250
    with pytest.raises(SemverError, match="too long"):
        parse_version(at_limit + "b")
    with pytest.raises(SemverError, match="too long"):
        Constraint(">=" + at_limit[:-2] + "-" + "b" * 2)  # 257-character version inside a short enough range


def test_constraints_longer_than_512_bytes_or_with_more_than_32_groups_are_refused() -> None:
    Constraint(" || ".join(["1.2.3"] * 32))
    with pytest.raises(SemverError, match="too many constraint groups"):
        Constraint(" || ".join(["1.2.3"] * 33))
    padded = ">=1.0.0" + " " * (512 - len(">=1.0.0"))
    Constraint(padded)
    with pytest.raises(SemverError, match="too long"):
        Constraint(padded + " ")


# --- selecting the highest tag (the ImagePolicy fast path) ------------------------------


def reference_highest(tags: list[str], constraint: Constraint) -> str | None:
    """Flux's SemVer.Latest, one tag at a time: parse, check the range, keep the first strictly greater version."""
    best: Version | None = None
    for tag in tags:
        try:
            version = parse_version(tag)
        except SemverError:
            continue
        if constraint.check(version) and (best is None or version > best):
            best = version
    return best.original if best is not None else None


def test_select_highest_agrees_with_masterminds_on_every_vector() -> None:
    """The winner must be the highest of exactly the tags Go's Check accepted (first one among equals)."""
    compared = 0
    for constraint_text, versions, expected in VECTORS["checks"]:
        if expected == "error":
            continue
        constraint = Constraint(constraint_text)
        accepted = [text for text, ok in zip(versions, expected) if ok]
        want = None
        for text in accepted:
            if want is None or parse_version(text) > parse_version(want):
                want = text
        assert select_highest(versions, constraint) == want, (constraint_text, versions, expected)
        assert select_highest(list(reversed(versions)), constraint) == reference_highest(list(reversed(versions)), constraint)
        compared += 1
    assert compared >= 500


def test_major_ceiling_never_excludes_a_version_masterminds_accepts() -> None:
    for constraint_text, versions, expected in VECTORS["checks"]:
        if expected == "error":
            continue
        ceiling = Constraint(constraint_text).major_ceiling
        for text, ok in zip(versions, expected):
            if ok:
                assert parse_version(text).major <= ceiling, (constraint_text, text)


@pytest.mark.parametrize(
    "constraint, tags, winner",
    [
        # the first of equal-precedence tags wins: `v` prefix and metadata do not count
        ("*", ["v1.2.3", "1.2.3", "1.2.3+build.1"], "v1.2.3"),
        ("*", ["1.2.3+build.1", "v1.2.3"], "1.2.3+build.1"),
        # three parts on the first two dots, then the coercing grammar: `1-a.b.c` is 1.0.0-a.b.c, `1-a.b` and `1.0` are not versions
        (">=0.0.0-0", ["1-a.b", "1-a.b.c", "1.0", "0.9.9"], "1-a.b.c"),
        ("*", ["1.0", "2", "1.2.3.4", "0.0.1"], "0.0.1"),
        # CalVer with leading zeros, prereleases only with a prerelease comparator, leading-zero identifiers refused
        ("*", ["2025.07.03", "2025.7.2", "2025.06.30"], "2025.07.03"),
        (">=1.0.0", ["1.5.0-rc.1", "1.4.0"], "1.4.0"),
        (">=1.0.0-0", ["1.5.0-rc.1", "1.4.0", "1.5.0-rc.01"], "1.5.0-rc.1"),
        (">=1.0.0-0", ["1.5.0-rc.9", "1.5.0-rc.10", "1.5.0-rc10"], "1.5.0-rc10"),
        # segments are uint64: one past the maximum is not a version, the maximum is
        ("*", ["18446744073709551616.0.0", "1.18446744073709551616.0", "1.0.18446744073709551616", "1.0.0"], "1.0.0"),
        (">=1.0.0", ["18446744073709551615.0.0", "1.0.0"], "18446744073709551615.0.0"),
        ("*", ["1." + "0" * 300 + "1.0", "0.5.0"], "0.5.0"),  # over 256 bytes, though its value is small
        # a group without an upper bound lifts the major ceiling of the whole range
        ("<2.0.0 || >=50.0.0", ["1.9.0", "49.0.0", "51.0.0"], "51.0.0"),
        ("<2.0.0 || ~>40.1", ["1.9.0", "40.1.7", "40.2.0"], "40.1.7"),
        ("~0.0.0", ["3.0.0", "0.0.1"], "3.0.0"),
        ("^0.2", ["0.2.9", "0.3.0", "1.0.0"], "0.2.9"),
        ("!=2.0.0", ["2.0.0", "1.0.0", "v2.0.0+meta"], "1.0.0"),
        ("<=*", ["0.0.5", "0.1.0"], "0.0.5"),
        # nothing in range, nothing at all
        (">5", ["1.0.0", "latest"], None),
        ("*", [], None),
        ("*", [""], None),
    ],
)
def test_select_highest_edge_cases(constraint: str, tags: list[str], winner: str | None) -> None:
    parsed = Constraint(constraint)
    assert select_highest(tags, parsed) == winner
    assert reference_highest(tags, parsed) == winner


@pytest.mark.parametrize("tags", [["1.2.3\n", "1.0.0"], ["9.9.9\n1.2.3", "1.0.0"], ["1.0.0", "\n9.9.9"], ["x\n", "1.0.0"]])
def test_select_highest_ignores_tags_holding_a_newline(tags: list[str]) -> None:
    """Go's `$` is the end of the text, so such a tag is never a version, even when one of its lines is."""
    assert select_highest(tags, Constraint("*")) == "1.0.0"


def test_possessive_grammar_reads_exactly_what_masterminds_loose_regex_reads() -> None:
    """The parser's grammar never backtracks; Masterminds' own (backtracking-style) regex must read the same parts."""
    import random
    import re

    from stockade.reflector import semver

    masterminds = re.compile(
        r"v?([0-9]+)(\.[0-9]+)?(\.[0-9]+)?(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?"
    )
    rng = random.Random(27)
    digits, idents, junk = ["0", "1", "01", "22", "007"], ["rc", "1", "01", "a-b", "Z-", "-", "0a"], [".", "-", "+", "x", "\n", " ", ""]

    def candidate() -> str:
        text = rng.choice(["", "v", "vv"]) + rng.choice(digits)
        text += "".join("." + rng.choice(digits) for _ in range(rng.randrange(4)))
        for mark in ("-", "+"):
            if rng.random() < 0.5:
                text += mark + ".".join(rng.choice(idents) for _ in range(rng.randrange(1, 4)))
        if rng.random() < 0.3:  # damage it somewhere
            cut = rng.randrange(len(text) + 1)
            text = text[:cut] + rng.choice(junk) + text[cut:]
        return text

    corpus = {candidate() for _ in range(20000)}
    corpus |= {"1.2.3", "v1.2.3-rc.1+b.2", "1-a.b.c", "1.2.3.4", "1.2-3.4", "1+2.3", "v.1.2"}
    accepted = 0
    for text in sorted(corpus):
        expected = masterminds.fullmatch(text)
        actual = semver._LOOSE.fullmatch(text)
        assert (actual is None) == (expected is None), text
        if expected is not None and actual is not None:
            accepted += 1
            minor, patch = expected.group(2), expected.group(3)
            want = (expected.group(1), minor and minor[1:], patch and patch[1:], expected.group(5), expected.group(8))
            assert actual.groups() == want, text
    assert accepted > 5000
    lines = [text for text in sorted(corpus) if "\n" not in text]
    want_lines = [text for text in lines if masterminds.fullmatch(text) and len(text.split(".", 2)) == 3]
    assert [found[0] for found in semver._STRICT_LINES.findall("\n".join(lines))] == want_lines
