"""The contract between the pure verifyImages engine handler and whatever checks signatures.

Kept free of I/O and heavy imports so `stockade.engine` can depend on it while the network-bound implementation
(`stockade.images.verify.CosignVerifier`) lives outside the engine and is injected at run time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol
from stockade.errors import StockadeError

MAX_RECORDED_CALLS = 64  # per recording block: enough for a signature + attestations, bounded whatever a registry does


@dataclass(frozen=True)
class HttpCall:
    """One HTTP round trip to a registry (for client spans): method, URL without query, status, wall-clock start."""

    method: str
    url: str
    status: int
    started_ns: int
    duration_ns: int


_recording = threading.local()


@contextmanager
def recording_http_calls() -> Iterator[list[HttpCall]]:
    """Collect the registry round trips this thread makes inside the block (the registry client reports them)."""
    calls: list[HttpCall] = []
    previous = getattr(_recording, "calls", None)
    _recording.calls = calls
    try:
        yield calls
    finally:
        _recording.calls = previous


def report_http_call(call: HttpCall) -> None:
    """Called by the registry client after each round trip; a no-op outside ``recording_http_calls``."""
    calls: list[HttpCall] | None = getattr(_recording, "calls", None)
    if calls is not None and len(calls) < MAX_RECORDED_CALLS:
        calls.append(call)


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
    # Sigstore trust (stockade.images.sigstore_trust.TrustRoot): keyless roots when the attestor names none.
    trust_root: Any = None
    # Trusted Rekor keys by log ID; None means the transparency log is not checked (ignoreTlog).
    rekor_keys: Mapping[str, Any] | None = None
    # Trusted CT log keys by log ID for keyless certificates' embedded SCTs; None means SCTs are not checked.
    ct_keys: Mapping[str, Any] | None = None


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
