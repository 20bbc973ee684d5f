"""Kyverno's dynamic configuration from the cluster: a watch of one ConfigMap (``kyverno/kyverno`` by default).

`LiveKyvernoConfig` holds the current parsed configuration and tells its listeners (webhook re-registration, ...)
when it changes.  `ConfigMapWatch` keeps it current: a daemon thread watches the single ConfigMap by
``metadata.name`` field selector (re-listing after 410 Gone or any error, with backoff).  A deleted or absent
ConfigMap means Kyverno's defaults, as in Kyverno.  Bad keys are logged once per change, naming the key and reason.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from stockade.controllers.kubetyped import WatchStream, watch_objects
from stockade.engine.kyvernoconfig import DEFAULT_CONFIGMAP_NAME, DEFAULT_CONFIGMAP_NAMESPACE, KyvernoConfig, parse_kyverno_config
from stockade.errors import StockadeError

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
    """Keeps a `LiveKyvernoConfig` equal to one ConfigMap; ``start()`` then ``stop()``."""

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
        self.watch_timeout = watch_timeout
        self.max_backoff = max_backoff
        self._stopping = threading.Event()
        self._synced = threading.Event()
        self._stream: WatchStream | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kyverno-configmap-watch", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        stream = self._stream
        if stream is not None:
            stream.stop()
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def wait_synced(self, timeout: float | None = None) -> bool:
        """True once the first read finished (the ConfigMap, its absence, or a failure that leaves the defaults)."""
        return self._synced.wait(timeout)

    def apply_event(self, event_type: str, obj: dict[str, Any]) -> bool:
        """One watch event for our ConfigMap; a deletion restores Kyverno's defaults."""
        if (obj.get("metadata") or {}).get("name") != self.name:
            return False
        if event_type == "DELETED":
            return self.live.load(None)
        return self.live.load(obj.get("data") or {})

    def _core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api_client)

    def _run(self) -> None:
        from kubernetes.client.exceptions import ApiException

        backoff = 1.0
        while not self._stopping.is_set():
            try:
                resource_version = self._list()
                self._synced.set()
                backoff = 1.0
                self._watch(resource_version)
            except ApiException as exc:
                if exc.status == 410:
                    continue
                log.warning("ConfigMap %s: list/watch failed (HTTP %s: %s), retrying in %.0fs", self.live.source, exc.status, exc.reason, backoff)
                self._synced.set()  # e.g. not allowed to read it: start with the defaults rather than wait
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)
            except Exception as exc:
                if self._stopping.is_set():
                    return
                log.warning("ConfigMap %s: list/watch failed (%s), retrying in %.0fs", self.live.source, exc, backoff)
                self._synced.set()
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)

    def _list(self) -> str:
        listing = self._core().list_namespaced_config_map(self.namespace, field_selector=f"metadata.name={self.name}", _request_timeout=60)
        items = [item for item in listing.items or [] if item.metadata is not None and item.metadata.name == self.name]
        if self.live.load(dict(items[0].data or {}) if items else None):
            log.info("ConfigMap %s: Kyverno configuration %s", self.live.source, "loaded" if items else "absent, using defaults")
        return str(listing.metadata.resource_version or "")

    def _watch(self, resource_version: str) -> None:
        watch_objects(
            self._core().list_namespaced_config_map,
            self.namespace,
            field_selector=f"metadata.name={self.name}",
            resource_version=resource_version,
            timeout_seconds=self.watch_timeout,
            stopping=self._stopping,
            on_event=self._on_event,
            on_stream=self._on_stream,
        )

    def _on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        if self.apply_event(event_type, obj):
            log.info("ConfigMap %s %s: Kyverno configuration updated", self.live.source, event_type.lower())

    def _on_stream(self, stream: WatchStream | None) -> None:
        self._stream = stream
