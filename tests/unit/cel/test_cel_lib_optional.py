"""CEL optional types (``?.``, ``[?]``, ``optional.*``) as Kubernetes and Kyverno policies use them."""

from __future__ import annotations

from typing import Any

import pytest

POD = {"metadata": {"name": "p", "labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}], "nodeName": None}}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("object.?metadata.?labels.?app.orValue('none')", "web"),
        ("object.?metadata.?labels.?team.orValue('none')", "none"),
        ("object.metadata.labels[?'app'].orValue('')", "web"),
        ("object.metadata.labels[?'x'].hasValue()", False),
        ("object.spec.containers[?0].?name.orValue('')", "c"),
        ("object.spec.containers[?5].hasValue()", False),
        ("object.?spec.?securityContext.?runAsNonRoot.orValue(false)", False),
        ("optional.of(1).value()", 1),
        ("optional.none().orValue(2)", 2),
        ("optional.ofNonZeroValue('').hasValue()", False),
        ("optional.ofNonZeroValue('x').hasValue()", True),
        ("optional.of(1).or(optional.of(2)).value()", 1),
        ("optional.none().or(optional.of(2)).value()", 2),
        ("{'a': 1, ?'b': optional.none()}", {"a": 1}),
        ("[1, ?optional.none(), ?optional.of(3)]", [1, 3]),
        # a top-level optional is unwrapped: absence becomes null
        ("object.?metadata.?labels.?team", None),
        ("object.?metadata.?labels.?app", "web"),
    ],
)
def test_optional_examples(ev: Any, expression: str, expected: Any) -> None:
    assert ev(expression, object=POD) == expected


def test_explicit_null_field_is_present_but_null(ev: Any) -> None:
    assert ev("has(object.spec.nodeName)", object=POD) is True
    assert ev("object.spec.?nodeName.orValue('x') == null", object=POD) is True
