"""Substitution is bounded in size: a value that substitutes into itself ends in an error, never a hang."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest

from stockade.engine.context import EngineContext
from stockade.engine.engine import Engine, Request
from stockade.engine.variables import MAX_SUBSTITUTION_GROWTH, SubstitutionLimitError, substitute_all
from stockade.policy.model import KyvernoPolicy

DOUBLING = "{{request.object.metadata.annotations.x}}{{request.object.metadata.annotations.x}}"


@pytest.fixture(autouse=True)
def alarm() -> Iterator[None]:
    """Fail instead of hanging forever: each of these must finish in well under a second."""

    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError("substitution did not stop")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _context(annotation: str) -> EngineContext:
    return EngineContext({"request": {"object": {"metadata": {"name": "web", "annotations": {"x": annotation}}}}})


def test_self_doubling_value_is_a_limit_error() -> None:
    ctx = _context(DOUBLING)
    with pytest.raises(SubstitutionLimitError, match="at path /data/v exceeds the substitution limit"):
        substitute_all("value: {{request.object.metadata.annotations.x}}", ctx, ("data", "v"))


def test_growth_budget_is_shared_by_the_whole_document() -> None:
    ctx = _context("a" * (MAX_SUBSTITUTION_GROWTH // 2 + 100))
    one = "<{{request.object.metadata.annotations.x}}>"
    assert len(substitute_all({"a": one}, ctx)["a"]) == MAX_SUBSTITUTION_GROWTH // 2 + 102
    with pytest.raises(SubstitutionLimitError, match="at path /b .*more than 1048576 bytes"):
        substitute_all({"a": one, "b": one}, ctx)


def test_ordinary_nested_substitution_still_works() -> None:
    ctx = _context("{{request.object.metadata.name}}")
    assert substitute_all("x-{{request.object.metadata.annotations.x}}", ctx) == "x-web"


def test_doubling_resource_gives_a_rule_error_naming_the_rule() -> None:
    policy = KyvernoPolicy(
        {
            "apiVersion": "kyverno.io/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "check-annotation"},
            "spec": {
                "rules": [
                    {
                        "name": "annotation-echo",
                        "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                        "validate": {"pattern": {"metadata": {"name": "pre-{{request.object.metadata.annotations.x}}"}}},
                    }
                ]
            },
        }
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "annotations": {"x": DOUBLING}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }
    engine = Engine()
    response = engine.validate(engine.policy_context(policy, Request(resource=pod)))
    assert response.policy_name == "check-annotation"
    [rule] = response.rules
    assert (rule.name, rule.status) == ("annotation-echo", "error")
    assert "exceeds the substitution limit" in rule.message
