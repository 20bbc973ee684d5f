"""The policy webhook's cluster checks: Kyverno refuses a generate rule its background controller's account may not
carry out (SubjectAccessReview per verb) and a target whose namespace does not fit the kind's scope."""

from __future__ import annotations

from typing import Any

from stockade.controllers.clusterdata import api_version_of
from stockade.controllers.policychecks import SUBJECT_ACCESS_REVIEWS, ClusterPolicyChecks
from stockade.controllers.webhookconfig import ApiResource

BACKGROUND = "system:serviceaccount:kyverno:kyverno-background-controller"


class SarCluster:
    """Discovery plus a SubjectAccessReview endpoint that allows ``granted`` (user, resource, verb) triples."""

    def __init__(self, granted: set[tuple[str, str, str]]) -> None:
        self.granted = granted
        self.resources = [
            ApiResource("", "v1", "serviceaccounts", "ServiceAccount"),
            ApiResource("", "v1", "configmaps", "ConfigMap"),
            ApiResource("", "v1", "namespaces", "Namespace", False),
        ]
        self.reviews: list[dict[str, Any]] = []
        self.refreshes = 0

    def api_resources(self, refresh: bool = False) -> list[ApiResource]:
        self.refreshes += refresh
        return list(self.resources)

    def resolve_kind(self, api_version: str, kind: str) -> ApiResource | None:
        return next((r for r in self.resources if r.kind == kind and (not api_version or api_version_of(r) == api_version)), None)

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
        assert (method, path) == ("POST", SUBJECT_ACCESS_REVIEWS)
        self.reviews.append(body)
        spec = body["spec"]
        attributes = spec["resourceAttributes"]
        return {"status": {"allowed": (spec["user"], attributes["resource"], attributes["verb"]) in self.granted}}


def sa_policy(synchronize: bool = True, namespace: str = "default") -> dict[str, Any]:
    generate = {"apiVersion": "v1", "kind": "ServiceAccount", "name": "sa", "namespace": namespace, "synchronize": synchronize, "clone": {"namespace": "default", "name": "regcred"}}
    rule = {"name": "r", "match": {"any": [{"resources": {"kinds": ["ConfigMap"]}}]}, "generate": generate}
    return {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {"rules": [rule]}}


def test_kyverno_refuses_a_generate_rule_the_background_account_cannot_carry_out() -> None:
    cluster = SarCluster(granted={(BACKGROUND, "serviceaccounts", "get")})
    errors, _ = ClusterPolicyChecks(cluster, background_user=BACKGROUND).check(sa_policy())  # type: ignore[arg-type]
    (error,) = errors
    assert f"{BACKGROUND} requires permissions create,update,delete for resource v1/ServiceAccount in namespace default" in error
    assert {r["spec"]["resourceAttributes"]["namespace"] for r in cluster.reviews} == {"default"}


def test_granted_permissions_admit_the_policy() -> None:
    granted = {(BACKGROUND, "serviceaccounts", verb) for verb in ("get", "create", "update", "delete")}
    assert ClusterPolicyChecks(SarCluster(granted), background_user=BACKGROUND).check(sa_policy()) == ([], [])  # type: ignore[arg-type]
    # without synchronization, get and create are enough
    granted = {(BACKGROUND, "serviceaccounts", verb) for verb in ("get", "create")}
    assert ClusterPolicyChecks(SarCluster(granted), background_user=BACKGROUND).check(sa_policy(synchronize=False)) == ([], [])  # type: ignore[arg-type]


def test_no_background_account_configured_means_no_permission_checks() -> None:
    cluster = SarCluster(granted=set())
    assert ClusterPolicyChecks(cluster).check(sa_policy()) == ([], [])  # type: ignore[arg-type]
    assert cluster.reviews == []


def test_scope_problems_are_rechecked_against_fresh_discovery() -> None:
    cluster = SarCluster(granted=set())
    errors, _ = ClusterPolicyChecks(cluster).check(sa_policy(namespace=""))  # type: ignore[arg-type]
    assert errors and "target namespace must be set for a namespaced resource" in errors[0]
    assert cluster.refreshes == 1


def test_an_update_that_only_warns_skips_the_permission_checks() -> None:
    old = sa_policy()
    new = sa_policy()
    new["spec"]["rules"][0]["generate"]["clone"]["name"] = "other"
    cluster = SarCluster(granted=set())
    assert ClusterPolicyChecks(cluster, background_user=BACKGROUND).check(new, old) == ([], [])  # type: ignore[arg-type]
    assert cluster.reviews == []
