"""Go regexp semantics of stockade.goregex: Go's error texts, what Go rejects, ReplaceAll templates and empty matches."""

from __future__ import annotations

import pytest

from stockade.goregex import GoRegexError, compile_go_regex, expand_template, find_all, replace_all


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("(abc", "missing closing ): `(abc`"),
        ("abc)", "unexpected ): `abc)`"),
        ("[a", "missing closing ]: `[a`"),
        ("a**", "invalid nested repetition operator: `**`"),
        ("x{2}{3}", "invalid nested repetition operator: `{2}{3}`"),
        ("*", "missing argument to repetition operator: `*`"),
        ("x{1001}", "invalid repeat count: `{1001}`"),
        ("a\\", "trailing backslash at end of expression: ``"),
        ("[z-a]", "invalid character class range: `z-a`"),
        ("[[:foo:]]", "invalid character class range: `[:foo:]`"),
        ("\\pX", "invalid character class range: `\\pX`"),
        ("(?P<n", "invalid named capture: `(?P<n`"),
        ("(?P<é>a)", "invalid named capture: `(?P<é>`"),  # Go names are ASCII word characters only
        # Perl syntax RE2 (and so Go) does not implement
        ("(?=a)", "invalid or unsupported Perl syntax: `(?=`"),
        ("(?!a)", "invalid or unsupported Perl syntax: `(?!`"),
        ("(?<=a)b", "invalid or unsupported Perl syntax: `(?<=`"),
        ("(?<!a)b", "invalid or unsupported Perl syntax: `(?<!`"),
        ("(?P<a>x)(?P=a)", "invalid or unsupported Perl syntax: `(?P`"),
        ("(a)\\1", "invalid escape sequence: `\\1`"),
        ("\\Z", "invalid escape sequence: `\\Z`"),
        ("\\C", "invalid escape sequence: `\\C`"),  # RE2's any-byte escape is not Go
    ],
)
def test_rejections_use_go_error_text(pattern: str, message: str) -> None:
    with pytest.raises(GoRegexError) as caught:
        compile_go_regex(pattern)
    assert str(caught.value) == f"error parsing regexp: {message}"


@pytest.mark.parametrize(
    ("pattern", "text", "found"),
    [
        ("a$", "a\n", None),  # $ is end of text without (?m), unlike Python's re
        ("(?m)a$", "a\nb", "a"),
        ("^b", "a\nb", None),
        ("(?m)^b", "a\nb", "b"),
        ("a\\z", "a", "a"),
        ("\\d+", "\u0663\u0664 42", "42"),  # ASCII \d
        ("\\w+", "é_x1", "_x1"),  # ASCII \w
        ("\\bx", "éx", "x"),  # ASCII word boundary: é is not a word character
        ("[[:alpha:]]+", "12ab3", "ab"),
        ("[[:^digit:]]+", "12ab3", "ab"),
        ("\\pL+", "1ünï2", "ünï"),
        ("\\p{Greek}", "aβ", "β"),
        ("\\Q.*\\E", "a.*b", ".*"),
        ("\\12", "\n", "\n"),  # octal escape, not a back-reference
        ("(?i)straße", "STRASSE straße", "straße"),
        ("(?s).", "\n", "\n"),
        (".", "\n", None),
        ("(?U)a+", "aaa", "a"),
        ("a|ab", "ab", "a"),  # leftmost-first, not leftmost-longest
        ("x", "\ud800x", "x"),  # a lone surrogate does not break matching
    ],
)
def test_search_follows_go(pattern: str, text: str, found: str | None) -> None:
    match = compile_go_regex(pattern).search(text)
    assert (match.group(0) if match else None) == found


def test_offsets_are_characters_not_bytes() -> None:
    match = compile_go_regex("(?P<word>b+)").search("ééébb")
    assert match is not None and match.span() == (3, 5) and match.group("word") == "bb"


@pytest.mark.parametrize(
    ("pattern", "source", "template", "expected"),
    [
        ("a*", "baaacada", "X", "XbXcXdX"),  # no empty match right after a match
        ("x*", "abxd", "-", "-a-b-d-"),
        ("", "abc", "-", "-a-b-c-"),
        ("([a-z]+)-([0-9]+)", "abc-123", "$2-$1", "123-abc"),
        ("(?P<word>[a-z]+)", "ab cd", "<${word}>", "<ab> <cd>"),
        ("(?<word>[a-z]+)", "ab", "${word}!", "ab!"),
        ("([a-z]+)", "ab", "$1x", ""),  # $1x names group "1x", which does not exist
        ("([a-z]+)", "ab", "${1}x", "abx"),
        ("([a-z]+)", "ab", "$$1", "$1"),
        ("(a)|(b)", "ab", "[$1$2]", "[a][b]"),  # a group that did not take part expands to ""
        ("([a-z]+)", "ab", "${1", "${1"),  # malformed reference stays literal
        ("é", "aéb", "$0$0", "aééb"),
    ],
)
def test_replace_all_expands_like_go(pattern: str, source: str, template: str, expected: str) -> None:
    assert replace_all(compile_go_regex(pattern), source, template, literal=False) == expected


def test_replace_all_literal_keeps_dollars() -> None:
    assert replace_all(compile_go_regex("[a-z]+"), "ab cd", "$0", literal=True) == "$0 $0"


@pytest.mark.parametrize(
    ("pattern", "text", "limit", "expected"),
    [
        ("a*", "abaa", -1, ["a", "aa"]),  # the empty matches at 1 and 4 abut a match: skipped
        ("a*", "baaacada", -1, ["", "aaa", "a", "a"]),
        ("", "ab", -1, ["", "", ""]),
        ("[0-9]+", "1 22 333", 2, ["1", "22"]),
        ("[0-9]+", "1 22 333", 0, []),
    ],
)
def test_find_all_follows_go(pattern: str, text: str, limit: int, expected: list[str]) -> None:
    assert find_all(compile_go_regex(pattern), text, limit) == expected


def test_expand_template_on_a_search_match() -> None:
    match = compile_go_regex(r"v(?P<major>\d+)\.(\d+)").search("tag v1.25")
    assert match is not None
    assert expand_template("$major-$2-${major}", match) == "1-25-1"
