"""A patch path as the JMESPath expression Kyverno builds for ``{{@}}`` (pkg/utils/jsonpointer's JMESPath rules)."""

import pytest

from stockade.jmespath import search
from stockade.jmespath.pointer import pointer_expression


@pytest.mark.parametrize(
    ("components", "expression"),
    [
        (("request", "object", "spec", "replicas"), "request.object.spec.replicas"),
        (("spec", "containers", 0, "image"), "spec.containers[0].image"),
        # a component that reads as an unsigned integer is an index, even as a map key
        (("spec", "containers", "1"), "spec.containers[1]"),
        (("labels", "deploy-zone"), 'labels."deploy-zone"'),
        (("labels", "corp.com/retention"), 'labels."corp.com\\/retention"'),
        (("labels", '"quoted"\\'), 'labels."\\"quoted\\"\\\\"'),
        (("labels", "tab\there"), 'labels."tab\\there"'),
        (("labels", "bell\x07"), 'labels."bell\\u0007"'),
        (("labels", "9lives"), 'labels."9lives"'),
        (("labels", ""), 'labels.""'),
    ],
)
def test_components_are_written_as_kyverno_writes_them(components: tuple[str | int, ...], expression: str) -> None:
    assert pointer_expression(components) == expression


def test_quoted_components_select_the_value_they_name() -> None:
    data = {"metadata": {"labels": {"corp.com/retention": "days_37", "deploy-zone": "frankfurt", 'odd"\\key': "x"}}}
    for key, value in data["metadata"]["labels"].items():
        assert search(pointer_expression(("metadata", "labels", key)), data) == value
