"""Mutating/ValidatingWebhookConfigurations computed from the loaded policies.

Registering only the kinds and operations that some rule can match keeps the apiserver from calling us for
everything (and keeps the cluster usable if we are down).  Pure functions here; talking to the API lives in
``registration.py``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import posixpath
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from stockade.celpolicy.autogen import CONTROLLERS, autogen_specs, can_autogen
from stockade.engine.kyvernoconfig import KyvernoConfig
from stockade.engine.wildcard import match as wildcard_match
from stockade.engine.match import parse_kind_selector
from stockade.policy.model import KyvernoPolicy, Rule
from stockade.webhook.admission import (
    FAILURE_POLICY_FAIL,
    FAILURE_POLICY_IGNORE,
    POLICY_MUTATION_PATH,
    VERIFY_MUTATION_PATH,
    failure_policy,
    has_own_webhook,
    policy_timeout,
)

MANAGED_BY_LABEL = "webhook.stockade.io/managed-by"
MANAGED_BY_VALUE = "stockade"
MUTATING_CONFIG_NAME = "stockade-resource-mutating-webhook-cfg"
VALIDATING_CONFIG_NAME = "stockade-resource-validating-webhook-cfg"
POLICY_VALIDATING_CONFIG_NAME = "stockade-policy-validating-webhook-cfg"


@dataclass(frozen=True)
class WebhookNaming:
    """The names and ownership label our webhook configurations carry.

    Kyverno's naming is a compatibility setting (``serve --webhook-names kyverno``): tooling and tests written for
    Kyverno look its configurations up by name and label, and Kyverno keeps both resource configurations registered
    even when no policy needs them."""

    managed_by_label: str
    managed_by_value: str
    mutating: str
    validating: str
    policy_validating: str
    service_host: str  # the middle of webhook names: ``validate.<host>-fail``
    keep_empty: bool
    # Kyverno also registers a policy mutating configuration (a no-op default webhook for policy CREATE/UPDATE) and
    # a verify one (lease UPDATEs of its own Deployment); empty names: not registered
    policy_mutating: str = ""
    verify_mutating: str = ""
    # what the policy validating webhook does when the server cannot answer: Stockade never blocks policy management,
    # Kyverno's configuration refuses policies while it is down
    policy_failure_policy: str = FAILURE_POLICY_IGNORE

    @property
    def selector(self) -> str:
        """The label selector that finds every configuration we own (for removal)."""
        return f"{self.managed_by_label}={self.managed_by_value}"


STOCKADE_NAMING = WebhookNaming(
    MANAGED_BY_LABEL, MANAGED_BY_VALUE, MUTATING_CONFIG_NAME, VALIDATING_CONFIG_NAME, POLICY_VALIDATING_CONFIG_NAME, "stockade.svc", keep_empty=False
)
KYVERNO_NAMING = WebhookNaming(
    "webhook.kyverno.io/managed-by",
    "kyverno",
    "kyverno-resource-mutating-webhook-cfg",
    "kyverno-resource-validating-webhook-cfg",
    "kyverno-policy-validating-webhook-cfg",
    "kyverno.svc",
    keep_empty=True,
    policy_mutating="kyverno-policy-mutating-webhook-cfg",
    verify_mutating="kyverno-verify-mutating-webhook-cfg",
    policy_failure_policy=FAILURE_POLICY_FAIL,
)
WEBHOOK_NAMINGS = {"stockade": STOCKADE_NAMING, "kyverno": KYVERNO_NAMING}
POLICY_VALIDATION_PATH = "/policyvalidate"
FINE_GRAINED_PATH = "/finegrained"
# The policy kinds the /policyvalidate endpoint checks, as webhook rules name them (plural resources).
POLICY_RESOURCES: dict[str, tuple[str, ...]] = {
    # GlobalContextEntries are checked like policies (Kyverno has a webhook of their own for them)
    "kyverno.io": ("clusterpolicies", "policies", "policyexceptions", "cleanuppolicies", "clustercleanuppolicies", "globalcontextentries"),
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
    """One served resource as discovery lists it: what a webhook rule names (group, version, plural, or
    ``plural/subresource`` for a subresource, whose kind is its own, ``Eviction`` for ``pods/eviction``)."""

    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool = True

    @property
    def is_subresource(self) -> bool:
        return "/" in self.resource


Resolver = Callable[[str, str, str, str], list[ApiResource]]
"""(group, version, kind, subresource selector) → the served resources a kind selector names, as Kyverno's
discovery resolves them (``find_resources``); selectors may hold wildcards."""

_POD_SUBRESOURCES: tuple[tuple[str, str], ...] = (
    ("attach", "PodAttachOptions"),
    ("binding", "Binding"),
    ("ephemeralcontainers", "Pod"),
    ("eviction", "Eviction"),
    ("exec", "PodExecOptions"),
    ("log", "Pod"),
    ("portforward", "PodPortForwardOptions"),
    ("proxy", "PodProxyOptions"),
    ("resize", "Pod"),
    ("status", "Pod"),
)
_SCALED: tuple[tuple[str, str, str], ...] = (
    ("", "replicationcontrollers", "ReplicationController"),
    ("apps", "deployments", "Deployment"),
    ("apps", "statefulsets", "StatefulSet"),
    ("apps", "replicasets", "ReplicaSet"),
)

# Fallback when no discovery is available: the built-in kinds policies name most often, with the subresources
# kube-apiserver serves for them.
BUILTIN_RESOURCES: tuple[ApiResource, ...] = (
    ApiResource("", "v1", "pods", "Pod"),
    *(ApiResource("", "v1", f"pods/{sub}", kind) for sub, kind in _POD_SUBRESOURCES),
    ApiResource("", "v1", "services", "Service"),
    ApiResource("", "v1", "services/status", "Service"),
    ApiResource("", "v1", "configmaps", "ConfigMap"),
    ApiResource("", "v1", "secrets", "Secret"),
    ApiResource("", "v1", "serviceaccounts", "ServiceAccount"),
    ApiResource("", "v1", "serviceaccounts/token", "TokenRequest"),
    ApiResource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
    ApiResource("", "v1", "namespaces", "Namespace", namespaced=False),
    ApiResource("", "v1", "namespaces/finalize", "Namespace", namespaced=False),
    ApiResource("", "v1", "namespaces/status", "Namespace", namespaced=False),
    ApiResource("", "v1", "nodes", "Node", namespaced=False),
    ApiResource("", "v1", "nodes/status", "Node", namespaced=False),
    ApiResource("", "v1", "replicationcontrollers", "ReplicationController"),
    ApiResource("apps", "v1", "deployments", "Deployment"),
    ApiResource("apps", "v1", "statefulsets", "StatefulSet"),
    ApiResource("apps", "v1", "daemonsets", "DaemonSet"),
    ApiResource("apps", "v1", "replicasets", "ReplicaSet"),
    *(ApiResource(group, "v1", f"{plural}/{sub}", kind if sub == "status" else "Scale") for group, plural, kind in _SCALED for sub in ("scale", "status")),
    ApiResource("apps", "v1", "daemonsets/status", "DaemonSet"),
    ApiResource("batch", "v1", "jobs", "Job"),
    ApiResource("batch", "v1", "jobs/status", "Job"),
    ApiResource("batch", "v1", "cronjobs", "CronJob"),
    ApiResource("batch", "v1", "cronjobs/status", "CronJob"),
    ApiResource("networking.k8s.io", "v1", "ingresses", "Ingress"),
    ApiResource("networking.k8s.io", "v1", "ingresses/status", "Ingress"),
    ApiResource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"),
    ApiResource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    ApiResource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    ApiResource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
    ApiResource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False),
)


def find_resources(served: Iterable[ApiResource], group: str, version: str, kind: str, subresource: str) -> list[ApiResource]:
    """The served resources a kind selector names, as Kyverno's FindResources resolves them: top-level resources
    whose group, version and kind match; with a subresource selector, the matching subresources of those (under
    the parent's group and version, with their own scope) instead; ``*/*`` both."""
    table = tuple(served)
    parents = [
        r for r in table if not r.is_subresource and wildcard_match(group, r.group) and wildcard_match(version, r.version) and wildcard_match(kind, r.kind)
    ]
    if not subresource:
        return parents
    subresources: list[ApiResource] = []
    for parent in parents:
        pattern = f"{parent.resource}/{subresource}"
        subresources += [
            r for r in table if r.is_subresource and r.group == parent.group and r.version == parent.version and wildcard_match(pattern, r.resource)
        ]
    if kind == "*" and subresource == "*":
        return parents + subresources
    return subresources


def static_resolver(resources: Iterable[ApiResource] = BUILTIN_RESOURCES) -> Resolver:
    """A resolver over a fixed table of served resources and subresources (discovery's, or the built-in one)."""
    table = tuple(resources)

    def resolve(group: str, version: str, kind: str, subresource: str) -> list[ApiResource]:
        return find_resources(table, group, version, kind, subresource)

    return resolve


@dataclass(frozen=True)
class WebhookTarget:
    """Where the apiserver sends reviews: a Service in the cluster, or a URL (out-of-cluster/dev/tests)."""

    service_name: str = ""
    service_namespace: str = ""
    service_port: int = 443
    url: str = ""

    def client_config(self, path: str, ca_bundle: bytes) -> dict[str, Any]:
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
    return rule.has_validate() or rule.has_verify_image_checks() or rule.has_generate() or rule.has_mutate_existing()


def cel_resource_rules(policy: Any) -> list[tuple[str, str, str, set[str]]]:
    """(group, version, resource, operations) a ValidatingPolicy's matchConstraints (and autogen variants) name."""

    specs = [policy.spec]
    if policy.base_kind in ("ValidatingPolicy", "MutatingPolicy", "ImageValidatingPolicy"):
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


Operation = str
RuleEntry = tuple[str, str, str, str, str, Operation]  # group, version, resource, subresource, scope, operation
CREATE_UPDATE = ("CREATE", "UPDATE")
CREATE_UPDATE_DELETE = ("CREATE", "UPDATE", "DELETE")
SCOPE_ALL = "*"
SCOPE_NAMESPACED = "Namespaced"


@dataclass
class RuleAggregate:
    """What Kyverno's webhook controller aggregates for one webhook: every (group, version, resource, subresource,
    scope, operation) some policy in it can match, its timeout and match conditions; ``policy`` is set for a
    fine-grained webhook (one per policy with its own matchConditions)."""

    failure: str
    timeout: int
    match_conditions: list[dict[str, Any]]
    policy: KyvernoPolicy | None = None
    entries: set[RuleEntry] = field(default_factory=set)

    def covered(self, entry: RuleEntry) -> bool:
        """Whether a broader entry already covers this one (then it is left out of the rules)."""
        group, version, resource, subresource, scope, operation = entry
        scopes = [scope] if scope == SCOPE_ALL else [scope, SCOPE_ALL]
        groups = [group] if group == "*" else [group, "*"]
        versions = [version] if version == "*" else [version, "*"]
        if subresource == "":
            resources = [("*", ""), ("*", "*")] if resource == "*" else [(resource, ""), ("*", ""), ("*", "*")]
        elif subresource == "*":
            resources = [("*", "*")] if resource == "*" else [(resource, "*"), ("*", "*")]
        else:
            resources = [("*", subresource), ("*", "*")] if resource == "*" else [(resource, subresource), (resource, "*"), ("*", subresource), ("*", "*")]
        for other_scope in scopes:
            for other_group in groups:
                for other_version in versions:
                    for other_resource, other_sub in resources:
                        candidate = (other_group, other_version, other_resource, other_sub, other_scope, operation)
                        if candidate != entry and candidate in self.entries:
                            return True
        return False

    def rules(self) -> list[dict[str, Any]]:
        """Entries folded into webhook rules: per (group, version, scope), resources sharing the same operations."""
        by_gvs: dict[tuple[str, str, str], dict[str, set[str]]] = {}
        for entry in self.entries:
            if self.covered(entry):
                continue
            group, version, resource, subresource, scope, operation = entry
            name = f"{resource}/{subresource}" if subresource else resource
            by_gvs.setdefault((group, version, scope), {}).setdefault(name, set()).add(operation)
        out: list[dict[str, Any]] = []
        for (group, version, scope), resources in by_gvs.items():
            by_operations: dict[tuple[str, ...], set[str]] = {}
            for name, resource_operations in resources.items():
                by_operations.setdefault(tuple(sorted(resource_operations)), set()).add(name)
            for operation_list, names in by_operations.items():
                # a rule on Pods also reviews `kubectl debug` (pods/ephemeralcontainers), as Kyverno registers it
                if group in ("", "*") and version in ("v1", "*") and names & {"pods", "*"}:
                    names = names | {"pods/ephemeralcontainers"}
                out.append({"apiGroups": [group], "apiVersions": [version], "operations": list(operation_list), "resources": sorted(names), "scope": scope})
        return sorted_rules(out)


def _rule_sort_key(rule: dict[str, Any]) -> tuple[Any, ...]:
    # Kyverno orders slices by length first, then element by element
    parts: list[Any] = []
    for key in ("apiGroups", "apiVersions", "resources", "operations"):
        values = list(rule.get(key) or [])
        parts += [len(values), tuple(values)]
    return (*parts, str(rule.get("scope") or ""))


def sorted_rules(rules: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rules deduplicated, each one's lists sorted, then ordered as Kyverno orders them (stable output means no
    needless configuration updates)."""
    seen: set[tuple[Any, ...]] = set()
    out: list[dict[str, Any]] = []
    for rule in rules:
        normal = {**rule, **{key: sorted(str(v) for v in rule.get(key) or []) for key in ("apiGroups", "apiVersions", "resources", "operations")}}
        key = _rule_sort_key(normal)
        if key in seen:
            continue
        seen.add(key)
        out.append(normal)
    return sorted(out, key=_rule_sort_key)


def _described_operations(rule: Rule, default_operations: tuple[str, ...]) -> dict[str, set[str]]:
    """Kind selector -> operations a rule's match names (Kyverno's collectResourceDescriptions), minus what an
    ``exclude.any`` entry that only names kinds/operations takes away."""
    out: dict[str, set[str]] = {}
    for block in _resource_blocks(rule):
        operations = [str(op).upper() for op in block.get("operations") or []] or list(default_operations)
        for kind in block.get("kinds") or []:
            out.setdefault(str(kind), set()).update(operations)
    for entry in (rule.exclude or {}).get("any") or []:
        if not isinstance(entry, dict) or any(entry.get(key) for key in ("roles", "clusterRoles", "subjects")):
            continue
        resources = entry.get("resources") or {}
        if any(resources.get(key) for key in ("name", "names", "namespaces", "annotations", "selector", "namespaceSelector")):
            continue
        kinds = [str(k) for k in resources.get("kinds") or []] or list(out)
        removed = {str(op).upper() for op in resources.get("operations") or []} or set(ALL_OPERATIONS)
        for kind in kinds:
            if kind in out:
                out[kind] -= removed
    return out


def _kinds_for(rule: Rule, validating: bool) -> dict[str, set[str]]:
    """What a rule registers in the validating (``validating``) or mutating webhook, as Kyverno's mergeWebhook."""
    matched: dict[str, set[str]] = {}
    if rule.has_generate():
        # triggers on every operation (CONNECT too), and the generated kinds so synchronisation sees their changes
        for kind, operations in _described_operations(rule, ALL_OPERATIONS).items():
            matched.setdefault(kind, set()).update(operations)
        generate = rule.generate or {}
        for item in [generate, *[g for g in generate.get("foreach") or [] if isinstance(g, dict)]]:
            kinds = [str(item["kind"])] if item.get("kind") else [str(k) for k in ((item.get("cloneList") or {}).get("kinds") or [])]
            for kind in kinds:
                matched.setdefault(kind, set()).update(CREATE_UPDATE_DELETE)
        return matched
    if validating:
        wanted = rule.has_validate() or rule.has_verify_image_checks() or rule.has_mutate_existing()
    else:
        wanted = (rule.has_mutate() and not rule.has_mutate_existing()) or rule.has_verify_images()
    if wanted:
        return _described_operations(rule, ALL_OPERATIONS if validating else CREATE_UPDATE)
    return matched


