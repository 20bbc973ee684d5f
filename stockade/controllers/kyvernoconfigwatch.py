"""Kyverno's dynamic configuration from the cluster: a watch of one ConfigMap (``kyverno/kyverno`` by default).

`LiveKyvernoConfig` holds the current parsed configuration and tells its listeners (webhook re-registration, ...)
when it changes.  `ConfigMapWatch` keeps it current with an informer of the single ConfigMap (``metadata.name``
field selector) and a one-worker controller from `stockade.kube` (re-listing after 410 Gone, backoff on errors).  A deleted or absent
ConfigMap means Kyverno's defaults, as in Kyverno.  Bad keys are logged once per change, naming the key and reason.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from stockade.engine.kyvernoconfig import DEFAULT_CONFIGMAP_NAME, DEFAULT_CONFIGMAP_NAMESPACE, KyvernoConfig, parse_kyverno_config
from stockade.errors import StockadeError
from stockade.kube.controller import Controller, Result
from stockade.kube.errors import Backoff, Forbidden, Unauthorized
from stockade.kube.informer import Informer, RawListWatch

log = logging.getLogger("stockade.controllers.kyvernoconfig")


class InvalidConfigMapReference(StockadeError, ValueError):
    """``--config-map`` is not ``NAMESPACE/NAME``."""


def parse_configmap_reference(text: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` → (namespace, name); both parts must be non-empty DNS-style names."""
    namespace, slash, name = text.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise InvalidConfigMapReference(f"--config-map must be NAMESPACE/NAME, got {text!r}")
    return namespace, name


class LiveKyvernoConfig:
    """The configuration in force; ``current`` is an immutable snapshot, swapped atomically on change."""

    def __init__(self, initial: KyvernoConfig | None = None, source: str = f"{DEFAULT_CONFIGMAP_NAMESPACE}/{DEFAULT_CONFIGMAP_NAME}") -> None:
        self.current = initial or KyvernoConfig()
        self.source = source
        self.listeners: list[Callable[[KyvernoConfig], None]] = []
        self.generation = 0
        self._lock = threading.Lock()

    def __call__(self) -> KyvernoConfig:
        return self.current

    # As a PolicyStore source: no documents, but a change bumps the fingerprint and notifies the store, which rebuilds
    # the snapshot at once (engine registry settings) and its listeners re-register the webhooks with the new selectors.
    def fingerprint(self) -> int:
        return self.generation

    def subscribe(self, callback: Callable[[], None]) -> None:
        """``callback()`` runs after every change, once the other listeners saw the new configuration."""
        self.listeners.append(lambda _config: callback())

    def documents(self) -> list[Any]:
        return []

    def load(self, data: dict[str, Any] | None) -> bool:
        """Parse a ConfigMap's ``data`` (``None``: no ConfigMap); True and listeners notified when it changed."""
        config = parse_kyverno_config(data)
        with self._lock:
            if config == self.current:
                return False
            self.current = config
            self.generation += 1
        for error in config.errors:
            log.error("ConfigMap %s: %s (kept the default)", self.source, error)
        for listener in list(self.listeners):
            try:
                listener(config)
            except Exception:
                log.exception("applying the changed Kyverno configuration failed")
        return True


class ConfigMapWatch:
    """Keeps a `LiveKyvernoConfig` equal to one ConfigMap; ``start()`` then ``stop()``.

    Built on the controller runtime (`stockade.kube`), as the pattern for the other watches: an `Informer` of the
    one ConfigMap (field selector on its name) feeds a `Controller` whose reconcile reads the informer's store and
    loads what it finds, its absence meaning Kyverno's defaults.  The informer resumes its watch from the last
    resourceVersion, lists again after 410 Gone (a deletion missed meanwhile still arrives) and backs off on other
    failures; the controller runs on every replica (no leadership needed)."""

    def __init__(
        self,
        api_client: Any,
        live: LiveKyvernoConfig,
        namespace: str = DEFAULT_CONFIGMAP_NAMESPACE,
        name: str = DEFAULT_CONFIGMAP_NAME,
        *,
        watch_timeout: int = 300,
        max_backoff: float = 30.0,
    ) -> None:
        self.api_client = api_client
        self.live = live
        self.namespace = namespace
        self.name = name
        self.key = f"{namespace}/{name}"
        self._synced = threading.Event()
        list_watch = RawListWatch.for_resource(api_client, "v1", "configmaps", namespace, field_selector=f"metadata.name={name}")
        self.informer = Informer(
            list_watch,
            name="kyverno-configmap",
            watch_timeout=watch_timeout,
            backoff=Backoff(initial=1.0, factor=2.0, cap=max_backoff, jitter=0.1),
            on_error=self._on_error,
        )
        self.controller = Controller("kyverno-configmap", self, workers=1, needs_leadership=False)
        self.controller.watch(self.informer)

    def start(self) -> None:
        self.controller.enqueue(self.key)  # reconciled once the informer synced, even when the ConfigMap is absent
        self.informer.start()
        self.controller.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.informer.stop(timeout)
        self.controller.stop(timeout=timeout)

    def wait_synced(self, timeout: float | None = None) -> bool:
        """True once the first read finished (the ConfigMap, its absence, or a failure that leaves the defaults)."""
        return self._synced.wait(timeout)

    def reconcile(self, key: str) -> Result | None:
        """Load what the store holds for our ConfigMap (nothing: Kyverno's defaults)."""
        if key != self.key:
            return None
        obj = self.informer.store.get(key)
        if self.live.load(dict(obj.get("data") or {}) if obj is not None else None):
            log.info("ConfigMap %s: Kyverno configuration %s", self.live.source, "loaded" if obj is not None else "absent, using defaults")
        self._synced.set()
        return None

    def apply_event(self, event_type: str, obj: dict[str, Any]) -> bool:
        """One watch event for our ConfigMap; a deletion restores Kyverno's defaults."""
        if (obj.get("metadata") or {}).get("name") != self.name:
            return False
        if event_type == "DELETED":
            return self.live.load(None)
        return self.live.load(obj.get("data") or {})

    def _on_error(self, exc: Exception) -> None:
        if isinstance(exc, (Forbidden, Unauthorized)):
            log.warning("ConfigMap %s: not allowed to read it (%s); Kyverno's defaults apply", self.live.source, exc)
        self._synced.set()  # e.g. not allowed to read it: start with the defaults rather than wait
