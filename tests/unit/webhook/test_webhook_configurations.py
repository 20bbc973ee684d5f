"""Webhook configurations list exactly what the loaded policies can match."""

from __future__ import annotations

import base64
from typing import Any

import yaml

from stockade.controllers.webhookconfig import (
    MANAGED_BY_LABEL,
    WebhookTarget,
    build_configurations,
    static_resolver,
)
from stockade.policy.model import KyvernoPolicy


def compute_rules(policies: list[KyvernoPolicy], phase: str, resolver: Any) -> list[dict[str, Any]]:
    """The rules of every webhook the policies produce in one phase."""
    mutating, validating = build_configurations(policies, WebhookTarget(url="https://x"), b"x", resolver)
    return [rule for webhook in (mutating if phase == "mutate" else validating)["webhooks"] for rule in webhook["rules"]]


def policy(text: str) -> KyvernoPolicy:
    return KyvernoPolicy(yaml.safe_load(text))


VALIDATE_PODS = policy("""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: pods}
spec:
  validationFailureAction: Enforce
  rules:
  - name: r
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate: {message: m, pattern: {metadata: {labels: {team: "?*"}}}}
""")

MUTATE_CM_IGNORE = policy("""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: cm}
spec:
  failurePolicy: Ignore
  webhookTimeoutSeconds: 20
  rules:
  - name: r
    match:
      resources:
        kinds: [ConfigMap]
        operations: [CREATE]
    mutate: {patchStrategicMerge: {metadata: {labels: {x: "y"}}}}
""")

EXEC_DENY = policy("""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: exec}
spec:
  validationFailureAction: Enforce
  rules:
  - name: r
    match: {any: [{resources: {kinds: [Pod/exec], operations: [CONNECT]}}]}
    validate: {message: m, deny: {}}
""")


def test_validate_rules_include_autogen_controllers_and_all_operations() -> None:
    rules = compute_rules([VALIDATE_PODS], "validate", static_resolver())
    by_group = {r["apiGroups"][0]: r for r in rules}
    assert by_group[""]["resources"] == ["pods", "pods/ephemeralcontainers", "replicationcontrollers"]
    assert by_group[""]["operations"] == ["CONNECT", "CREATE", "DELETE", "UPDATE"]
    assert by_group["apps"]["resources"] == ["daemonsets", "deployments", "replicasets", "statefulsets"]
    assert by_group["batch"]["resources"] == ["cronjobs", "jobs"]
    assert compute_rules([VALIDATE_PODS], "mutate", static_resolver()) == []


def test_listed_operations_and_subresources() -> None:
    assert compute_rules([EXEC_DENY], "validate", static_resolver()) == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CONNECT"], "resources": ["pods/exec"], "scope": "Namespaced"}
    ]
    assert compute_rules([MUTATE_CM_IGNORE], "mutate", static_resolver())[0]["operations"] == ["CREATE"]


def test_configurations_split_by_failure_policy_with_ca_and_exclusions() -> None:
    mutating, validating = build_configurations(
        [VALIDATE_PODS, MUTATE_CM_IGNORE],
        WebhookTarget(service_name="stockade-svc", service_namespace="stockade"),
        b"CA PEM",
        static_resolver(),
        excluded_namespaces=["kube-system", "stockade"],
    )
    assert mutating["kind"] == "MutatingWebhookConfiguration"
    assert mutating["metadata"]["labels"][MANAGED_BY_LABEL] == "stockade"
    assert [w["name"] for w in mutating["webhooks"]] == ["mutate.stockade.svc-ignore"]
    hook: dict[str, Any] = mutating["webhooks"][0]
    assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] == 20 and hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["clientConfig"]["service"] == {"name": "stockade-svc", "namespace": "stockade", "path": "/mutate/ignore", "port": 443}
    assert base64.b64decode(hook["clientConfig"]["caBundle"]) == b"CA PEM"
    assert hook["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "stockade"]}
    ]
    assert [w["name"] for w in validating["webhooks"]] == ["validate.stockade.svc-fail"]
    assert validating["webhooks"][0]["sideEffects"] == "NoneOnDryRun"
    assert validating["webhooks"][0]["admissionReviewVersions"] == ["v1"]
    assert "reinvocationPolicy" not in validating["webhooks"][0]


def test_url_target_and_no_policies() -> None:
    target = WebhookTarget(url="https://127.0.0.1:9443/")
    assert target.client_config("/validate/fail", b"x")["url"] == "https://127.0.0.1:9443/validate/fail"
    mutating, validating = build_configurations([], target, b"x", static_resolver())
    assert mutating["webhooks"] == [] and validating["webhooks"] == []


def test_wildcard_kind_registers_everything() -> None:
    wildcard = policy("""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: all}
spec:
  rules:
  - name: r
    match: {any: [{resources: {kinds: ["*"], operations: [CREATE]}}]}
    validate: {message: m, pattern: {metadata: {name: "?*"}}}
""")
    assert compute_rules([wildcard], "validate", static_resolver()) == [
        {"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["CREATE"], "resources": ["*", "pods/ephemeralcontainers"], "scope": "*"}
    ]


def _deny_kinds(*kinds: str) -> Any:
    listed = ", ".join(f'"{k}"' for k in kinds)
    return policy(f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {{name: sub}}
spec:
  rules:
  - name: r
    match: {{any: [{{resources: {{kinds: [{listed}], operations: [UPDATE]}}}}]}}
    validate: {{message: m, deny: {{}}}}
""")


def test_subresource_kinds_register_their_subresources() -> None:
    """Kyverno's webhook controller: `*/ephemeralcontainers` is registered as that subresource of every resource
    (not as `*`, which the apiserver never matches against subresource requests); `Deployment/scale` as
    deployments/scale; `Pod` also brings pods/ephemeralcontainers so `kubectl debug` is reviewed."""
    assert compute_rules([_deny_kinds("*/ephemeralcontainers")], "validate", static_resolver()) == [
        {"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["*/ephemeralcontainers"], "scope": "*"}
    ]
    assert compute_rules([_deny_kinds("Deployment/scale")], "validate", static_resolver()) == [
        {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["deployments/scale"], "scope": "Namespaced"}
    ]
    assert compute_rules([_deny_kinds("Pod/ephemeralcontainers")], "validate", static_resolver()) == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods/ephemeralcontainers"], "scope": "Namespaced"}
    ]
