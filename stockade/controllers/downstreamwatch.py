"""Watches of the kinds GeneratingPolicies produce, so synchronized downstream objects are restored at once.

Kyverno's CEL generate controller watches every resource type a GeneratingPolicy has produced: a change or deletion
of a synchronized downstream object is reverted, and a change or deletion of a clone source (same type) is carried to
the copies that name its uid.  The admission webhooks of GeneratingPolicies see only their triggers, so Stockade
does the same: one `stockade.kube.informer.Informer` per (apiVersion, kind), started the first time the generate
controller writes such an object; every MODIFIED/DELETED event is handed to ``on_event`` (the controller queues it
for its worker thread).  The background scanner uses the same watches (ADDED/MODIFIED) for the kinds that no webhook
of ours sees change: those of background-only policies and of reported-on Kubernetes admission policies.

The first listing only fills the informer's store: objects that existed before the watch began are not events.
After that, a watch that expired (410 Gone) is followed by a listing whose differences from the store arrive as
events, so a change made while no watch was open is not missed.  The kind is resolved through discovery on every
listing: a CRD installed later is picked up by the informer's own retries.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from stockade.controllers.clusterdata import ClusterData, collection_path
from stockade.kube.errors import Backoff, NotFound
from stockade.kube.informer import Informer, Obj, RawListWatch, Store, WatchEvents

log = logging.getLogger("stockade.downstreamwatch")

WATCH_TIMEOUT_SECONDS = 240
WATCH_BACKOFF = Backoff(initial=1.0, factor=2.0, cap=60.0, jitter=0.1)
EventHandler = Callable[[str, dict[str, Any]], None]


class KindListWatch:
    """Lists and watches one kind, found through the cluster's discovery each time it lists (NotFound while no
    served resource has that kind)."""

    def __init__(self, cluster: ClusterData, api_version: str, kind: str, namespace: str = "") -> None:
        self.cluster = cluster
        self.api_version = api_version
        self.kind = kind
        self.namespace = namespace
        self._current: RawListWatch | None = None

    def _resolve(self) -> RawListWatch:
        resource = self.cluster.resolve_kind(self.api_version, self.kind)
        if resource is None:
            raise NotFound(f"{self.api_version}/{self.kind} is not served", method="GET", path=self.api_version)
        return RawListWatch(self.cluster.api_client, collection_path(resource, self.namespace))

    def list(self) -> tuple[list[Obj], str]:
        self._current = self._resolve()
        return self._current.list()

    def watch(self, resource_version: str, timeout_seconds: int) -> WatchEvents:
        current = self._current or self._resolve()
        return current.watch(resource_version, timeout_seconds)


class DownstreamWatcher:
    """One informer per resource type; ``ensure`` is cheap and idempotent."""

    def __init__(self, cluster: ClusterData, on_event: EventHandler, event_types: tuple[str, ...] = ("MODIFIED", "DELETED"), namespace: str = "") -> None:
        self.cluster = cluster
        self.namespace = namespace  # watch only this namespace (RBAC may grant no more); "": all of them
        self.on_event = on_event
        self.event_types = frozenset(event_types)  # which watch events reach ``on_event``
        self._informers: dict[tuple[str, str], Informer] = {}
        self._lock = threading.Lock()
        self._stopped = False

    def ensure(self, api_version: str, kind: str) -> None:
        key = (api_version, kind)
        with self._lock:
            if key in self._informers or self._stopped:
                return
            informer = self._informer(api_version, kind)
            self._informers[key] = informer
        informer.start()

    def _informer(self, api_version: str, kind: str) -> Informer:
        informer = Informer(
            KindListWatch(self.cluster, api_version, kind, self.namespace),
            name=f"watch-{kind}",
            watch_timeout=WATCH_TIMEOUT_SECONDS,
            backoff=WATCH_BACKOFF,
        )

        def deliver(event_type: str, obj: Obj) -> None:
            # objects of the first listing existed before we watched: not changes
            if event_type in self.event_types and informer.has_synced():
                self.on_event(event_type, obj)

        informer.add_handlers(
            on_add=lambda obj: deliver("ADDED", obj),
            on_update=lambda old, new: deliver("MODIFIED", new) if old is not new else None,
            on_delete=lambda obj: deliver("DELETED", obj),
        )
        return informer

    def stop(self, timeout: float = 5.0) -> None:
        with self._lock:
            self._stopped = True
            informers = list(self._informers.values())
        for informer in informers:
            informer.stop(timeout / max(len(informers), 1))

    def watched(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(self._informers)

    def store(self, api_version: str, kind: str) -> Store | None:
        """The synced store of a watched kind (None while it is not watched or not yet listed): what the cluster
        holds of that kind, as of the last event."""
        with self._lock:
            informer = self._informers.get((api_version, kind))
        return informer.store if informer is not None and informer.has_synced() else None