def _merge_policy(aggregate: RuleAggregate, policy: KyvernoPolicy, validating: bool, resolver: Resolver) -> None:
    matched: dict[str, set[str]] = {}
    for rule in policy.rules:
        for kind, operations in _kinds_for(rule, validating).items():
            matched.setdefault(kind, set()).update(operations)
    policy_scope = SCOPE_NAMESPACED if policy.kind == "Policy" else SCOPE_ALL
    for selector, operations in matched.items():
        group, version, kind, subresource = parse_kind_selector(selector)
        if kind == "*":
            targets = [(group, version, "*", subresource, policy_scope)]
        else:
            # an unknown kind or subresource registers nothing (Kyverno logs "resource not found" and goes on)
            targets = [
                (resource.group, resource.version, *_split_resource(resource.resource), SCOPE_NAMESPACED if resource.namespaced else SCOPE_ALL)
                for resource in resolver(group or "*", version or "*", kind, subresource)
            ]
        for group_, version_, resource_, subresource_, scope in targets:
            for operation in operations:
                aggregate.entries.add((group_, version_, resource_, subresource_, scope, operation))
    aggregate.timeout = max(aggregate.timeout, _declared_timeout(policy))


def _split_resource(name: str) -> tuple[str, str]:
    resource, _, subresource = name.partition("/")
    return resource, subresource


