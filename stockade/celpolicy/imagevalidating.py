"""ImageValidatingPolicy (and its Namespaced twin): CEL validations over the images of a matched resource.

Matching works like ValidatingPolicy (``matchConstraints``, ``matchConditions``, pod-controller autogen).  The images
of the request are gathered per category (``containers``, ``initContainers``, ``ephemeralContainers`` by default,
plus the policy's own ``images`` extractors), narrowed by ``matchImageReferences`` and handed to the validations as
the ``images`` variable.

Signature and attestation checks need a registry (``--registry`` offline, always in ``serve``): the image functions
are then answered by :class:`stockade.images.ivpol.IvpolImageVerifier` over the shared cosign verifier.  Without
one, a validation that would perform a check on a matched image yields an *error* naming the policy and the image:
an unverifiable image must never silently pass.  ``mutateDigest`` (the default) pins matched tags to the digest they
resolve to (a JSON patch in the mutating webhook); ``verifyDigest`` (the default) fails images without a digest.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from stockade.cel import IMAGE_VALIDATING_LIBRARIES, CelEnvironment, CelError, CelEvalError
from stockade.celpolicy.autogen import autogen_specs
from stockade.celpolicy.compiler import POLICY_VARIABLES, PolicyCompiler
from stockade.celpolicy.evaluator import CelPolicyEvaluator, _Outcome, validation_message
from stockade.celpolicy.matching import constraints_match
from stockade.celpolicy.model import CelPolicy
from stockade.celpolicy.request import AdmissionInput
from stockade.celpolicy.scope import ConditionError, Scope
from stockade.engine.handlers.verify_images import VerificationCache
from stockade.images.ivpol import IvpolImageVerifier
from stockade.images.reference import parse_reference
from stockade.images.verifier_api import VerificationFailure, VerificationUnavailable
from stockade.images.verify import CosignVerifier

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


@dataclass
class RequestVerifications:
    """What one request's ImageValidatingPolicies verified, shared between them: Kyverno's ``required`` (default
    on) turns a passing policy into a failure when an image it matched was verified by no policy of the request."""

    verified: dict[str, bool] = field(default_factory=dict)
    pending: list[tuple[Any, list[str]]] = field(default_factory=list)  # (passing rule, images its policy matched)

    def enforce_required(self) -> None:
        """Call once every policy of the request has been evaluated (a later policy may verify an image)."""
        for rule, images in self.pending:
            for image in images:
                if self.verified.get(image):
                    continue
                rule.status = "fail"
                if image in self.verified:
                    rule.message = f"image {image} failed signature or attestation verification"
                else:
                    rule.message = f"image {image} is not verified: no policy performed a signature or attestation check on it"
                break
        self.pending.clear()


class ImageValidatingEvaluator:
    """Evaluates (Namespaced)ImageValidatingPolicies, sharing exceptions/providers with a
    :class:`CelPolicyEvaluator`.

    ``image_verifier`` is the registry-backed cosign verifier (``--registry``, ``serve``); successful verifications
    are remembered in ``cache`` per policy, attestors and resolved digest.
    """

    def __init__(self, base: CelPolicyEvaluator, image_verifier: CosignVerifier | None = None, cache: VerificationCache | None = None) -> None:
        self.base = base
        self.image_verifier = image_verifier
        self.cache = cache if cache is not None else VerificationCache()
        self.compiler = PolicyCompiler(CelEnvironment(IMAGE_POLICY_VARIABLES, IMAGE_VALIDATING_LIBRARIES))
        self._matchers: dict[str, ImageReferenceMatcher] = {}

    def _scope(self, key: str, request: AdmissionInput, extra_providers: Mapping[str, Any] | None = None) -> Scope:
        scope = self.base._scope(key, request)
        return Scope(self.compiler, key, scope.values, {**scope.providers, **(extra_providers or {})})

    def _image_provider(
        self, key: str, spec: Mapping[str, Any], verifications: RequestVerifications | None = None
    ) -> IvpolImageVerifier | NoRegistryAccess:
        """The per-evaluation answerer of the image functions, bound to this policy's attestations and images."""
        if self.image_verifier is None:
            return NoRegistryAccess()
        attestations = {str(a.get("name")): a for a in spec.get("attestations") or [] if isinstance(a, Mapping)}
        fingerprint = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:24]
        return IvpolImageVerifier(
            self.image_verifier,
            attestations,
            self._matcher(key, spec).matches,
            self.cache,
            f"{key}#{fingerprint}",
            verifications.verified if verifications is not None else {},
        )

    def _matcher(self, key: str, spec: Mapping[str, Any]) -> ImageReferenceMatcher:
        matcher = self._matchers.get(key)
        if matcher is None:
            matcher = self._matchers[key] = ImageReferenceMatcher(spec.get("matchImageReferences"))
        return matcher

    def mutate_digest(self, policy: CelPolicy, request: AdmissionInput) -> tuple[list[dict[str, Any]], Any]:
        """Kyverno's mutateDigest: JSON patches pinning each matched, tag-only container image to the digest it
        resolves to, and an error response naming images that could not be resolved (None when all were; an
        unpinned image must not slip through).  Verification is left to the validating phase."""
        patches, problem = self._digest_patches(policy, request)
        if not problem:
            return patches, None
        return patches, self.base._response(policy, request, "mutateDigest", _Outcome("error", f"failed to update digest: {problem}"))

    def _digest_patches(self, policy: CelPolicy, request: AdmissionInput) -> tuple[list[dict[str, Any]], str]:
        spec_pair = self._matching_spec(policy, request)
        if spec_pair is None or self.image_verifier is None or request.object is None:
            return [], ""
        index, spec = spec_pair
        if (spec.get("validationConfigurations") or {}).get("mutateDigest", True) is False:
            return [], ""
        key = policy.key if index == 0 else f"{policy.key}#autogen{index}"
        scope = self._scope(key, request)
        ignore = str(spec.get("failurePolicy") or "Fail") == "Ignore"
        try:
            keys, images, values, full = self.base._policy_exceptions(policy, scope)
            if full or not scope.conditions_hold(spec.get("matchConditions"), "spec.matchConditions", ignore):
                return [], ""
        except (ConditionError, CelError) as error:
            return [], f"failed to evaluate match conditions: {error}"
        matcher = self._matcher(key, spec)
        patches: list[dict[str, Any]] = []
        problems: list[str] = []
        for pointer, image in container_image_pointers(request.object):
            if _has_digest(image) or not matcher.matches(image):
                continue
            try:
                digest = self.image_verifier.resolve_digest(image)
            except (VerificationUnavailable, VerificationFailure) as error:
                problems.append(f"failed to resolve digest for image {image}: {error}")
                continue
            patches.append({"op": "replace", "path": pointer, "value": f"{image}@{digest}"})
        return patches, "; ".join(problems)

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

    def validate(self, policy: CelPolicy, request: AdmissionInput, verifications: RequestVerifications | None = None) -> Any:
        """The policy's response for ``request``; ``None`` when Kyverno's CLI drops it (namespace/selector mismatch).

        With a registry verifier and ``verifications`` shared by the request's policies, a passing response joins
        the ``required`` check (`RequestVerifications.enforce_required`)."""
        matched = self._matching_spec(policy, request)
        if matched is None:
            constraints = policy.spec.get("matchConstraints") or {}
            if policy.is_namespaced or constraints.get("namespaceSelector") or constraints.get("objectSelector"):
                return None
            return self.base._response(policy, request, IMAGE_VERIFY, None)
        index, spec = matched
        key = policy.key if index == 0 else f"{policy.key}#autogen{index}"
        matched_images: list[str] = []
        outcome = self._evaluate(policy, key, spec, request, verifications, matched_images)
        response = self.base._response(policy, request, IMAGE_VERIFY, outcome)
        actions = {str(a) for a in spec.get("validationActions") or ["Deny"]}
        for rule in response.rules:
            rule.failure_action = "Enforce" if "Deny" in actions else "Audit"
        required = (spec.get("validationConfigurations") or {}).get("required", True) is not False
        if verifications is not None and self.image_verifier is not None and required and outcome.status == "pass" and response.rules:
            verifications.pending.append((response.rules[0], matched_images))
        return response

    def _evaluate(
        self,
        policy: CelPolicy,
        key: str,
        spec: dict[str, Any],
        request: AdmissionInput,
        verifications: RequestVerifications | None = None,
        matched_images: list[str] | None = None,
    ) -> _Outcome:
        provider = self._image_provider(key, spec, verifications)
        scope = self._scope(key, request, {"imageVerify": provider})
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
        if matched_images is not None:
            matched_images.extend(dict.fromkeys(checked))
        if (spec.get("validationConfigurations") or {}).get("verifyDigest", True) is not False:
            for image in checked:
                if not _has_digest(image):
                    return _Outcome("fail", f"image {image} does not have a digest")
        scope.set("images", selected)
        scope.set("attestations", {str(a.get("name")): str(a.get("name")) for a in spec.get("attestations") or [] if isinstance(a, Mapping)})
        try:
            attestors = {str(a.get("name")): _resolved_attestor(scope, a, i) for i, a in enumerate(spec.get("attestors") or []) if isinstance(a, Mapping)}
        except CelError as error:
            return _Outcome("error", f"policy {policy.name}: {error}")
        scope.set("attestors", attestors)
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
        matcher = self._matcher(key, spec)
        return {name: [image for image in images if matcher.matches(image)] for name, images in categories.items()}

    def _run_validations(self, policy: CelPolicy, spec: dict[str, Any], scope: Scope, checked: list[str]) -> _Outcome:
        for index, validation in enumerate(spec.get("validations") or []):
            expression = str(validation.get("expression", ""))
            if self.image_verifier is None and _REGISTRY_CALL.search(expression):
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

    @staticmethod
    def _registry_message(policy: CelPolicy, image: str) -> str:
        return f"policy {policy.name}: image {image}: {REGISTRY_NEEDED}"


