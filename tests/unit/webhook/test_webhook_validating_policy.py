"""policies.kyverno.io ValidatingPolicy served by the same webhook: Deny blocks, Warn warns, Audit stays quiet."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from webhook_helpers import RunningServer, WebhookClient, pod, review, start_server

from stockade.controllers.webhookconfig import WebhookTarget, build_configurations, static_resolver
from stockade.webhook.certs import CertificateManager
from stockade.webhook.policystore import PolicyStore

VPOL = """
apiVersion: policies.kyverno.io/v1beta1
kind: ValidatingPolicy
metadata:
  name: {name}
spec:
  validationActions: [{action}]
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [pods]
  validations:
  - expression: "has(object.metadata.labels) && '{label}' in object.metadata.labels"
    message: "label '{label}' is required"
"""


@pytest.fixture()
def vpol_server(tmp_path: Path) -> Iterator[tuple[RunningServer, WebhookClient]]:
    directory = tmp_path / "vpol"
    directory.mkdir()
    (directory / "deny.yaml").write_text(VPOL.format(name="need-team", action="Deny", label="team"))
    (directory / "warn.yaml").write_text(VPOL.format(name="want-owner", action="Warn", label="owner"))
    (directory / "audit.yaml").write_text(VPOL.format(name="track-cost", action="Audit", label="cost"))
    running = start_server(directory, CertificateManager(hosts=["127.0.0.1"], directory=tmp_path / "c"))
    client = running.client()
    yield running, client
    client.close()
    running.stop()


def test_deny_action_blocks_with_policy_message(vpol_server: tuple[RunningServer, WebhookClient]) -> None:
    """Kyverno e2e validating-policies (validation-actions/none, context/configmap, ...): its CEL policy webhooks
    answer "Policy <name> failed: <message>", not the YAML block message of ClusterPolicies."""
    _, client = vpol_server
    response = client.post_review("/vpol/need-team", review(pod(labels={"app": "x"})))["response"]
    assert response["allowed"] is False
    assert response["status"]["message"] == "Policy need-team failed: label 'team' is required"


def test_each_webhook_path_evaluates_only_its_policies(vpol_server: tuple[RunningServer, WebhookClient]) -> None:
    """As in Kyverno, the CEL policies' webhooks name their policies in the path; the ClusterPolicy webhooks
    (/validate/fail) do not evaluate them, so a review reaching several of our webhooks runs each policy once."""
    _, client = vpol_server
    unlabeled = review(pod(labels={"app": "x"}))
    assert client.post_review("/validate/fail", unlabeled)["response"]["allowed"] is True
    assert client.post_review("/vpol/want-owner/track-cost", unlabeled)["response"]["allowed"] is True
    assert client.post_review("/vpol/need-team/track-cost", unlabeled)["response"]["allowed"] is False
    assert client.post_review("/nvpol/need-team", unlabeled)["response"]["allowed"] is True  # another kind's path
    import json

    status, _ = client.request("POST", "/validate/bogus", json.dumps(unlabeled).encode())
    assert status == 404


def test_warn_action_warns_and_audit_is_silent(vpol_server: tuple[RunningServer, WebhookClient]) -> None:
    _, client = vpol_server
    response = client.post_review("/validate", review(pod(labels={"team": "a"})))["response"]
    assert response["allowed"] is True
    assert len(response["warnings"]) == 1
    assert response["warnings"] == ["Policy want-owner failed: label 'owner' is required"]
    compliant = client.post_review("/validate", review(pod(labels={"team": "a", "owner": "b", "cost": "c"})))["response"]
    assert compliant["allowed"] is True and "warnings" not in compliant


def test_validating_policies_are_registered_with_autogen_controllers(tmp_path: Path) -> None:
    (tmp_path / "deny.yaml").write_text(VPOL.format(name="need-team", action="Deny", label="team"))
    snapshot = PolicyStore([str(tmp_path)]).load()
    assert snapshot.unsupported == ()
    _, validating = build_configurations(
        snapshot.policies, WebhookTarget(url="https://127.0.0.1:1"), b"x", static_resolver(), cel_policies=snapshot.cel_policies
    )
    rules = validating["webhooks"][0]["rules"]
    resources = {(r["apiGroups"][0], res) for r in rules for res in r["resources"]}
    assert ("", "pods") in resources and ("apps", "deployments") in resources and ("batch", "cronjobs") in resources
    assert all(r["operations"] == ["CREATE", "UPDATE"] for r in rules)


MPOL = """
apiVersion: policies.kyverno.io/v1beta1
kind: MutatingPolicy
metadata:
  name: add-tier
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [pods]
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: |
        [JSONPatch{op: "add", path: "/metadata/labels/tier", value: "gold"}]