def _declared_timeout(policy: Any) -> int:

    return math.ceil(policy_timeout(policy, 0))


def _custom_match_conditions(policy: KyvernoPolicy) -> list[dict[str, Any]]:
    if not has_own_webhook(policy):
        return []
    return [dict(c) for c in policy.spec["webhookConfiguration"]["matchConditions"] if isinstance(c, dict)]


def excluded_namespaces_selector(namespaces: Iterable[str]) -> dict[str, Any]:
    values = sorted({ns for ns in namespaces if ns})
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": values}]}


def webhook_configuration(kind: str, name: str, webhooks: list[dict[str, Any]], kyverno_config: KyvernoConfig | None, naming: WebhookNaming) -> dict[str, Any]:
    """A Validating/MutatingWebhookConfiguration document with our metadata."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": configuration_metadata(name, kyverno_config, naming),
        "webhooks": webhooks,
    }


def configuration_metadata(name: str, kyverno_config: KyvernoConfig | None, naming: WebhookNaming = STOCKADE_NAMING) -> dict[str, Any]:
    """Name, the ConfigMap's ``webhookLabels`` (our managed-by label always wins) and ``webhookAnnotations``."""
    labels = dict((kyverno_config.webhook_labels if kyverno_config else None) or {})
    labels[naming.managed_by_label] = naming.managed_by_value
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    annotations = kyverno_config.webhook_annotations if kyverno_config else None
    if annotations:
        metadata["annotations"] = dict(annotations)
    return metadata


