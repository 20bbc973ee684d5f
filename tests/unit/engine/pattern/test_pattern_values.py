"""Single-leaf matching: operators, ranges, units, wildcards and typed patterns (kyverno.md §3.2-§3.3)."""

from typing import Any

import pytest

from stockade.engine.pattern import match_value


@pytest.mark.parametrize(
    ("value", "pattern", "expected"),
    [
        # plain strings and wildcards
        ("nginx:1.2", "nginx:*", True),
        ("busybox", "nginx:*", False),
        ("nginx:latest", "!*:latest", False),
        ("nginx:1.2", "!*:latest", True),
        ("", "?*", False),
        ("x", "?*", True),
        # OR / AND
        ("Always", "Always | IfNotPresent", True),
        ("Never", "Always | IfNotPresent", False),
        ("IfNotPresent", "Always|IfNotPresent", True),
        (5, ">1 & <10", True),
        (15, ">1 & <10", False),
        (15, ">1 & <10 | 15", True),
        # numeric comparisons through quantities
        (5, ">4", True),
        (5, ">5", False),
        (5, ">=5", True),
        (5, "<=4", False),
        (5, "< 6", True),  # space after the operator is allowed
        ("5", ">4", True),
        (4.5, ">4", True),
        (1001, "<=1000", False),
        (1000, "!1000", False),
        (999, "!1000", True),
        (None, "<1", True),  # nil counts as zero for numeric comparisons
        (None, ">=1", False),
        # quantities with units
        ("2Gi", "<=4Gi", True),
        ("5Gi", "<=4Gi", False),
        ("1024Mi", "1Gi", True),
        ("500m", "<1", True),
        ("1500m", "<1", False),
        # durations
        ("30m", "<1h", True),
        ("2h", "<1h", False),
        ("90s", "1m30s", True),
        ("1h", ">=60m", True),
        # ranges
        (5, "1-10", True),
        (10, "1-10", True),
        (11, "1-10", False),
        (0, "1-10", False),
        (11, "1!-10", True),
        (5, "1!-10", False),
        (-3, "-5-0", True),
        ("2Gi", "1Gi-4Gi", True),
        ("8Gi", "1Gi-4Gi", False),
        ("8Gi", "1Gi!-4Gi", True),
        ("1.5", "1.0-2.0", True),
        # ordering operators do not apply to plain strings
        ("b", ">a", False),
        ("abc", "<zzz", False),
        # non-string values under string patterns
        (True, "true", True),
        (False, "true", False),
        (False, "!true", True),
        (80, "80", True),
        (80, "8*", True),  # 8* is not a quantity, so the int is compared as text
        (1.5, "1.5E+00", True),  # floats are rendered with %E for text comparison
        (None, "*", False),
        ({"a": 1}, "*", False),
        (["a"], "a", False),
    ],
)
def test_string_patterns(value: Any, pattern: str, expected: bool) -> None:
    assert match_value(value, pattern) is expected


@pytest.mark.parametrize(
    ("value", "pattern", "expected"),
    [
        (True, True, True),
        (False, True, False),
        ("true", True, False),  # bool patterns accept bools only
        (1, True, False),
        (3, 3, True),
        (3, 4, False),
        (3.0, 3, True),
        (3.5, 3, False),
        ("3", 3, True),  # numeric strings are parsed
        ("3.0", 3, True),
        ("three", 3, False),
        (True, 1, False),
        (2.5, 2.5, True),
        ("2.5", 2.5, True),
        (2, 2.5, False),
        (2, 2.0, True),
        (None, None, True),
        (0, None, True),
        (0.0, None, True),
        ("", None, True),
        (False, None, True),
        (1, None, False),
        ("x", None, False),
        ({}, None, False),
        ([], None, False),
        ({"k": "v"}, {"other": 1}, True),  # a map leaf only checks the type
        ("x", {"k": "v"}, False),
        (["a"], ["a"], False),  # arrays are not valid leaves
    ],
)
def test_typed_patterns(value: Any, pattern: Any, expected: bool) -> None:
    assert match_value(value, pattern) is expected


def test_exact_string_shortcut_bypasses_operators() -> None:
    # A value identical to the pattern text matches even when the text would parse as an operator expression.
    assert match_value(">5", ">5") is True
    assert match_value("a|b", "a|b") is True
