"""`verifyImages` rules: signature/attestation checks, digest pinning, and the verification record.

Pure engine code: every registry access goes through an injected `ImageSignatureVerifier`.

Two phases, as in Kyverno:
- mutate (`verify_and_patch`): verify each matched image, pin digests (`mutateDigest`), and write the record of
  outcomes into the annotations `kyverno.io/verify-images` and `kyverno.io/verify-images-scoped`;
- validate (`validate_verified_images`): `verifyDigest` and `required` checks against the record.

Correctness rules that fix Kyverno issue #7651 and its follow-ups, and make the record unforgeable:
- the record is built only from verifications this process performed for this request (a cache hit counts: the
  cache holds only our own successes, keyed by the resolved manifest digest); annotations found on the new or the
  old object are never read, so forged `pass`/`fail` entries, entries under rules that do not run on this kind and
  stale entries for images no longer in the spec all disappear when the record is rewritten;
- unchanged images of an UPDATE are verified again (a cache lookup when this process verified them before), so
  the annotation always lists every matched image and an annotate-only update cannot smuggle in a result;
- `apply_record` rewrites both annotations from the record, or removes them when nothing was verified; callers
  apply it once per request after every verifyImages policy ran, whether or not a rule matched.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stockade.engine.context import ContextError
from stockade.engine.images import extract_images
from stockade.engine.policycontext import PolicyContext
from stockade.engine.preconditions import ConditionEvaluationError, evaluate_conditions
from stockade.engine.response import ERROR, FAIL, PASS, SKIP, ImageCheck, RuleResponse, rule_error, rule_fail, rule_pass, rule_skip
from stockade.engine.variables import SubstitutionError, substitute_all
from stockade.engine.wildcard import match as wildcard_match
from stockade.images.verifier_api import (
    ImageSignatureVerifier,
    SignatureOptions,
    VerificationFailure,
    VerificationUnavailable,
    recording_http_calls,
)
from stockade.jmespath import JMESPathError
from stockade.policy.model import RULE_TYPE_IMAGE_VERIFY, RULE_TYPE_VALIDATION, Rule

VERIFY_IMAGES_ANNOTATION = "kyverno.io/verify-images"
SCOPED_ANNOTATION = "kyverno.io/verify-images-scoped"
STATUS_PASS, STATUS_FAIL, STATUS_SKIP = "pass", "fail", "skip"
_PEM_BEGIN = "-----BEGIN"


# -- verification record ------------------------------------------------------------------------------------------
@dataclass
class VerificationRecord:
    """`{policy key: {rule: {image: pass|fail|skip}}}`, serialised into the scoped annotation."""

    policies: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)

    def status(self, policy_key: str, rule_name: str, image: str) -> str | None:
        return self.policies.get(policy_key, {}).get(rule_name, {}).get(image)

    def replace_rule(self, policy_key: str, rule_name: str, images: Mapping[str, str]) -> None:
        self.policies.setdefault(policy_key, {})[rule_name] = dict(images)

    def flat(self) -> dict[str, str]:
        """The legacy per-image view: an image fails if any policy/rule failed it, else passes if any passed."""
        rank = {STATUS_FAIL: 2, STATUS_PASS: 1, STATUS_SKIP: 0}
        result: dict[str, str] = {}
        for rules in self.policies.values():
            for images in rules.values():
                for image, status in images.items():
                    if rank.get(status, 2) >= rank.get(result.get(image, STATUS_SKIP), 0) or image not in result:
                        result[image] = status if status in rank else STATUS_FAIL
        return result

    def is_empty(self) -> bool:
        return not any(images for rules in self.policies.values() for images in rules.values())

    def annotations(self) -> dict[str, str]:
        scoped = {"version": 1, "policies": self.policies}
        return {
            VERIFY_IMAGES_ANNOTATION: json.dumps(self.flat(), sort_keys=True, separators=(",", ":")),
            SCOPED_ANNOTATION: json.dumps(scoped, sort_keys=True, separators=(",", ":")),
        }


def _annotation_pointer(name: str) -> str:
    return "/metadata/annotations/" + name.replace("~", "~0").replace("/", "~1")


def apply_record(resource: dict[str, Any], record: VerificationRecord) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`resource` with both record annotations rewritten from `record` (removed when it is empty), and the patches.

    Whatever the annotations held before (user-written or stale) is discarded; `resource` itself is not modified.
    """
    raw_metadata = resource.get("metadata")
    metadata: dict[str, Any] = raw_metadata if isinstance(raw_metadata, dict) else {}
    raw_annotations = metadata.get("annotations")
    annotations: dict[str, Any] = raw_annotations if isinstance(raw_annotations, dict) else {}
    wanted = {} if record.is_empty() else record.annotations()
    current = {name: annotations.get(name) for name in (VERIFY_IMAGES_ANNOTATION, SCOPED_ANNOTATION)}
    if all(current[name] == wanted.get(name) for name in current):
        return resource, []
    patched = copy.deepcopy(resource)
    patched_metadata = patched.setdefault("metadata", {})
    patches: list[dict[str, Any]] = []
    if not isinstance(patched_metadata.get("annotations"), dict):
        patches.append({"op": "add", "path": "/metadata/annotations", "value": {}})
        patched_metadata["annotations"] = {}
    target = patched_metadata["annotations"]
    for name in (VERIFY_IMAGES_ANNOTATION, SCOPED_ANNOTATION):
        if name in wanted:
            patches.append({"op": "add", "path": _annotation_pointer(name), "value": wanted[name]})
            target[name] = wanted[name]
        elif name in target:
            patches.append({"op": "remove", "path": _annotation_pointer(name)})
            del target[name]
    return patched, patches


