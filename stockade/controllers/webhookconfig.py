"""Mutating/ValidatingWebhookConfigurations computed from the loaded policies.

Registering only the kinds and operations that some rule can match keeps the apiserver from calling us for
everything (and keeps the cluster usable if we are down).  Pure functions here; talking to the API lives in
``registration.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from stockade.engine.kyvernoconfig import KyvernoConfig
from stockade.engine.match import parse_kind_selector
from stockade.policy.model import KyvernoPolicy, Rule
from stockade.webhook.admission import FAILURE_POLICY_FAIL, FAILURE_POLICY_IGNORE, failure_policy

MANAGED_BY_LABEL = "webhook.stockade.io/managed-by"
MANAGED_BY_VALUE = "stockade"
MUTATING_CONFIG_NAME = "stockade-resource-mutating-webhook-cfg"
VALIDATING_CONFIG_NAME = "stockade-resource-validating-webhook-cfg"
POLICY_VALIDATING_CONFIG_NAME = "stockade-policy-validating-webhook-cfg"
POLICY_VALIDATION_PATH = "/policyvalidate"
# The policy kinds the /policyvalidate endpoint checks, as webhook rules name them (plural resources).
POLICY_RESOURCES: dict[str, tuple[str, ...]] = {
    "kyverno.io": ("clusterpolicies", "policies", "policyexceptions", "cleanuppolicies", "clustercleanuppolicies"),
    "policies.kyverno.io": (
        "validatingpolicies",
        "namespacedvalidatingpolicies",
        "mutatingpolicies",
        "namespacedmutatingpolicies",
        "generatingpolicies",
        "namespacedgeneratingpolicies",
        "deletingpolicies",
        "namespaceddeletingpolicies",
        "imagevalidatingpolicies",
        "namespacedimagevalidatingpolicies",
        "policyexceptions",
    ),
}
DEFAULT_TIMEOUT_SECONDS = 10
MAX_TIMEOUT_SECONDS = 30
ALL_OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
MUTATE_DEFAULT_OPERATIONS = ("CREATE", "UPDATE")


@dataclass(frozen=True)
class ApiResource:
    """One served resource: what a webhook rule names (group, version, plural[/subresource])."""

    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool = True


Resolver = Callable[[str, str, str], list[ApiResource]]
"""(group selector, version selector, kind) → matching served resources; selectors may be ``*``."""

# Fallback when no discovery is available: the built-in kinds policies name most often.
BUILTIN_RESOURCES: tuple[ApiResource, ...] = (
    ApiResource("", "v1", "pods", "Pod"),
    ApiResource("", "v1", "services", "Service"),
    ApiResource("", "v1", "configmaps", "ConfigMap"),
    ApiResource("", "v1", "secrets", "Secret"),
    ApiResource("", "v1", "serviceaccounts", "ServiceAccount"),
    ApiResource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
    ApiResource("", "v1", "namespaces", "Namespace", namespaced=False),
    ApiResource("", "v1", "nodes", "Node", namespaced=False),
    ApiResource("", "v1", "replicationcontrollers", "ReplicationController"),
    ApiResource("apps", "v1", "deployments", "Deployment"),
    ApiResource("apps", "v1", "statefulsets", "StatefulSet"),
    ApiResource("apps", "v1", "daemonsets", "DaemonSet"),
    ApiResource("apps", "v1", "replicasets", "ReplicaSet"),
    ApiResource("batch", "v1", "jobs", "Job"),
    ApiResource("batch", "v1", "cronjobs", "CronJob"),
    ApiResource("networking.k8s.io", "v1", "ingresses", "Ingress"),
    ApiResource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"),
    ApiResource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    ApiResource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    ApiResource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
    ApiResource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False),
)


def static_resolver(resources: Iterable[ApiResource] = BUILTIN_RESOURCES) -> Resolver:
    table = tuple(resources)

    def resolve(group: str, version: str, kind: str) -> list[ApiResource]:
        from stockade.engine.wildcard import match

        return [r for r in table if match(group, r.group) and match(version, r.version) and match(kind, r.kind)]

    return resolve


@dataclass(frozen=True)
class WebhookTarget:
    """Where the apiserver sends reviews: a Service in the cluster, or a URL (out-of-cluster/dev/tests)."""

    service_name: str = ""
    service_namespace: str = ""
    service_port: int = 443
    url: str = ""

    def client_config(self, path: str, ca_bundle: bytes) -> dict[str, Any]:
        import base64

        config: dict[str, Any] = {"caBundle": base64.b64encode(ca_bundle).decode()}
        if self.url:
            config["url"] = self.url.rstrip("/") + path
        else:
            config["service"] = {"name": self.service_name, "namespace": self.service_namespace, "path": path, "port": self.service_port}
        return config


def _resource_blocks(rule: Rule) -> list[dict[str, Any]]:
    match = rule.match or {}
    blocks: list[dict[str, Any]] = []
    for key in ("any", "all"):
        for entry in match.get(key) or []:
            blocks.append((entry or {}).get("resources") or {})
    if match.get("resources"):
        blocks.append(match["resources"])
    return blocks


def rule_operations(rule: Rule, phase: str) -> set[str]:
    """Operations a rule can fire on: what ``resources.operations`` lists, else the phase's defaults."""
    defaults = MUTATE_DEFAULT_OPERATIONS if phase == "mutate" else ALL_OPERATIONS
    operations: set[str] = set()
    for block in _resource_blocks(rule):
        listed = [str(op).upper() for op in block.get("operations") or []]
        operations.update(listed or defaults)
    return operations or set(defaults)


