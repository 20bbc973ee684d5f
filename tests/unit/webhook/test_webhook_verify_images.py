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
