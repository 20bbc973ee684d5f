"""ClusterPolicy ``context[].globalReference`` entries answered from the cluster's GlobalContextEntries, as Kyverno's
admission controller answers them from its global context store (e2e globalcontext/*)."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.controllers.clusterdata import ClusterData
from stockade.controllers.webhookconfig import ApiResource
from stockade.engine.contextloader import ContextLoadError
from stockade.engine.engine import Engine, Request
from stockade.policy.model import KyvernoPolicy
from tests.unit.controllers.test_controllers_clusterdata import FakeApiClient, _Response

RESOURCES = [
    ApiResource("kyverno.io", "v2alpha1", "globalcontextentries", "GlobalContextEntry", namespaced=False),
    ApiResource("apps", "v1", "deployments", "Deployment"),
]
GCE = "/apis/kyverno.io/v2alpha1/globalcontextentries"
DEPLOYMENTS = "/apis/apps/v1/namespaces/team/deployments"


def cluster(objects: dict[str, Any]) -> ClusterData:
    return ClusterData(FakeApiClient(objects), ttl_seconds=0.0, resources=RESOURCES)


def entries() -> dict[str, Any]:
    listing = {"kind": "DeploymentList", "items": [{"metadata": {"name": "main", "namespace": "team"}}]}
    return {
        DEPLOYMENTS: listing,
        f"{GCE}/by-api": {"spec": {"apiCall": {"urlPath": DEPLOYMENTS}, "projections": [{"name": "count", "jmesPath": "items | length(@)"}]}},
        f"{GCE}/by-resource": {"spec": {"kubernetesResource": {"group": "apps", "version": "v1", "resource": "deployments", "namespace": "team"}}},
    }


def deny_when_no_deployments(reference: dict[str, Any]) -> KyvernoPolicy:
    rule = {
        "name": "main-deployment-exists",
        "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
        "context": [{"name": "deploymentCount", "globalReference": reference}],
        "validate": {"failureAction": "Enforce", "deny": {"conditions": {"any": [{"key": "{{ deploymentCount }}", "operator": "Equal", "value": 0}]}}},
    }
    return KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "gctx"}, "spec": {"rules": [rule]}})


def evaluate(data: ClusterData, reference: dict[str, Any]) -> tuple[str, str]:
    engine = Engine(providers=data.providers())
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    response = engine.validate(engine.policy_context(deny_when_no_deployments(reference), Request(resource=pod)))
    return response.rules[0].status, response.rules[0].message


def test_global_reference_reads_api_call_and_kubernetes_resource_entries() -> None:
    """Kyverno's gctx loader: the entry's data (an apiCall's answer, a kubernetesResource's object list), then the
    reference's own jmesPath (e2e globalcontext/apicall-correct, resource-correct)."""
    data = cluster(entries())
    assert evaluate(data, {"name": "by-api", "jmesPath": "items | length(@)"})[0] == "pass"
    assert evaluate(data, {"name": "by-resource", "jmesPath": "length(@)"})[0] == "pass"


def test_global_reference_name_selects_a_projection_after_the_first_dot() -> None:
    """Kyverno splits ``entry.projection`` at the first dot (e2e globalcontext/apicall-correct-projection)."""
    data = cluster(entries())
    assert data.global_reference("by-api.count") == 1
    with pytest.raises(ContextLoadError, match="no data available"):
        data.global_reference("by-api.other")


def test_a_missing_entry_is_an_error_naming_it() -> None:
    """Kyverno: "failed to fetch entry key=NAME" fails the rule, so the admission answer names the entry
    (e2e globalcontext/gctxentry-not-exist)."""
    status, message = evaluate(cluster(entries()), {"name": "non-existent-gctx", "jmesPath": "length(@)"})
    assert status == "error"
    assert "failed to fetch entry key=non-existent-gctx" in message


class ForbiddingApiClient(FakeApiClient):
    def answer(self, method: str, url: str, header_params: Any = None, body: Any = None) -> _Response:
        if url.startswith("/apis/apps/v1/namespaces/default/unknown"):
            return _Response(403, {"kind": "Status", "message": "unknown.apps is forbidden"})
        return super().answer(method, url, header_params, body)


def test_an_api_call_refused_by_rbac_says_permission_denied() -> None:
    """Kyverno's apiCall executor names a 401/403 answer "permission denied" (e2e globalcontext/apicall-failed)."""
    objects = {f"{GCE}/failing": {"spec": {"apiCall": {"urlPath": "/apis/apps/v1/namespaces/default/unknown"}}}}
    data = ClusterData(ForbiddingApiClient(objects), ttl_seconds=0.0, resources=RESOURCES)
    with pytest.raises(ContextLoadError, match="failed to GET resource with raw url: /apis/apps/v1/namespaces/default/unknown: permission denied: "):
        data.global_reference("failing")
    status, message = evaluate(data, {"name": "failing", "jmesPath": "length(@)"})
    assert status == "error" and "permission denied" in message


