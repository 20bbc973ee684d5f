"""Status of GlobalContextEntries that make an ``apiCall`` (leader only).

Kyverno's admission controller loads such an entry when it appears or changes and again every ``refreshInterval``
(default 10m), and records the outcome on the entry: a ``Ready`` condition (True, reason Succeeded, message "Ready",
with ``lastRefreshTime``; or False, reason Failed, with the error) — entries over a ``kubernetesResource`` get no
status.  Stockade reads entry data anew for each evaluation, so this controller only keeps that status: it makes the
entry's call (as the admission account when ``reader`` impersonates it) and writes the condition.

The entries are watched (an informer), never listed periodically: an entry is loaded when it appears or its
generation changes, and comes back through the work queue once its ``refreshInterval`` has passed.  The clocks and
the list/watch are injectable.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

from stockade.controllers.clusterdata import ClusterData, object_path
from stockade.controllers.downstreamwatch import WATCH_BACKOFF, WATCH_TIMEOUT_SECONDS, KindListWatch
from stockade.controllers.webhookconfig import ApiResource
from stockade.engine.contextloader import ContextLoadError
from stockade.units.duration import DurationError, parse_duration
from stockade.kube.controller import FunctionReconciler, InformerController, Result
from stockade.kube.errors import NotFound
from stockade.kube.informer import Informer, ListWatch

log = logging.getLogger("stockade.globalcontext")

DEFAULT_REFRESH_SECONDS = 600.0  # Kyverno's CRD default, 10m


def refresh_seconds(call: dict[str, Any]) -> float:
    """The entry's ``refreshInterval`` (a Go duration) in seconds; the default when absent, invalid or not positive."""
    try:
        seconds = parse_duration(str(call.get("refreshInterval") or "")) / 1e9
    except DurationError:
        return DEFAULT_REFRESH_SECONDS
    return seconds if seconds > 0 else DEFAULT_REFRESH_SECONDS


def ready_status(previous: Any, ready: bool, message: str, now: dt.datetime) -> dict[str, Any]:
    """The entry's status with its Ready condition set (the transition time kept while the condition's status does
    not change) and, when ready, ``lastRefreshTime`` now."""
    stamp = now.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = dict(previous) if isinstance(previous, dict) else {}
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    wanted = "True" if ready else "False"
    old = next((c for c in conditions if c.get("type") == "Ready"), None)
    condition = {
        "type": "Ready",
        "status": wanted,
        "reason": "Succeeded" if ready else "Failed",
        "message": message,
        "lastTransitionTime": old.get("lastTransitionTime") if old is not None and old.get("status") == wanted and old.get("lastTransitionTime") else stamp,
    }
    status["conditions"] = [condition if c is old else c for c in conditions] if old is not None else [*conditions, condition]
    status.pop("ready", None)
    if ready:
        status["lastRefreshTime"] = stamp
    return status


class GlobalContextStatusController(InformerController):
    """Loads each apiCall GlobalContextEntry when it is new or changed and every refreshInterval, writing its status
    (a `stockade.kube.controller.Runnable` that needs leadership)."""

    def __init__(
        self,
        api_client: Any,
        *,
        cluster_data: ClusterData | None = None,
        reader: ClusterData | None = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc),
        monotonic: Callable[[], float] = time.monotonic,
        list_watch: ListWatch | None = None,
    ) -> None:
        super().__init__("globalcontext-status", FunctionReconciler(self.reconcile), self._informer, needs_leadership=True)
        self.cluster = cluster_data or ClusterData(api_client, ttl_seconds=0.0)
        self.reader = reader or self.cluster
        self.clock = clock
        self.monotonic = monotonic
        self._list_watch = list_watch
        self._loaded: dict[str, tuple[str, Any, float]] = {}  # name -> (uid, generation, when)
        self.loads: list[str] = []  # names of the entries loaded, in order (for logs and tests)

    def _informer(self) -> Informer:
        # the served version is found through discovery when the informer lists (and lists again)
        list_watch = self._list_watch or KindListWatch(self.cluster, "", "GlobalContextEntry")
        return Informer(list_watch, name="globalcontextentries", watch_timeout=WATCH_TIMEOUT_SECONDS, backoff=WATCH_BACKOFF)

    def reconcile(self, key: str) -> Result | None:
        """Load the entry named ``key`` if it is due; come back when its refreshInterval has passed."""
        entry = self.informer.store.get(key) if self.informer is not None else None
        call = ((entry or {}).get("spec") or {}).get("apiCall")
        if entry is None or not isinstance(call, dict):
            self._loaded.pop(key, None)
            return None
        metadata = entry.get("metadata") or {}
        uid = str(metadata.get("uid") or "")
        refresh = refresh_seconds(call)
        previous = self._loaded.get(key)
        now = self.monotonic()
        if previous is not None and previous[:2] == (uid, metadata.get("generation")) and now - previous[2] < refresh:
            return Result(requeue_after=refresh - (now - previous[2]))  # our own status write, or an early timer
        if self.load(entry, call):
            self._loaded[key] = (uid, metadata.get("generation"), now)
        return Result(requeue_after=refresh)

    def load(self, entry: dict[str, Any], call: dict[str, Any]) -> bool:
        """Make the entry's call and write its Ready condition; False when the entry is gone.  A status that could
        not be written raises (the key is retried with backoff)."""
        metadata = entry.get("metadata") or {}
        name = str(metadata.get("name") or "")
        group, _, version = str(entry.get("apiVersion") or "kyverno.io/v2beta1").rpartition("/")
        resource = ApiResource(group, version, "globalcontextentries", "GlobalContextEntry", namespaced=False)
        try:
            self.reader.api_call(call)
            ready, message = True, "Ready"
        except ContextLoadError as exc:
            ready, message = False, str(exc)
        status = ready_status(entry.get("status"), ready, message, self.clock())
        path = object_path(resource, "", name) + "/status"
        try:
            self.cluster.request("PATCH", path, {"status": status}, content_type="application/merge-patch+json")
        except NotFound:
            return False
        self.loads.append(name)
        return True
