"""Typed, read-only views over Kyverno ClusterPolicy/Policy and PolicyException documents.

The raw dictionaries stay the source of truth (rules are heterogeneous and users rely on fields we may not model);
these views give the engine named accessors and one place for defaults and legacy spellings.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

KYVERNO_GROUP = "kyverno.io"
CEL_POLICY_GROUP = "policies.kyverno.io"
ADMISSION_GROUP = "admissionregistration.k8s.io"

KYVERNO_POLICY_KINDS = frozenset({"ClusterPolicy", "Policy"})
CEL_POLICY_KINDS = frozenset(
    {
        "ValidatingPolicy",
        "NamespacedValidatingPolicy",
        "MutatingPolicy",
        "NamespacedMutatingPolicy",
        "GeneratingPolicy",
        "NamespacedGeneratingPolicy",
        "DeletingPolicy",
        "NamespacedDeletingPolicy",
        "ImageValidatingPolicy",
        "NamespacedImageValidatingPolicy",
    }
)
ADMISSION_POLICY_KINDS = frozenset(
    {
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }
)

RULE_TYPE_VALIDATION = "Validation"
RULE_TYPE_MUTATION = "Mutation"
RULE_TYPE_GENERATION = "Generation"
RULE_TYPE_IMAGE_VERIFY = "ImageVerify"


def api_group(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


# Kyverno 1.19 reads the CEL policy kinds through its v1beta1 client, so every reference it writes to one (owner
# references, Event involvedObject) names that version, whichever version the policy was created or is stored in.
KYVERNO_REFERENCE_VERSIONS = {"policies.kyverno.io": "policies.kyverno.io/v1beta1"}


def kyverno_reference_api_version(api_version: str) -> str:
    """The apiVersion Kyverno writes when it refers to a policy of this apiVersion."""
    return KYVERNO_REFERENCE_VERSIONS.get(api_group(api_version), api_version)


def is_kyverno_policy(document: dict[str, Any]) -> bool:
    return api_group(str(document.get("apiVersion", ""))) == KYVERNO_GROUP and document.get("kind") in KYVERNO_POLICY_KINDS


def is_policy_exception(document: dict[str, Any]) -> bool:
    return document.get("kind") == "PolicyException" and api_group(str(document.get("apiVersion", ""))) == KYVERNO_GROUP


class ObjectView:
    """Read-only accessors every Kubernetes-style document shares; ``raw`` stays the source of truth."""

    raw: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.raw.get("kind", ""))

    @property
    def api_version(self) -> str:
        return str(self.raw.get("apiVersion", ""))

    @property
    def metadata(self) -> dict[str, Any]:
        return self.raw.get("metadata") or {}

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace") or "")

    @property
    def annotations(self) -> dict[str, str]:
        return self.metadata.get("annotations") or {}

    @property
    def labels(self) -> dict[str, str]:
        return self.metadata.get("labels") or {}

    @property
    def spec(self) -> dict[str, Any]:
        return self.raw.get("spec") or {}


@dataclass(frozen=True)
class Rule:
    """One rule of a ClusterPolicy/Policy; ``raw`` is the rule as written (or as autogen rewrote it)."""

    raw: dict[str, Any]

    @cached_property
    def name(self) -> str:
        """Cached: the engine asks for it many times per rule and review (rules never change once loaded)."""
        return str(self.raw.get("name", ""))

    @property
    def match(self) -> dict[str, Any]:
        return self.raw.get("match") or {}

    @property
    def exclude(self) -> dict[str, Any]:
        return self.raw.get("exclude") or {}

    @property
    def context(self) -> list[dict[str, Any]]:
        return self.raw.get("context") or []

    @property
    def preconditions(self) -> Any:
        return self.raw.get("preconditions")

    @property
    def validate(self) -> dict[str, Any] | None:
        return self.raw.get("validate")

    @property
    def mutate(self) -> dict[str, Any] | None:
        return self.raw.get("mutate")

    @property
    def generate(self) -> dict[str, Any] | None:
        return self.raw.get("generate")

    @property
    def verify_images(self) -> list[dict[str, Any]]:
        return self.raw.get("verifyImages") or []

    @property
    def rule_type(self) -> str:
        if self.raw.get("verifyImages"):
            return RULE_TYPE_IMAGE_VERIFY
        if self.raw.get("generate"):
            return RULE_TYPE_GENERATION
        if self.raw.get("mutate"):
            return RULE_TYPE_MUTATION
        return RULE_TYPE_VALIDATION

    def has_validate(self) -> bool:
        return bool(self.raw.get("validate"))

    def has_mutate(self) -> bool:
        mutate = self.raw.get("mutate")
        return bool(mutate)

    def has_mutate_existing(self) -> bool:
        mutate = self.raw.get("mutate") or {}
        return bool(mutate.get("targets"))

    def has_generate(self) -> bool:
        return bool(self.raw.get("generate"))

    def has_verify_images(self) -> bool:
        return bool(self.raw.get("verifyImages"))

    def has_verify_image_checks(self) -> bool:
        """A verifyImages entry whose results are checked after mutation (``verifyDigest`` or ``required``, both on
        unless set false): what Kyverno's validating webhook registers verifyImages rules for."""
        return any(
            isinstance(entry, dict) and (entry.get("verifyDigest", True) is not False or entry.get("required", True) is not False)
            for entry in self.raw.get("verifyImages") or []
        )