@pytest.mark.parametrize("kind", ["ClusterPolicy", "Policy"])
def test_the_crds_require_a_global_reference_name_as_kyvernos_do(kind: str) -> None:
    """Kyverno's CRD marks globalReference.name required, so the API server refuses the policy with
    "spec.rules[0].context[0].globalReference.name: Required value" before any webhook (e2e
    globalcontext/validate-reference)."""
    from pathlib import Path

    import yaml

    crds = [d for d in yaml.safe_load_all((Path(__file__).parents[3] / "deploy" / "crds" / "policies.yaml").read_text()) if d]
    crd = next(d for d in crds if d["spec"]["group"] == "kyverno.io" and d["spec"]["names"]["kind"] == kind)
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        assert "x-kubernetes-preserve-unknown-fields" not in spec  # the full schema: unknown fields are pruned
        entry = spec["properties"]["rules"]["items"]["properties"]["context"]["items"]
        assert entry["properties"]["globalReference"]["required"] == ["name"]


class RbacApiClient(FakeApiClient):
    """Answers 403 to requests made as ``restricted`` (Impersonate-User) for paths outside ``allowed``."""

    def __init__(self, objects: dict[str, Any], restricted: str, allowed: tuple[str, ...]) -> None:
        super().__init__(objects)
        self.restricted, self.allowed = restricted, allowed
        self.users: list[tuple[str, str, str]] = []

    def answer(self, method: str, url: str, header_params: Any = None, body: Any = None) -> _Response:
        user = (header_params or {}).get("Impersonate-User", "")
        self.users.append((method, url, user))
        if user == self.restricted and not url.startswith(self.allowed):
            return _Response(403, {"kind": "Status", "message": f"forbidden for {user}"})
        if method == "DELETE":
            self.objects.pop(url, None)
            return _Response(200, {})
        return super().answer(method, url, header_params, body)


ADMISSION = "system:serviceaccount:kyverno:kyverno-admission-controller"


def test_global_context_data_is_loaded_with_the_admission_accounts_rbac() -> None:
    """Kyverno's admission controller loads GlobalContextEntry data with its own account, so a path its RBAC does not
    cover fails with "permission denied" even where our own rights would get a 404 (e2e globalcontext/apicall-failed)."""
    from stockade.controllers.clusterdata import ClusterGlobalContext

    objects = {**entries(), f"{GCE}/failing": {"spec": {"apiCall": {"urlPath": "/apis/apps/v1/namespaces/default/unknown"}}}}
    client = RbacApiClient(objects, ADMISSION, allowed=(DEPLOYMENTS,))
    data = ClusterData(client, ttl_seconds=0.0, resources=RESOURCES)
    data.global_context = ClusterGlobalContext(data, reuse_seconds=0.0, reader=ClusterData(client, ttl_seconds=0.0, resources=RESOURCES, impersonate=ADMISSION))
    assert data.global_reference("by-api.count") == 1
    with pytest.raises(ContextLoadError, match="permission denied"):
        data.global_reference("failing")
    # the entry itself is read with our own rights, its data as the admission account
    assert ("GET", f"{GCE}/by-api", "") in client.users and ("GET", DEPLOYMENTS, ADMISSION) in client.users


def test_deleting_policies_delete_with_the_cleanup_accounts_rbac() -> None:
    """Kyverno's cleanup controller deletes with its own account: without RBAC for the target the object stays and a
    failure is counted (e2e deleting-policies/rbac-missing, namespaced-deleting-policies/rbac-missing)."""
    from stockade.controllers.cleanup import ScheduledDeletionController
    from tests.unit.controllers.test_controllers_generating_policy import Store

    cleanup_user = "system:serviceaccount:kyverno:kyverno-cleanup-controller"
    configmaps = "/api/v1/namespaces/default/configmaps"
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keep", "namespace": "default"}}
    client = RbacApiClient({configmaps: {"items": [cm]}, "/api/v1/configmaps": {"items": [cm]}, f"{configmaps}/keep": cm}, cleanup_user, allowed=("/api/v1/configmaps", configmaps + "?"))
    policy = {
        "apiVersion": "policies.kyverno.io/v1beta1",
        "kind": "DeletingPolicy",
        "metadata": {"name": "del"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]}, "schedule": "*/1 * * * *"},
    }
    resources = [ApiResource("", "v1", "configmaps", "ConfigMap"), ApiResource("", "v1", "namespaces", "Namespace", namespaced=False)]
    controller = ScheduledDeletionController(
        client, Store(policy), cluster_data=ClusterData(client, ttl_seconds=0.0, resources=resources), write_status=False, acting_user=cleanup_user
    )
    from stockade.controllers.cleanup import ScheduledPolicy

    assert controller.execute(ScheduledPolicy(policy)) == 0
    assert f"{configmaps}/keep" in client.objects
    assert ("DELETE", f"{configmaps}/keep", cleanup_user) in client.users
    assert controller.stats.failures == 1


def test_cel_global_context_answers_null_for_a_missing_entry() -> None:
    """Kyverno's CEL globalContext.Get returns null when the entry does not exist, so a ValidatingPolicy can degrade
    gracefully (e2e validating-policies/context/globalreference-missing-graceful); the JSON engine's globalReference
    still fails the rule."""
    from stockade.controllers.clusterdata import ClusterGlobalContext

    data = cluster(entries())
    library = ClusterGlobalContext(data, reuse_seconds=0.0)
    assert library.get("non-existent-gctx", "count") is None
    assert library.get("by-api", "count") == 1
    with pytest.raises(ContextLoadError, match="failed to fetch entry key=non-existent-gctx"):
        data.global_reference("non-existent-gctx")
