"""verifyImages engine handler with a fake verifier: counts, caching, record/annotation and issue #7651 fixes."""

from __future__ import annotations

import copy
import json
from typing import Any, Mapping

import pytest

from stockade.engine.engine import Engine, Request
from stockade.engine.handlers.verify_images import (
    SCOPED_ANNOTATION,
    VERIFY_IMAGES_ANNOTATION,
    VerificationCache,
    VerificationRecord,
    apply_record,
    validate_verified_images,
    verify_and_patch,
)
from stockade.images.verifier_api import SignatureOptions, VerificationFailure, VerificationUnavailable
from stockade.policy.model import KyvernoPolicy

DIGESTS = {
    "ghcr.io/acme/app:1.0": "sha256:" + "a" * 64,
    "ghcr.io/acme/app:2.0": "sha256:" + "b" * 64,
    "ghcr.io/acme/sidecar:6.3.3": "sha256:" + "c" * 64,
    "ghcr.io/acme/evil:1.0": "sha256:" + "e" * 64,
    "ghcr.io/acme/skipme:1.0": "sha256:" + "f" * 64,
}
KEY_A = "-----BEGIN PUBLIC KEY-----\nA\n-----END PUBLIC KEY-----\n"
KEY_B = "-----BEGIN PUBLIC KEY-----\nB\n-----END PUBLIC KEY-----\n"


class FakeVerifier:
    """Signatures are a set of (digest, key) pairs; statements per digest."""

    def __init__(self) -> None:
        self.digests = dict(DIGESTS)
        self.signed: set[tuple[str, str]] = set()
        self.statements: dict[str, list[dict[str, Any]]] = {}
        self.down = False
        self.calls = 0

    def resolve_digest(self, image: str) -> str:
        if self.down:
            raise VerificationUnavailable("registry ghcr.io: connection refused")
        try:
            return self.digests[image]
        except KeyError:
            raise VerificationFailure(f"{image} not found") from None

    def verify_signature(self, image: str, digest: str, attestor: Mapping[str, Any], options: SignatureOptions) -> None:
        self.calls += 1
        if self.down:
            raise VerificationUnavailable("registry ghcr.io: connection refused")
        key = attestor["keys"]["publicKeys"]
        if (digest, key) not in self.signed:
            raise VerificationFailure("no matching signatures")

    def fetch_attestations(self, image: str, digest: str, attestor: Mapping[str, Any], options: SignatureOptions, predicate_type: str) -> list[dict[str, Any]]:
        self.calls += 1
        return [s for s in self.statements.get(digest, []) if s["predicateType"] == predicate_type]


def policy(entry_overrides: dict[str, Any] | None = None, *, uid: str = "uid-1", rv: str = "1") -> KyvernoPolicy:
    entry: dict[str, Any] = {
        "imageReferences": ["ghcr.io/acme/*"],
        "attestors": [{"entries": [{"keys": {"publicKeys": KEY_A}}]}],
    }
    entry.update(entry_overrides or {})
    return KyvernoPolicy(
        {
            "apiVersion": "kyverno.io/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "check-images", "uid": uid, "resourceVersion": rv},
            "spec": {"rules": [{"name": "verify", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "verifyImages": [entry]}]},
        }
    )


def deployment(*images: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "web", "namespace": "default"}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {"template": {"spec": {"containers": [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]}}},
    }


def pod(*images: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "web", "namespace": "default"}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]}}


def run(pol: KyvernoPolicy, resource: dict[str, Any], verifier: FakeVerifier, *, old: dict[str, Any] | None = None, cache: VerificationCache | None = None, rule_name: str = "verify"):
    engine = Engine()
    request = Request(resource=resource, operation="UPDATE" if old else "CREATE", old_resource=old or {})
    pctx = engine.policy_context(pol, request)
    rule = next(r for r in pol.rules if r.name == rule_name)
    outcome = verify_and_patch(pctx, rule, verifier, cache)
    validate_pctx = engine.policy_context(pol, Request(resource=outcome.resource, operation=request.operation, old_resource=old or {}))
    return outcome, validate_verified_images(validate_pctx, rule, outcome.record)


