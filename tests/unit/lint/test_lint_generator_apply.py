"""generator.apply as Kyverno declares it per policy scope (kyverno/sdk's generator library): a GeneratingPolicy names
the target namespace, a NamespacedGeneratingPolicy generates into its own; the other overload does not compile."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.lint.check import check_policy


def policy(kind: str, expression: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "gen"}
    if kind.startswith("Namespaced"):
        metadata["namespace"] = "team"
    return {
        "apiVersion": "policies.kyverno.io/v1beta1",
        "kind": kind,
        "metadata": metadata,
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]},
            "variables": [{"name": "cms", "expression": "[{'kind': dyn('ConfigMap'), 'apiVersion': dyn('v1'), 'metadata': dyn({'name': 'x'})}]"}],
            "generate": [{"expression": expression}],
        },
    }


def errors(document: dict[str, Any]) -> list[str]:
    return [f.message for f in check_policy(document) if f.severity.name == "ERROR"]


@pytest.mark.parametrize(
    ("kind", "good", "bad"),
    [
        ("GeneratingPolicy", "generator.Apply('team', variables.cms)", "generator.Apply(variables.cms)"),
        ("NamespacedGeneratingPolicy", "generator.Apply(variables.cms)", "generator.Apply('kube-system', variables.cms)"),
    ],
)
def test_each_scope_has_its_own_generator_apply(kind: str, good: str, bad: str) -> None:
    assert errors(policy(kind, good)) == []
    assert errors(policy(kind, good.replace("Apply", "apply"))) == []
    refused = errors(policy(kind, bad))
    assert len(refused) == 1 and "spec.generate[0].expression" in refused[0] and "does not compile" in refused[0]