def rule_kinds(rule: Rule) -> list[str]:
    kinds: list[str] = []
    for block in _resource_blocks(rule):
        kinds.extend(str(k) for k in block.get("kinds") or [])
    return kinds


def _rule_in_phase(rule: Rule, phase: str) -> bool:
    # verifyImages rules verify and pin digests while mutating, then check the results while validating
    if phase == "mutate":
        return (rule.has_mutate() and not rule.has_mutate_existing()) or rule.has_verify_images()
    # generate and mutate-existing rules run after admission, but only a registered webhook tells us about their triggers
    return rule.has_validate() or rule.has_verify_images() or rule.has_generate() or rule.has_mutate_existing()


def cel_resource_rules(policy: Any) -> list[tuple[str, str, str, set[str]]]:
    """(group, version, resource, operations) a ValidatingPolicy's matchConstraints (and autogen variants) name."""
    from stockade.celpolicy.autogen import autogen_specs

    specs = [policy.spec]
    if policy.base_kind in ("ValidatingPolicy", "MutatingPolicy"):
        specs += autogen_specs(policy.spec)
    found = []
    for spec in specs:
        for rule in (spec.get("matchConstraints") or {}).get("resourceRules") or []:
            operations = {str(op) for op in rule.get("operations") or ["*"]}
            if "*" in operations:
                operations = set(ALL_OPERATIONS)
            for group in rule.get("apiGroups") or ["*"]:
                for version in rule.get("apiVersions") or ["*"]:
                    for resource in rule.get("resources") or []:
                        found.append((str(group), str(version), str(resource), operations))
    return found


def compute_rules(policies: Iterable[KyvernoPolicy], phase: str, resolver: Resolver, cel_policies: Iterable[Any] = ()) -> list[dict[str, Any]]:
    """Deduplicated, sorted webhook rules: one entry per (group, version, operations) with its resources."""
    wanted: dict[tuple[str, str, str], set[str]] = {}  # (group, version, resource) -> operations
    # a GeneratingPolicy's triggers reach the generate controller through the validating webhook
    wanted_kinds = ("ValidatingPolicy", "GeneratingPolicy") if phase == "validate" else ("MutatingPolicy",)
    for cel_policy in cel_policies:
        if cel_policy.base_kind not in wanted_kinds:
            continue
        for group, version, resource, operations in cel_resource_rules(cel_policy):
            wanted.setdefault((group, version, resource), set()).update(operations)
    for policy in policies:
        for rule in policy.rules:
            if not _rule_in_phase(rule, phase):
                continue
            operations = rule_operations(rule, phase)
            for selector in rule_kinds(rule):
                group, version, kind, subresource = parse_kind_selector(selector)
                if kind == "*":
                    # Kyverno: `*` names every resource, `*/scale` one subresource of all of them, `*/*` everything
                    targets = [("*", "*", f"*/{subresource}" if subresource else "*")]
                else:
                    targets = []
                    for served in resolver(group or "*", version or "*", kind):
                        name = f"{served.resource}/{subresource}" if subresource else served.resource
                        targets.append((served.group, served.version, name))
                for group, version, resource in list(targets):
                    # Kyverno registers pods/ephemeralcontainers with pods: a rule on Pod also sees `kubectl debug`
                    if group in ("", "*") and version in ("v1", "*") and resource in ("pods", "*"):
                        targets.append((group, version, "pods/ephemeralcontainers"))
                for target in targets:
                    wanted.setdefault(target, set()).update(operations)
    grouped: dict[tuple[str, str, tuple[str, ...]], set[str]] = {}
    for (group, version, resource), operations in wanted.items():
        grouped.setdefault((group, version, tuple(sorted(operations))), set()).add(resource)
    rules = []
    for (group, version, sorted_operations), resources in sorted(grouped.items()):
        rules.append(
            {
                "apiGroups": [group],
                "apiVersions": [version],
                "operations": list(sorted_operations),
                "resources": sorted(resources),
                "scope": "*",
            }
        )
    return rules


def excluded_namespaces_selector(namespaces: Iterable[str]) -> dict[str, Any]:
    values = sorted({ns for ns in namespaces if ns})
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": values}]}


