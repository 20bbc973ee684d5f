"""ImageValidatingPolicy (and its Namespaced twin): CEL validations over the images of a matched resource.

Matching works like ValidatingPolicy (``matchConstraints``, ``matchConditions``, pod-controller autogen).  The images
of the request are gathered per category (``containers``, ``initContainers``, ``ephemeralContainers`` by default,
plus the policy's own ``images`` extractors), narrowed by ``matchImageReferences`` and handed to the validations as
the ``images`` variable.

Signature and attestation checks need a registry.  Offline, a validation that would perform one on a matched image
yields an *error* naming the policy and the image: an unverifiable image must never silently pass.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any, Mapping

from stockade.cel import IMAGE_VALIDATING_LIBRARIES, CelEnvironment, CelError, CelEvalError
from stockade.celpolicy.autogen import autogen_specs
from stockade.celpolicy.compiler import POLICY_VARIABLES, PolicyCompiler
from stockade.celpolicy.evaluator import CelPolicyEvaluator, _Outcome, validation_message
from stockade.celpolicy.matching import constraints_match
from stockade.celpolicy.model import CelPolicy
from stockade.celpolicy.request import AdmissionInput
from stockade.celpolicy.scope import ConditionError, Scope
from stockade.images.reference import parse_reference

IMAGE_VERIFY = "ImageVerify"
REGISTRY_NEEDED = "image verification needs registry access: pass --registry"

# Extra variables visible to ImageValidatingPolicy expressions, on top of ValidatingPolicy's.
IMAGE_POLICY_VARIABLES: tuple[str, ...] = (*POLICY_VARIABLES, "images", "attestors", "attestations")

# Functions (and variables) whose evaluation contacts a registry.
_REGISTRY_CALL = re.compile(r"\b(verifyImageSignatures|verifyAttestationSignatures|extractPayload|getImageData)\s*\(")

# Where each kind keeps its pod spec; kinds not listed have no default image extractors.
_POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
_DEFAULT_CATEGORIES: tuple[str, ...] = ("containers", "initContainers", "ephemeralContainers")


def default_images(resource: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """Images of the built-in categories for pods and pod controllers; empty for any other kind."""
    if not resource:
        return {}
    path = _POD_SPEC_PATHS.get(str(resource.get("kind") or ""))
    if path is None:
        return {}
    node: Any = resource
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    node = node if isinstance(node, Mapping) else {}
    found: dict[str, list[str]] = {}
    for category in _DEFAULT_CATEGORIES:
        containers = node.get(category) or []
        found[category] = [str(c.get("image")) for c in containers if isinstance(c, Mapping) and c.get("image")]
    return found


def _glob_matches(pattern: str, image: str) -> bool:
    """Kyverno's globs: ``*`` spans any characters (path separators included), ``?`` one character."""
    return fnmatch.fnmatchcase(image, pattern)


class ImageReferenceMatcher:
    """``matchImageReferences``: an image is checked when any glob or CEL expression (over ``ref``) accepts it;
    no entries means every image is checked."""

    _environment: CelEnvironment | None = None

    def __init__(self, entries: list[dict[str, Any]] | None) -> None:
        self.entries = [e for e in entries or [] if isinstance(e, Mapping)]
        self._programs: dict[str, Any] = {}

    def _program(self, expression: str) -> Any:
        program = self._programs.get(expression)
        if program is None:
            if ImageReferenceMatcher._environment is None:
                ImageReferenceMatcher._environment = CelEnvironment(("ref",))
            program = ImageReferenceMatcher._environment.compile(expression)
            self._programs[expression] = program
        return program

    def matches(self, image: str) -> bool:
        from stockade.cel import CelActivation

        if not self.entries:
            return True
        for index, entry in enumerate(self.entries):
            if entry.get("glob") is not None:
                if _glob_matches(str(entry["glob"]), image):
                    return True
                continue
            expression = entry.get("expression")
            if expression is None:
                continue
            result = self._program(str(expression)).evaluate(CelActivation({"ref": image}))
            if not isinstance(result, bool):
                raise CelEvalError(f"spec.matchImageReferences[{index}].expression must evaluate to a bool")
            if result:
                return True
        return False


def _has_digest(image: str) -> bool:
    try:
        return bool(parse_reference(image).digest)
    except Exception:  # noqa: BLE001 - an unparsable reference certainly carries no digest
        return "@sha256:" in image