class NoRegistryAccess:
    """The image functions where no registry may be contacted: every call is an error, never a pass."""

    @staticmethod
    def _refuse(name: str, image: str) -> VerificationUnavailable:
        return VerificationUnavailable(f"{name}({image}): {REGISTRY_NEEDED}")

    def verify_image_signatures(self, image: str, attestors: list[Any]) -> int:
        raise self._refuse("verifyImageSignatures", image)

    def verify_attestation_signatures(self, image: str, attestation: str, attestors: list[Any]) -> int:
        raise self._refuse("verifyAttestationSignatures", image)

    def extract_payload(self, image: str, attestation: str) -> Any:
        raise self._refuse("extractPayload", image)

    def get_image_data(self, image: str) -> Mapping[str, Any]:
        raise self._refuse("getImageData", image)


# StringOrExpression fields of a cosign/notary attestor (relative paths) that may hold a CEL ``expression``.
_EXPRESSION_FIELDS: tuple[tuple[str, ...], ...] = (
    ("cosign", "key"),
    ("cosign", "certificate", "cert"),
    ("cosign", "certificate", "certChain"),
    ("cosign", "trustedRoot"),
    ("notary", "certs"),
    ("notary", "tsaCerts"),
)


def _resolved_attestor(scope: Scope, attestor: Mapping[str, Any], index: int) -> dict[str, Any]:
    """A copy of the attestor with each ``expression`` of a StringOrExpression (and ``key.expression``, which
    yields the key's ``data``) evaluated, as Kyverno does before verifying."""
    resolved: dict[str, Any] = json.loads(json.dumps(attestor, default=str))
    for path in _EXPRESSION_FIELDS:
        node: Any = resolved
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or not node.get("expression"):
            continue
        field_path = f"spec.attestors[{index}]." + ".".join(path) + ".expression"
        value = scope.evaluate(field_path, str(node["expression"]))
        if not isinstance(value, str):
            raise CelEvalError(f"{field_path} must evaluate to a string, got {type(value).__name__}")
        node["data" if path[-1] == "key" else "value"] = value
    return resolved


def container_image_pointers(resource: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(JSON pointer, image) of every container image in the built-in categories of a pod or pod controller."""
    path = _POD_SPEC_PATHS.get(str(resource.get("kind") or ""))
    if path is None:
        return []
    node: Any = resource
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    if not isinstance(node, Mapping):
        return []
    prefix = "/" + "/".join(path)
    found: list[tuple[str, str]] = []
    for category in _DEFAULT_CATEGORIES:
        for position, container in enumerate(node.get(category) or []):
            if isinstance(container, Mapping) and isinstance(container.get("image"), str) and container["image"]:
                found.append((f"{prefix}/{category}/{position}/image", container["image"]))
    return found


__all__ = ["ImageReferenceMatcher", "ImageValidatingEvaluator", "RequestVerifications", "REGISTRY_NEEDED", "container_image_pointers", "default_images"]
