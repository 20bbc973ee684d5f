"""Resource documents as the CLI hands them to the engine (namespace defaulting, policy/resource split)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stockade.policy.loader import Document
from stockade.policy.model import (
    ADMISSION_POLICY_KINDS,
    CEL_POLICY_KINDS,
    KyvernoPolicy,
    PolicyException,
    api_group,
    is_kyverno_policy,
    is_policy_exception,
)

# Built-in cluster-scoped kinds; any other kind is namespaced and lands in "default" when it names none,
# exactly as `kubectl`/Kyverno's CLI treat it.
CLUSTER_SCOPED_KINDS = frozenset(
    {
        "APIService",
        "CertificateSigningRequest",
        "ClusterCleanupPolicy",
        "ClusterEphemeralReport",
        "ClusterPolicy",
        "ClusterPolicyReport",
        "ClusterReport",
        "ClusterRole",
        "ClusterRoleBinding",
        "ComponentStatus",
        "CSIDriver",
        "CSINode",
        "CustomResourceDefinition",
        "DeletingPolicy",
        "FlowSchema",
        "GeneratingPolicy",
        "GlobalContextEntry",
        "ImageValidatingPolicy",
        "IngressClass",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "MutatingPolicy",
        "MutatingWebhookConfiguration",
        "Namespace",
        "Node",
        "PersistentVolume",
        "PodSecurityPolicy",
        "PriorityClass",
        "PriorityLevelConfiguration",
        "RuntimeClass",
        "SelfSubjectAccessReview",
        "SelfSubjectRulesReview",
        "StorageClass",
        "SubjectAccessReview",
        "TokenReview",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingPolicy",
        "ValidatingWebhookConfiguration",
        "VolumeAttachment",
    }
)


def is_cluster_scoped(resource: dict[str, Any], extra_cluster_kinds: frozenset[str] = frozenset()) -> bool:
    kind = str(resource.get("kind", ""))
    return kind in CLUSTER_SCOPED_KINDS or kind in extra_cluster_kinds


def normalise_resource(resource: dict[str, Any], extra_cluster_kinds: frozenset[str] = frozenset()) -> dict[str, Any]:
    """A copy with ``metadata.namespace: default`` for namespaced kinds that name none, and nil label maps emptied."""
    resource = copy.deepcopy(resource)
    metadata = resource.get("metadata")
    if not isinstance(metadata, dict):
        metadata = {}
        resource["metadata"] = metadata
    for key in ("labels", "annotations"):
        if key in metadata and metadata[key] is None:
            metadata[key] = {}
    if not metadata.get("namespace") and not is_cluster_scoped(resource, extra_cluster_kinds):
        metadata["namespace"] = "default"
    return resource


def resource_key(resource: dict[str, Any]) -> str:
    metadata = resource.get("metadata") or {}
    return ",".join(
        (str(resource.get("apiVersion", "")), str(resource.get("kind", "")), str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
    )


@dataclass
class PolicySet:
    """Everything loaded from policy paths, split by kind."""

    kyverno: list[KyvernoPolicy] = field(default_factory=list)
    exceptions: list[PolicyException] = field(default_factory=list)
    cel: list[Document] = field(default_factory=list)
    admission: list[Document] = field(default_factory=list)
    ignored: list[Document] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.kyverno) + len([d for d in self.cel if d.kind != "PolicyException"]) + len(
            [d for d in self.admission if not d.kind.endswith("Binding")]
        )


def split_policies(documents: list[Document], prebuilt: Callable[[Document], Any] | None = None) -> PolicySet:
    """``prebuilt`` may return the KyvernoPolicy/PolicyException view already built for an unchanged document (the
    server's policy store reuses them across reloads, with whatever they computed lazily); None builds a new one."""
    policies = PolicySet()
    for document in documents:
        data = document.data
        group = api_group(document.api_version)
        view = prebuilt(document) if prebuilt is not None else None
        if is_kyverno_policy(data):
            policies.kyverno.append(view if isinstance(view, KyvernoPolicy) else KyvernoPolicy(data, document.origin))
        elif is_policy_exception(data):
            policies.exceptions.append(view if isinstance(view, PolicyException) else PolicyException(data, document.origin))
        elif document.kind in CEL_POLICY_KINDS or (group == "policies.kyverno.io"):
            policies.cel.append(document)
        elif document.kind in ADMISSION_POLICY_KINDS:
            policies.admission.append(document)
        else:
            policies.ignored.append(document)
    return policies