@dataclass
class KyvernoPolicy(ObjectView):
    """A ClusterPolicy or Policy plus its autogen-expanded rule list."""

    raw: dict[str, Any]
    source: str = ""
    _rules: list[Rule] | None = field(default=None, repr=False)

    # kind, name, namespace and key are cached: the admission path asks for them many times per policy and review,
    # and a policy document never changes once loaded (a changed policy is a new document and a new view)
    @cached_property
    def kind(self) -> str:
        return str(self.raw.get("kind", ""))

    @cached_property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @cached_property
    def namespace(self) -> str:
        if self.kind == "Policy":
            return str(self.metadata.get("namespace") or "default")
        return ""

    @cached_property
    def key(self) -> str:
        """``ns/name`` for a Policy, ``name`` for a ClusterPolicy, as PolicyExceptions and reports refer to them."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def uid(self) -> str:
        return str(self.metadata.get("uid", ""))

    @property
    def resource_version(self) -> str:
        return str(self.metadata.get("resourceVersion", ""))

    @property
    def declared_rules(self) -> list[Rule]:
        return [Rule(rule) for rule in self.spec.get("rules") or [] if isinstance(rule, dict)]

    @property
    def rules(self) -> list[Rule]:
        """Rules as the engine runs them: declared rules plus autogen rules for Pod controllers."""
        if self._rules is None:
            from stockade.policy.autogen import compute_rules

            self._rules = [Rule(raw) for raw in compute_rules(self.raw)]
        return self._rules

    def with_rules(self, rules: list[Rule]) -> KyvernoPolicy:
        """A view of this policy (same document) that runs only ``rules``: controllers apply some rules of a policy
        apart from the others, and ``applyRules: One`` must not let another rule hide them."""
        return KyvernoPolicy(self.raw, self.source, _rules=list(rules))

    @property
    def apply_rules(self) -> str:
        return str(self.spec.get("applyRules") or "All")

    @property
    def background(self) -> bool:
        return bool(self.spec.get("background", True))

    @property
    def admission(self) -> bool:
        """``spec.admission`` (default true): false makes a background-only policy the webhook never applies."""
        return self.spec.get("admission", True) is not False

    @property
    def validation_failure_action(self) -> str:
        return str(self.spec.get("validationFailureAction") or "Audit")

    @property
    def validation_failure_action_overrides(self) -> list[dict[str, Any]]:
        return self.spec.get("validationFailureActionOverrides") or []

    @property
    def emit_warning(self) -> bool:
        return bool(self.spec.get("emitWarning", False))

    def has_mutate(self) -> bool:
        return any(rule.has_mutate() for rule in self.rules)

    def has_validate(self) -> bool:
        return any(rule.has_validate() for rule in self.rules)

    def has_generate(self) -> bool:
        return any(rule.has_generate() for rule in self.rules)

    def has_verify_images(self) -> bool:
        return any(rule.has_verify_images() for rule in self.rules)

    @cached_property
    def severity(self) -> str:
        return str(self.annotations.get("policies.kyverno.io/severity", ""))

    @cached_property
    def category(self) -> str:
        return str(self.annotations.get("policies.kyverno.io/category", ""))

    def copy_raw(self) -> dict[str, Any]:
        return copy.deepcopy(self.raw)


@dataclass
class PolicyException(ObjectView):
    """A kyverno.io/v2 PolicyException: rules it exempts, and for which resources."""

    raw: dict[str, Any]
    source: str = ""

    @property
    def exceptions(self) -> list[dict[str, Any]]:
        return self.spec.get("exceptions") or []

    @property
    def match(self) -> dict[str, Any]:
        return self.spec.get("match") or {}

    @property
    def conditions(self) -> Any:
        return self.spec.get("conditions")

    @property
    def pod_security(self) -> list[dict[str, Any]]:
        return self.spec.get("podSecurity") or []
