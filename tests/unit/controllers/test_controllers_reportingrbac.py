"""RBACPermissionsGranted: Kyverno's policy status controller asks whether its reports controller may get, list and
watch each (group, version, resource) a CEL policy matches, and lists the refusals in the condition's message."""

from __future__ import annotations

from typing import Any

from stockade.controllers.policywatch import cel_conditions, reporting_checked
from stockade.controllers.clusterdata import SUBJECT_ACCESS_REVIEWS
from stockade.controllers.reportingrbac import ReportingPermissions

USER = "system:serviceaccount:kyverno:kyverno-reports-controller"


def vpol(background: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "policies.kyverno.io/v1beta1",
        "kind": "ValidatingPolicy",
        "metadata": {"name": "check-deployment-labels", "generation": 1},
        "spec": {
            "evaluation": {"background": {"enabled": background}},
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]},
                    {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["configmaps"]},
                ]
            },
            "validations": [{"expression": "true"}],
        },
    }


class Authorizer:
    def __init__(self, allowed: set[tuple[str, str]]) -> None:
        self.allowed = allowed
        self.asked: list[dict[str, Any]] = []

    def request(self, method: str, path: str, body: Any = None) -> Any:
        assert (method, path) == ("POST", SUBJECT_ACCESS_REVIEWS) and body["spec"]["user"] == USER
        attributes = body["spec"]["resourceAttributes"]
        self.asked.append(attributes)
        return {"status": {"allowed": (f"{attributes['group']}/{attributes['resource']}", attributes["verb"]) in self.allowed}}


def test_refusals_are_listed_in_kyvernos_words_and_the_condition_fails() -> None:
    authorizer = Authorizer({("apps/deployments", verb) for verb in ("get", "list", "watch")})
    missing = ReportingPermissions(authorizer.request, USER).missing(vpol())
    assert missing == ["get apps/v1, Resource=configmaps: ", "list apps/v1, Resource=configmaps: ", "watch apps/v1, Resource=configmaps: "]
    rbac = cel_conditions(vpol(), True, [], 1, missing)[-1]
    assert rbac["type"] == "RBACPermissionsGranted" and rbac["status"] == "False" and rbac["reason"] == "Failed"
    assert rbac["message"] == (
        "Policy is not ready for reporting, missing permissions: get apps/v1, Resource=configmaps: ; "
        "list apps/v1, Resource=configmaps: ; watch apps/v1, Resource=configmaps: ."
    )
    assert cel_conditions(vpol(), True, [], 1, [])[-1]["message"] == "Policy is ready for reporting."


def test_answers_are_reused_for_a_few_seconds_and_background_off_policies_are_not_checked() -> None:
    authorizer = Authorizer(set())
    permissions = ReportingPermissions(authorizer.request, USER, clock=lambda: 0.0)
    permissions.missing(vpol())
    permissions.missing(vpol())
    assert len(authorizer.asked) == 6
    assert reporting_checked(vpol()) and not reporting_checked(vpol(background=False))
    assert cel_conditions(vpol(background=False), True, [], 1, ["get x"])[-1]["status"] == "True"
