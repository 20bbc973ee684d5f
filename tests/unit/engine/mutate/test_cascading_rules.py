"""Kyverno's cascading mutation: each mutate rule sees, as ``request.object``, the object the earlier rules patched
(foreach rules included)."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.engine.engine import Engine, Request
from stockade.policy.model import KyvernoPolicy


def _rule(name: str, annotations: dict[str, str], foreach: bool) -> dict[str, Any]:
    patch = {"metadata": {"annotations": annotations}}
    mutate: dict[str, Any] = {"foreach": [{"list": "['dummy']", "patchStrategicMerge": patch}]} if foreach else {"patchStrategicMerge": patch}
    return {"name": name, "match": {"all": [{"resources": {"kinds": ["v1/ConfigMap"]}}]}, "mutate": mutate}


@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "plain"])
def test_a_later_rule_sees_the_earlier_rules_patch_in_request_object(foreach: bool) -> None:
    policy = KyvernoPolicy(
        {
            "apiVersion": "kyverno.io/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "chain"},
            "spec": {
                "rules": [
                    _rule("first", {"first": "1"}, foreach),
                    _rule("second", {"second": "saw {{ request.object.metadata.annotations.first || '<nothing>' }}"}, foreach),
                ]
            },
        }
    )
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"}}
    engine = Engine()
    response = engine.mutate(engine.policy_context(policy, Request(resource=configmap, operation="CREATE")))
    assert response.patched_resource["metadata"]["annotations"] == {"first": "1", "second": "saw 1"}
