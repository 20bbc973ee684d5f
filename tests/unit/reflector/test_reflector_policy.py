"""Flux ImagePolicy tag selection (semver, alphabetical, numerical, filterTags)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from stockade.reflector.policy import (
    InvalidPolicyError,
    PolicyError,
    apply_tag_filter,
    compile_tag_filter,
    expand_template,
    parse_go_float,
    select_latest,
)

VECTORS = json.loads((Path(__file__).parent / "data" / "go_oracle_vectors.json").read_text(encoding="utf-8"))


def semver(range_text: str) -> dict[str, object]:
    return {"semver": {"range": range_text}}


def shuffled(items: list[str], seed: int) -> list[str]:
    copy = list(items)
    random.Random(seed).shuffle(copy)
    return copy


# --- semver -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tags, range_text, expected",
    [
        (["1.0.0", "1.0.0.1", "1.0.0p", "1.0.1", "1.2.0", "0.1.0"], "1.0.x", "1.0.1"),
        (["v1.2.3", "v1.0.0", "v0.1.0"], "1.0.x", "v1.0.0"),
        (["0.1.0", "0.1.1", "0.2.0", "1.0.0", "1.0.1", "1.0.2", "1.1.0-alpha"], "1.0.x", "1.0.2"),
        (["1.0.0", "2.0.0", "1.0.1", "1.2.0"], "v1.0.x", "1.0.1"),
        (["v1.0.0", "v2.0.0", "v1.0.1", "v1.2.0"], "1.0.x", "v1.0.1"),
        (["1.0.0", "1.1.0-alpha", "1.0.5"], "1.x", "1.0.5"),
        (["1.0.0", "1.1.0-alpha"], ">=1.0.0-0", "1.1.0-alpha"),
        (["2021.12.1", "2022.04.1", "2022.4.2"], ">=2021.0.0", "2022.4.2"),
        (["2025.07.03", "2025.6.1"], ">=2025.0.0", "2025.07.03"),
        (["2025.07.03", "2025.7.4", "2024.12.31"], "<2025.7.4", "2025.07.03"),
        (["v0.0.1", "v0.0.1-1-abcd"], "*", "v0.0.1"),
        (["v0.0.1", "v0.0.2-1-abcd"], ">=0.0.1-0", "v0.0.2-1-abcd"),
        (["latest", "main", "sha-1234"], "*", None),
    ],
)
def test_semver_policy(tags: list[str], range_text: str, expected: str | None) -> None:
    for seed in range(4):
        assert select_latest(shuffled(tags, seed), semver(range_text)) == expected


def test_semver_policy_without_candidates_returns_none() -> None:
    assert select_latest(["b1.2.3", "b1.0.0", "b0.1.0"], semver("1.0.x")) is None
    assert select_latest([], semver("1.0.x")) is None
    assert select_latest(["1.2.0"], semver("1.0.x")) is None


def test_semver_ties_keep_the_first_tag_seen() -> None:
    assert select_latest(["v1.0.0", "1.0.0"], semver("1.x")) == "v1.0.0"
    assert select_latest(["1.0.0", "v1.0.0"], semver("1.x")) == "1.0.0"
    assert select_latest(["1.0.0+b", "1.0.0+a"], semver("1.x")) == "1.0.0+b"


@pytest.mark.parametrize("range_text", ["1.0.0p", "1x", "x1", "-1", "a", "", "*-*"])
def test_invalid_semver_range_is_an_invalid_policy_even_without_tags(range_text: str) -> None:
    with pytest.raises(InvalidPolicyError, match="invalid policy"):
        select_latest([], semver(range_text))


# --- alphabetical ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "tags, order, expected",
    [
        (["16.04", "16.04.1", "16.10", "20.04", "20.10"], "asc", "20.10"),
        (["16.04", "16.04.1", "16.10", "20.04", "20.10"], "desc", "16.04"),
        (["xenial", "yakkety", "zesty", "artful", "bionic"], "asc", "zesty"),
        (["xenial", "yakkety", "zesty", "artful", "bionic"], "desc", "artful"),
        (["1606234201", "1606364286", "1606334092"], "", "1606364286"),
        (["rel-1606234201", "rel-1606364286", "rel-1606334092"], "ASC", "rel-1606364286"),
        (["2021-01-08T21-18-21Z", "2021-01-08T21-19-21Z", "2020-12-31T23-59-59Z"], "asc", "2021-01-08T21-19-21Z"),
        (["1.0.63", "1.0.9"], "asc", "1.0.9"),  # byte order, the #192 surprise
        (["3d-dev-1.0.9", "1.0.63"], "asc", "3d-dev-1.0.9"),
        (["B", "a"], "asc", "a"),
    ],
)
def test_alphabetical_policy(tags: list[str], order: str, expected: str) -> None:
    for seed in range(3):
        assert select_latest(shuffled(tags, seed), {"alphabetical": {"order": order}}) == expected


def test_alphabetical_defaults_to_ascending_and_rejects_unknown_order() -> None:
    assert select_latest(["a", "c", "b"], {"alphabetical": {}}) == "c"
    with pytest.raises(InvalidPolicyError, match="invalid order argument provided: 'INVALID'"):
        select_latest(["a"], {"alphabetical": {"order": "invalid"}})


# --- numerical ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tags, order, expected",
    [
        (["-62", "-88", "73", "72", "15", "16", "15", "29", "-33", "-91"], "asc", "73"),
        (["5", "-8", "-78", "25", "70", "-4", "80", "92", "-20", "-24"], "desc", "-78"),
        (["47.40896403322944", "-27.8520927455902", "53.47333823144817", "3.2008658570411086"], "asc",
         "53.47333823144817"),
        (["-65.27202780220686", "57.82948329142309", "-90.29082099756083", "16.06867070412028"], "desc",
         "-90.29082099756083"),
        (["1606234201", "1606364286", "1606334092", "1606334284"], "asc", "1606364286"),
        (["1606234201", "1606364286", "1606334092", "1606334284"], "desc", "1606234201"),
        (["1"], "asc", "1"),
        (["1"], "desc", "1"),
        (["9", "10", "100"], "asc", "100"),
        (["0x1p4", "15", "1e1"], "asc", "0x1p4"),
    ],
)
def test_numerical_policy(tags: list[str], order: str, expected: str) -> None:
    for seed in range(3):
        assert select_latest(shuffled(tags, seed), {"numerical": {"order": order}}) == expected


def test_numerical_ties_keep_the_last_tag_seen() -> None:
    assert select_latest(["1", "1.0"], {"numerical": {"order": "asc"}}) == "1.0"
    assert select_latest(["1.0", "1"], {"numerical": {"order": "desc"}}) == "1"


def test_numerical_fails_on_any_non_number() -> None:
    with pytest.raises(PolicyError, match="failed to parse invalid numeric value '1a'") as caught:
        select_latest(["0", "1a", "b"], {"numerical": {"order": "asc"}})
    assert not isinstance(caught.value, InvalidPolicyError)
    assert select_latest([], {"numerical": {}}) is None
    with pytest.raises(InvalidPolicyError):
        select_latest(["1"], {"numerical": {"order": "up"}})


def test_policy_choice_order_and_missing_choice() -> None:
    both = {"semver": {"range": ">=1.0.0"}, "alphabetical": {"order": "asc"}}
    assert select_latest(["1.0.0", "2.0.0", "zzz"], both) == "2.0.0"
    with pytest.raises(InvalidPolicyError, match="ImagePolicyChoice"):
        select_latest(["1.0.0"], {})
    with pytest.raises(InvalidPolicyError):
        select_latest(["1.0.0"], {"semver": {}})


# --- go float grammar --------------------------------------------------------------------


def test_go_float_grammar_matches_strconv() -> None:
    mismatches = []
    for text, expected in VECTORS["floats"]:
        try:
            actual: object = parse_go_float(text)
        except ValueError:
            actual = None
        if expected is None or actual is None:
            ok = expected is actual
        elif expected == "NaN":
            ok = isinstance(actual, float) and math.isnan(actual)
        else:
            ok = float(expected.replace("Inf", "inf")) == actual
        if not ok:
            mismatches.append((text, expected, actual))
    assert not mismatches, mismatches[:5]


@pytest.mark.parametrize("text", [" 1", "1 ", "1e400", "0x10", "1__0", "_1", "+nan", "1e", ""])
def test_go_float_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_go_float(text)


def test_go_float_accepts_go_only_forms() -> None:
    assert parse_go_float("1_000") == 1000.0
    assert parse_go_float("0x1.8p1") == 3.0
    assert parse_go_float("-Infinity") == -math.inf
    assert parse_go_float("1e-400") == 0.0


# --- filterTags --------------------------------------------------------------------------


def test_filter_without_pattern_passes_everything() -> None:
    assert apply_tag_filter(["a", "b"], "") == {"a": "a", "b": "b"}
    assert select_latest(["a", "c", "b"], {"alphabetical": {}}, {"pattern": ""}) == "c"


def test_filter_is_unanchored_search() -> None:
    assert apply_tag_filter(["ver1", "xver2", "1ver"], "ver") == {"ver1": "ver1", "xver2": "xver2", "1ver": "1ver"}
    assert apply_tag_filter(["ver1", "xver2", "1ver"], "^ver") == {"ver1": "ver1"}


def test_filter_extract_with_numbered_and_named_groups() -> None:
    assert sorted(apply_tag_filter(["ver1", "ver2", "ver3", "other"], r"ver(\d+)", "$1")) == ["1", "2", "3"]
    named = apply_tag_filter(["ver1", "ver2"], r"ver(?P<tag>\d+)", "$tag")
    assert named == {"1": "ver1", "2": "ver2"}
    go_named = apply_tag_filter(["ver7"], r"ver(?<num>\d+)", "${num}")
    assert go_named == {"7": "ver7"}


def test_filter_duplicate_extracts_keep_the_later_tag() -> None:
    assert apply_tag_filter(["a-1", "b-1"], r"-(\d)", "$1") == {"1": "b-1"}


@pytest.mark.parametrize("pattern", ["[=", "^test-(.*", "(?=x)", "a(?!b)", r"(a)\1", r"\C", "(?P<a>x)(?P=a)", "(?#c)"])
def test_filter_rejects_patterns_go_cannot_compile(pattern: str) -> None:
    with pytest.raises(InvalidPolicyError, match="invalid regular expression pattern"):
        compile_tag_filter(pattern)
    with pytest.raises(InvalidPolicyError, match="failed to filter tags"):
        select_latest(["x"], semver("*"), {"pattern": pattern})


def test_filter_translates_go_only_syntax() -> None:
    assert compile_tag_filter(r"^[[:digit:]]+\z").search("123")
    assert not compile_tag_filter(r"^[[:digit:]]+\z").search("123\n")
    assert compile_tag_filter(r"[]a]").search("]")
    assert compile_tag_filter(r"^[a\s]+$").search("a \t")
    assert not compile_tag_filter(r"^\d+$").search("\u0661\u0662")  # RE2 \d is ASCII only
    assert compile_tag_filter(r"^\pL+$").search("ünïcode")  # Go has Unicode classes (\pL, \p{Greek})


def test_expand_matches_go_regexp_expand() -> None:
    mismatches = []
    for pattern, template, subject, expected in VECTORS["expands"]:
        match = compile_tag_filter(pattern).search(subject)
        actual = None if match is None else expand_template(template, match)
        if actual != expected:
            mismatches.append((pattern, template, subject, expected, actual))
    assert not mismatches, mismatches[:5]


def test_semver_over_extracted_values_returns_original_tag() -> None:
    tags = ["test-0.1.0", "test-0.1.1", "dev-0.2.0", "1.0.0", "1.0.1", "1.0.2", "1.1.0-alpha"]
    chosen = select_latest(tags, semver(">=0.x"), {"pattern": "^test-(.*)$", "extract": "$1"})
    assert chosen == "test-0.1.1"


def test_numerical_over_named_extract() -> None:
    tags = ["1.0.0", "1.0.0-rc.1", "1.0.0-rc.2", "1.0.0-rc.3", "1.0.1-rc.2"]
    filter_tags = {"pattern": r"1.0.0-rc\.(?P<num>[0-9]+)", "extract": "$num"}
    assert select_latest(tags, {"numerical": {"order": "asc"}}, filter_tags) == "1.0.0-rc.3"


def test_alphabetical_over_named_extract() -> None:
    tags = ["foo-aaa", "bar-bbb", "foo-zzz", "baz-nnn", "foo-ooo"]
    filter_tags = {"pattern": "foo-(?P<word>[a-z]+)", "extract": "$word"}
    assert select_latest(tags, {"alphabetical": {"order": "asc"}}, filter_tags) == "foo-zzz"


def test_filter_that_matches_nothing_returns_none() -> None:
    assert select_latest(["1.0.0"], semver("*"), {"pattern": "^nomatch$"}) is None


def test_latest_alias_tracking_with_filter() -> None:
    assert select_latest(["latest", "1.0.0", "main"], {"alphabetical": {}}, {"pattern": "^latest$"}) == "latest"
