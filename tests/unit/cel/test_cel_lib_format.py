"""Kubernetes format library: ``format.<name>().validate(s)`` is an optional list of errors (none = valid)."""

from __future__ import annotations

from typing import Any

import pytest

VALID = [
    ("dns1123Label", "my-label-name"),
    ("dns1123Subdomain", "apiextensions.k8s.io"),
    ("dns1035Label", "my-name"),
    ("qualifiedName", "example.com/MyName_1"),
    ("dns1123LabelPrefix", "my-prefix-"),
    ("dns1123SubdomainPrefix", "example.com-"),
    ("dns1035LabelPrefix", "my-prefix-"),
    ("labelValue", "my_value.1"),
    ("labelValue", ""),
    ("uri", "https://example.com/path"),
    ("uuid", "123e4567-e89b-12d3-a456-426614174000"),
    ("byte", "aGVsbG8="),
    ("date", "2024-02-29"),
    ("datetime", "2024-02-29T10:00:00+01:00"),
]

INVALID = [
    ("dns1123Label", "MY_LABEL"),
    ("dns1123Label", "a" * 64),
    ("dns1123Subdomain", "-leading.example.com"),
    ("dns1035Label", "1abc"),
    ("qualifiedName", "-bad/name"),
    ("labelValue", "-bad"),
    ("uri", "relative/path"),
    ("uuid", "not-a-uuid"),
    ("byte", "!!"),
    ("date", "2023-02-29"),
    ("datetime", "2024-02-29 10:00"),
]


@pytest.mark.parametrize(("name", "text"), VALID)
def test_valid_values_give_no_errors(ev: Any, name: str, text: str) -> None:
    assert ev(f"format.{name}().validate('{text}').hasValue()") is False
    assert ev(f"format.named('{name}').value().validate('{text}').hasValue()") is False


@pytest.mark.parametrize(("name", "text"), INVALID)
def test_invalid_values_give_error_messages(ev: Any, name: str, text: str) -> None:
    assert ev(f"format.{name}().validate('{text}').hasValue()") is True
    messages = ev(f"format.{name}().validate('{text}').value()")
    assert messages and all(isinstance(message, str) and message for message in messages)


def test_named_lookup(ev: Any) -> None:
    assert ev("format.named('dns1123Label').hasValue()") is True
    assert ev("format.named('nonexistent').hasValue()") is False


def test_dns1123_label_message_names_the_rule(ev: Any) -> None:
    message = ev("format.dns1123Label().validate('MY_LABEL').value()[0]")
    assert message.startswith("a lowercase RFC 1123 label must consist of") or "lower case alphanumeric" in message


def test_typical_policy_use(ev: Any) -> None:
    expression = "!format.dns1123Label().validate(object.metadata.name).hasValue()"
    assert ev(expression, object={"metadata": {"name": "web-1"}}) is True
    assert ev(expression, object={"metadata": {"name": "Web_1"}}) is False