def build_policy_validation_configuration(
    target: WebhookTarget,
    ca_bundle: bytes,
    *,
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
    kyverno_config: KyvernoConfig | None = None,
    naming: WebhookNaming = STOCKADE_NAMING,
) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration that sends policy CREATE/UPDATE to ``/policyvalidate``.

    failurePolicy Ignore: a stopped server must never block policy management (removing a bad policy is a DELETE and
    never reviewed); under Kyverno's naming Fail, as Kyverno registers it.  No namespaceSelector: Policies live in
    any namespace, ours and kube-system included."""
    rules = [
        {"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"], "resources": list(resources), "scope": "*"}
        for group, resources in POLICY_RESOURCES.items()
    ]
    webhook = {
        "name": f"validate-policy.{naming.service_host}",
        "clientConfig": target.client_config(POLICY_VALIDATION_PATH, ca_bundle),
        "rules": rules,
        "failurePolicy": naming.policy_failure_policy,
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": max(1, min(timeout_seconds, MAX_TIMEOUT_SECONDS)),
    }
    return webhook_configuration("ValidatingWebhookConfiguration", naming.policy_validating, [webhook], kyverno_config, naming)


def build_policy_mutation_configuration(
    target: WebhookTarget,
    ca_bundle: bytes,
    *,
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
    kyverno_config: KyvernoConfig | None = None,
    naming: WebhookNaming = STOCKADE_NAMING,
) -> dict[str, Any] | None:
    """Kyverno's policy MutatingWebhookConfiguration (``mutate-policy.<host>`` on ClusterPolicy/Policy CREATE and
    UPDATE, path ``/policymutate``, failurePolicy Fail), registered only by a naming that names it; the server
    admits those requests unchanged."""
    if not naming.policy_mutating:
        return None
    webhook = {
        "name": f"mutate-policy.{naming.service_host}",
        "clientConfig": target.client_config(POLICY_MUTATION_PATH, ca_bundle),
        "rules": [
            {"apiGroups": ["kyverno.io"], "apiVersions": ["v1", "v2beta1"], "operations": ["CREATE", "UPDATE"], "resources": ["clusterpolicies", "policies"], "scope": "*"}
        ],
        "failurePolicy": FAILURE_POLICY_FAIL,
        "matchPolicy": "Equivalent",
        "sideEffects": "NoneOnDryRun",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": max(1, min(timeout_seconds, MAX_TIMEOUT_SECONDS)),
        "reinvocationPolicy": "IfNeeded",
    }
    return webhook_configuration("MutatingWebhookConfiguration", naming.policy_mutating, [webhook], kyverno_config, naming)


def build_verify_mutation_configuration(
    target: WebhookTarget,
    ca_bundle: bytes,
    *,
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
    kyverno_config: KyvernoConfig | None = None,
    naming: WebhookNaming = STOCKADE_NAMING,
) -> dict[str, Any] | None:
    """Kyverno's verify MutatingWebhookConfiguration (``monitor-webhooks.<host>`` on UPDATE of Leases labelled
    ``app.kubernetes.io/name: kyverno``, path ``/verifymutate``, failurePolicy Ignore), registered only by a naming
    that names it; the server admits those requests unchanged."""
    if not naming.verify_mutating:
        return None
    webhook = {
        "name": f"monitor-webhooks.{naming.service_host}",
        "clientConfig": target.client_config(VERIFY_MUTATION_PATH, ca_bundle),
        "rules": [{"apiGroups": ["coordination.k8s.io"], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["leases"], "scope": "*"}],
        "failurePolicy": FAILURE_POLICY_IGNORE,
        "matchPolicy": "Equivalent",
        "sideEffects": "NoneOnDryRun",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": max(1, min(timeout_seconds, MAX_TIMEOUT_SECONDS)),
        "reinvocationPolicy": "IfNeeded",
        "objectSelector": {"matchLabels": {"app.kubernetes.io/name": naming.managed_by_value}},
    }
    return webhook_configuration("MutatingWebhookConfiguration", naming.verify_mutating, [webhook], kyverno_config, naming)


def _cel_failure_policy(policy: Any) -> str:
    """Generation happens after admission: a GeneratingPolicy's webhook never blocks its triggers (Ignore)."""
    return FAILURE_POLICY_IGNORE if policy.base_kind == "GeneratingPolicy" else failure_policy(policy)