def test_signed_image_passes_and_digest_is_pinned() -> None:
    verifier = FakeVerifier()
    verifier.signed.add((DIGESTS["ghcr.io/acme/app:1.0"], KEY_A))
    outcome, validation = run(policy(), pod("ghcr.io/acme/app:1.0"), verifier)
    assert [r.status for r in outcome.responses] == ["pass"]
    assert outcome.responses[0].message == "verified image signatures for ghcr.io/acme/app:1.0"
    pinned = f"ghcr.io/acme/app:1.0@{DIGESTS['ghcr.io/acme/app:1.0']}"
    assert outcome.resource["spec"]["containers"][0]["image"] == pinned
    assert {"op": "replace", "path": "/spec/containers/0/image", "value": pinned} in outcome.patches
    flat = json.loads(outcome.resource["metadata"]["annotations"][VERIFY_IMAGES_ANNOTATION])
    assert flat == {f"ghcr.io/acme/app@{DIGESTS['ghcr.io/acme/app:1.0']}": "pass"}
    assert validation is not None and validation.status == "pass" and validation.message == "image verified"


def test_wrong_key_fails_and_validate_reports_unverified() -> None:
    verifier = FakeVerifier()
    verifier.signed.add((DIGESTS["ghcr.io/acme/app:1.0"], KEY_B))
    outcome, validation = run(policy(), pod("ghcr.io/acme/app:1.0"), verifier)
    assert outcome.rule_response is not None and outcome.rule_response.status == "fail"
    assert "failed to verify image ghcr.io/acme/app:1.0: .attestors[0].entries[0].keys: no matching signatures" == outcome.rule_response.message
    assert outcome.resource["spec"]["containers"][0]["image"] == "ghcr.io/acme/app:1.0"
    assert validation is not None and validation.status == "fail"
    assert validation.message == "missing digest for ghcr.io/acme/app:1.0"


def test_registry_down_is_error_never_pass() -> None:
    verifier = FakeVerifier()
    verifier.down = True
    outcome, _ = run(policy(), pod("ghcr.io/acme/app:1.0@" + DIGESTS["ghcr.io/acme/app:1.0"]), verifier)
    assert outcome.rule_response is not None and outcome.rule_response.status == "error"
    assert "connection refused" in outcome.rule_response.message


def test_count_one_of_two_keys_and_all_required_by_default() -> None:
    verifier = FakeVerifier()
    verifier.signed.add((DIGESTS["ghcr.io/acme/app:1.0"], KEY_B))
    entries = [{"keys": {"publicKeys": KEY_A}}, {"keys": {"publicKeys": KEY_B}}]
    any_one = policy({"attestors": [{"count": 1, "entries": entries}]})
    assert run(any_one, pod("ghcr.io/acme/app:1.0"), verifier)[0].rule_response.status == "pass"
    all_of = policy({"attestors": [{"entries": entries}]})
    assert run(all_of, pod("ghcr.io/acme/app:1.0"), verifier)[0].rule_response.status == "fail"
    # several PEM keys in one publicKeys string count as separate entries
    combined = policy({"attestors": [{"count": 1, "entries": [{"keys": {"publicKeys": KEY_A + KEY_B}}]}]})
    assert run(combined, pod("ghcr.io/acme/app:1.0"), verifier)[0].rule_response.status == "pass"


def test_skip_image_references_and_unmatched_images() -> None:
    verifier = FakeVerifier()
    outcome, validation = run(policy({"skipImageReferences": ["ghcr.io/acme/skipme*"]}), pod("ghcr.io/acme/skipme:1.0", "docker.io/nginx:1.25"), verifier)
    assert [r.status for r in outcome.responses] == ["skip"]
    assert outcome.responses[0].message == "skipping image reference image ghcr.io/acme/skipme:1.0, policy check-images ruleName verify"
    assert verifier.calls == 0


