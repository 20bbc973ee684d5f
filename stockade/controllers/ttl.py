"""The ``cleanup.kyverno.io/ttl`` label: objects carrying it are deleted once it expires (leader only).

The value is a duration counted from the object's creation (Go durations such as ``90s`` or ``1h30m``, and the
``3d``/``2 weeks`` forms Kubernetes' OpenAPI duration parser accepts) or an absolute UTC time, ``2006-01-02T150405Z``
or ``2006-01-02``, exactly the formats Kyverno's TTL controller reads.  An unparsable value is logged and left
alone (Kyverno's admission check only warns about it).  Every served resource that can be listed, watched and
deleted is scanned with the label selector; the ``cleanup.kyverno.io/propagation-policy`` annotation chooses the
deletion propagation.  The clock and the scan interval are injectable.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable
from typing import Any

from stockade.controllers.clusterdata import ClusterData, object_path
from stockade.controllers.periodic import LeaderPeriodicWorker
from stockade.controllers.webhookconfig import ApiResource
from stockade.errors import StockadeError

log = logging.getLogger("stockade.ttl")

TTL_LABEL = "cleanup.kyverno.io/ttl"
PROPAGATION_ANNOTATION = "cleanup.kyverno.io/propagation-policy"
_GO_DURATION = re.compile(r"^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$")
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_WORD_PART = re.compile(r"(\d+)\s*([A-Za-zµ]+)")
# unit families: a unit matches a family by equality with any variant, or by prefix of the last (long) one
_WORD_UNITS = (
    (("ns", "nano"), 1e-9),
    (("us", "µs", "micro"), 1e-6),
    (("ms", "milli"), 1e-3),
    (("s", "sec"), 1.0),
    (("m", "min"), 60.0),
    (("h", "hr", "hour"), 3600.0),
    (("d", "day"), 86400.0),
    (("w", "wk", "week"), 604800.0),
)
from stockade.kube.errors import Forbidden, KubeError, MethodNotAllowed, NotFound


class TtlError(StockadeError, ValueError):
    """A ttl label value in none of the accepted formats."""


def parse_duration(text: str) -> dt.timedelta:
    """A Go duration, else the OpenAPI duration forms (``3d``, ``2 weeks``, ``1 hour 30 min``)."""
    if _GO_DURATION.match(text) and text not in ("+", "-"):
        sign = -1.0 if text.startswith("-") else 1.0
        seconds = sum(float(value) * _GO_UNITS[unit] for value, unit in _GO_PART.findall(text))
        return dt.timedelta(seconds=sign * seconds)
    if text in ("0",):
        return dt.timedelta(0)
    total = 0.0
    matched = False
    for count, unit_text in _WORD_PART.findall(text):
        unit = unit_text.lower()
        for variants, seconds in _WORD_UNITS:
            for index, variant in enumerate(variants):
                if (index == len(variants) - 1 and unit.startswith(variant)) or unit == variant:
                    matched = True
                    total += int(count) * seconds
    if not matched:
        raise TtlError(f"unable to parse {text} as duration")
    return dt.timedelta(seconds=total)


def deletion_time(value: str, created: dt.datetime | None) -> dt.datetime:
    """When an object with this ttl value expires; raises TtlError naming the value."""
    try:
        duration = parse_duration(value)
    except TtlError:
        duration = None
    if duration is not None:
        if created is None:
            raise TtlError(f"{TTL_LABEL}={value}: the object has no creationTimestamp to count from")
        return created + duration
    for layout in ("%Y-%m-%dT%H%M%SZ", "%Y-%m-%d"):
        try:
            return dt.datetime.strptime(value, layout).replace(tzinfo=dt.timezone.utc)
        except ValueError:
            continue
    raise TtlError(f"{TTL_LABEL} label value {value!r} cannot be parsed as a duration or a 2006-01-02T150405Z / 2006-01-02 time")


def ttl_warning(labels: dict[str, Any] | None) -> str | None:
    """The admission warning Kyverno gives for an unparsable ttl label (it does not deny); None when fine."""
    value = (labels or {}).get(TTL_LABEL)
    if value is None:
        return None
    try:
        deletion_time(str(value), dt.datetime.now(dt.timezone.utc))
    except TtlError as exc:
        return f"{TTL_LABEL} label value cannot be parsed as any recognizable format ({exc})"
    return None


def propagation_policy(annotations: dict[str, Any] | None) -> str:
    value = str((annotations or {}).get(PROPAGATION_ANNOTATION) or "")
    return value if value in ("Foreground", "Background", "Orphan") else ""


def _created(obj: dict[str, Any]) -> dt.datetime | None:
    value = (obj.get("metadata") or {}).get("creationTimestamp")
    if not isinstance(value, str):
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def deletable_resources(cluster: ClusterData) -> list[ApiResource]:
    """Preferred versions of every resource whose discovery verbs include list, watch and delete."""
    found: list[ApiResource] = []

    def add(group: str, version: str, listing: Any) -> None:
        for entry in (listing or {}).get("resources") or []:
            name = str(entry.get("name") or "")
            if name and "/" not in name and {"list", "watch", "delete"} <= set(entry.get("verbs") or []):
                found.append(ApiResource(group, version, name, str(entry.get("kind") or ""), bool(entry.get("namespaced"))))

    add("", "v1", cluster.request("GET", "/api/v1"))
    for group in (cluster.request("GET", "/apis") or {}).get("groups") or []:
        preferred = (group.get("preferredVersion") or {}).get("groupVersion")
        if not preferred:
            continue
        try:
            add(str(group.get("name") or ""), preferred.rpartition("/")[2], cluster.request("GET", f"/apis/{preferred}"))
        except KubeError as exc:
            log.warning("discovery of %s failed: %s", preferred, exc)
    return found


class TtlController(LeaderPeriodicWorker):
    """Deletes objects whose ``cleanup.kyverno.io/ttl`` has expired, scanning every ``interval`` seconds."""

    def __init__(
        self,
        api_client: Any,
        *,
        cluster_data: Any = None,
        is_leader: Callable[[], bool] = lambda: True,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc),
        interval: float = 30.0,
        resources: Callable[[], list[ApiResource]] | None = None,
    ) -> None:
        self.cluster = cluster_data or ClusterData(api_client, ttl_seconds=0.0)
        self.clock = clock
        self.interval = interval
        LeaderPeriodicWorker.__init__(self, is_leader, interval)
        self.resources = resources or (lambda: deletable_resources(self.cluster))
        self.deleted = 0
        self.invalid: set[str] = set()

    thread_name = "ttl"

    def run_once(self) -> object:
        return self.scan()

    def scan(self) -> int:
        """Delete every expired object now; returns how many were deleted."""
        now = self.clock()
        deleted = 0
        for resource in self.resources():
            try:
                objects = self.cluster.list_resource(resource, "", label_selector=TTL_LABEL, cached=False)
            except (Forbidden, NotFound, MethodNotAllowed):
                continue
            except KubeError as exc:
                log.warning("listing %s with %s failed: %s", resource.resource, TTL_LABEL, exc)
                continue
            for obj in objects:
                deleted += self._expire(resource, obj, now)
        self.deleted += deleted
        return deleted

    def _expire(self, resource: ApiResource, obj: dict[str, Any], now: dt.datetime) -> int:
        metadata = obj.get("metadata") or {}
        if metadata.get("deletionTimestamp"):
            return 0
        value = str((metadata.get("labels") or {}).get(TTL_LABEL, ""))
        where = f"{resource.kind} {metadata.get('namespace') or ''}/{metadata.get('name')}"
        try:
            expires = deletion_time(value, _created(obj))
        except TtlError as exc:
            if where not in self.invalid:
                self.invalid.add(where)
                log.error("%s: %s", where, exc)
            return 0
        if now <= expires:
            return 0
        policy = propagation_policy(metadata.get("annotations"))
        try:
            self.cluster.request(
                "DELETE", object_path(resource, str(metadata.get("namespace") or ""), str(metadata.get("name") or "")),
                query={"propagationPolicy": policy} if policy else None,
            )
        except NotFound:
            return 0
        except KubeError as exc:
            log.warning("deleting expired %s failed: %s", where, exc)
            return 0
        log.info("deleted %s: %s=%s expired", where, TTL_LABEL, value)
        return 1