def _timeout(policies: list[Any], default: int) -> int:
    """The apiserver must wait at least as long as the slowest policy of a webhook may take."""
    from stockade.webhook.admission import policy_timeout

    timeouts = [math.ceil(policy_timeout(p, 0)) for p in policies]
    return max(1, min(max([default, *timeouts]), MAX_TIMEOUT_SECONDS))


def configuration_metadata(name: str, kyverno_config: KyvernoConfig | None) -> dict[str, Any]:
    """Name, the ConfigMap's ``webhookLabels`` (our managed-by label always wins) and ``webhookAnnotations``."""
    labels = dict((kyverno_config.webhook_labels if kyverno_config else None) or {})
    labels[MANAGED_BY_LABEL] = MANAGED_BY_VALUE
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    annotations = kyverno_config.webhook_annotations if kyverno_config else None
    if annotations:
        metadata["annotations"] = dict(annotations)
    return metadata


def build_policy_validation_configuration(
    target: WebhookTarget, ca_bundle: bytes, *, timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS, kyverno_config: KyvernoConfig | None = None
) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration that sends policy CREATE/UPDATE to ``/policyvalidate``.

    failurePolicy Ignore: a stopped server must never block policy management (including removing a bad policy);
    no namespaceSelector: Policies live in any namespace, ours and kube-system included."""
    rules = [
        {"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"], "resources": list(resources), "scope": "*"}
        for group, resources in POLICY_RESOURCES.items()
    ]
    webhook = {
        "name": "validate-policy.stockade.svc",
        "clientConfig": target.client_config(POLICY_VALIDATION_PATH, ca_bundle),
        "rules": rules,
        "failurePolicy": FAILURE_POLICY_IGNORE,
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": max(1, min(timeout_seconds, MAX_TIMEOUT_SECONDS)),
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": configuration_metadata(POLICY_VALIDATING_CONFIG_NAME, kyverno_config),
        "webhooks": [webhook],
    }


def _cel_failure_policy(policy: Any) -> str:
    """Generation happens after admission: a GeneratingPolicy's webhook never blocks its triggers (Ignore)."""
    return FAILURE_POLICY_IGNORE if policy.base_kind == "GeneratingPolicy" else failure_policy(policy)


def build_configurations(
    policies: list[KyvernoPolicy],
    target: WebhookTarget,
    ca_bundle: bytes,
    resolver: Resolver,
    *,
    excluded_namespaces: Iterable[str] = ("kube-system",),
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
    cel_policies: Iterable[Any] = (),
    kyverno_config: KyvernoConfig | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(MutatingWebhookConfiguration, ValidatingWebhookConfiguration); a variant with no rules is left out.

    Kyverno's ConfigMap (``kyverno_config``) supplies the ``webhooks`` namespaceSelector (replacing the
    excluded-namespaces one) and objectSelector, ``matchConditions``, and labels/annotations, as Kyverno does."""
    selector = excluded_namespaces_selector(excluded_namespaces)
    object_selector: dict[str, Any] | None = None
    match_conditions: list[dict[str, str]] = []
    if kyverno_config is not None:
        if kyverno_config.webhook.namespace_selector is not None:
            selector = dict(kyverno_config.webhook.namespace_selector)
        if kyverno_config.webhook.object_selector is not None:
            object_selector = dict(kyverno_config.webhook.object_selector)
        match_conditions = [dict(c) for c in kyverno_config.match_conditions or ()]
    cel_policies = list(cel_policies)
    configurations = []
    for phase, kind, name in (
        ("mutate", "MutatingWebhookConfiguration", MUTATING_CONFIG_NAME),
        ("validate", "ValidatingWebhookConfiguration", VALIDATING_CONFIG_NAME),
    ):
        webhooks = []
        for failure, suffix in ((FAILURE_POLICY_FAIL, "fail"), (FAILURE_POLICY_IGNORE, "ignore")):
            chosen = [p for p in policies if failure_policy(p) == failure]
            chosen_cel = [p for p in cel_policies if _cel_failure_policy(p) == failure]
            rules = compute_rules(chosen, phase, resolver, chosen_cel)
            if not rules:
                continue
            webhook: dict[str, Any] = {
                "name": f"{phase}.stockade.svc-{suffix}",
                "clientConfig": target.client_config(f"/{phase}/{suffix}", ca_bundle),
                "rules": rules,
                "failurePolicy": failure,
                "matchPolicy": "Equivalent",
                "sideEffects": "NoneOnDryRun",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": _timeout([*chosen, *chosen_cel], timeout_seconds),
                "namespaceSelector": selector,
            }
            if object_selector is not None:
                webhook["objectSelector"] = object_selector
            if match_conditions:
                webhook["matchConditions"] = match_conditions
            if phase == "mutate":
                webhook["reinvocationPolicy"] = "IfNeeded"
            webhooks.append(webhook)
        configurations.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": configuration_metadata(name, kyverno_config),
                "webhooks": webhooks,
            }
        )
    return configurations[0], configurations[1]
