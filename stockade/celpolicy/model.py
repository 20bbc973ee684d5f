"""A thin view over a CEL policy document, so responses can carry kind/name/annotations like Kyverno policies."""

from __future__ import annotations

from typing import Any

from stockade.policy.model import ObjectView

# Policy kinds whose test results carry no rule name: every rule response of the policy is checked.
RULELESS_KINDS = frozenset(
    {
        "ValidatingPolicy",
        "NamespacedValidatingPolicy",
        "ValidatingAdmissionPolicy",
        "MutatingPolicy",
        "NamespacedMutatingPolicy",
        "MutatingAdmissionPolicy",
        "ImageValidatingPolicy",
        "NamespacedImageValidatingPolicy",
        "GeneratingPolicy",
        "NamespacedGeneratingPolicy",
        "DeletingPolicy",
        "NamespacedDeletingPolicy",
    }
)


class CelPolicy(ObjectView):
    """A policies.kyverno.io or admissionregistration document; identity is (kind, namespace, name)."""

    def __init__(self, data: dict[str, Any], origin: str = "") -> None:
        self.raw = data
        self.origin = origin
        # the spec plus pod-controller autogen variants, computed once by the evaluator
        self.variants: list[dict[str, Any]] | None = None

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"

    @property
    def is_namespaced(self) -> bool:
        return self.kind.startswith("Namespaced")

    @property
    def admission(self) -> bool:
        """``spec.evaluation.admission.enabled`` (default true): false leaves the policy to background scans."""
        spec = self.raw.get("spec")
        evaluation = spec.get("evaluation") if isinstance(spec, dict) else None
        admission = evaluation.get("admission") if isinstance(evaluation, dict) else None
        return not (isinstance(admission, dict) and admission.get("enabled") is False)

    @property
    def background(self) -> bool:
        """``spec.evaluation.background.enabled`` (default true): false keeps the policy out of background scans."""
        spec = self.raw.get("spec")
        evaluation = spec.get("evaluation") if isinstance(spec, dict) else None
        background = evaluation.get("background") if isinstance(evaluation, dict) else None
        return not (isinstance(background, dict) and background.get("enabled") is False)

    @property
    def mutates_existing(self) -> bool:
        """``spec.evaluation.mutateExisting.enabled`` (default false)."""
        existing = self._evaluation().get("mutateExisting")
        return isinstance(existing, dict) and existing.get("enabled") is True

    @property
    def skips_background_requests(self) -> bool:
        """``spec.evaluation.skipBackgroundRequests`` (default true): requests made by the background controller
        neither are mutated by the policy nor trigger its mutateExisting."""
        return self._evaluation().get("skipBackgroundRequests") is not False

    @property
    def has_target_constraints(self) -> bool:
        """``targetMatchConstraints`` with resource rules or an expression: the policy mutates existing objects only,
        never the admitted request."""
        spec = self.raw.get("spec")
        constraints = spec.get("targetMatchConstraints") if isinstance(spec, dict) else None
        return isinstance(constraints, dict) and bool(constraints.get("resourceRules") or constraints.get("expression"))

    def _evaluation(self) -> dict[str, Any]:
        spec = self.raw.get("spec")
        evaluation = spec.get("evaluation") if isinstance(spec, dict) else None
        return evaluation if isinstance(evaluation, dict) else {}

    @property
    def base_kind(self) -> str:
        return self.kind[len("Namespaced"):] if self.is_namespaced else self.kind

    def __repr__(self) -> str:
        return f"CelPolicy({self.key})"
