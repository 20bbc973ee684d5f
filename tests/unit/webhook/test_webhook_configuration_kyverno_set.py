"""Under Kyverno's naming the server registers Kyverno's whole set of webhook configurations.

Kyverno's webhook controller always keeps, besides the resource mutating/validating and the policy validating
configurations, a policy mutating configuration (buildPolicyMutatingWebhookConfiguration: ClusterPolicy/Policy
CREATE/UPDATE to /policymutate, failurePolicy Fail) and a verify one (buildVerifyMutatingWebhookConfiguration:
UPDATE of Leases labelled app.kubernetes.io/name=kyverno to /verifymutate, failurePolicy Ignore); its policy
validating webhook is failurePolicy Fail.  Stockade's own naming registers neither extra configuration and keeps
its policy webhook fail-open."""

from __future__ import annotations

import base64
import uuid
from typing import Any

from test_webhook_registration import FakeApiServer, fake_api  # noqa: F401 - the fixture is used by name
from webhook_helpers import WebhookClient

from stockade.controllers.registration import WebhookRegistrar
from stockade.controllers.webhookconfig import (
    KYVERNO_NAMING,
    STOCKADE_NAMING,
    WebhookTarget,
    build_configurations,
    build_policy_mutation_configuration,
    build_policy_validation_configuration,
    build_verify_mutation_configuration,
    static_resolver,
)
from stockade.engine.kyvernoconfig import parse_kyverno_config

TARGET = WebhookTarget(service_name="kyverno-svc", service_namespace="kyverno")
MANAGED = {"webhook.kyverno.io/managed-by": "kyverno"}


def test_policy_mutating_configuration_as_kyverno_builds_it() -> None:
    config = build_policy_mutation_configuration(TARGET, b"CA", timeout_seconds=12, naming=KYVERNO_NAMING)
    assert config is not None
    assert config["kind"] == "MutatingWebhookConfiguration"
    assert config["metadata"] == {"name": "kyverno-policy-mutating-webhook-cfg", "labels": MANAGED}
    (webhook,) = config["webhooks"]
    assert webhook["name"] == "mutate-policy.kyverno.svc"
    assert webhook["clientConfig"] == {
        "caBundle": base64.b64encode(b"CA").decode(),
        "service": {"name": "kyverno-svc", "namespace": "kyverno", "path": "/policymutate", "port": 443},
    }
    (rule,) = webhook["rules"]
    assert rule["apiGroups"] == ["kyverno.io"] and set(rule["resources"]) == {"clusterpolicies", "policies"}
    assert rule["operations"] == ["CREATE", "UPDATE"]
    assert webhook["failurePolicy"] == "Fail" and webhook["sideEffects"] == "NoneOnDryRun" and webhook["matchPolicy"] == "Equivalent"
    assert webhook["timeoutSeconds"] == 12 and webhook["reinvocationPolicy"] == "IfNeeded" and webhook["admissionReviewVersions"] == ["v1"]
    assert "namespaceSelector" not in webhook and "objectSelector" not in webhook


def test_verify_mutating_configuration_as_kyverno_builds_it() -> None:
    config = build_verify_mutation_configuration(TARGET, b"CA", naming=KYVERNO_NAMING)
    assert config is not None
    assert config["metadata"] == {"name": "kyverno-verify-mutating-webhook-cfg", "labels": MANAGED}
    (webhook,) = config["webhooks"]
    assert webhook["name"] == "monitor-webhooks.kyverno.svc"
    assert webhook["clientConfig"]["service"]["path"] == "/verifymutate"
    assert webhook["rules"] == [{"apiGroups": ["coordination.k8s.io"], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["leases"], "scope": "*"}]
    assert webhook["objectSelector"] == {"matchLabels": {"app.kubernetes.io/name": "kyverno"}}
    assert webhook["failurePolicy"] == "Ignore" and webhook["sideEffects"] == "NoneOnDryRun" and webhook["timeoutSeconds"] == 10
    assert webhook["reinvocationPolicy"] == "IfNeeded" and webhook["matchPolicy"] == "Equivalent"