def test_cache_is_keyed_by_digest_so_a_repointed_tag_is_reverified() -> None:
    verifier = FakeVerifier()
    verifier.signed.add((DIGESTS["ghcr.io/acme/app:1.0"], KEY_A))
    cache = VerificationCache()
    pol = policy({"mutateDigest": False, "verifyDigest": False})
    assert run(pol, pod("ghcr.io/acme/app:1.0"), verifier, cache=cache)[0].rule_response.status == "pass"
    second = run(pol, pod("ghcr.io/acme/app:1.0"), verifier, cache=cache)[0]
    assert second.rule_response.message == "verified from cache" and verifier.calls == 1
    # the tag now points at unsigned content: the cached success must not apply
    verifier.digests["ghcr.io/acme/app:1.0"] = DIGESTS["ghcr.io/acme/evil:1.0"]
    third = run(pol, pod("ghcr.io/acme/app:1.0"), verifier, cache=cache)[0]
    assert third.rule_response.status == "fail"


def test_cache_invalidated_by_policy_edit_and_disabled_by_use_cache_false() -> None:
    verifier = FakeVerifier()
    verifier.signed.add((DIGESTS["ghcr.io/acme/app:1.0"], KEY_A))
    cache = VerificationCache()
    run(policy(rv="1"), pod("ghcr.io/acme/app:1.0"), verifier, cache=cache)
    run(policy(rv="2"), pod("ghcr.io/acme/app:1.0"), verifier, cache=cache)
    assert verifier.calls == 2
    run(policy({"useCache": False}), pod("ghcr.io/acme/app:1.0"), verifier, cache=cache)
    run(policy({"useCache": False}), pod("ghcr.io/acme/app:1.0"), verifier, cache=cache)
    assert verifier.calls == 4


def test_cache_expires_after_ttl() -> None:
    now = [0.0]
    cache = VerificationCache(ttl_seconds=10, clock=lambda: now[0])
    cache.add(("k",))
    assert cache.get(("k",))
    now[0] = 11
    assert not cache.get(("k",))


# -- issue #7651 and follow-ups -----------------------------------------------------------------------------------
def _admit_create(pol: KyvernoPolicy, resource: dict[str, Any], verifier: FakeVerifier, rule_name: str = "verify", cache: VerificationCache | None = None) -> dict[str, Any]:
    outcome, validation = run(pol, resource, verifier, rule_name=rule_name, cache=cache)
    assert validation is not None and validation.status == "pass", validation
    return outcome.resource