# -- cache ----------------------------------------------------------------------------------------------------------
class VerificationCache:
    """TTL + size bounded cache of *successful* verifications (failures are always re-checked)."""

    def __init__(self, ttl_seconds: float = 3600.0, max_entries: int = 1000, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_seconds = ttl_seconds
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[tuple[str, ...], float] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, ...]) -> bool:
        with self._lock:
            expires = self._entries.get(key)
            if expires is None:
                return False
            if expires <= self._clock():
                del self._entries[key]
                return False
            self._entries.move_to_end(key)
            return True

    def add(self, key: tuple[str, ...]) -> None:
        with self._lock:
            self._entries[key] = self._clock() + self.ttl_seconds
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


# -- outcome --------------------------------------------------------------------------------------------------------
@dataclass
class VerifyImagesOutcome:
    """What the mutate phase produced for one rule."""

    resource: dict[str, Any]
    responses: list[RuleResponse]
    patches: list[dict[str, Any]]
    record: VerificationRecord

    @property
    def rule_response(self) -> RuleResponse | None:
        """One response for the rule: the first error, else the first failure, else a pass, else a skip; it carries
        the image checks of every image the rule looked at."""
        checks = list({id(check): check for response in self.responses for check in response.image_checks}.values())
        for status in (ERROR, FAIL, PASS, SKIP):
            for response in self.responses:
                if response.status == status:
                    response.image_checks = checks
                    return response
        return None


# -- helpers --------------------------------------------------------------------------------------------------------
def policy_key(pctx: PolicyContext) -> str:
    namespace, name = pctx.policy.namespace, pctx.policy.name
    return f"{namespace}/{name}" if namespace else name