class ImageValidatingEvaluator:
    """Evaluates (Namespaced)ImageValidatingPolicies, sharing exceptions/providers with a
    :class:`CelPolicyEvaluator`.

    ``image_verifier`` is the registry-backed verifier of ``--registry``; signature checks of this policy kind are
    not wired to it yet, so they report an error either way (never a pass).
    """

    def __init__(self, base: CelPolicyEvaluator, image_verifier: Any = None) -> None:
        self.base = base
        self.image_verifier = image_verifier
        self.compiler = PolicyCompiler(CelEnvironment(IMAGE_POLICY_VARIABLES, IMAGE_VALIDATING_LIBRARIES))
        self._matchers: dict[str, ImageReferenceMatcher] = {}

    def _scope(self, key: str, request: AdmissionInput) -> Scope:
        scope = self.base._scope(key, request)
        return Scope(self.compiler, key, scope.values, scope.providers)

    def _matching_spec(self, policy: CelPolicy, request: AdmissionInput) -> tuple[int, dict[str, Any]] | None:
        """The spec, or the pod-controller autogen variant, whose constraints select the request."""
        if policy.is_namespaced and request.namespace != policy.namespace:
            return None
        if policy.variants is None:
            policy.variants = [policy.spec, *autogen_specs(policy.spec)]
        for index, spec in enumerate(policy.variants):
            if constraints_match(spec.get("matchConstraints"), request):
                return index, spec
        return None

    def validate(self, policy: CelPolicy, request: AdmissionInput) -> Any:
        """The policy's response for ``request``; ``None`` when Kyverno's CLI drops it (namespace/selector mismatch)."""
        matched = self._matching_spec(policy, request)
        if matched is None:
            constraints = policy.spec.get("matchConstraints") or {}
            if policy.is_namespaced or constraints.get("namespaceSelector") or constraints.get("objectSelector"):
                return None
            return self.base._response(policy, request, IMAGE_VERIFY, None)
        index, spec = matched
        key = policy.key if index == 0 else f"{policy.key}#autogen{index}"
        outcome = self._evaluate(policy, key, spec, request)
        response = self.base._response(policy, request, IMAGE_VERIFY, outcome)
        actions = {str(a) for a in spec.get("validationActions") or ["Deny"]}
        for rule in response.rules:
            rule.failure_action = "Enforce" if "Deny" in actions else "Audit"
        return response

    def _evaluate(self, policy: CelPolicy, key: str, spec: dict[str, Any], request: AdmissionInput) -> _Outcome:
        scope = self._scope(key, request)
        ignore = str(spec.get("failurePolicy") or "Fail") == "Ignore"
        try:
            keys, images, values, full = self.base._policy_exceptions(policy, scope)
            if full:
                return self.base._exception_outcome(keys)
            scope.set("exceptions", {"allowedImages": images, "allowedValues": values})
            if not scope.conditions_hold(spec.get("matchConditions"), "spec.matchConditions", ignore):
                return _Outcome("skip", "skip")
        except (ConditionError, CelError) as error:
            return _Outcome("error", f"failed to evaluate match conditions: {error}")
        scope.bind_variables(spec.get("variables"))
        try:
            categories = self._extract_images(scope, spec, request)
            selected = self._select(key, spec, categories)
        except CelError as error:
            return _Outcome("error", f"policy {policy.name}: failed to extract images: {error}")
        checked = [image for images_of in selected.values() for image in images_of]
        if (spec.get("validationConfigurations") or {}).get("verifyDigest", True) is not False:
            for image in checked:
                if not _has_digest(image):
                    return _Outcome("fail", f"image {image} does not have a digest")
        scope.set("images", selected)
        scope.set("attestations", {str(a.get("name")): str(a.get("name")) for a in spec.get("attestations") or [] if isinstance(a, Mapping)})
        scope.set("attestors", {str(a.get("name")): dict(a) for a in spec.get("attestors") or [] if isinstance(a, Mapping)})
        return self._run_validations(policy, spec, scope, checked)

    def _extract_images(self, scope: Scope, spec: dict[str, Any], request: AdmissionInput) -> dict[str, list[str]]:
        subject = request.object if request.object is not None else request.old_object
        categories = default_images(subject)
        for index, extractor in enumerate(spec.get("images") or []):
            name = str(extractor.get("name") or "")
            value = scope.evaluate(f"spec.images[{index}].expression", str(extractor.get("expression") or ""))
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise CelEvalError(f"spec.images[{index}] ({name}) must evaluate to a list of strings")
            categories[name] = list(value)
        return categories

    def _select(self, key: str, spec: dict[str, Any], categories: dict[str, list[str]]) -> dict[str, list[str]]:
        matcher = self._matchers.get(key)
        if matcher is None:
            matcher = self._matchers[key] = ImageReferenceMatcher(spec.get("matchImageReferences"))
        return {name: [image for image in images if matcher.matches(image)] for name, images in categories.items()}

    def _run_validations(self, policy: CelPolicy, spec: dict[str, Any], scope: Scope, checked: list[str]) -> _Outcome:
        for index, validation in enumerate(spec.get("validations") or []):
            expression = str(validation.get("expression", ""))
            if _REGISTRY_CALL.search(expression):
                if not checked:
                    continue  # the verification functions only ever see matched images: none, nothing to verify
                return _Outcome("error", self._registry_message(policy, checked[0]))
            try:
                ok = scope.evaluate(f"spec.validations[{index}].expression", expression)
                if not isinstance(ok, bool):
                    raise CelEvalError(f"validation must evaluate to a bool, got {type(ok).__name__}")
            except CelError as error:
                return _Outcome("error", f"policy {policy.name}: spec.validations[{index}]: {error}")
            if ok:
                continue
            return _Outcome("fail", validation_message(scope, validation, index))
        return _Outcome("pass", "success")

    def _registry_message(self, policy: CelPolicy, image: str) -> str:
        if self.image_verifier is None:
            return f"policy {policy.name}: image {image}: {REGISTRY_NEEDED}"
        return f"policy {policy.name}: image {image}: ImageValidatingPolicy signature verification is not supported yet"


__all__ = ["ImageReferenceMatcher", "ImageValidatingEvaluator", "REGISTRY_NEEDED", "default_images"]