def test_update_changing_one_of_two_images_is_admitted_and_annotation_lists_both() -> None:
    verifier = FakeVerifier()
    for image in ("ghcr.io/acme/app:1.0", "ghcr.io/acme/app:2.0", "ghcr.io/acme/sidecar:6.3.3"):
        verifier.signed.add((DIGESTS[image], KEY_A))
    pol = policy({"mutateDigest": False, "verifyDigest": False})
    pol_rules_name = "autogen-verify"
    cache = VerificationCache()
    stored = _admit_create(pol, deployment("ghcr.io/acme/app:1.0", "ghcr.io/acme/sidecar:6.3.3"), verifier, pol_rules_name, cache)
    calls_after_create = verifier.calls
    updated = copy.deepcopy(stored)
    updated["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/acme/app:2.0"
    outcome, validation = run(pol, updated, verifier, old=stored, rule_name=pol_rules_name, cache=cache)
    assert validation is not None and validation.status == "pass", validation.message
    assert verifier.calls == calls_after_create + 1  # the unchanged sidecar came from our own digest-bound cache
    flat = json.loads(outcome.resource["metadata"]["annotations"][VERIFY_IMAGES_ANNOTATION])
    assert flat == {"ghcr.io/acme/app:2.0": "pass", "ghcr.io/acme/sidecar:6.3.3": "pass"}


def _forged(flat: dict[str, str], scoped: dict[str, Any]) -> dict[str, str]:
    return {VERIFY_IMAGES_ANNOTATION: json.dumps(flat), SCOPED_ANNOTATION: json.dumps({"version": 1, "policies": scoped})}


def test_user_written_annotation_cannot_bypass_verification() -> None:
    verifier = FakeVerifier()  # nothing is signed
    pol = policy({"mutateDigest": False, "verifyDigest": False})
    forged = _forged({"ghcr.io/acme/evil:1.0": "pass"}, {"check-images": {"verify": {"ghcr.io/acme/evil:1.0": "pass"}}})
    outcome, validation = run(pol, pod("ghcr.io/acme/evil:1.0", annotations=forged), verifier)
    assert outcome.rule_response.status == "fail"
    assert validation is not None and validation.status == "fail" and validation.message == "unverified image ghcr.io/acme/evil:1.0"
    assert json.loads(outcome.resource["metadata"]["annotations"][VERIFY_IMAGES_ANNOTATION]) == {"ghcr.io/acme/evil:1.0": "fail"}
    # on UPDATE too: neither the new object's nor the old object's annotations are trusted
    outcome, validation = run(pol, pod("ghcr.io/acme/evil:1.0", annotations=forged), verifier, old=pod("ghcr.io/acme/app:1.0"))
    assert validation.status == "fail"
    # annotate-only update of an object whose stored record was forged (e.g. written while the webhook was down)
    outcome, validation = run(pol, pod("ghcr.io/acme/evil:1.0", annotations=forged), verifier, old=pod("ghcr.io/acme/evil:1.0", annotations=forged))
    assert outcome.rule_response.status == "fail" and validation.status == "fail"


def test_user_written_annotation_cannot_block_an_update() -> None:
    verifier = FakeVerifier()
    for image in ("ghcr.io/acme/app:1.0", "ghcr.io/acme/sidecar:6.3.3"):
        verifier.signed.add((DIGESTS[image], KEY_A))
    pol = policy({"mutateDigest": False, "verifyDigest": False})
    stored = _admit_create(pol, pod("ghcr.io/acme/app:1.0", "ghcr.io/acme/sidecar:6.3.3"), verifier)
    updated = copy.deepcopy(stored)
    updated["metadata"]["annotations"][VERIFY_IMAGES_ANNOTATION] = json.dumps({"ghcr.io/acme/app:1.0": "fail"})
    updated["metadata"]["annotations"][SCOPED_ANNOTATION] = "garbage"
    updated["metadata"]["labels"] = {"touched": "yes"}
    outcome, validation = run(pol, updated, verifier, old=stored)
    assert validation is not None and validation.status == "pass"
    assert json.loads(outcome.resource["metadata"]["annotations"][VERIFY_IMAGES_ANNOTATION]) == {
        "ghcr.io/acme/app:1.0": "pass",
        "ghcr.io/acme/sidecar:6.3.3": "pass",
    }


def test_old_record_is_never_carried_forward() -> None:
    verifier = FakeVerifier()  # nothing signed, yet the stored object claims this very policy and rule passed it
    pol = policy({"mutateDigest": False, "verifyDigest": False})
    claimed = _forged({"ghcr.io/acme/app:1.0": "pass"}, {"check-images": {"verify": {"ghcr.io/acme/app:1.0": "pass"}}})
    old = pod("ghcr.io/acme/app:1.0", annotations=claimed)
    outcome, validation = run(pol, copy.deepcopy(old), verifier, old=old)
    assert verifier.calls == 1 and outcome.rule_response.status == "fail" and validation.status == "fail"


# -- forged records: every form is dropped ---------------------------------------------------------------------------
def _signed_verifier() -> FakeVerifier:
    verifier = FakeVerifier()
    for image in ("ghcr.io/acme/app:1.0", "ghcr.io/acme/sidecar:6.3.3"):
        verifier.signed.add((DIGESTS[image], KEY_A))
    return verifier


def _record_of(resource: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    annotations = resource["metadata"]["annotations"]
    return json.loads(annotations[VERIFY_IMAGES_ANNOTATION]), json.loads(annotations[SCOPED_ANNOTATION])["policies"]


def test_annotate_only_update_rebuilds_the_record_from_our_results() -> None:
    verifier = _signed_verifier()
    pol = policy({"mutateDigest": False, "verifyDigest": False})
    cache = VerificationCache()
    stored = _admit_create(pol, pod("ghcr.io/acme/app:1.0", "ghcr.io/acme/sidecar:6.3.3"), verifier, cache=cache)
    annotated = copy.deepcopy(stored)  # what `kubectl annotate --overwrite` sends: only the annotation differs
    annotated["metadata"]["annotations"].update(
        _forged(
            {"ghcr.io/acme/evil:1.0": "pass", "ghcr.io/acme/app:1.0": "fail"},
            {"check-images": {"verify": {"ghcr.io/acme/app:1.0": "fail"}, "never-runs": {"ghcr.io/acme/evil:1.0": "pass"}}, "ghost-policy": {"r": {"x": "pass"}}},
        )
    )
    outcome, validation = run(pol, annotated, verifier, old=stored, cache=cache)
    assert validation.status == "pass"
    assert _record_of(outcome.resource) == _record_of(stored)
    assert _record_of(outcome.resource)[0] == {"ghcr.io/acme/app:1.0": "pass", "ghcr.io/acme/sidecar:6.3.3": "pass"}


def test_forged_pass_for_an_unsigned_image_under_a_rule_that_never_runs_on_the_kind() -> None:
    verifier = _signed_verifier()
    pol = policy({"mutateDigest": False, "verifyDigest": False})  # rules: verify (Pod) and autogen-verify (Deployment)
    forged = _forged({"ghcr.io/acme/evil:1.0": "pass"}, {"check-images": {"verify": {"ghcr.io/acme/evil:1.0": "pass"}}})
    outcome, validation = run(pol, deployment("ghcr.io/acme/app:1.0", annotations=forged), verifier, rule_name="autogen-verify")
    assert validation.status == "pass"
    flat, scoped = _record_of(outcome.resource)
    assert flat == {"ghcr.io/acme/app:1.0": "pass"}
    assert scoped == {"check-images": {"autogen-verify": {"ghcr.io/acme/app:1.0": "pass"}}}


def test_forged_fail_for_a_verified_image_is_dropped() -> None:
    verifier = _signed_verifier()
    pol = policy({"mutateDigest": False, "verifyDigest": False})
    forged = _forged({"ghcr.io/acme/app:1.0": "fail"}, {"other/policy": {"x": {"ghcr.io/acme/app:1.0": "fail"}}})
    outcome, validation = run(pol, pod("ghcr.io/acme/app:1.0", annotations=forged), verifier)
    assert validation.status == "pass"
    assert _record_of(outcome.resource) == ({"ghcr.io/acme/app:1.0": "pass"}, {"check-images": {"verify": {"ghcr.io/acme/app:1.0": "pass"}}})


def test_stale_entries_for_images_no_longer_in_the_spec_are_dropped() -> None:
    verifier = _signed_verifier()
    verifier.signed.add((DIGESTS["ghcr.io/acme/app:2.0"], KEY_A))
    pol = policy({"mutateDigest": False, "verifyDigest": False})
    stored = _admit_create(pol, pod("ghcr.io/acme/app:1.0", "ghcr.io/acme/sidecar:6.3.3"), verifier)
    updated = copy.deepcopy(stored)
    updated["spec"]["containers"] = [{"name": "c0", "image": "ghcr.io/acme/app:2.0"}]
    outcome, validation = run(pol, updated, verifier, old=stored)
    assert validation.status == "pass"
    assert _record_of(outcome.resource)[0] == {"ghcr.io/acme/app:2.0": "pass"}


def test_removed_or_edited_annotations_are_written_back() -> None:
    verifier = _signed_verifier()
    pol = policy({"mutateDigest": False, "verifyDigest": False})
    stored = _admit_create(pol, pod("ghcr.io/acme/app:1.0"), verifier)
    removed = copy.deepcopy(stored)
    del removed["metadata"]["annotations"]
    outcome, _ = run(pol, removed, verifier, old=stored)
    assert _record_of(outcome.resource) == _record_of(stored)
    assert {"op": "add", "path": "/metadata/annotations", "value": {}} in outcome.patches


def test_apply_record_removes_annotations_when_nothing_was_verified() -> None:
    forged = _forged({"ghcr.io/acme/evil:1.0": "pass"}, {"p": {"r": {"ghcr.io/acme/evil:1.0": "pass"}}})
    resource = pod("ghcr.io/acme/evil:1.0", annotations={**forged, "keep": "me"})
    cleaned, patches = apply_record(resource, VerificationRecord())
    assert cleaned["metadata"]["annotations"] == {"keep": "me"}
    assert [p["op"] for p in patches] == ["remove", "remove"]
    assert resource["metadata"]["annotations"][VERIFY_IMAGES_ANNOTATION]  # the input is not modified
    untouched, none = apply_record(pod("ghcr.io/acme/app:1.0"), VerificationRecord())
    assert none == [] and "annotations" not in untouched["metadata"]


def test_processor_strips_forged_records_even_when_no_rule_matches() -> None:
    from stockade.engine.processor import apply_policies

    verifier = _signed_verifier()
    pol = policy({"imageReferences": ["ghcr.io/other/*"]})  # matches the Pod kind, but none of its images
    forged = _forged({"ghcr.io/acme/evil:1.0": "pass"}, {"check-images": {"verify": {"ghcr.io/acme/evil:1.0": "pass"}}})
    engine = Engine(image_verifier=verifier)
    result = apply_policies(engine, [pol], Request(resource=pod("ghcr.io/acme/evil:1.0", annotations=forged)))
    assert VERIFY_IMAGES_ANNOTATION not in result.patched_resource["metadata"].get("annotations", {})
    assert SCOPED_ANNOTATION not in result.patched_resource["metadata"].get("annotations", {})


def test_attestation_conditions_and_context_entry() -> None:
    verifier = FakeVerifier()
    digest = DIGESTS["ghcr.io/acme/app:1.0"]
    verifier.signed.add((digest, KEY_A))
    verifier.statements[digest] = [{"predicateType": "https://example.com/review/v1", "subject": [], "predicate": {"reviewer": "alice", "approved": True}}]
    entry = {
        "attestors": [],
        "attestations": [
            {
                "type": "https://example.com/review/v1",
                "name": "reviews",
                "attestors": [{"entries": [{"keys": {"publicKeys": KEY_A}}]}],
                "conditions": [{"all": [{"key": "{{ reviewer }}", "operator": "Equals", "value": "alice"}]}],
            }
        ],
    }
    outcome, _ = run(policy(entry), pod("ghcr.io/acme/app:1.0"), verifier)
    assert outcome.rule_response.status == "pass", outcome.rule_response.message
    assert outcome.rule_response.message == "verified image attestations for ghcr.io/acme/app:1.0"
    entry["attestations"][0]["conditions"] = [{"all": [{"key": "{{ reviewer }}", "operator": "Equals", "value": "bob", "message": "not bob"}]}]
    outcome, _ = run(policy(entry), pod("ghcr.io/acme/app:1.0"), verifier)
    assert outcome.rule_response.status == "fail"
    assert "attestation checks failed for ghcr.io/acme/app:1.0 and predicate https://example.com/review/v1: not bob" in outcome.rule_response.message
    entry["attestations"][0]["type"] = "https://example.com/other"
    outcome, _ = run(policy(entry), pod("ghcr.io/acme/app:1.0"), verifier)
    assert "attestions not found for predicate type https://example.com/other" in outcome.rule_response.message


def test_verify_digest_false_and_required_false() -> None:
    verifier = FakeVerifier()
    pol = policy({"mutateDigest": False, "verifyDigest": False, "required": False})
    outcome, validation = run(pol, pod("ghcr.io/acme/app:1.0"), verifier)
    assert outcome.rule_response.status == "fail"
    assert validation is not None and validation.status == "pass"


def test_required_without_attestors_can_never_be_satisfied() -> None:
    verifier = FakeVerifier()
    required = policy({"attestors": [], "mutateDigest": False, "verifyDigest": False})
    _, validation = run(required, pod("ghcr.io/acme/app:1.0"), verifier)
    assert validation is not None and validation.status == "fail" and validation.message == "unverified image ghcr.io/acme/app:1.0"
    optional = policy({"attestors": [], "mutateDigest": False, "verifyDigest": False, "required": False})
    _, validation = run(optional, pod("ghcr.io/acme/app:1.0"), verifier)
    assert validation is not None and validation.status == "pass"
