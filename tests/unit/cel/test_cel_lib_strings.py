"""cel-go ext.Strings as Kubernetes enables it (version 2+), from the documented examples."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.cel import CelEvalError


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("'hello'.charAt(4)", "o"),
        ("'hello'.charAt(5)", ""),
        ("'hello mellow'.indexOf('')", 0),
        ("'hello mellow'.indexOf('ello')", 1),
        ("'hello mellow'.indexOf('jello')", -1),
        ("'hello mellow'.indexOf('', 2)", 2),
        ("'hello mellow'.indexOf('ello', 2)", 7),
        ("'hello mellow'.lastIndexOf('')", 12),
        ("'hello mellow'.lastIndexOf('ello')", 7),
        ("'hello mellow'.lastIndexOf('jello')", -1),
        ("'hello mellow'.lastIndexOf('ello', 6)", 1),
        ("'TacoCat'.lowerAscii()", "tacocat"),
        ("'TacoCÆt Xii'.lowerAscii()", "tacocÆt xii"),
        ("'TacoCat'.upperAscii()", "TACOCAT"),
        ("'hello hello'.replace('he', 'we')", "wello wello"),
        ("'hello hello'.replace('he', 'we', -1)", "wello wello"),
        ("'hello hello'.replace('he', 'we', 1)", "wello hello"),
        ("'hello hello'.replace('he', 'we', 0)", "hello hello"),
        ("'hello hello'.split(' ')", ["hello", "hello"]),
        ("'hello hello hello'.split(' ', 0)", []),
        ("'hello hello hello'.split(' ', 1)", ["hello hello hello"]),
        ("'hello hello hello'.split(' ', 2)", ["hello", "hello hello"]),
        ("'hello hello hello'.split(' ', -1)", ["hello", "hello", "hello"]),
        ("'tacocat'.substring(4)", "cat"),
        ("'tacocat'.substring(0, 4)", "taco"),
        ("'  \\ttrim\\n    '.trim()", "trim"),
        ("['hello', 'mellow'].join()", "hellomellow"),
        ("['hello', 'mellow'].join(' ')", "hello mellow"),
        ("[].join('/')", ""),
        ("strings.quote('single-quote with \"double quote\"')", '"single-quote with \\"double quote\\""'),
        ("'gums'.reverse()", "smug"),
        ("'this is a %s'.format(['string'])", "this is a string"),
        ("'%d items'.format([3])", "3 items"),
        ("'%.2f'.format([3.14159])", "3.14"),
        ("'%x'.format([255])", "ff"),
    ],
)
def test_documented_examples(ev: Any, expression: str, expected: Any) -> None:
    assert ev(expression) == expected


@pytest.mark.parametrize("expression", ["'tacocat'.substring(40)", "'hello'.charAt(-1)"])
def test_out_of_range_is_an_error(ev: Any, expression: str) -> None:
    with pytest.raises(CelEvalError):
        ev(expression)
