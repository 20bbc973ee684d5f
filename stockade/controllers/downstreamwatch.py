"""Watches of the kinds GeneratingPolicies produce, so synchronized downstream objects are restored at once.

Kyverno's CEL generate controller watches every resource type a GeneratingPolicy has produced: a change or deletion
of a synchronized downstream object is reverted, and a change or deletion of a clone source (same type) is carried to
the copies that name its uid.  The admission webhooks of GeneratingPolicies see only their triggers, so Stockade
does the same: one list+watch per (apiVersion, kind), started the first time the generate controller writes such an
object; every MODIFIED/DELETED event is handed to ``on_event`` (the controller queues it for its worker thread).
The background scanner uses the same watches (ADDED/MODIFIED) for the kinds that no webhook of ours sees change:
those of background-only policies and of reported-on Kubernetes admission policies.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from stockade.controllers.clusterdata import ApiError, ClusterData, collection_path

log = logging.getLogger("stockade.downstreamwatch")

WATCH_TIMEOUT_SECONDS = 240
EventHandler = Callable[[str, dict[str, Any]], None]


def parse_watch_lines(buffer: bytes) -> tuple[list[dict[str, Any]], bytes]:
    """Complete JSON watch events in ``buffer`` (newline-delimited) and the incomplete remainder."""
    events: list[dict[str, Any]] = []
    *lines, rest = buffer.split(b"\n")
    for line in lines:
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            log.warning("undecodable watch event skipped")
            continue
        if isinstance(event, dict):
            events.append(event)
    return events, rest


class DownstreamWatcher:
    """One watch thread per resource type; ``ensure`` is cheap and idempotent."""

    def __init__(self, cluster: ClusterData, on_event: EventHandler, event_types: tuple[str, ...] = ("MODIFIED", "DELETED"), namespace: str = "") -> None:
        self.cluster = cluster
        self.namespace = namespace  # watch only this namespace (RBAC may grant no more); "": all of them
        self.on_event = on_event
        self.event_types = frozenset(event_types)  # which watch events reach ``on_event``
        self._threads: dict[tuple[str, str], threading.Thread] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def ensure(self, api_version: str, kind: str) -> None:
        key = (api_version, kind)
        with self._lock:
            if key in self._threads or self._stop.is_set():
                return
            thread = threading.Thread(target=self._run, args=key, name=f"watch-{kind}", daemon=True)
            self._threads[key] = thread
        thread.start()

    def stop(self) -> None:
        self._stop.set()

    def watched(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(self._threads)

    def _run(self, api_version: str, kind: str) -> None:
        backoff = 1.0
        resource_version = ""
        while not self._stop.is_set():
            try:
                resource = self.cluster.resolve_kind(api_version, kind)
                if resource is None:
                    raise ApiError("GET", f"{api_version}/{kind}", 404, "not served")
                path = collection_path(resource, self.namespace)
                if not resource_version:
                    listing = self.cluster.request("GET", path, query={"limit": "1"})
                    resource_version = str(((listing or {}).get("metadata") or {}).get("resourceVersion") or "")
                resource_version = self._watch(path, resource_version)
                backoff = 1.0
            except ApiError as exc:
                if exc.status == 410:
                    resource_version = ""  # expired: start from a fresh list
                    continue
                log.warning("watching %s %s failed (%s), retrying in %.0fs", api_version, kind, exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 60.0)
            except Exception as exc:  # connection drops: resume from the last resourceVersion
                log.warning("watching %s %s failed (%s), retrying in %.0fs", api_version, kind, exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 60.0)

    def _watch(self, path: str, resource_version: str) -> str:
        """One watch request until the server ends it; returns the last resourceVersion seen."""
        api_client = self.cluster.api_client
        query = [("watch", "true"), ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(WATCH_TIMEOUT_SECONDS))]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        method, url, headers, _, _ = api_client.param_serialize("GET", path, query_params=query, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
        response = api_client.call_api(method, url, header_params=headers, _request_timeout=(10, WATCH_TIMEOUT_SECONDS + 30))
        raw = getattr(response, "response", response)
        if int(getattr(raw, "status", 200) or 200) != 200:
            raise ApiError("GET", path, int(raw.status), str(getattr(raw, "reason", "")))
        buffer = b""
        try:
            for chunk in raw.stream(65536):
                if self._stop.is_set():
                    break
                events, buffer = parse_watch_lines(buffer + chunk)
                for event in events:
                    obj = event.get("object") if isinstance(event.get("object"), dict) else {}
                    assert isinstance(obj, dict)
                    if event.get("type") == "ERROR":
                        if obj.get("code") == 410:
                            raise ApiError("GET", path, 410, "watch expired")
                        continue
                    resource_version = str((obj.get("metadata") or {}).get("resourceVersion") or resource_version)
                    if event.get("type") in self.event_types:
                        try:
                            self.on_event(str(event["type"]), obj)
                        except Exception:
                            log.exception("handling a %s event failed", event.get("type"))
        finally:
            raw.release_conn()
        return resource_version
