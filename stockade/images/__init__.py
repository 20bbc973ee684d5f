"""Image references and an OCI distribution registry client (pull, push, tags, auth)."""

from stockade.images.auth import Credential, CredentialError, CredentialStore
from stockade.images.reference import ImageReference, InvalidReferenceError, image_info, parse_reference
from stockade.images.registry import (
    DigestMismatchError,
    RegistryAuthError,
    RegistryClient,
    RegistryError,
    RegistryNotFoundError,
)

__all__ = [
    "Credential",
    "CredentialError",
    "CredentialStore",
    "DigestMismatchError",
    "ImageReference",
    "InvalidReferenceError",
    "RegistryAuthError",
    "RegistryClient",
    "RegistryError",
    "RegistryNotFoundError",
    "image_info",
    "parse_reference",
]
