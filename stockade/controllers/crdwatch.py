"""Kyverno's CRD watcher (``global.crdWatcher``): kinds appear and go with CustomResourceDefinitions, and what was
resolved from discovery must follow.

A policy may name a kind whose CRD is not installed yet (it is accepted with a warning); once the CRD is created the
webhook configurations must route that kind to us, and once it is deleted they must drop it.  CRDs are watched as
metadata only (an informer, no polling); every add, change (a CRD becoming Established changes its status, and so
its resourceVersion) and delete is coalesced onto one work-queue key, whose reconcile tells the listeners once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from stockade.kube.controller import Controller, FunctionReconciler, Result
from stockade.kube.informer import Informer, RawListWatch, resource_version_of

log = logging.getLogger("stockade.crdwatch")

CHANGED = "customresourcedefinitions"  # the one key every CRD event maps onto


class CrdWatch:
    """A `Runnable` every replica runs (each keeps its own view of discovery); ``listeners`` are called after CRD
    changes, at most once per burst of events, from the controller's worker thread."""

    def __init__(self, api_client: Any, listeners: list[Callable[[], None]] | None = None, *, list_watch: Any = None) -> None:
        self.api_client = api_client
        self.listeners: list[Callable[[], None]] = list(listeners or [])
        self._list_watch = list_watch
        self.informer: Informer | None = None
        self.controller: Controller | None = None
        self.notified = 0

    @property
    def name(self) -> str:
        return "crd-watch"

    @property
    def needs_leadership(self) -> bool:
        return False

    def start(self) -> None:
        if self.controller is not None:
            return
        list_watch = self._list_watch or RawListWatch.for_resource(
            self.api_client, "apiextensions.k8s.io/v1", "customresourcedefinitions", metadata_only=True
        )
        self.informer = Informer(list_watch, name="customresourcedefinitions")
        self.controller = Controller("crd-watch", FunctionReconciler(self._reconcile), needs_leadership=False)
        self.controller.watch(
            self.informer,
            keys=lambda _obj: (CHANGED,),
            update_filter=lambda old, new: resource_version_of(old) != resource_version_of(new),
        )
        self.informer.start()
        self.controller.start()

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None
        if self.informer is not None:
            self.informer.stop()
            self.informer = None

    def _reconcile(self, key: str) -> Result | None:
        if key != CHANGED:
            return None
        self.notified += 1
        for listener in self.listeners:
            try:
                listener()
            except Exception:  # one listener's failure must not keep the others from seeing the change
                log.exception("reacting to a CRD change failed")
        return None
