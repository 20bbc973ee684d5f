"""The contract between the pure verifyImages engine handler and whatever checks signatures.

Kept free of I/O and heavy imports so `stockade.engine` can depend on it while the network-bound implementation
(`stockade.images.verify.CosignVerifier`) lives outside the engine and is injected at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol
from stockade.errors import StockadeError


class VerificationFailure(StockadeError):
    """The image is not signed/attested the way the policy demands (wrong key, tampered, missing): rule *fail*."""


class VerificationUnavailable(StockadeError):
    """Verification could not be carried out (registry down, auth refused, KMS not configured): rule *error*.

    Never treated as a pass: an unreachable registry must not let an image in.
    """



class InvalidAttestor(VerificationUnavailable):
    """The policy's own key or certificate material is unusable (garbage PEM, wrong type, truncated): rule *error*,
    since nothing was verified; the message names the attestor field."""


@dataclass(frozen=True)
class SignatureOptions:
    """Per-`verifyImages`-entry settings that apply to every attestor of the entry."""

    repository: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)
    signature_algorithm: str = "sha256"
    verifier_type: str = "Cosign"


class ImageSignatureVerifier(Protocol):
    """One attestor entry (`keys`, `certificates` or `keyless`, as written in the policy) at a time."""

    def resolve_digest(self, image: str) -> str:
        """The manifest digest a reference points at now (raises VerificationUnavailable on registry errors)."""
        ...

    def verify_signature(self, image: str, digest: str, attestor: Mapping[str, Any], options: SignatureOptions) -> None:
        """Return when a signature of `digest` by `attestor` exists; raise VerificationFailure/Unavailable."""
        ...

    def fetch_attestations(
        self, image: str, digest: str, attestor: Mapping[str, Any], options: SignatureOptions, predicate_type: str
    ) -> list[dict[str, Any]]:
        """In-toto statements of `predicate_type` about `digest` whose envelope `attestor` signed (an empty
        attestor means: any attestation, signature unchecked — Kyverno's behaviour for attestor-less entries)."""
        ...
