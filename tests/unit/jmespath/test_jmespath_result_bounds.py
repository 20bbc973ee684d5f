"""String-building functions are bounded in output size: small input never becomes a huge string."""

from __future__ import annotations

import pytest

import stockade.jmespath as jmespath
from stockade.jmespath.registry import MAX_RESULT_GROWTH, ResultTooLargeError

BIG = {"s": "a" * 200_000, "short": "a" * 2_000, "wide": "${1}" + "b" * 1_000}


@pytest.mark.parametrize(
    "expression",
    [
        "replace_all(s, '', s)",
        "replace(s, 'a', s, `-1`)",
        "join(s, [s, s, s, s, s, s, s, s, s, s])",
        "regex_replace_all_literal('a', s, 'bbbbbbbbbb')",
        "regex_replace_all('(a)', short, wide)",
    ],
)
def test_amplifying_calls_are_refused(expression: str) -> None:
    with pytest.raises(ResultTooLargeError, match=f"exceeds the limit of {MAX_RESULT_GROWTH} characters"):
        jmespath.search(expression, BIG)


@pytest.mark.parametrize("pattern", ["(a{1000}){2000}", "((){60000}){60000}"])
def test_random_patterns_are_bounded(pattern: str) -> None:
    with pytest.raises(jmespath.JMESPathError, match="pattern generates more than"):
        jmespath.search(f"random('{pattern}')", {})


def test_ordinary_calls_are_unchanged() -> None:
    assert jmespath.search("join('-', ['a', 'b'])", {}) == "a-b"
    assert jmespath.search("replace_all('a.b.c', '.', '/')", {}) == "a/b/c"
    assert jmespath.search("replace('abc', '', '-', `2`)", {}) == "-a-bc"
    assert jmespath.search("regex_replace_all('(b)', 'abc', '[$1]')", {}) == "a[b]c"
    assert len(jmespath.search("replace_all(s, 'a', 'bb')", {"s": "a" * 100_000})) == 200_000


def test_parse_yaml_refuses_an_alias_bomb() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]\n" for previous, name in zip("abcdefgh", "bcdefghi")
    )
    with pytest.raises(jmespath.JMESPathError, match="aliases expand to more than"):
        jmespath.search("parse_yaml(s)", {"s": bomb})
    assert jmespath.search("parse_yaml(s).b[0][1]", {"s": "a: &a [1, 2]\nb: [*a]\n"}) == 2
