"""Declarations of Kyverno's image-verification CEL functions (ImageValidatingPolicy only).

Kyverno's signatures: ``verifyImageSignatures(string, list) -> int`` and
``verifyAttestationSignatures(string, string, list) -> int`` count the attestors that verified the image (or its
attestation), ``extractPayload(string, string) -> dyn`` returns a verified attestation's statement and
``getImageData(string) -> dyn`` the image's registry metadata.  They are declared here, for this policy kind only,
without implementations: the ``imageVerify`` provider (``stockade.cel.providers.ImageVerificationProvider``) binds
them per evaluation, so the CEL layer does no I/O and an evaluation without a registry verifier cannot pass.
"""

from __future__ import annotations

from stockade.cel.functions import Library

IMAGE_VERIFY_LIBRARY = "kyverno.imageverify"

# Names and Kyverno's (params, result); the list parameters hold attestors (maps), so they are lists of dyn.
IMAGE_VERIFY_FUNCTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "verifyImageSignatures": (("string", "list"), "int"),
    "verifyAttestationSignatures": (("string", "string", "list"), "int"),
    "extractPayload": (("string", "string"), "dyn"),
    "getImageData": (("string",), "dyn"),
}


def build_imageverify() -> Library:
    library = Library(IMAGE_VERIFY_LIBRARY)
    for name, (params, result) in IMAGE_VERIFY_FUNCTIONS.items():
        library.add(name, params, result, None, overload_id=f"provider:imageVerify:{name}:{'_'.join(params)}")
    return library


__all__ = ["IMAGE_VERIFY_FUNCTIONS", "IMAGE_VERIFY_LIBRARY", "build_imageverify"]
