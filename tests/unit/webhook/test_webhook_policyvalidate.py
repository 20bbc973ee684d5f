"""/policyvalidate: invalid policies are denied at admission with the field named; its webhook configuration."""

from __future__ import annotations

import uuid
from typing import Any

from test_webhook_registration import FakeApiServer, fake_api  # noqa: F401 - the fixture is used by name
from webhook_helpers import WebhookClient

from stockade.controllers.registration import WebhookRegistrar
from stockade.controllers.webhookconfig import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    KYVERNO_NAMING,
    POLICY_VALIDATING_CONFIG_NAME,
    WebhookTarget,
    build_configurations,
    build_policy_validation_configuration,
    static_resolver,
)


def policy_review(document: dict[str, Any], operation: str = "CREATE", dry_run: bool = False) -> dict[str, Any]:
    group, _, version = document["apiVersion"].rpartition("/")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": document["kind"]},
            "resource": {"group": group, "version": version, "resource": "clusterpolicies"},
            "name": document["metadata"]["name"],
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": document if operation != "DELETE" else None,
            "oldObject": document if operation != "CREATE" else None,
            "dryRun": dry_run,
        },
    }


def cluster_policy(message: str) -> dict[str, Any]:
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "require-team"},
        "spec": {
            "rules": [
                {
                    "name": "check-team",
                    "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                    "validate": {"message": message, "pattern": {"metadata": {"labels": {"team": "?*"}}}},
                }
            ]
        },
    }


def test_invalid_policy_is_denied_with_policy_rule_and_field(client: WebhookClient) -> None:
    response = client.post_review("/policyvalidate", policy_review(cluster_policy("hi {{ request.object.metadata.name[ }}")))["response"]
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert message.startswith('ClusterPolicy "require-team" is invalid: rule "check-team": spec.rules[0].validate.message: invalid JMESPath')


def test_valid_policy_is_allowed(client: WebhookClient) -> None:
    response = client.post_review("/policyvalidate", policy_review(cluster_policy("team label needed")))["response"]
    assert response["allowed"] is True and "status" not in response


def test_update_is_checked_and_delete_is_not(client: WebhookClient) -> None:
    broken = cluster_policy("{{ a[ }}")
    assert client.post_review("/policyvalidate", policy_review(broken, "UPDATE"))["response"]["allowed"] is False
    assert client.post_review("/policyvalidate", policy_review(broken, "DELETE"))["response"]["allowed"] is True


def test_configuration_is_ignore_without_namespace_selector() -> None:
    config = build_policy_validation_configuration(WebhookTarget(url="https://127.0.0.1:9443"), b"CA", timeout_seconds=7)
    assert config["kind"] == "ValidatingWebhookConfiguration"
    assert config["metadata"] == {"name": POLICY_VALIDATING_CONFIG_NAME, "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}}
    (webhook,) = config["webhooks"]
    assert webhook["failurePolicy"] == "Ignore" and "namespaceSelector" not in webhook and webhook["timeoutSeconds"] == 7
    assert webhook["clientConfig"]["url"] == "https://127.0.0.1:9443/policyvalidate"
    by_group = {rule["apiGroups"][0]: rule for rule in webhook["rules"]}
    assert set(by_group["kyverno.io"]["resources"]) == {"clusterpolicies", "policies", "policyexceptions", "cleanuppolicies", "clustercleanuppolicies", "globalcontextentries"}
    assert {"validatingpolicies", "mutatingpolicies", "policyexceptions"} <= set(by_group["policies.kyverno.io"]["resources"])
    assert all(rule["operations"] == ["CREATE", "UPDATE"] for rule in webhook["rules"])


def test_registrar_applies_it_and_remove_all_removes_it(fake_api: tuple[FakeApiServer, Any]) -> None:  # noqa: F811
    fake, api_client = fake_api
    registrar = WebhookRegistrar(api_client)
    empty = {"metadata": {"name": "stockade-resource-mutating-webhook-cfg"}, "webhooks": []}
    empty_validating = {"metadata": {"name": "stockade-resource-validating-webhook-cfg"}, "webhooks": []}
    registrar.apply(empty, empty_validating, build_policy_validation_configuration(WebhookTarget(url="https://x"), b"CA"))
    assert list(fake.objects["validatingwebhookconfigurations"]) == [POLICY_VALIDATING_CONFIG_NAME]
    assert registrar.remove_all() == 1
    assert fake.objects["validatingwebhookconfigurations"] == {}


def test_kyverno_naming_uses_kyverno_names_label_and_keeps_empty_configurations(fake_api: tuple[FakeApiServer, Any]) -> None:  # noqa: F811
    """`serve --webhook-names kyverno`: tooling written for Kyverno finds the configurations by Kyverno's names and
    label, and, as in Kyverno, the resource configurations stay registered while no policy needs them."""
    fake, api_client = fake_api
    target = WebhookTarget(url="https://x")
    mutating, validating = build_configurations([], target, b"CA", static_resolver(), naming=KYVERNO_NAMING)
    policy_validation = build_policy_validation_configuration(target, b"CA", naming=KYVERNO_NAMING)
    assert validating["metadata"] == {"name": "kyverno-resource-validating-webhook-cfg", "labels": {"webhook.kyverno.io/managed-by": "kyverno"}}
    assert mutating["metadata"]["name"] == "kyverno-resource-mutating-webhook-cfg"
    assert policy_validation["webhooks"][0]["name"] == "validate-policy.kyverno.svc"
    registrar = WebhookRegistrar(api_client, KYVERNO_NAMING)
    registrar.apply(mutating, validating, policy_validation)
    assert sorted(fake.objects["validatingwebhookconfigurations"]) == ["kyverno-policy-validating-webhook-cfg", "kyverno-resource-validating-webhook-cfg"]
    assert list(fake.objects["mutatingwebhookconfigurations"]) == ["kyverno-resource-mutating-webhook-cfg"]
    assert WebhookRegistrar(api_client).remove_all() == 0  # the default naming's label does not select Kyverno-named ones
    assert registrar.remove_all() == 3
    assert fake.objects["validatingwebhookconfigurations"] == {} and fake.objects["mutatingwebhookconfigurations"] == {}
