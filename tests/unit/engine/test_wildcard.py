"""go-wildcard v1 semantics as Kyverno uses them for images, names, labels and string patterns."""

import pytest

from stockade.engine.wildcard import contains_wildcard, match


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        ("*", "anything at all", True),
        ("*", "", True),
        ("", "", True),
        ("", "x", False),
        ("nginx", "nginx", True),
        ("nginx", "nginx2", False),
        ("*:latest", "nginx:latest", True),
        ("*:latest", "nginx:1.2", False),
        ("nginx*", "nginx", True),  # star matches the empty run
        ("ng*x", "ngx", True),
        ("ng?nx", "nginx", True),
        ("ng?nx", "ngnx", False),  # ? is exactly one character
        ("?*", "", False),  # the idiom for "non-empty"
        ("?*", "a", True),
        ("??", "abc", False),
        ("a*b*c", "aXXbYYc", True),
        ("a*b*c", "aXXbYY", False),
        ("my-bucket/In*", "my-bucket/Karnataka/India/", False),
        ("a.b", "aXb", False),  # regex metacharacters are literal
        ("[ab]", "a", False),
        ("[ab]", "[ab]", True),
        ("*\n*", "x\ny", True),  # star spans newlines
        ("é?", "éü", True),  # ? is one character, not one byte
        ("**", "", True),
    ],
)
def test_match(pattern: str, text: str, expected: bool) -> None:
    assert match(pattern, text) is expected


@pytest.mark.parametrize(
    ("text", "expected"), [("app*", True), ("a?b", True), ("plain", False), ("", False)]
)
def test_contains_wildcard(text: str, expected: bool) -> None:
    assert contains_wildcard(text) is expected
