"""Building the image verifier the CLI hands to the engine when ``--registry`` grants network access."""

from __future__ import annotations

from typing import Any


def make_image_verifier(insecure_registries: tuple[str, ...] = (), ca_file: str | None = None) -> Any:
    """A cosign verifier over a registry client using the user's docker credentials; imported lazily."""
    from stockade.engine.handlers.verify_images import VerificationCache
    from stockade.images.auth import CredentialStore
    from stockade.images.registry import RegistryClient
    from stockade.images.verify import CosignVerifier

    try:
        credentials = CredentialStore.from_docker_config_file()
    except Exception:  # no or unreadable docker config: anonymous access
        credentials = CredentialStore.anonymous()
    client = RegistryClient(credentials=credentials, insecure_registries=insecure_registries, ca_file=ca_file, allow_http_localhost=bool(insecure_registries))
    return CosignVerifier(client), VerificationCache()
