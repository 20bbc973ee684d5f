"""Status of GlobalContextEntries that make an ``apiCall`` (leader only).

Kyverno's admission controller loads such an entry when it appears or changes and again every ``refreshInterval``
(default 10m), and records the outcome on the entry: a ``Ready`` condition (True, reason Succeeded, message "Ready",
with ``lastRefreshTime``; or False, reason Failed, with the error) — entries over a ``kubernetesResource`` get no
status.  Stockade reads entry data anew for each evaluation, so this controller only keeps that status: it makes the
entry's call (as the admission account when ``reader`` impersonates it) and writes the condition.  The clock is
injectable.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

from stockade.controllers.clusterdata import ClusterData, object_path
from stockade.controllers.periodic import LeaderPeriodicWorker
from stockade.engine.contextloader import ContextLoadError
from stockade.units.duration import DurationError, parse_duration
from stockade.kube.errors import KubeError, NotFound

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


class GlobalContextStatusController(LeaderPeriodicWorker):
    """Loads each apiCall GlobalContextEntry when it is new or changed and every refreshInterval, writing its status."""

    thread_name = "globalcontext-status"

    def __init__(
        self,
        api_client: Any,
        *,
        cluster_data: ClusterData | None = None,
        reader: ClusterData | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc),
        monotonic: Callable[[], float] = time.monotonic,
        period: float = 2.0,
    ) -> None:
        self.cluster = cluster_data or ClusterData(api_client, ttl_seconds=0.0)
        self.reader = reader or self.cluster
        self.clock = clock
        self.monotonic = monotonic
        LeaderPeriodicWorker.__init__(self, is_leader, period)
        self._loaded: dict[str, tuple[Any, float]] = {}  # uid -> (generation, when)

    def run_once(self) -> object:
        return self.scan()

    def scan(self) -> list[str]:
        """Load every due entry and write its status; returns the names of the entries loaded."""
        resource = self.cluster.resolve_resource("kyverno.io", "v2beta1", "globalcontextentries") or self.cluster.resolve_resource(
            "kyverno.io", "v2alpha1", "globalcontextentries"
        )
        if resource is None:
            return []
        try:
            entries = self.cluster.list_resource(resource, "", cached=False)
        except KubeError as exc:
            log.warning("listing GlobalContextEntries failed: %s", exc)
            return []
        seen: set[str] = set()
        loaded: list[str] = []
        for entry in entries:
            metadata = entry.get("metadata") or {}
            call = (entry.get("spec") or {}).get("apiCall")
            uid = str(metadata.get("uid") or metadata.get("name") or "")
            seen.add(uid)
            if not isinstance(call, dict):
                continue
            previous = self._loaded.get(uid)
            now = self.monotonic()
            if previous is not None and previous[0] == metadata.get("generation") and now - previous[1] < refresh_seconds(call):
                continue
            self._loaded[uid] = (metadata.get("generation"), now)
            try:
                self.reader.api_call(call)
                ready, message = True, "Ready"
            except ContextLoadError as exc:
                ready, message = False, str(exc)
            status = ready_status(entry.get("status"), ready, message, self.clock())
            path = object_path(resource, "", str(metadata.get("name") or "")) + "/status"
            try:
                self.cluster.request("PATCH", path, {"status": status}, content_type="application/merge-patch+json")
            except NotFound:
                continue
            except KubeError as exc:
                log.warning("status of GlobalContextEntry %s not written: %s", metadata.get("name"), exc)
                continue
            loaded.append(str(metadata.get("name") or ""))
        for uid in [u for u in self._loaded if u not in seen]:
            del self._loaded[uid]
        return loaded
