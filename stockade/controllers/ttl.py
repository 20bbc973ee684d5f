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
import threading
from collections.abc import Callable
from typing import Any

from stockade.controllers.clusterdata import ClusterData, object_path, subject_access_review
from stockade.controllers.webhookconfig import ApiResource
from stockade.errors import StockadeError
from stockade.kube.controller import Controller, FunctionReconciler, Result
from stockade.kube.errors import Forbidden, KubeError, MethodNotAllowed, NotFound
from stockade.kube.informer import Informer, ListWatch, Obj, RawListWatch, object_key

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


DISCOVERY_SAFETY_SECONDS = 600.0  # discovery is read again this often even when no CRD or APIService changed
WORKERS = 3  # Kyverno's TTL controllers' worker count


def resource_id(resource: ApiResource) -> str:
    """``group/version/resource`` (``/v1/configmaps`` for the core group): the prefix of the work queue's keys."""
    return f"{resource.group}/{resource.version}/{resource.resource}"


def _api_version(resource: ApiResource) -> str:
    return f"{resource.group}/{resource.version}" if resource.group else resource.version


class TtlController:
    """Deletes objects whose ``cleanup.kyverno.io/ttl`` has expired (a `stockade.kube.controller.Runnable` that
    needs leadership); see the module docstring."""

    def __init__(
        self,
        api_client: Any,
        *,
        cluster_data: Any = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc),
        resources: Callable[[], list[ApiResource]] | None = None,
        list_watch: Callable[[ApiResource, str], ListWatch] | None = None,
        discovery_interval: float = DISCOVERY_SAFETY_SECONDS,
        watch_discovery: bool = True,
        workers: int = WORKERS,
        acting_user: str = "",
    ) -> None:
        self.cluster = cluster_data or ClusterData(api_client, ttl_seconds=0.0)
        # Kyverno's cleanup controller watches and deletes with its own account: only resources that account may
        # watch, list and delete are looked after (checked with SubjectAccessReviews), and deletions are made as it
        self.acting_user = acting_user
        self.acting = ClusterData(self.cluster.api_client, ttl_seconds=0.0, impersonate=acting_user) if acting_user else self.cluster
        self.clock = clock
        self.resources = resources or (lambda: deletable_resources(self.cluster))
        # (resource, label selector) -> its list/watch: metadata only through the API server unless a test injects one
        self.list_watch = list_watch or self._raw_list_watch
        self.discovery_interval = discovery_interval
        self.watch_discovery = watch_discovery and list_watch is None
        self.workers = workers
        self.deleted = 0
        self.invalid: set[str] = set()
        self.controller: Controller | None = None
        self._informers: dict[str, tuple[ApiResource, Informer]] = {}
        self._discovery_informers: list[Informer] = []
        self._rediscover = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return "ttl"

    @property
    def needs_leadership(self) -> bool:
        return True

    def _raw_list_watch(self, resource: ApiResource, label_selector: str) -> ListWatch:
        return RawListWatch.for_resource(
            self.cluster.api_client, _api_version(resource), resource.resource, label_selector=label_selector, metadata_only=True
        )

    # -- lifecycle ---------------------------------------------------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._stopping.clear()
            self.controller = Controller("ttl", FunctionReconciler(self.reconcile), workers=self.workers)
            self.controller.start()
            if self.watch_discovery:
                self._watch_discovery()
            self._rediscover.set()
            self._thread = threading.Thread(target=self._run, name="ttl-discovery", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._stopping.set()
            self._rediscover.set()
            if self._thread is not None:
                self._thread.join(timeout)
                self._thread = None
            for informer in self._discovery_informers:
                informer.stop(timeout)
            self._discovery_informers = []
            for rid in list(self._informers):
                self._stop_informer(rid, timeout)
            if self.controller is not None:
                self.controller.stop()
                self.controller = None

    def _watch_discovery(self) -> None:
        """A new or removed CRD or aggregated API changes what can carry the label: look at discovery again."""
        for resource in (
            ApiResource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False),
            ApiResource("apiregistration.k8s.io", "v1", "apiservices", "APIService", False),
        ):
            informer = Informer(self._raw_list_watch(resource, ""), name=f"ttl-discovery-{resource.resource}")

            def changed(*_objects: Obj, informer: Informer = informer) -> None:
                if informer.has_synced():  # the first listing is what discovery already shows
                    self._rediscover.set()

            def updated(old: Obj, new: Obj) -> None:
                if old.get("metadata", {}).get("generation") != new.get("metadata", {}).get("generation"):
                    changed(new)

            informer.add_handlers(on_add=changed, on_update=updated, on_delete=changed)
            informer.start()
            self._discovery_informers.append(informer)

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._rediscover.wait(self.discovery_interval)
            if self._stopping.is_set():
                return
            self._rediscover.clear()
            try:
                self.sync_resources()
            except Exception:
                log.exception("ttl: discovery failed")

    # -- informers, one per resource -----------------------------------------------------------------------------
    def watched(self) -> list[str]:
        return sorted(self._informers)

    def sync_resources(self) -> None:
        """Informers for every resource that can carry the label now; those for vanished resources stop."""
        wanted = {resource_id(resource): resource for resource in self.resources()}
        for rid in [rid for rid in self._informers if rid not in wanted]:
            self._stop_informer(rid)
        for rid, resource in wanted.items():
            if rid not in self._informers and not self._stopping.is_set():
                self._start_informer(rid, resource)

    def permitted(self, resource: ApiResource) -> bool:
        """Whether the acting account may watch, list and delete ``resource`` everywhere (always, acting as ourselves)."""
        if not self.acting_user:
            return True
        for verb in ("watch", "list", "delete"):
            attributes = {"group": resource.group, "version": resource.version, "resource": resource.resource, "verb": verb}
            try:
                allowed, _ = subject_access_review(self.cluster.request, self.acting_user, attributes)
            except KubeError as exc:
                log.warning("ttl: checking %s %s for %s failed: %s", verb, resource.resource, self.acting_user, exc)
                return False
            if not allowed:
                return False
        return True

    def _start_informer(self, rid: str, resource: ApiResource) -> None:
        if not self.permitted(resource):
            log.debug("ttl: %s may not watch, list and delete %s", self.acting_user, rid)
            return
        list_watch = self.list_watch(resource, TTL_LABEL)
        try:  # as Kyverno's preflight: a resource we may not list is left out rather than retried for ever
            list_watch.list()
        except (Forbidden, NotFound, MethodNotAllowed) as exc:
            log.info("ttl: not watching %s: %s", rid, exc)
            return
        except KubeError as exc:
            log.warning("ttl: listing %s with %s failed: %s", rid, TTL_LABEL, exc)
            return
        informer = Informer(list_watch, name=f"ttl-{resource.resource}")

        def enqueue(obj: Obj) -> None:
            if self.controller is not None:
                self.controller.enqueue(f"{rid}|{object_key(obj)}")

        informer.add_handlers(on_add=enqueue, on_update=lambda _old, new: enqueue(new))
        self._informers[rid] = (resource, informer)
        informer.start()

    def _stop_informer(self, rid: str, timeout: float = 10.0) -> None:
        entry = self._informers.pop(rid, None)
        if entry is not None and not entry[1].stop(timeout):
            log.warning("ttl: informer for %s did not stop in time", rid)

    # -- reconcile -------------------------------------------------------------------------------------------------
    def reconcile(self, key: str) -> Result | None:
        """Delete the object named by ``key`` (``group/version/resource|namespace/name``) if its ttl has expired;
        come back when it expires otherwise."""
        rid, _, object_name = key.partition("|")
        entry = self._informers.get(rid)
        if entry is None:
            return None
        resource, informer = entry
        obj = informer.store.get(object_name)
        if obj is None:
            return None
        wait = self.expire(resource, obj, self.clock())
        return Result(requeue_after=wait) if wait is not None else None

    def expire(self, resource: ApiResource, obj: dict[str, Any], now: dt.datetime) -> float | None:
        """Delete ``obj`` if expired (None); seconds until it expires otherwise; None for an unparsable value.  A
        failed deletion raises (the key is retried with backoff)."""
        metadata = obj.get("metadata") or {}
        if metadata.get("deletionTimestamp"):
            return None
        value = str((metadata.get("labels") or {}).get(TTL_LABEL, ""))
        where = f"{resource.kind} {metadata.get('namespace') or ''}/{metadata.get('name')}"
        try:
            expires = deletion_time(value, _created(obj))
        except TtlError as exc:
            if where not in self.invalid:
                self.invalid.add(where)
                log.error("%s: %s", where, exc)
            return None
        if now <= expires:
            return max((expires - now).total_seconds(), 0.0) + 0.5  # a little after, so the clock has passed it
        policy = propagation_policy(metadata.get("annotations"))
        try:
            self.acting.request(
                "DELETE", object_path(resource, str(metadata.get("namespace") or ""), str(metadata.get("name") or "")),
                query={"propagationPolicy": policy} if policy else None,
            )
        except NotFound:
            return None
        log.info("deleted %s: %s=%s expired", where, TTL_LABEL, value)
        self.deleted += 1
        return None