def test_the_configmaps_labels_and_annotations_reach_them() -> None:
    config = parse_kyverno_config({"webhookLabels": '{"team": "platform"}', "webhookAnnotations": '{"note": "x"}'})
    built = build_verify_mutation_configuration(TARGET, b"CA", kyverno_config=config, naming=KYVERNO_NAMING)
    assert built is not None and built["metadata"]["labels"] == {"team": "platform", **MANAGED} and built["metadata"]["annotations"] == {"note": "x"}


def test_policy_validating_webhook_fails_closed_only_under_kyverno_naming() -> None:
    kyverno = build_policy_validation_configuration(TARGET, b"CA", naming=KYVERNO_NAMING)["webhooks"][0]
    stockade = build_policy_validation_configuration(TARGET, b"CA", naming=STOCKADE_NAMING)["webhooks"][0]
    assert (kyverno["failurePolicy"], stockade["failurePolicy"]) == ("Fail", "Ignore")
    assert kyverno["sideEffects"] == "None" and kyverno["matchPolicy"] == "Equivalent"


def test_stockade_naming_registers_neither() -> None:
    assert build_policy_mutation_configuration(TARGET, b"CA") is None
    assert build_verify_mutation_configuration(TARGET, b"CA") is None


def test_registrar_keeps_all_five_and_removes_them_by_label(fake_api: tuple[FakeApiServer, Any]) -> None:  # noqa: F811
    fake, api_client = fake_api
    mutating, validating = build_configurations([], TARGET, b"CA", static_resolver(), naming=KYVERNO_NAMING)
    extra = [build(TARGET, b"CA", naming=KYVERNO_NAMING) for build in (build_policy_mutation_configuration, build_verify_mutation_configuration)]
    registrar = WebhookRegistrar(api_client, KYVERNO_NAMING)
    registrar.apply(mutating, validating, build_policy_validation_configuration(TARGET, b"CA", naming=KYVERNO_NAMING), [e for e in extra if e is not None])
    assert sorted(fake.objects["mutatingwebhookconfigurations"]) == [
        "kyverno-policy-mutating-webhook-cfg",
        "kyverno-resource-mutating-webhook-cfg",
        "kyverno-verify-mutating-webhook-cfg",
    ]
    assert sorted(fake.objects["validatingwebhookconfigurations"]) == ["kyverno-policy-validating-webhook-cfg", "kyverno-resource-validating-webhook-cfg"]
    registrar.apply(mutating, validating, None, [e for e in extra if e is not None])  # a second pass replaces them in place
    assert len(fake.objects["mutatingwebhookconfigurations"]) == 3
    assert registrar.remove_all() == 5
    assert fake.objects["mutatingwebhookconfigurations"] == {} and fake.objects["validatingwebhookconfigurations"] == {}


def lease_review(operation: str = "UPDATE") -> dict[str, Any]:
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "kyverno-health", "namespace": "kyverno"}, "spec": {}}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "coordination.k8s.io", "version": "v1", "kind": "Lease"},
            "resource": {"group": "coordination.k8s.io", "version": "v1", "resource": "leases"},
            "name": "kyverno-health",
            "namespace": "kyverno",
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kyverno:kyverno"},
            "object": lease,
            "oldObject": lease,
        },
    }


def test_policymutate_and_verifymutate_admit_unchanged(client: WebhookClient) -> None:
    for path in ("/policymutate", "/verifymutate"):
        review = lease_review()
        answer = client.post_review(path, review)["response"]
        assert answer["uid"] == review["request"]["uid"] and answer["allowed"] is True
        assert "patch" not in answer and "patchType" not in answer
    status, _ = client.request("POST", "/policymutate", b"{not json")
    assert status == 400
