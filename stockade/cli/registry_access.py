"""Building the image verifier the CLI hands to the engine when ``--registry`` grants network access."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class DeferredVerifier:
    """Stands for the cosign verifier until a policy first verifies an image, then builds it and hands every call on.
    Building it loads cryptography's native library (about 8 MiB resident); `stockade serve` makes a verifier in
    every evaluation worker, most of which never verify anything."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self._build = build
        self._verifier: Any = None
        self._lock = threading.Lock()

    def _target(self) -> Any:
        verifier = self._verifier
        if verifier is None:
            with self._lock:
                if self._verifier is None:
                    self._verifier = self._build()
                verifier = self._verifier
        return verifier

    @property
    def built(self) -> bool:
        return self._verifier is not None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)


def make_image_verifier(insecure_registries: tuple[str, ...] = (), ca_file: str | None = None) -> Any:
    """A cosign verifier over a registry client using the user's docker credentials, built on its first use."""
    from stockade.engine.handlers.verify_images import VerificationCache

    def build() -> Any:
        from stockade.images.auth import CredentialStore
        from stockade.images.registry import RegistryClient
        from stockade.images.verify import CosignVerifier

        try:
            credentials = CredentialStore.from_docker_config_file()
        except Exception:  # no or unreadable docker config: anonymous access
            credentials = CredentialStore.anonymous()
        client = RegistryClient(credentials=credentials, insecure_registries=insecure_registries, ca_file=ca_file, allow_http_localhost=bool(insecure_registries))
        return CosignVerifier(client)

    return DeferredVerifier(build), VerificationCache()