"""


def test_mutating_policy_patch_comes_back_and_is_registered(tmp_path: Path) -> None:
    import base64
    import json

    import jsonpatch

    directory = tmp_path / "mpol"
    directory.mkdir()
    (directory / "mpol.yaml").write_text(MPOL)
    running = start_server(directory, CertificateManager(hosts=["127.0.0.1"], directory=tmp_path / "c"))
    try:
        client = running.client()
        original = pod(labels={"team": "a"})
        response = client.post_review("/mpol/add-tier", review(original))["response"]
        client.close()
    finally:
        running.stop()
    patched = jsonpatch.apply_patch(original, json.loads(base64.b64decode(response["patch"])))
    assert patched["metadata"]["labels"] == {"team": "a", "tier": "gold"}

    snapshot = PolicyStore([str(directory)]).load()
    mutating, validating = build_configurations(
        snapshot.policies, WebhookTarget(url="https://127.0.0.1:1"), b"x", static_resolver(), cel_policies=snapshot.cel_policies
    )
    assert validating["webhooks"] == []
    assert mutating["webhooks"][0]["rules"][0]["resources"] == ["pods"]


RESOURCE_VPOL = """
apiVersion: policies.kyverno.io/v1beta1
kind: ValidatingPolicy
metadata:
  name: check-labels
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [pods]
  variables:
  - name: cm
    expression: resource.get("v1", "configmaps", object.metadata.namespace, "policy-cm")
  validations:
  - expression: "object.metadata.labels.env == variables.cm.data.env"
    message: env must match the ConfigMap
  - expression: "authorizer.serviceAccount('default', 'builder').group('').resource('pods').check('delete').allowed()"
    message: builder may not delete pods
"""


def test_validating_policies_reach_the_cluster_through_the_store_providers(tmp_path: Path) -> None:
    """Kyverno e2e validating-policies/context/configmap: ``resource.get`` (and authorizer checks) in a ValidatingPolicy
    served by the webhook are answered by the cluster-backed providers the store is given."""
    from stockade.webhook.admission import parse_review

    class ConfigMaps:
        def get(self, api_version: str, resource: str, namespace: str | None, name: str) -> dict[str, object]:
            assert (api_version, resource, namespace, name) == ("v1", "configmaps", "default", "policy-cm")
            return {"data": {"env": "prod"}}

    allowed_users: set[str] = {"system:serviceaccount:default:builder"}

    def authorize(user: dict[str, object], attributes: dict[str, object]) -> tuple[str, str]:
        return ("allow", "") if user.get("username") in allowed_users else ("noOpinion", "")

    directory = tmp_path / "vpol"
    directory.mkdir()
    (directory / "vpol.yaml").write_text(RESOURCE_VPOL)
    store = PolicyStore([str(directory)], cel_providers={"resource": ConfigMaps()}, cel_authorize=authorize)
    evaluator = store.load().evaluator
    assert evaluator.validate(parse_review(review(pod(labels={"env": "prod"})))).allowed is True
    assert evaluator.validate(parse_review(review(pod(labels={"env": "dev"})))).allowed is False
    allowed_users.clear()
    assert evaluator.validate(parse_review(review(pod(labels={"env": "prod"})))).allowed is False
