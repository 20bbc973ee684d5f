"""The list and ASCII fast paths of goregex give exactly the matches of the binding's own one-text search.

`search` on ASCII text calls RE2 directly, and `search_each` searches a whole list as one newline-joined text with a
(?m)/never_nl program; both must agree with `re2`'s public `search` (spans and every group) on each text.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import re2

from stockade.goregex import GoMatch, compile_go_regex, compile_template, expand_template

VECTORS = json.loads((Path(__file__).parents[1] / "reflector" / "data" / "go_oracle_vectors.json").read_text(encoding="utf-8"))

PATTERNS = [
    r"^v?(?P<v>[0-9]+\.[0-9]+\.[0-9]+)$",
    r"^main-(?P<ts>[0-9]+)-[a-f0-9]+$",
    r"[0-9]+",
    r"x*",  # empty matches everywhere
    r"$",
    r"^",
    r"^$",
    r"\b[a-z]+\b",
    r"\B[0-9]\B",
    r"(?s)a.*b",
    r"a[^x]*b",
    r"a\s*b",
    r"\D+$",
    r"(a)|(b)|(c)?",
    r"(?i)^REL-(\d+)",
    r"^(.*?)-(.*)$",
    r"(?U)a+",
    r"(a+)(b)?",
    r"\Aab",  # text anchors and the m flag keep the one-text search
    r"ab\z",
    r"(?m)^b$",
    r"(?im:^B)",
    r"[\n]|q",
]

TEXTS = ["", "a", "b", "ab", "ba", "axb", "a b", "aab", "1.2.3", "v1.2.3", "v1.2.3-rc.1", "main-1700000000-abc1234",
         "rel-42", "REL-7-x", "x", "xx", "123", "a1b", "foo-bar-baz", " ", "ab ab", "b\ta", "zzz"]


def reference(pattern: str, text: str) -> tuple[tuple[int, int], ...] | None:
    found = re2.compile(pattern).search(text)
    if found is None:
        return None
    return tuple(found.span(index) for index in range(found.re.groups + 1))


def spans(match: GoMatch, groups: int) -> tuple[tuple[int, int], ...]:
    return tuple(match.span(index) for index in range(groups + 1))


@pytest.mark.parametrize("pattern", PATTERNS)
def test_ascii_search_agrees_with_the_binding(pattern: str) -> None:
    regexp = compile_go_regex(pattern)
    for text in TEXTS:
        found = regexp.search(text)
        expected = reference(pattern, text)
        assert (None if found is None else spans(found, regexp.groups)) == expected, (pattern, text)
        if found is not None:
            assert [found.group(i) for i in range(regexp.groups + 1)] == [
                None if a < 0 else text[a:b] for a, b in expected or ()
            ]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_search_each_agrees_with_searching_each_text(pattern: str) -> None:
    regexp = compile_go_regex(pattern)
    lists = [TEXTS, list(reversed(TEXTS)), TEXTS[:1], [], ["", ""], ["ab", "", "ab"], TEXTS + ["ünï", "ab"],
             ["ab\nab", "ab"], list(itertools.chain.from_iterable(zip(TEXTS, TEXTS[1:])))]
    for texts in lists:
        batch = [(text, spans(found, regexp.groups), [found.group(i) for i in range(regexp.groups + 1)])
                 for text, found in regexp.search_each(texts)]
        one_by_one = []
        for text in texts:
            expected = reference(pattern, text)
            if expected is not None:
                one_by_one.append((text, expected, [None if a < 0 else text[a:b] for a, b in expected]))
        assert batch == one_by_one, (pattern, texts)


def test_search_each_keeps_the_first_match_of_each_text_only() -> None:
    regexp = compile_go_regex(r"[0-9]+")
    found = list(regexp.search_each(["a1b22c333", "x", "44 5"]))
    assert [(text, match.group(0), match.span()) for text, match in found] == [("a1b22c333", "1", (1, 2)), ("44 5", "44", (0, 2))]


def test_named_group_access_and_bad_groups() -> None:
    regexp = compile_go_regex(r"(?P<major>\d+)\.(?P<minor>\d+)(x)?")
    match = regexp.search("v10.20")
    assert match is not None
    assert match.group("major") == "10" and match.group("minor") == "20" and match.group(3) is None
    assert match.span(3) == (-1, -1) and match.start() == 1 and match.end() == 6
    with pytest.raises(IndexError):
        match.group(4)
    with pytest.raises(KeyError):
        match.group("patch")


def test_compiled_templates_match_go_expand_vectors() -> None:
    """Rows from running Go's FindStringSubmatchIndex + ExpandString (see reflector/data/README.md)."""
    mismatches = []
    for pattern, template, subject, expected in VECTORS["expands"]:
        regexp = compile_go_regex(pattern)
        expand = compile_template(template, regexp)
        neighbours = ["zzz", subject, "", subject + "-"]
        found = {text: expand(match) for text, match in regexp.search_each(neighbours)}
        single = regexp.search(subject)
        actual = None if single is None else expand_template(template, single)
        if found.get(subject) != expected or actual != expected:
            mismatches.append((pattern, template, subject, expected, found.get(subject), actual))
    assert not mismatches, mismatches[:5]
    assert len(VECTORS["expands"]) >= 600