# The CEL policy kinds' webhooks: (base kind, namespaced, webhook name prefix, path prefix), as Kyverno names them
# (its MutatingPolicy webhooks really are called "mpol.validate...").  The path carries the policy names, so a
# review is evaluated against exactly the policies of the webhook that sent it.
CEL_VALIDATING_WEBHOOKS: tuple[tuple[str, bool, str, str], ...] = (
    ("ValidatingPolicy", False, "vpol.validate", "/vpol"),
    ("ValidatingPolicy", True, "nvpol.validate", "/nvpol"),
    ("GeneratingPolicy", False, "gpol.validate", "/gpol"),
    ("GeneratingPolicy", True, "ngpol.validate", "/ngpol"),
    ("ImageValidatingPolicy", False, "ivpol.validate", "/ivpol/validate"),
    ("ImageValidatingPolicy", True, "ivpol.validate", "/nivpol/validate"),
)
CEL_MUTATING_WEBHOOKS: tuple[tuple[str, bool, str, str], ...] = (
    ("MutatingPolicy", False, "mpol.validate", "/mpol"),
    ("MutatingPolicy", True, "nmpol.validate", "/nmpol"),
    # ImageValidatingPolicies pin digests (mutateDigest, on unless set false) in the mutating phase
    ("ImageValidatingPolicy", False, "ivpol.mutate", "/ivpol/mutate"),
    ("ImageValidatingPolicy", True, "ivpol.mutate", "/nivpol/mutate"),
)
ALL_CEL_OPERATIONS = ["CREATE", "UPDATE", "DELETE", "CONNECT"]


def merge_label_selectors(first: dict[str, Any] | None, second: dict[str, Any] | None) -> dict[str, Any] | None:
    """Both selectors must match: labels and expressions of both (Kyverno's mergeLabelSelectors)."""
    if first is None:
        return second
    if second is None:
        return first
    labels = {**(first.get("matchLabels") or {}), **(second.get("matchLabels") or {})}
    expressions = [*(first.get("matchExpressions") or []), *(second.get("matchExpressions") or [])]
    merged: dict[str, Any] = {}
    if labels:
        merged["matchLabels"] = labels
    if expressions:
        merged["matchExpressions"] = expressions
    return merged


def _go_selector(selector: dict[str, Any] | None) -> Any:
    """A label selector in Go's JSON field order (matchLabels, matchExpressions; key, operator, values)."""
    if selector is None:
        return None
    out: dict[str, Any] = {}
    if selector.get("matchLabels"):
        out["matchLabels"] = dict(sorted(selector["matchLabels"].items()))
    if selector.get("matchExpressions"):
        out["matchExpressions"] = [
            {k: e[k] for k in ("key", "operator", "values") if k in e and (k != "values" or e[k])} for e in selector["matchExpressions"]
        ]
    return out


def selector_key(namespace_selector: dict[str, Any] | None, object_selector: dict[str, Any] | None) -> str:
    """A stable digest of a webhook's selectors: policies with equal selectors share a webhook, and the name
    suffix derived from it does not change when policies come and go."""
    serialized = json.dumps([_go_selector(namespace_selector), _go_selector(object_selector)], separators=(",", ":"))
    return hashlib.sha256(serialized.encode()).hexdigest()


@dataclass(frozen=True)
class WebhookSettings:
    """What every webhook of one configuration shares: where it calls, the CA, and the ConfigMap's selectors."""

    target: WebhookTarget
    ca_bundle: bytes
    namespace_selector: dict[str, Any] | None
    object_selector: dict[str, Any] | None
    match_conditions: list[dict[str, Any]]
    timeout_seconds: int


def _autogen_match_conditions(config: str, targets: list[tuple[str, str, str]], conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A policy's matchConditions rewritten so they only apply to the kinds of one autogen variant."""
    if not targets or not conditions:
        return []
    kinds = sorted({f"(object.apiVersion == '{(group + '/') if group else ''}{version}' && object.kind =='{kind}')" for group, version, kind in targets})
    precondition = " || ".join(kinds)
    prefix = f"autogen-{config}" if config else "autogen"
    return [{"name": f"{prefix}-{c.get('name', '')}", "expression": f"!({precondition}) || ({c.get('expression', '')})"} for c in conditions]


def _autogen_variants(policy: Any) -> list[tuple[str, list[tuple[str, str, str]], dict[str, Any]]]:
    """(config name, target kinds, spec) of a Validating/MutatingPolicy's pod-controller variants."""

    if policy.base_kind not in ("ValidatingPolicy", "MutatingPolicy", "ImageValidatingPolicy"):
        return []
    variants = []
    for spec in autogen_specs(policy.spec):
        targets = []
        for rule in (spec.get("matchConstraints") or {}).get("resourceRules") or []:
            for resource in rule.get("resources") or []:
                group, version, kind, replacement = CONTROLLERS[str(resource)]
                targets.append((group, version, kind))
        config = CONTROLLERS[str(((spec.get("matchConstraints") or {}).get("resourceRules") or [{}])[0].get("resources", ["deployments"])[0])][3]
        variants.append((config, targets, spec))
    return sorted(variants, key=lambda v: v[0])


def _webhook_rules(spec: dict[str, Any], generating: bool) -> list[dict[str, Any]]:
    rules = []
    for rule in (spec.get("matchConstraints") or {}).get("resourceRules") or []:
        if not isinstance(rule, dict):
            continue
        entry = {k: rule[k] for k in ("apiGroups", "apiVersions", "resources", "operations", "scope") if k in rule}
        if generating:
            entry["operations"] = list(ALL_CEL_OPERATIONS)  # generate needs every operation, CONNECT included
        rules.append(entry)
    return rules


def _synchronizing(policy: Any) -> bool:
    synchronize = ((policy.spec.get("evaluation") or {}).get("synchronize") or {}) if isinstance(policy.spec.get("evaluation"), dict) else {}
    return isinstance(synchronize, dict) and synchronize.get("enabled") is True


def _namespace_selector_of(policy: Any, settings: WebhookSettings) -> dict[str, Any] | None:
    """A namespaced policy only sees its own namespace; a cluster-wide one keeps its matchConstraints selector."""
    if policy.is_namespaced:
        own = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [policy.namespace]}]}
        return merge_label_selectors(own, settings.namespace_selector)
    return merge_label_selectors((policy.spec.get("matchConstraints") or {}).get("namespaceSelector"), settings.namespace_selector)


