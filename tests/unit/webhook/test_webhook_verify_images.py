"""verifyImages through the webhook: the mutate call verifies and pins digests (denying unsigned images under
Enforce), the validate call re-checks against what this process verified, never against the annotation."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, Mapping

import jsonpatch
from webhook_helpers import pod, review

from stockade.engine.handlers.verify_images import VerificationCache
from stockade.images.verifier_api import SignatureOptions, VerificationFailure
from stockade.webhook.admission import parse_review
from stockade.webhook.policystore import PolicyStore

SIGNED = "ghcr.io/acme/app:1.0"
UNSIGNED = "ghcr.io/acme/evil:1.0"
DIGESTS = {SIGNED: "sha256:" + "a" * 64, UNSIGNED: "sha256:" + "e" * 64}
KEY = "-----BEGIN PUBLIC KEY-----\nK\n-----END PUBLIC KEY-----\n"

POLICY = f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: signed-images
spec:
  webhookTimeoutSeconds: 15
  rules:
  - name: verify
    match:
      any:
      - resources:
          kinds: [Pod]
    verifyImages:
    - imageReferences: ["ghcr.io/acme/*"]
      failureAction: Enforce
      attestors:
      - entries:
        - keys:
            publicKeys: |-
{"".join("              " + line + chr(10) for line in KEY.strip().splitlines())}
"""


class SignedOnlyVerifier:
    """Only SIGNED's digest carries a signature by KEY; counts registry round trips."""

    def __init__(self) -> None:
        self.calls = 0

    def resolve_digest(self, image: str) -> str:
        self.calls += 1
        return DIGESTS[image]

    def verify_signature(self, image: str, digest: str, attestor: Mapping[str, Any], options: SignatureOptions) -> None:
        self.calls += 1
        if digest != DIGESTS[SIGNED] or attestor["keys"]["publicKeys"].strip() != KEY.strip():
            raise VerificationFailure("no matching signatures")

    def fetch_attestations(self, *args: Any) -> list[dict[str, Any]]:
        return []


def store(tmp_path: Path) -> tuple[PolicyStore, SignedOnlyVerifier]:
    (tmp_path / "policy.yaml").write_text(POLICY)
    verifier = SignedOnlyVerifier()
    policy_store = PolicyStore([str(tmp_path)], image_verifier=verifier, verification_cache=VerificationCache())
    policy_store.load()
    return policy_store, verifier


def test_signed_image_is_pinned_then_validated(tmp_path: Path) -> None:
    policy_store, verifier = store(tmp_path)
    evaluator = policy_store.snapshot.evaluator  # type: ignore[union-attr]
    assert evaluator.needs_network
    original = pod(labels={"team": "a"}, image=SIGNED)
    mutated = evaluator.mutate(parse_review(review(original)))
    assert mutated.allowed
    patched = jsonpatch.apply_patch(original, mutated.patch)
    assert patched["spec"]["containers"][0]["image"] == f"{SIGNED}@{DIGESTS[SIGNED]}"  # Kyverno keeps the tag beside the digest
    assert "kyverno.io/verify-images" in patched["metadata"]["annotations"]
    calls = verifier.calls
    validated = evaluator.validate(parse_review(review(patched)))
    assert validated.allowed and not validated.warnings
    assert verifier.calls <= calls + 1  # cached: at most a digest lookup, no new signature check


def test_unsigned_image_is_denied_by_the_mutating_call(tmp_path: Path) -> None:
    policy_store, _ = store(tmp_path)
    evaluator = policy_store.snapshot.evaluator  # type: ignore[union-attr]
    decision = evaluator.mutate(parse_review(review(pod(image=UNSIGNED))))
    assert not decision.allowed
    assert "resource Pod/default/web was blocked due to the following policies" in decision.message
    assert "signed-images:" in decision.message and "no matching signatures" in decision.message


def test_forged_annotation_does_not_pass_validation(tmp_path: Path) -> None:
    policy_store, _ = store(tmp_path)
    evaluator = policy_store.snapshot.evaluator  # type: ignore[union-attr]
    signed = jsonpatch.apply_patch(pod(image=SIGNED), evaluator.mutate(parse_review(review(pod(image=SIGNED)))).patch)
    forged = pod(image=f"ghcr.io/acme/evil@{DIGESTS[UNSIGNED]}")
    forged["metadata"]["annotations"] = signed["metadata"]["annotations"]
    decision = evaluator.validate(parse_review(review(forged)))
    assert not decision.allowed


