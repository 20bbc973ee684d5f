"""User-supplied regexes and wildcards run in time linear in the input, through every entry point that takes them.

Each test would take hours (or forever) on a backtracking matcher; a 20 s alarm turns such a regression into a
failure instead of a hang.  The inputs are 100,000 characters (1 MB for the wildcard).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest

from stockade.cel import CelActivation, CelEnvironment
from stockade.goregex import compile_go_regex, replace_all
from stockade.jmespath import search
from stockade.reflector.policy import apply_tag_filter
from stockade.wildcard import match as wildcard_match

CATASTROPHIC = ["^([a-z0-9]+-?)+$", "^(a+)+$", "(a|aa)+$", "^(\\w+\\s?)*$", "(.*a){12}"]
LONG_TEXT = "a" * 100_000 + "!"  # almost matches: the worst case for backtracking


@pytest.fixture(autouse=True)
def twenty_second_guard() -> Iterator[None]:
    def fail(signum: int, frame: Any) -> None:
        raise TimeoutError("matching took over 20 s: it is not linear any more")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_the_reported_annotation_case_is_instant() -> None:
    annotation = "a1-b2-c3-d4-e5-f6-g7-h8-i9_!"  # 28 characters: ~10 s under Python's re
    assert search("regex_match('^([a-z0-9]+-?)+$', @)", annotation) is False


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_goregex_search_replace_and_fullmatch(pattern: str) -> None:
    regexp = compile_go_regex(pattern)
    assert regexp.fullmatch(LONG_TEXT) is None
    regexp.search(LONG_TEXT)
    replace_all(regexp, LONG_TEXT, "x", literal=False)


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_jmespath_regex_functions(pattern: str) -> None:
    quoted = pattern.replace("\\", "\\\\")
    assert search(f"regex_match('{quoted}', @)", LONG_TEXT) in (True, False)
    assert isinstance(search(f"regex_replace_all('{quoted}', @, 'x')", LONG_TEXT), str)
    assert isinstance(search(f"regex_replace_all_literal('{quoted}', @, 'x')", LONG_TEXT), str)


def test_cel_regex_library_and_builtin_matches() -> None:
    environment = CelEnvironment(["object"])
    activation = CelActivation({"object": {"text": LONG_TEXT, "pattern": "^([a-z0-9]+-?)+$"}})
    for expression in (
        "object.text.find(object.pattern)",
        "object.text.findAll(object.pattern)",
        "regex.replace(object.text, object.pattern, 'x')",
        "object.text.matches(object.pattern)",
    ):
        environment.compile(expression).evaluate(activation)


def test_flux_tag_filter() -> None:
    assert apply_tag_filter([LONG_TEXT, "v1-2-3"], "^([a-z0-9]+-?)+$") == {"v1-2-3": "v1-2-3"}


def test_wildcard_on_a_megabyte_image() -> None:
    image = "registry.example.com/" + "a/" * 500_000 + "app"  # no tag: */*/*:* cannot match
    assert len(image) > 1_000_000
    assert wildcard_match("*/*/*:*", image) is False
    assert wildcard_match("*/*/*:*", image + ":v1") is True
    assert search("pattern_match('*/*/*:*', @)", image) is False


def test_wildcard_with_question_marks_on_a_megabyte_text() -> None:
    text = "ab" * 500_000
    assert wildcard_match("*a?b*", text) is False  # every second character after an a is an a
    assert wildcard_match("*b?b*", text) is True