# What kube-apiserver compiles webhook matchConditions with: its CEL extension libraries and variables, none of
# Kyverno's (image(), resource, http, ...).
_KUBERNETES_MATCH_LIBRARIES = (
    "ext.strings", "ext.optional", "ext.math", "ext.encoders", "ext.bindings", "k8s.lists", "k8s.sets", "k8s.regex",
    "k8s.urls", "k8s.ip", "k8s.cidr", "k8s.quantity", "k8s.semver", "k8s.format", "k8s.authz", "compat",
)
_KUBERNETES_MATCH_VARIABLES = ("object", "oldObject", "request", "authorizer")
_kubernetes_match_env: Any = None


def kubernetes_compilable(conditions: list[dict[str, Any]]) -> bool:
    """Whether every matchCondition compiles in the apiserver's environment."""
    global _kubernetes_match_env
    from stockade.cel import CelEnvironment
    from stockade.cel.errors import CelError

    if _kubernetes_match_env is None:
        _kubernetes_match_env = CelEnvironment(_KUBERNETES_MATCH_VARIABLES, _KUBERNETES_MATCH_LIBRARIES)
    for condition in conditions:
        try:
            _kubernetes_match_env.compile(str(condition.get("expression") or ""))
        except CelError:
            return False
    return True


def webhook_match_conditions(conditions: Any) -> list[dict[str, Any]]:
    """A CEL policy's matchConditions as its webhook carries them: all of them when the apiserver can compile them
    all, none otherwise (Kyverno then evaluates them itself), as Kyverno's webhook controller decides (validConditions).
    Our CEL environment declares the apiserver's variables untyped, so ``request``'s AdmissionRequest fields and
    Kyverno-only names are checked by ``webhook_compatible_condition`` before the compile."""
    found = [dict(c) for c in conditions or [] if isinstance(c, dict)]
    if not found or not all(webhook_compatible_condition(str(c.get("expression") or "")) for c in found):
        return []
    return found if kubernetes_compilable(found) else []


def _fine_grained(policy: Any) -> bool:
    constraints = policy.spec.get("matchConstraints") or {}
    configuration = policy.spec.get("webhookConfiguration")
    timeout = configuration.get("timeoutSeconds") if isinstance(configuration, dict) else None
    return bool(webhook_match_conditions(policy.spec.get("matchConditions"))) or constraints.get("matchPolicy") == "Exact" or timeout is not None


# What the API server's webhook matchConditions environment declares: these variables, the fields of its
# AdmissionRequest type, and the standard and Kubernetes CEL functions callable without a receiver.
_WEBHOOK_CONDITION_VARIABLES = frozenset({"object", "oldObject", "request", "authorizer", "true", "false", "null", "in"})
_WEBHOOK_REQUEST_FIELDS = frozenset(
    {"kind", "resource", "subResource", "requestKind", "requestResource", "requestSubResource", "name", "namespace", "operation", "userInfo", "dryRun", "options"}
)
_WEBHOOK_CONDITION_FUNCTIONS = frozenset(
    {
        "has", "size", "int", "uint", "double", "string", "bytes", "bool", "dyn", "type", "duration", "timestamp", "matches",
        "quantity", "isQuantity", "url", "isURL", "ip", "isIP", "cidr", "isCIDR", "format", "semver", "isSemver",
    }
)
_CEL_STRING = re.compile(r"""[rRbB]*('''[\s\S]*?'''|\"\"\"[\s\S]*?\"\"\"|'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")""")
_CEL_TOKEN = re.compile(r"(?P<dot>\.\s*\??\s*)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<call>\s*\()?")
# the iteration variable a CEL macro declares (x in ``items.all(x, ...)``)
_MACRO_VARIABLE = re.compile(r"\.\s*(?:all|exists_one|exists|map|filter)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,")