def test_review_response_carries_the_digest_patch(tmp_path: Path) -> None:
    from stockade.webhook.admission import review_response

    policy_store, _ = store(tmp_path)
    request = parse_review(review(pod(image=SIGNED)))
    answer = review_response(request, policy_store.snapshot.evaluator.mutate(request))  # type: ignore[union-attr]
    operations = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert any(op["path"] == "/spec/containers/0/image" for op in operations)


# -- the stored record: rebuilt from this process's verifications on every update path -------------------------------
def _admitted(evaluator: Any, obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None, failure: str | None = None) -> dict[str, Any]:
    decision = evaluator.mutate(parse_review(review(obj, operation, old)), failure)
    assert decision.allowed, decision.message
    return jsonpatch.apply_patch(obj, decision.patch) if decision.patch else obj


def _record(obj: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    annotations = obj["metadata"].get("annotations") or {}
    return json.loads(annotations["kyverno.io/verify-images"]), json.loads(annotations["kyverno.io/verify-images-scoped"])["policies"]


def test_annotate_only_update_drops_every_forged_entry(tmp_path: Path) -> None:
    policy_store, _ = store(tmp_path)
    evaluator = policy_store.snapshot.evaluator  # type: ignore[union-attr]
    stored = _admitted(evaluator, pod(image=SIGNED))
    pinned = f"ghcr.io/acme/app@{DIGESTS[SIGNED]}"
    assert _record(stored) == ({pinned: "pass"}, {"signed-images": {"verify": {pinned: "pass"}}})
    annotated = json.loads(json.dumps(stored))  # kubectl annotate --overwrite: only the annotations change
    annotated["metadata"]["annotations"]["kyverno.io/verify-images"] = json.dumps({UNSIGNED: "pass", pinned: "fail"})
    annotated["metadata"]["annotations"]["kyverno.io/verify-images-scoped"] = json.dumps(
        {"version": 1, "policies": {"signed-images": {"verify": {pinned: "fail"}, "autogen-verify": {UNSIGNED: "pass"}}, "ghost": {"r": {UNSIGNED: "pass"}}}}
    )
    assert _record(_admitted(evaluator, annotated, "UPDATE", stored)) == _record(stored)
    removed = json.loads(json.dumps(stored))
    del removed["metadata"]["annotations"]
    assert _record(_admitted(evaluator, removed, "UPDATE", stored)) == _record(stored)


def test_a_kind_no_rule_verifies_loses_forged_records(tmp_path: Path) -> None:
    policy_store, verifier = store(tmp_path)
    evaluator = policy_store.snapshot.evaluator  # type: ignore[union-attr]
    forged = pod(image="docker.io/library/nginx:1.27")  # outside imageReferences: nothing to verify
    forged["metadata"]["annotations"] = {"kyverno.io/verify-images": json.dumps({UNSIGNED: "pass"}), "keep": "me"}
    assert _admitted(evaluator, forged)["metadata"]["annotations"] == {"keep": "me"}
    assert verifier.calls == 0


def test_both_webhook_variants_write_the_same_complete_record(tmp_path: Path) -> None:
    (tmp_path / "ignore.yaml").write_text(POLICY.replace("name: signed-images", "name: signed-images-ignore").replace("webhookTimeoutSeconds: 15", "webhookTimeoutSeconds: 15\n  failurePolicy: Ignore"))
    policy_store, _ = store(tmp_path)
    evaluator = policy_store.snapshot.evaluator  # type: ignore[union-attr]
    forged = pod(image=SIGNED)
    forged["metadata"]["annotations"] = {"kyverno.io/verify-images-scoped": json.dumps({"version": 1, "policies": {"ghost": {"r": {UNSIGNED: "pass"}}}})}
    after_fail = _admitted(evaluator, forged, failure="Fail")
    after_both = _admitted(evaluator, after_fail, failure="Ignore")
    assert set(_record(after_fail)[1]) == {"signed-images", "signed-images-ignore"}
    assert _record(after_both) == _record(after_fail)
