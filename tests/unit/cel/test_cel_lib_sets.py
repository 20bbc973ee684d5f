"""Kubernetes sets library (cel-go ext.Sets), from the documented examples."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("sets.contains([], [])", True),
        ("sets.contains([], [1])", False),
        ("sets.contains([1, 2, 3, 4], [2, 3])", True),
        ("sets.contains([1, 2.0, 3u], [1.0, 2u, 3])", True),
        ("sets.equivalent([], [])", True),
        ("sets.equivalent([1], [1, 1])", True),
        ("sets.equivalent([1], [1u, 1.0])", True),
        ("sets.equivalent([1, 2, 3], [3u, 2.0, 1])", True),
        ("sets.equivalent([1, 2], [2, 2, 2])", False),
        ("sets.intersects([1], [])", False),
        ("sets.intersects([1], [1, 2])", True),
        ("sets.intersects([[1], [2, 3]], [[1, 2], [2, 3.0]])", True),
        ("sets.intersects(['a'], ['b'])", False),
    ],
)
def test_documented_examples(ev: Any, expression: str, expected: bool) -> None:
    assert ev(expression) is expected