def webhook_compatible_condition(expression: str) -> bool:
    """Whether the API server can compile a CEL policy's match condition for a webhook: only ``object``,
    ``oldObject``, ``request`` (its AdmissionRequest fields) and ``authorizer``, and functions it knows.  Kyverno's
    own variables and libraries (``variables``, ``namespaceObject``, ``request.object``, ``resource.Get``...) are
    not; when unsure the answer is no (the webhook then evaluates the condition alone)."""
    text = _CEL_STRING.sub("''", expression)
    previous: tuple[str, int] | None = None  # the last top-level name and where it ended
    for found in _CEL_TOKEN.finditer(text):
        name = found.group("name")
        if found.group("dot"):
            if previous is not None and previous[0] == "request" and previous[1] == found.start() and name not in _WEBHOOK_REQUEST_FIELDS:
                return False
            previous = None
            continue
        previous = (name, found.end())
        if found.start() > 0 and (text[found.start() - 1].isalnum() or text[found.start() - 1] == "_"):
            continue  # the tail of a number literal (1e3)
        if found.group("call"):
            if name not in _WEBHOOK_CONDITION_FUNCTIONS:
                return False
            continue
        if name in _WEBHOOK_CONDITION_VARIABLES:
            continue
        # a macro's iteration variable is declared by the macro itself
        if name not in {m.group(1) for m in _MACRO_VARIABLE.finditer(text)}:
            return False
    return True


def cel_webhooks(policies: list[Any], name: str, path: str, settings: WebhookSettings) -> list[dict[str, Any]]:
    """The webhooks for one CEL policy kind, as Kyverno builds them: a webhook per policy for those with their own
    matchConditions, matchPolicy Exact or timeout ("fine-grained"), and shared ones per selector pair for the rest."""
    fine = sorted((p for p in policies if _fine_grained(p)), key=lambda p: (p.namespace, p.name))
    basic = [p for p in policies if not _fine_grained(p)]
    webhooks: list[dict[str, Any]] = []
    fail_list: list[dict[str, Any]] = []
    ignore_list: list[dict[str, Any]] = []
    for policy in fine:
        generating = policy.base_kind == "GeneratingPolicy"
        conditions = webhook_match_conditions(policy.spec.get("matchConditions"))
        if generating and _synchronizing(policy):
            # UPDATE/DELETE of a trigger that stopped matching must still arrive, so synchronisation can clean up
            conditions = [{"name": c.get("name"), "expression": f"request.operation != 'CREATE' || ({c.get('expression')})"} for c in conditions]

        webhook: dict[str, Any] = {"admissionReviewVersions": ["v1"], "sideEffects": "NoneOnDryRun"}
        match_conditions = (
            _autogen_match_conditions("", [("", "v1", "Pod")], conditions) if can_autogen(policy.spec.get("matchConstraints")) else conditions
        )
        rules = _webhook_rules(policy.spec, generating)
        for config, targets, spec in _autogen_variants(policy):
            match_conditions += _autogen_match_conditions(config, targets, webhook_match_conditions(spec.get("matchConditions")))
            rules += _webhook_rules(spec, False)
        webhook["rules"] = sorted_rules(rules)
        if match_conditions:
            webhook["matchConditions"] = match_conditions
        if (policy.spec.get("matchConstraints") or {}).get("matchPolicy") == "Exact":
            webhook["matchPolicy"] = "Exact"
        configuration = policy.spec.get("webhookConfiguration")
        if isinstance(configuration, dict) and isinstance(configuration.get("timeoutSeconds"), int):
            webhook["timeoutSeconds"] = configuration["timeoutSeconds"]
        failure = _cel_failure_policy(policy)
        owner = f"{policy.namespace}-{policy.name}" if policy.is_namespaced else policy.name
        webhook["failurePolicy"] = failure
        webhook["name"] = f"{name}-{'ignore' if failure == FAILURE_POLICY_IGNORE else 'fail'}-finegrained-{owner}"
        webhook["clientConfig"] = settings.target.client_config(posixpath.join(path, policy.name), settings.ca_bundle)
        selector = _namespace_selector_of(policy, settings)
        if selector is not None:
            webhook["namespaceSelector"] = selector
        object_selector = merge_label_selectors((policy.spec.get("matchConstraints") or {}).get("objectSelector"), settings.object_selector)
        if object_selector is not None:
            webhook["objectSelector"] = object_selector
        (ignore_list if failure == FAILURE_POLICY_IGNORE else fail_list).append(webhook)
    webhooks += fail_list + ignore_list
    groups: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None, list[Any]]] = {}
    for policy in basic:
        namespace_selector = _namespace_selector_of(policy, settings)
        object_selector = merge_label_selectors((policy.spec.get("matchConstraints") or {}).get("objectSelector"), settings.object_selector)
        key = selector_key(namespace_selector, object_selector)
        groups.setdefault(key, (namespace_selector, object_selector, []))[2].append(policy)
    for key in sorted(groups):
        namespace_selector, object_selector, members = groups[key]
        suffix = f"-{key[:8]}" if len(groups) > 1 else ""
        member_path = posixpath.join(path, *sorted(p.name for p in members))
        by_failure: dict[str, list[dict[str, Any]]] = {FAILURE_POLICY_FAIL: [], FAILURE_POLICY_IGNORE: []}
        for policy in members:
            rules = []
            for _config, _targets, spec in _autogen_variants(policy):
                rules += _webhook_rules(spec, False)
            rules += _webhook_rules(policy.spec, policy.base_kind == "GeneratingPolicy")
            by_failure[_cel_failure_policy(policy)] += rules
        for failure, label in ((FAILURE_POLICY_FAIL, "fail"), (FAILURE_POLICY_IGNORE, "ignore")):
            if not by_failure[failure]:
                continue
            webhook = {
                "name": f"{name}-{label}{suffix}",
                "clientConfig": settings.target.client_config(member_path, settings.ca_bundle),
                "rules": sorted_rules(by_failure[failure]),
                "failurePolicy": failure,
                "sideEffects": "NoneOnDryRun",
                "admissionReviewVersions": ["v1"],
            }
            if namespace_selector is not None:
                webhook["namespaceSelector"] = namespace_selector
            if object_selector is not None:
                webhook["objectSelector"] = object_selector
            webhooks.append(webhook)
    return webhooks


