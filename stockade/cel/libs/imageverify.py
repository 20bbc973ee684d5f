"""Declarations of Kyverno's image-verification CEL functions (ImageValidatingPolicy only).

Kyverno's signatures: ``verifyImageSignatures(string, list) -> int`` and
``verifyAttestationSignatures(string, string, list) -> int`` count the attestors that verified the image (or its
attestation), ``extractPayload(string, string) -> dyn`` returns an attestation's payload and
``getImageData(string) -> dyn`` the image's registry metadata.  Declaring them lets such policies compile and pass
validation.  All four need a registry; the implementations here fail with :class:`ImageVerificationUnavailable`, so
a call is an evaluation error (the policy's failurePolicy decides), never a silent pass.
"""

from __future__ import annotations

from typing import Any, NoReturn

from stockade.cel.functions import Library
from stockade.errors import StockadeError

IMAGE_VERIFY_LIBRARY = "kyverno.imageverify"

# Names and Kyverno's (params, result); the list parameters hold attestors (maps), so they are lists of dyn.
IMAGE_VERIFY_FUNCTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "verifyImageSignatures": (("string", "list"), "int"),
    "verifyAttestationSignatures": (("string", "string", "list"), "int"),
    "extractPayload": (("string", "string"), "dyn"),
    "getImageData": (("string",), "dyn"),
}


class ImageVerificationUnavailable(StockadeError, ValueError):
    """An image-verification function was called where no registry verifier is wired in."""


def _unavailable(name: str) -> Any:
    def call(image: Any, *_rest: Any) -> NoReturn:
        raise ImageVerificationUnavailable(f"{name}({image!s}): image verification needs registry access, which is not available here")

    return call


def build_imageverify() -> Library:
    library = Library(IMAGE_VERIFY_LIBRARY)
    for name, (params, result) in IMAGE_VERIFY_FUNCTIONS.items():
        library.add(name, params, result, _unavailable(name))
    return library


__all__ = ["IMAGE_VERIFY_FUNCTIONS", "IMAGE_VERIFY_LIBRARY", "ImageVerificationUnavailable", "build_imageverify"]
