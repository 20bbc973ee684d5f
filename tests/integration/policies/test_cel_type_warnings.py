"""Kyverno's CEL type check of a ClusterPolicy's validate.cel against the cluster's own OpenAPI schemas (the
policy webhook's ClusterPolicyChecks on a real kube-apiserver): a field the matched kind does not have is a warning
in Kubernetes' words, a correct expression none, and a policy that cannot become a ValidatingAdmissionPolicy is not
checked."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.controllers.clusterdata import ClusterData
from stockade.controllers.policychecks import ClusterPolicyChecks
from stockade.kube.connection import load_api_client
from stockade.testing.apiserver import ControlPlane


def cel_policy(kinds: list[str], *expressions: str, rules: int = 1) -> dict[str, Any]:
    rule = {
        "name": "check",
        "match": {"any": [{"resources": {"kinds": kinds}}]},
        "validate": {"failureAction": "Enforce", "cel": {"expressions": [{"expression": e, "message": "m"} for e in expressions]}},
    }
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cel-types"},
        "spec": {"background": True, "rules": [dict(rule, name=f"check-{i}") for i in range(rules)]},
    }


@pytest.fixture(scope="module")
def checks(control_plane: ControlPlane) -> ClusterPolicyChecks:
    return ClusterPolicyChecks(ClusterData(load_api_client(str(control_plane.kubeconfig)), ttl_seconds=0.0))


def test_an_undefined_field_of_the_matched_kind_is_a_warning(checks: ClusterPolicyChecks) -> None:
    errors, warnings = checks.check(cel_policy(["Deployment"], "object.spec.replicas > 1", "object.replicas > 1"))
    assert errors == []
    assert len(warnings) == 1
    assert warnings[0].startswith("spec.rules[0].validate.cel.expressions[1].expression:apps/v1, Kind=Deployment: compilation failed: ERROR: <input>:1:7:")
    assert "undefined field 'replicas';" in warnings[0]


def test_each_matched_kind_is_checked_and_named(checks: ClusterPolicyChecks) -> None:
    _, warnings = checks.check(cel_policy(["Secret", "ConfigMap"], "!has(object.automountServiceAccountToken)"))
    (warning,) = warnings
    assert "/v1, Kind=ConfigMap: compilation failed" in warning and "/v1, Kind=Secret: compilation failed" in warning
    assert "undefined field 'automountServiceAccountToken';" in warning


def test_well_typed_expressions_over_maps_lists_and_timestamps_pass(checks: ClusterPolicyChecks) -> None:
    policy = cel_policy(
        ["Pod"],
        "object.spec.containers.all(c, c.image.startsWith('registry/'))",
        "object.metadata.labels['team'] == 'a' && object.metadata.creationTimestamp < timestamp('2030-01-01T00:00:00Z')",
        "object.spec.containers.all(c, !has(c.resources.limits) || c.resources.limits['cpu'] == '1')",
    )
    assert checks.check(policy) == ([], [])


def test_type_errors_other_than_fields_are_reported_too(checks: ClusterPolicyChecks) -> None:
    _, warnings = checks.check(cel_policy(["Deployment"], "object.spec.replicas > 'two'"))
    assert len(warnings) == 1 and "found no matching overload for '_>_' applied to '(int, string)'" in warnings[0]


def test_policies_that_cannot_become_a_validating_admission_policy_are_not_checked(checks: ClusterPolicyChecks) -> None:
    assert checks.check(cel_policy(["Deployment"], "object.replicas > 1", rules=2)) == ([], [])