def kyverno_policy_webhooks(policies: list[KyvernoPolicy], phase: str, resolver: Resolver, settings: WebhookSettings, host: str) -> list[dict[str, Any]]:
    """ClusterPolicy/Policy webhooks: one per failurePolicy, plus one per policy that declares its own
    ``webhookConfiguration.matchConditions`` (path ``/<phase>/<fail|ignore>/finegrained/[<ns>/]<name>``)."""
    validating = phase == "validate"
    shared = {
        failure: RuleAggregate(failure, settings.timeout_seconds, list(settings.match_conditions)) for failure in (FAILURE_POLICY_FAIL, FAILURE_POLICY_IGNORE)
    }
    fine: list[RuleAggregate] = []
    for policy in policies:
        if not policy.admission:
            continue
        rules = policy.rules
        if validating:
            relevant = any(r.has_validate() or r.has_generate() or r.has_mutate_existing() or r.has_verify_image_checks() for r in rules)
        else:
            relevant = any((r.has_mutate() and not r.has_mutate_existing()) or r.has_verify_images() for r in rules)
        if not relevant:
            continue
        failure = failure_policy(policy)
        custom = _custom_match_conditions(policy)
        if custom:
            aggregate = RuleAggregate(failure, settings.timeout_seconds, custom, policy)
            fine.append(aggregate)
        else:
            aggregate = shared[failure]
        _merge_policy(aggregate, policy, validating, resolver)
    webhooks = []
    for aggregate in [shared[FAILURE_POLICY_IGNORE], shared[FAILURE_POLICY_FAIL], *fine]:
        if not aggregate.entries:
            continue
        label = "ignore" if aggregate.failure == FAILURE_POLICY_IGNORE else "fail"
        name, path = f"{phase}.{host}-{label}", f"/{phase}/{label}"
        if aggregate.policy is not None:
            owner = aggregate.policy
            name += "-finegrained-" + (f"{owner.namespace}-{owner.name}" if owner.kind == "Policy" else owner.name)
            path += FINE_GRAINED_PATH + "/" + (f"{owner.namespace}/{owner.name}" if owner.kind == "Policy" else owner.name)
        webhook_rules = aggregate.rules()
        if not webhook_rules:
            continue
        webhook: dict[str, Any] = {
            "name": name,
            "clientConfig": settings.target.client_config(path, settings.ca_bundle),
            "rules": webhook_rules,
            "failurePolicy": aggregate.failure,
            "matchPolicy": "Equivalent",
            "sideEffects": "NoneOnDryRun",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": max(1, min(aggregate.timeout, MAX_TIMEOUT_SECONDS)),
            "objectSelector": dict(settings.object_selector or {}),
        }
        if settings.namespace_selector is not None:
            webhook["namespaceSelector"] = settings.namespace_selector
        if aggregate.match_conditions:
            webhook["matchConditions"] = aggregate.match_conditions
        if phase == "mutate":
            webhook["reinvocationPolicy"] = "IfNeeded"
        webhooks.append(webhook)
    return webhooks


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
    naming: WebhookNaming = STOCKADE_NAMING,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(MutatingWebhookConfiguration, ValidatingWebhookConfiguration) shaped as Kyverno's webhook controller shapes
    them: shared webhooks per failurePolicy for ClusterPolicies, fine-grained ones per policy with its own match
    conditions, and per-kind webhooks for the CEL policies whose paths name their policies; sorted by name.

    Kyverno's ConfigMap (``kyverno_config``) supplies the ``webhooks`` namespaceSelector (replacing the
    excluded-namespaces one) and objectSelector, ``matchConditions``, and labels/annotations, as Kyverno does."""
    namespace_selector: dict[str, Any] | None = excluded_namespaces_selector(excluded_namespaces)
    object_selector: dict[str, Any] | None = None
    match_conditions: list[dict[str, Any]] = []
    if kyverno_config is not None:
        if kyverno_config.webhook.namespace_selector is not None:
            namespace_selector = dict(kyverno_config.webhook.namespace_selector)
        if kyverno_config.webhook.object_selector is not None:
            object_selector = dict(kyverno_config.webhook.object_selector)
        match_conditions = [dict(c) for c in kyverno_config.match_conditions or ()]
    settings = WebhookSettings(target, ca_bundle, namespace_selector, object_selector, match_conditions, timeout_seconds)
    cel = [p for p in cel_policies if getattr(p, "admission", True)]
    configurations = []
    for phase, kind, name, cel_kinds in (
        ("mutate", "MutatingWebhookConfiguration", naming.mutating, CEL_MUTATING_WEBHOOKS),
        ("validate", "ValidatingWebhookConfiguration", naming.validating, CEL_VALIDATING_WEBHOOKS),
    ):
        webhooks = kyverno_policy_webhooks(policies, phase, resolver, settings, naming.service_host)
        for base_kind, namespaced, prefix, path in cel_kinds:
            chosen = [p for p in cel if p.base_kind == base_kind and bool(p.is_namespaced) == namespaced]
            if phase == "mutate" and base_kind == "ImageValidatingPolicy":
                chosen = [p for p in chosen if (p.spec.get("validationConfigurations") or {}).get("mutateDigest", True) is not False]
            built = cel_webhooks(chosen, f"{prefix}.{naming.service_host}", path, settings)
            if phase == "mutate":
                # Kyverno builds the CEL mutating webhooks as validating ones and copies them over field by field,
                # without matchPolicy: the API server's default (Equivalent) stands even for matchPolicy Exact
                for webhook in built:
                    webhook.pop("matchPolicy", None)
            webhooks += built
        webhooks.sort(key=lambda w: str(w["name"]))
        configurations.append(webhook_configuration(kind, name, webhooks, kyverno_config, naming))
    return configurations[0], configurations[1]