def _policy_identity(pctx: PolicyContext, rule: Rule) -> str:
    """Cache scope: uid+resourceVersion when known, plus a hash of the rule so any edit invalidates entries."""
    digest = hashlib.sha256(json.dumps(rule.raw, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"{pctx.policy.uid};{pctx.policy.resource_version};{policy_key(pctx)};{digest}"


def convert_legacy(entry: Mapping[str, Any]) -> dict[str, Any]:
    """Rewrite the deprecated `image`/`key`/`roots`/`subject`/`issuer` fields into `imageReferences` + attestors."""
    result = dict(entry)
    if result.get("image") and not result.get("imageReferences"):
        result["imageReferences"] = [result["image"]]
    if not result.get("attestors"):
        if result.get("key"):
            keys: dict[str, Any] = {"publicKeys": result["key"]}
            result["attestors"] = [{"entries": [{"keys": keys}]}]
        elif result.get("issuer") or result.get("subject") or result.get("roots"):
            keyless = {name: result[name] for name in ("issuer", "subject", "roots", "additionalExtensions") if result.get(name)}
            result["attestors"] = [{"entries": [{"keyless": keyless}]}]
    for attestation in result.get("attestations") or []:
        if isinstance(attestation, dict) and not attestation.get("type") and attestation.get("predicateType"):
            attestation["type"] = attestation["predicateType"]
    return result


def _expand_static_keys(entries: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One entry per PEM key when `publicKeys` lists several (each key then counts separately)."""
    expanded: list[Mapping[str, Any]] = []
    for entry in entries:
        keys = entry.get("keys") if isinstance(entry, Mapping) else None
        if not isinstance(keys, Mapping):
            keys = {}
        public_keys = str(keys.get("publicKeys") or "")
        blocks = public_keys.count(_PEM_BEGIN)
        if blocks > 1 and isinstance(keys, Mapping):
            parts = [f"{_PEM_BEGIN}{chunk}".strip() for chunk in public_keys.split(_PEM_BEGIN)[1:]]
            for part in parts:
                expanded.append({**entry, "keys": {**keys, "publicKeys": part + "\n"}})
        else:
            expanded.append(entry)
    return expanded


def _required_count(attestor_set: Mapping[str, Any], entries: list[Mapping[str, Any]]) -> int:
    count = attestor_set.get("count")
    return int(count) if isinstance(count, int) and count > 0 else len(entries)


def _references_match(patterns: list[Any], info: Mapping[str, Any]) -> bool:
    candidates = {str(info.get("reference", "")), str(info.get("referenceWithTag", ""))}
    if info.get("tag") and info.get("digest"):
        candidates.add(f"{info['referenceWithTag']}@{info['digest']}")
    return any(wildcard_match(str(pattern), candidate) for pattern in patterns for candidate in candidates if candidate)


def _pointer_set(document: Any, pointer: str, value: Any) -> None:
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
    node = document
    for token in tokens[:-1]:
        node = node[int(token)] if isinstance(node, list) else node.setdefault(token, {})
    if isinstance(node, list):
        node[int(tokens[-1])] = value
    else:
        node[tokens[-1]] = value


def matched_images(resource: Mapping[str, Any], references: list[Any], default_registry: str = "docker.io") -> list[dict[str, Any]]:
    """Image infos (with JSON pointers) of `resource` that match any of `references`, in container order."""
    result: list[dict[str, Any]] = []
    for group in extract_images(dict(resource), default_registry).values():
        for info in group.values():
            if _references_match(references, info):
                result.append(info)
    return result


# -- mutate phase ---------------------------------------------------------------------------------------------------
class _RuleVerification:
    """Verification of one rule against one resource (holds the per-call state)."""

    def __init__(self, pctx: PolicyContext, rule: Rule, verifier: ImageSignatureVerifier, cache: VerificationCache | None) -> None:
        self.pctx = pctx
        self.rule = rule
        self.verifier = verifier
        self.cache = cache
        self.policy_key = policy_key(pctx)
        self.identity = _policy_identity(pctx, rule)
        self.statuses: dict[str, str] = {}

    def _respond(self, status: str, message: str) -> RuleResponse:
        factory = {PASS: rule_pass, FAIL: rule_fail, SKIP: rule_skip}.get(status)
        if factory is None:
            return rule_error(self.rule.name, RULE_TYPE_IMAGE_VERIFY, message)
        return factory(self.rule.name, RULE_TYPE_IMAGE_VERIFY, message)

    def run_entry(self, entry: Mapping[str, Any], resource: dict[str, Any], responses: list[RuleResponse], patches: list[dict[str, Any]]) -> None:
        references = list(entry.get("imageReferences") or [])
        skip_references = list(entry.get("skipImageReferences") or [])
        has_checks = bool(entry.get("attestors") or entry.get("attestations"))
        options = SignatureOptions(
            repository=str(entry.get("repository") or ""),
            annotations={str(k): str(v) for k, v in (entry.get("annotations") or {}).items()},
            signature_algorithm=str(entry.get("signatureAlgorithm") or "sha256"),
            verifier_type=str(entry.get("type") or "Cosign"),
        )
        for info in matched_images(self.pctx.new_resource, references):
            image = str(info["reference"])
            pointer = str(info["jsonPointer"])
            if _references_match(skip_references, info):
                self.statuses[image] = STATUS_SKIP
                responses.append(self._respond(SKIP, f"skipping image reference image {image}, policy {self.pctx.policy.name} ruleName {self.rule.name}"))
                continue
            response, digest = self._verify_image(entry, info, options) if has_checks else (None, str(info.get("digest") or ""))
            if entry.get("mutateDigest", True) and not info.get("digest") and (response is None or response.status == PASS):
                try:
                    digest = digest or self.verifier.resolve_digest(image)
                except (VerificationUnavailable, VerificationFailure) as exc:
                    responses.append(rule_error(self.rule.name, RULE_TYPE_IMAGE_VERIFY, "failed to update digest", exc))
                    if has_checks:
                        self.statuses[image] = STATUS_FAIL
                    continue
                new_image = f"{info['referenceWithTag']}@{digest}"
                patches.append({"op": "replace", "path": pointer, "value": new_image})
                _pointer_set(resource, pointer, new_image)
                image = f"{str(info['referenceWithTag']).rsplit(':', 1)[0]}@{digest}"
                if response is None:
                    response = self._respond(PASS, "mutated image digest")
            if response is not None:
                if has_checks:
                    self.statuses[image] = STATUS_PASS if response.status == PASS else STATUS_SKIP if response.status == SKIP else STATUS_FAIL
                responses.append(response)

    def _verify_image(self, entry: Mapping[str, Any], info: Mapping[str, Any], options: SignatureOptions) -> tuple[RuleResponse, str]:
        """Verify one image; the registry round trips it made are kept on its ImageCheck (client spans)."""
        with recording_http_calls() as calls:
            response, digest = self._verify_image_recorded(entry, info, options)
        if response.image_checks and calls:
            response.image_checks[-1].http_calls = [[c.method, c.url, c.status, c.started_ns, c.duration_ns] for c in calls]
        return response, digest

    def _verify_image_recorded(self, entry: Mapping[str, Any], info: Mapping[str, Any], options: SignatureOptions) -> tuple[RuleResponse, str]:
        image = str(info["reference"])
        try:
            digest = str(info.get("digest") or "") or self.verifier.resolve_digest(image)
        except VerificationUnavailable as exc:
            return rule_error(self.rule.name, RULE_TYPE_IMAGE_VERIFY, f"failed to verify image {image}", exc), ""
        except VerificationFailure as exc:
            return self._respond(FAIL, f"failed to verify image {image}: {exc}"), ""
        repository = str(info.get("referenceWithTag", image)).rsplit(":", 1)[0] if info.get("tag") else image.split("@", 1)[0]
        cache_key = (self.identity, self.rule.name, repository, digest)
        use_cache = self.cache is not None and entry.get("useCache", True) is not False
        if use_cache and self.cache.get(cache_key):  # type: ignore[union-attr]
            cached = self._respond(PASS, "verified from cache")
            cached.image_checks.append(ImageCheck(image, digest, "cache", PASS, time.time_ns()))
            return cached, digest
        self.pctx.json_context.set("image", dict(info))
        started, clock_started = time.time_ns(), time.perf_counter_ns()
        response = self._verify_attestors(entry, image, digest, options)
        if response.status == PASS and entry.get("attestations"):
            response = self._verify_attestations(entry, image, digest, options)
        if response.status == PASS and isinstance(entry.get("validate"), Mapping):
            response = self._validate_deny(entry["validate"], response)
        if response.status == PASS and use_cache:
            self.cache.add(cache_key)  # type: ignore[union-attr]
        response.image_checks.append(ImageCheck(image, digest, "registry", response.status, started, time.perf_counter_ns() - clock_started))
        return response, digest

    # attestors ----------------------------------------------------------------------------------------------------
    def _verify_attestor_set(self, attestor_set: Mapping[str, Any], image: str, digest: str, options: SignatureOptions, path: str) -> tuple[bool, list[str], bool]:
        """(verified, errors, unavailable) for one AttestorSet, honouring `count` and nesting."""
        entries = _expand_static_keys([e for e in attestor_set.get("entries") or [] if isinstance(e, Mapping)])
        required = _required_count(attestor_set, entries)
        verified, errors, unavailable = 0, [], False
        for index, attestor in enumerate(entries):
            entry_path = f"{path}.entries[{index}]"
            if isinstance(attestor.get("attestor"), Mapping):
                ok, nested_errors, nested_unavailable = self._verify_attestor_set(attestor["attestor"], image, digest, options, entry_path + ".attestor")
                errors.extend(nested_errors)
                unavailable = unavailable or nested_unavailable
            else:
                sub_path = next((f".{name}" for name in ("keys", "certificates", "keyless") if name in attestor), "")
                try:
                    self.verifier.verify_signature(image, digest, attestor, options)
                    ok = True
                except VerificationUnavailable as exc:
                    ok, unavailable = False, True
                    errors.append(f"{entry_path}{sub_path}: {exc}")
                except VerificationFailure as exc:
                    ok = False
                    errors.append(f"{entry_path}{sub_path}: {exc}")
            if ok:
                verified += 1
                if verified >= required:
                    return True, [], False
        return False, errors, unavailable

    def _verify_attestors(self, entry: Mapping[str, Any], image: str, digest: str, options: SignatureOptions) -> RuleResponse:
        attestor_sets = [a for a in entry.get("attestors") or [] if isinstance(a, Mapping)]
        for index, attestor_set in enumerate(attestor_sets):
            ok, errors, unavailable = self._verify_attestor_set(attestor_set, image, digest, options, f".attestors[{index}]")
            if not ok:
                detail = "; ".join(errors) or "no attestor entries"
                if unavailable:
                    return rule_error(self.rule.name, RULE_TYPE_IMAGE_VERIFY, f"failed to verify image {image}", detail)
                return self._respond(FAIL, f"failed to verify image {image}: {detail}")
        return self._respond(PASS, f"verified image signatures for {image}")

    # attestations -------------------------------------------------------------------------------------------------
    def _verify_attestations(self, entry: Mapping[str, Any], image: str, digest: str, options: SignatureOptions) -> RuleResponse:
        for index, attestation in enumerate(entry.get("attestations") or []):
            path = f".attestations[{index}]"
            predicate_type = str(attestation.get("type") or attestation.get("predicateType") or "")
            if not predicate_type:
                return self._respond(FAIL, f"{path}: missing type")
            attestor_sets = attestation.get("attestors") or [{"entries": [{}]}]
            for set_index, attestor_set in enumerate(attestor_sets):
                entries = _expand_static_keys([e for e in attestor_set.get("entries") or [] if isinstance(e, Mapping)])
                required = _required_count(attestor_set, entries)
                verified, errors, unavailable = 0, [], False
                for entry_index, attestor in enumerate(entries):
                    entry_path = f"{path}.attestors[{set_index}].entries[{entry_index}]"
                    try:
                        statements = self.verifier.fetch_attestations(image, digest, attestor, options, predicate_type)
                    except VerificationUnavailable as exc:
                        errors.append(f"{entry_path}: {exc}")
                        unavailable = True
                        continue
                    except VerificationFailure as exc:
                        errors.append(f"{entry_path}: {exc}")
                        continue
                    if attestation.get("name"):
                        self.pctx.json_context.set(str(attestation["name"]), statements)
                    problem = self._check_statements(statements, attestation, image, predicate_type)
                    if problem is None:
                        verified += 1
                        if verified >= required:
                            break
                    else:
                        errors.append(f"{entry_path}: {problem}")
                if verified < required:
                    detail = "; ".join(errors) or "attestations verification failed"
                    if unavailable:
                        return rule_error(self.rule.name, RULE_TYPE_IMAGE_VERIFY, f"failed to verify image {image}", detail)
                    return self._respond(
                        FAIL, f"image attestations verification failed, verifiedCount: {verified}, requiredCount: {required}, error: {detail}"
                    )
        return self._respond(PASS, f"verified image attestations for {image}")

    def _check_statements(self, statements: list[dict[str, Any]], attestation: Mapping[str, Any], image: str, predicate_type: str) -> str | None:
        matching = [s for s in statements if s.get("predicateType") == predicate_type]
        if not matching:
            return f"attestions not found for predicate type {predicate_type}"
        conditions = attestation.get("conditions")
        if not conditions:
            return None
        ctx = self.pctx.json_context
        for statement in matching:
            predicate = statement.get("predicate")
            if not isinstance(predicate, dict):
                return f"failed to extract predicate from statement: {statement}"
            ctx.checkpoint()
            try:
                for key, value in predicate.items():
                    ctx.set(str(key), value)
                ok, message = evaluate_conditions(conditions, ctx, is_delete=self.pctx.is_delete)
            except (ConditionEvaluationError, ContextError, JMESPathError, SubstitutionError) as exc:
                return f"failed to check attestations: {exc}"
            finally:
                ctx.reset()
            if not ok:
                return f"attestation checks failed for {image} and predicate {predicate_type}: {message}"
        return None

    def _validate_deny(self, validation: Mapping[str, Any], passed: RuleResponse) -> RuleResponse:
        deny = validation.get("deny")
        if not isinstance(deny, Mapping) or deny.get("conditions") is None:
            return passed
        try:
            denied, message = evaluate_conditions(deny.get("conditions"), self.pctx.json_context, is_delete=self.pctx.is_delete)
        except ConditionEvaluationError as exc:
            return self._respond(FAIL, f"validation in verifyImages failed: failed to check deny conditions: {exc}")
        if not denied:
            return self._respond(PASS, f"verifyImages validation is passed in {self.rule.name} rule")
        text = "; ".join(part for part in (str(validation.get("message") or ""), message) if part)
        try:
            text = str(substitute_all(text, self.pctx.json_context)) if text else ""
        except SubstitutionError:
            text = message
        return self._respond(FAIL, f"validation in verifyImages failed: {text or 'validation error: imageVerify  failed'}")


def _substitute_rule(rule: Rule, pctx: PolicyContext) -> list[dict[str, Any]]:
    """Variables in verifyImages are substituted up front, except attestation conditions and deny (per image)."""
    entries = [convert_legacy(copy.deepcopy(entry)) for entry in rule.verify_images if isinstance(entry, dict)]
    held: list[tuple[list[Any], Any]] = []
    for entry in entries:
        held.append(([a.pop("conditions", None) for a in entry.get("attestations") or [] if isinstance(a, dict)], (entry.get("validate") or {}).pop("deny", None) if isinstance(entry.get("validate"), dict) else None))
    substituted: list[dict[str, Any]] = substitute_all(entries, pctx.json_context, is_delete=pctx.is_delete)
    for entry, (conditions, deny) in zip(substituted, held):
        for attestation, condition in zip([a for a in entry.get("attestations") or [] if isinstance(a, dict)], conditions):
            if condition is not None:
                attestation["conditions"] = condition
        if deny is not None:
            entry.setdefault("validate", {})["deny"] = deny
    return list(substituted)


def verify_and_patch(
    pctx: PolicyContext,
    rule: Rule,
    verifier: ImageSignatureVerifier,
    cache: VerificationCache | None = None,
    record: VerificationRecord | None = None,
) -> VerifyImagesOutcome:
    """Mutate phase of a verifyImages rule: per-image responses, digest patches, and the annotation record.

    `record` accumulates the results of every verifyImages rule of this request (a fresh one when omitted); this
    rule's entry is replaced in it and the annotations are rewritten from it, never merged with what the object
    carried. The returned resource has the patches applied; `patches` lists them (RFC 6902).
    """
    record = record if record is not None else VerificationRecord()
    try:
        entries = _substitute_rule(rule, pctx)
    except (SubstitutionError, ContextError, JMESPathError) as exc:
        response = rule_error(rule.name, RULE_TYPE_IMAGE_VERIFY, "failed to substitute variables", exc)
        cleaned, cleaning_patches = apply_record(pctx.new_resource, record)
        return VerifyImagesOutcome(cleaned, [response], cleaning_patches, record)
    resource = copy.deepcopy(pctx.new_resource)
    state = _RuleVerification(pctx, rule, verifier, cache)
    responses: list[RuleResponse] = []
    patches: list[dict[str, Any]] = []
    for entry in entries:
        state.run_entry(entry, resource, responses, patches)
    if state.statuses:
        record.replace_rule(state.policy_key, rule.name, state.statuses)
    resource, record_patches = apply_record(resource, record)
    return VerifyImagesOutcome(resource, responses, patches + record_patches, record)


# -- validate phase -------------------------------------------------------------------------------------------------
def validate_verified_images(pctx: PolicyContext, rule: Rule, record: VerificationRecord) -> RuleResponse | None:
    """`verifyDigest` and `required` checks of every matched image (not only the changed ones).

    `record` is the one `verify_and_patch` built in this process for this request; the annotations on the object
    are never consulted, so nothing a user writes there counts.
    """
    key = policy_key(pctx)
    skipped: list[str] = []
    passed: list[str] = []
    try:
        entries = _substitute_rule(rule, pctx)
    except (SubstitutionError, ContextError, JMESPathError) as exc:
        return rule_error(rule.name, RULE_TYPE_VALIDATION, "failed to substitute variables", exc)
    for entry in entries:
        for info in matched_images(pctx.new_resource, list(entry.get("imageReferences") or [])):
            image = str(info["reference"])
            if entry.get("verifyDigest", True) and not info.get("digest"):
                return rule_fail(rule.name, RULE_TYPE_IMAGE_VERIFY, f"missing digest for {image}")
            if entry.get("required", True):
                status = record.status(key, rule.name, image)
                if status in (None, STATUS_FAIL):
                    return rule_fail(rule.name, RULE_TYPE_IMAGE_VERIFY, f"unverified image {image}")
                (passed if status == STATUS_PASS else skipped).append(image)
            else:
                passed.append(image)
    if passed or not skipped:
        if skipped:
            return rule_pass(rule.name, RULE_TYPE_IMAGE_VERIFY, " ".join(["image verified, skipped images:", *skipped]))
        return rule_pass(rule.name, RULE_TYPE_IMAGE_VERIFY, "image verified")
    return rule_skip(rule.name, RULE_TYPE_IMAGE_VERIFY, " ".join(["image skipped, skipped images:", *skipped]))
