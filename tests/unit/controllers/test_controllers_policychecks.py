"""The policy webhook's cluster checks: Kyverno refuses a generate rule its background controller's account may not
carry out (SubjectAccessReview per verb) and a target whose namespace does not fit the kind's scope."""

from __future__ import annotations

from typing import Any

from stockade.controllers.clusterdata import api_version_of
from stockade.controllers.clusterdata import SUBJECT_ACCESS_REVIEWS
from stockade.controllers.policychecks import ClusterPolicyChecks
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
        self.subresources = [ApiResource("", "v1", "pods/status", "Pod"), ApiResource("apps", "v1", "deployments/scale", "Scale", True)]
        self.resources.extend([ApiResource("", "v1", "pods", "Pod"), ApiResource("apps", "v1", "deployments", "Deployment")])
        self.reviews: list[dict[str, Any]] = []
        self.refreshes = 0

    def api_resources(self, refresh: bool = False) -> list[ApiResource]:
        self.refreshes += refresh
        return list(self.resources)

    def api_subresources(self, refresh: bool = False) -> list[ApiResource]:
        return list(self.subresources)

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


def deny_policy(kinds: list[str], background: bool | None = None, kind: str = "ClusterPolicy") -> dict[str, Any]:
    spec: dict[str, Any] = {"rules": [{"name": "deny", "match": {"any": [{"resources": {"kinds": kinds}}]}, "validate": {"failureAction": "Audit", "deny": {}}}]}
    if background is not None:
        spec["background"] = background
    return {"apiVersion": "kyverno.io/v1", "kind": kind, "metadata": {"name": "deny"}, "spec": spec}


def test_kyverno_refuses_background_validate_rules_that_match_subresources() -> None:
    """Kyverno's policy webhook resolves every match/exclude kind through discovery: a background validate rule may
    not name a subresource (``Pod/*``, ``*/*``, ``*/status``); a kind nothing serves (``Scale`` is only a
    subresource's kind, pods have no ``scale``) only earns a warning (validKinds returns it as a warning and Validate
    accepts the policy)."""
    checks = ClusterPolicyChecks(SarCluster(set()))  # type: ignore[arg-type]
    for kinds in (["Pod/*"], ["*/*"], ["*/status"]):
        for kind in ("ClusterPolicy", "Policy"):
            (error,) = checks.check(deny_policy(kinds, kind=kind))[0]
            assert f"background scan enabled with subresource {kinds[0]}" in error and "spec.rules[0].match.any[0].kinds" in error
    for kinds in (["Scale"], ["Pod/scale"], ["Unknown"]):
        errors, (warning,) = checks.check(deny_policy(kinds))
        assert errors == []
        assert warning.startswith("the kind defined in the all match resource is invalid: ")
        assert f"unable to convert GVK to GVR for kinds {kinds[0]}" in warning
    # without background processing a subresource is fine; served kinds and the lone wildcard pass
    assert checks.check(deny_policy(["Pod/status", "Deployment/scale"], background=False)) == ([], [])
    assert checks.check(deny_policy(["Pod", "apps/v1/Deployment"])) == ([], [])
    assert checks.check(deny_policy(["*"], background=False)) == ([], [])


def mutate_existing_policy(namespace: str = "") -> dict[str, Any]:
    target: dict[str, Any] = {"apiVersion": "v1", "kind": "ServiceAccount"}
    if namespace:
        target["namespace"] = namespace
    rule = {"name": "r", "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]}, "mutate": {"targets": [target], "patchStrategicMerge": {"metadata": {"labels": {"foo": "bar"}}}}}
    return {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {"background": False, "rules": [rule]}}


def test_kyverno_refuses_mutate_existing_targets_the_background_account_cannot_get_and_update() -> None:
    cluster = SarCluster(granted={(BACKGROUND, "serviceaccounts", "get")})
    (error,) = ClusterPolicyChecks(cluster, background_user=BACKGROUND).check(mutate_existing_policy("{{ request.object.metadata.name }}"))[0]  # type: ignore[arg-type]
    assert "spec.rules[0].mutate.targets" in error and "auth check fails" in error and "update" in error
    assert [r["spec"]["resourceAttributes"]["namespace"] for r in cluster.reviews] == ["{{ request.object.metadata.name }}"] * 2
    granted = {(BACKGROUND, "serviceaccounts", verb) for verb in ("get", "update")}
    assert ClusterPolicyChecks(SarCluster(granted), background_user=BACKGROUND).check(mutate_existing_policy()) == ([], [])  # type: ignore[arg-type]
    # without a background account configured nothing is asked
    assert ClusterPolicyChecks(SarCluster(set())).check(mutate_existing_policy()) == ([], [])  # type: ignore[arg-type]
