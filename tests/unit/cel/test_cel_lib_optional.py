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


# cel-go (Kyverno) semantics that cel-cpp lacks, provided by rewriting the expression.
NULLS = {"metadata": None, "spec": {"volumes": [{"name": "v"}], "template": {"metadata": None}}}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # an optional selection on null is absent, as in cel-go
        ("oldObject.?spec.orValue('absent')", "absent"),
        ("object.metadata.?labels.orValue({})", {}),
        ("object.spec.template.metadata.?annotations[?'a'].orValue('')", ""),
        ("object.?metadata.?labels.?app.orValue('none')", "none"),
        ("object.spec.?template.?metadata.?name.hasValue()", False),
        ("object.metadata[?'x'].hasValue()", False),
        # present-but-null stays present
        ("object.?metadata.hasValue()", True),
        # orValue on a plain (non-optional) value yields the value itself, as Kyverno evaluates it
        ("object.spec.volumes.orValue([]).size()", 1),
        ("object.spec.volumes.orValue([]).map(v, v.name)", ["v"]),
        ("object.spec.?volumes.orValue([]).size()", 1),
        ("object.spec.?missing.orValue([]).size()", 0),
        # plain index/selection after an optional stays optional (optional chaining)
        ("object.spec.?template['metadata'].orValue('x')", None),
        ("object.?spec.volumes[0].name.orValue('x')", "v"),
        ("object.?spec.volumes[0].?missing.orValue('x')", "x"),
    ],
)
def test_cel_go_null_and_or_value_semantics(ev: Any, expression: str, expected: Any) -> None:
    assert ev(expression, object=NULLS, oldObject=None) == expected


def test_plain_selection_on_null_is_still_an_error(ev: Any) -> None:
    from stockade.cel import CelEvalError

    with pytest.raises(CelEvalError):
        ev("object.metadata.labels", object=NULLS)
