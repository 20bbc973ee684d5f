"""Informers: a local, indexed copy of one resource type, kept current by list-then-watch, with change handlers.

An `Informer` lists the collection once, then watches from the list's ``resourceVersion`` with bookmarks on, so a
server-side watch timeout (or a dropped connection) resumes from the last version seen instead of listing again.
When the server says that version is gone (410, or a watch ``ERROR`` event carrying a 410 Status) the informer
lists again and compares the listing with its store: objects that appeared are delivered as adds, objects whose
``resourceVersion`` changed as updates and objects that vanished as deletes, so a change made while no watch was
open is never lost.  ``has_synced()`` turns true after the first listing was delivered.  With a resync period,
every stored object is delivered again as an update (old and new the same object) that often, for reconcilers
that must re-check the world now and then.

Handlers run on the informer's own thread, one event at a time, in the order the server sent them; a handler that
raises is logged and does not stop the informer.  They should be quick: the usual handler just puts a key on a
`stockade.kube.workqueue.WorkQueue`.

`RawListWatch` lists and watches through `stockade.kube.client.KubeClient` (raw REST over
`stockade.kube.connection`), objects as plain dicts, the way every controller talks to the API server.  Anything with the
same two methods (`ListWatch`) can stand in for it, which is how tests inject failures.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from stockade.kube.client import KubeClient
from stockade.kube.errors import Backoff, Gone, KubeError, from_status, translated

log = logging.getLogger("stockade.kube.informer")

Obj = dict[str, Any]


# -- keys ---------------------------------------------------------------------------------------------------------
def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object: the key of the store and the work queue."""
    metadata = obj.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "")
    name = str(metadata.get("name") or "")
    return f"{namespace}/{name}" if namespace else name


def split_key(key: str) -> tuple[str, str]:
    """``namespace/name`` → (namespace, name); ``name`` → ("", name)."""
    namespace, slash, name = key.partition("/")
    return (namespace, name) if slash else ("", namespace)


def resource_version_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


# -- label selectors ----------------------------------------------------------------------------------------------
_REQUIREMENT = re.compile(r"^\s*(!?)\s*([A-Za-z0-9./_-]+)\s*(?:(==|=|!=)\s*([A-Za-z0-9._-]*)|\s+(in|notin)\s*\(([^)]*)\))?\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        if self.operator == "NotIn":
            return labels.get(self.key) not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels


class InvalidSelector(KubeError):
    """A label selector that cannot be parsed (raised before any request is made)."""


@dataclass(frozen=True)
class LabelSelector:
    """A Kubernetes label selector (no wildcards): every requirement must hold; the empty selector matches all."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        """The string form: ``a=b,c!=d,e in (x,y),f notin (z),g,!h``."""
        requirements: list[Requirement] = []
        for part in _split_selector(text):
            match = _REQUIREMENT.match(part)
            if match is None:
                raise InvalidSelector(f"invalid label selector term {part!r}", status=0)
            negated, key, equality, value, set_op, set_values = match.groups()
            if negated and (equality or set_op):
                raise InvalidSelector(f"invalid label selector term {part!r}", status=0)
            if equality in ("=", "=="):
                requirements.append(Requirement(key, "In", frozenset([value])))
            elif equality == "!=":
                requirements.append(Requirement(key, "NotIn", frozenset([value])))
            elif set_op:
                values = frozenset(v.strip() for v in set_values.split(",") if v.strip())
                requirements.append(Requirement(key, "In" if set_op == "in" else "NotIn", values))
            else:
                requirements.append(Requirement(key, "DoesNotExist" if negated else "Exists"))
        return cls(tuple(requirements))

    @classmethod
    def from_dict(cls, selector: Mapping[str, Any]) -> LabelSelector:
        """The object form: ``{"matchLabels": {...}, "matchExpressions": [{"key", "operator", "values"}]}``."""
        requirements = [Requirement(str(k), "In", frozenset([str(v)])) for k, v in (selector.get("matchLabels") or {}).items()]
        for expression in selector.get("matchExpressions") or []:
            operator = str(expression.get("operator", ""))
            if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
                raise InvalidSelector(f"{operator!r} is not a label selector operator", status=0)
            requirements.append(Requirement(str(expression.get("key", "")), operator, frozenset(str(v) for v in expression.get("values") or [])))
        return cls(tuple(requirements))

    @classmethod
    def of(cls, selector: str | Mapping[str, Any] | LabelSelector | None) -> LabelSelector:
        if selector is None:
            return cls()
        if isinstance(selector, LabelSelector):
            return selector
        if isinstance(selector, str):
            return cls.parse(selector)
        if "matchLabels" in selector or "matchExpressions" in selector:
            return cls.from_dict(selector)
        return cls.from_dict({"matchLabels": selector})  # a plain {label: value} mapping

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(requirement.matches(labels) for requirement in self.requirements)

    def equalities(self) -> list[tuple[str, str]]:
        """The ``key=value`` requirements, which the store answers from its label index."""
        return [(r.key, next(iter(r.values))) for r in self.requirements if r.operator == "In" and len(r.values) == 1]


def _split_selector(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts: list[str] = []
    depth = 0
    current = ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [part for part in parts if part.strip()]


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in ((obj.get("metadata") or {}).get("labels") or {}).items()}


# -- the store ----------------------------------------------------------------------------------------------------
class Store:
    """Objects by key, with a namespace index and a label index; safe to read from any thread.  Callers must not
    modify the dicts they get (they are the store's own)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._items: dict[str, Obj] = {}
        self._by_namespace: dict[str, set[str]] = {}
        self._by_label: dict[tuple[str, str], set[str]] = {}

    def get(self, key: str) -> Obj | None:
        with self._lock:
            return self._items.get(key)

    def get_by_name(self, namespace: str, name: str) -> Obj | None:
        return self.get(f"{namespace}/{name}" if namespace else name)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._items)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def list(self, namespace: str | None = None, selector: str | Mapping[str, Any] | LabelSelector | None = None) -> list[Obj]:
        """Objects in ``namespace`` (None: all) whose labels match ``selector`` (a selector string, a
        LabelSelector dict, a plain ``{label: value}`` mapping, or a `LabelSelector`)."""
        parsed = LabelSelector.of(selector)
        with self._lock:
            candidates: set[str] | None = None
            if namespace is not None:
                candidates = set(self._by_namespace.get(namespace, ()))
            for pair in parsed.equalities():
                indexed = self._by_label.get(pair, set())
                candidates = set(indexed) if candidates is None else candidates & indexed
            keys = sorted(self._items if candidates is None else candidates)
            found = [self._items[key] for key in keys if key in self._items]
        return [obj for obj in found if parsed.matches(labels_of(obj))]

    def _index(self, key: str, obj: Obj) -> None:
        namespace = str((obj.get("metadata") or {}).get("namespace") or "")
        self._by_namespace.setdefault(namespace, set()).add(key)
        for pair in labels_of(obj).items():
            self._by_label.setdefault(pair, set()).add(key)

    def _unindex(self, key: str, obj: Obj) -> None:
        namespace = str((obj.get("metadata") or {}).get("namespace") or "")
        keys = self._by_namespace.get(namespace)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_namespace[namespace]
        for pair in labels_of(obj).items():
            keys = self._by_label.get(pair)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_label[pair]

    def upsert(self, obj: Obj) -> Obj | None:
        """Store ``obj``; returns the object it replaced."""
        key = object_key(obj)
        with self._lock:
            old = self._items.get(key)
            if old is not None:
                self._unindex(key, old)
            self._items[key] = obj
            self._index(key, obj)
            return old

    def delete(self, key: str) -> Obj | None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._unindex(key, old)
            return old


# -- list and watch -----------------------------------------------------------------------------------------------
class WatchEvents(Protocol):
    """An open watch: raw events ``{"type": ..., "object": {...}}`` until the server ends it; ``close()`` may be
    called from another thread to end it early."""

    def __iter__(self) -> Iterator[Obj]: ...

    def close(self) -> None: ...


class ListWatch(Protocol):
    def list(self) -> tuple[list[Obj], str]:
        """Every object (``apiVersion`` and ``kind`` filled in) and the listing's ``resourceVersion``."""
        ...

    def watch(self, resource_version: str, timeout_seconds: int) -> WatchEvents: ...


def collection_path(api_version: str, resource: str, namespace: str = "") -> str:
    """The REST path of a collection: ``("v1", "configmaps", "ns")`` → ``/api/v1/namespaces/ns/configmaps``."""
    prefix = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    if namespace:
        return f"{prefix}/namespaces/{urllib.parse.quote(namespace)}/{resource}"
    return f"{prefix}/{resource}"


class _RawWatch:
    """A streaming watch response, read line by line."""

    def __init__(self, response: Any, path: str) -> None:
        self._response = response  # urllib3.HTTPResponse
        self._path = path
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[Obj]:
        buffer = b""
        try:
            for chunk in self._response.stream(amt=None, decode_content=False):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield self._decode(line)
            if buffer.strip():
                yield self._decode(buffer)
        except Exception as exc:
            if self._closed.is_set():
                return
            with translated(method="WATCH", path=self._path):
                raise exc
        finally:
            self.close()

    def _decode(self, line: bytes) -> Obj:
        event = json.loads(line)
        if not isinstance(event, dict):
            raise ValueError(f"watch {self._path}: not an event: {line[:200]!r}")
        return event

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            self._response.shutdown()  # unblocks a read in progress on another thread
        except Exception:
            pass
        self._response.release_conn()
        self._response.close()


LIST_RESTARTS = 3  # times `RawListWatch.objects` lists again after its continue token expired, before giving up


class RawListWatch:
    """Lists (paginated) and watches one collection through `KubeClient`'s raw REST calls."""

    def __init__(
        self,
        api_client: Any,
        path: str,
        *,
        label_selector: str = "",
        field_selector: str = "",
        page_size: int = 500,
        request_timeout: float = 60.0,
        metadata_only: bool = False,
        client: KubeClient | None = None,
    ) -> None:
        self.api_client = api_client
        # ``client``: list through this one instead (a writer's own client, with its user and test double)
        self.client = client if client is not None else KubeClient(api_client, timeout=request_timeout)
        self.path = path
        # objects as PartialObjectMetadata (apiVersion, kind, metadata only): for watching big or numerous objects
        # when only their names, labels and annotations matter
        self.metadata_only = metadata_only
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.page_size = page_size
        self.request_timeout = request_timeout

    @classmethod
    def for_resource(cls, api_client: Any, api_version: str, resource: str, namespace: str = "", **options: Any) -> RawListWatch:
        return cls(api_client, collection_path(api_version, resource, namespace), **options)

    def _query(self, extra: Mapping[str, str]) -> list[tuple[str, str]]:
        query = {k: v for k, v in (("labelSelector", self.label_selector), ("fieldSelector", self.field_selector)) if v}
        return list({**query, **extra}.items())

    def _accept(self, watch: bool) -> str:
        if not self.metadata_only:
            return "application/json"
        kind = "PartialObjectMetadata" if watch else "PartialObjectMetadataList"
        return f"application/json;as={kind};g=meta.k8s.io;v=v1"

    def _call(self, query: list[tuple[str, str]], timeout: Any, watch: bool = False) -> Any:
        """The GET; its transport response (not yet read) on 2xx, a `KubeError` otherwise."""
        return self.client.open(self.path, query=query, accept=self._accept(watch), timeout=timeout)

    def pages(self) -> Iterator[tuple[list[Obj], str]]:
        """The collection a page at a time (``page_size`` objects per request), each page with the resourceVersion
        of its listing: a caller that handles each page before asking for the next holds one page, not all."""
        token = ""
        while True:
            extra = {"limit": str(self.page_size)} if self.page_size > 0 else {}
            if token:
                extra["continue"] = token
            page = self.client.request("GET", self.path, query=self._query(extra), accept=self._accept(False), timeout=self.request_timeout)
            if not isinstance(page, dict):
                raise ValueError(f"listing {self.path}: not a list: {str(page)[:200]}")
            kind = str(page.get("kind") or "")
            item_kind = kind[: -len("List")] if kind.endswith("List") else kind
            api_version = str(page.get("apiVersion") or "")
            items: list[Obj] = []
            for item in page.get("items") or []:
                if isinstance(item, dict):
                    item.setdefault("apiVersion", api_version)
                    item.setdefault("kind", item_kind)
                    items.append(item)
            metadata = page.get("metadata") or {}
            token = str(metadata.get("continue") or "")
            yield items, str(metadata.get("resourceVersion") or "")
            if not token:
                return

    def list(self) -> tuple[list[Obj], str]:
        items: list[Obj] = []
        version = ""
        for page, version in self.pages():
            items.extend(page)
        return items, version

    def objects(self) -> Iterator[Obj]:
        """Every object of the collection, fetched a page at a time while the caller consumes them.  When the
        listing's continue token expires before the last page (410 Gone: the caller took longer than the API server
        keeps the listing's version), the listing starts again and objects already yielded (by uid) are skipped."""
        seen: set[str] = set()
        restarts = 0
        while True:
            try:
                for page, _version in self.pages():
                    for item in page:
                        uid = str((item.get("metadata") or {}).get("uid") or "")
                        if uid and uid in seen:
                            continue
                        if uid:
                            seen.add(uid)
                        yield item
                return
            except Gone:
                restarts += 1
                if not seen or restarts > LIST_RESTARTS:
                    raise
                log.info("listing %s expired after %d objects; listing again from the start", self.path, len(seen))

    def watch(self, resource_version: str, timeout_seconds: int) -> WatchEvents:
        extra = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
        }
        return _RawWatch(self._call(self._query(extra), (10.0, timeout_seconds + 30.0), watch=True), self.path)


# -- the informer -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Handlers:
    on_add: Callable[[Obj], None] | None = None
    on_update: Callable[[Obj, Obj], None] | None = None
    on_delete: Callable[[Obj], None] | None = None


WATCH_BACKOFF = Backoff(initial=0.5, factor=2.0, cap=30.0, jitter=0.2)


class Informer:
    """See the module docstring.  ``start()`` then ``stop()``; ``store`` is readable at any time."""

    def __init__(
        self,
        list_watch: ListWatch,
        *,
        name: str = "informer",
        resync_period: float = 0.0,
        watch_timeout: int = 300,
        backoff: Backoff = WATCH_BACKOFF,
        on_error: Callable[[Exception], None] | None = None,
        on_synced: Callable[[], None] | None = None,
    ) -> None:
        self.list_watch = list_watch
        self.on_error = on_error  # told of every failed list or watch (not of Gone), before the backoff pause
        self.on_synced = on_synced  # told after every complete listing was delivered (the first one and relists)
        self.name = name
        self.resync_period = resync_period
        self.watch_timeout = watch_timeout
        self.backoff = backoff
        self.store = Store()
        self.resource_version = ""
        self.relists = 0  # listings done (the first one included): how often a Gone or a restart forced one
        self._handlers: list[Handlers] = []
        self._dispatch = threading.RLock()  # one event at a time, across the watch and resync threads
        self._stopping = threading.Event()
        self._synced = threading.Event()
        self._watch: WatchEvents | None = None
        self._watch_lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    # -- handlers ------------------------------------------------------------------------------------------------
    def add_handlers(
        self,
        on_add: Callable[[Obj], None] | None = None,
        on_update: Callable[[Obj, Obj], None] | None = None,
        on_delete: Callable[[Obj], None] | None = None,
    ) -> None:
        """Register handlers; objects already stored are delivered to the new ``on_add`` at once."""
        handlers = Handlers(on_add, on_update, on_delete)
        with self._dispatch:
            self._handlers.append(handlers)
            if on_add is not None:
                for obj in self.store.list():
                    self._call(on_add, obj)

    def _call(self, fn: Callable[..., None], *args: Obj) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("%s: event handler failed", self.name)

    def _added(self, obj: Obj) -> None:
        for handlers in self._handlers:
            if handlers.on_add is not None:
                self._call(handlers.on_add, obj)

    def _updated(self, old: Obj, new: Obj) -> None:
        for handlers in self._handlers:
            if handlers.on_update is not None:
                self._call(handlers.on_update, old, new)

    def _deleted(self, obj: Obj) -> None:
        for handlers in self._handlers:
            if handlers.on_delete is not None:
                self._call(handlers.on_delete, obj)

    # -- lifecycle -----------------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._threads:
            raise RuntimeError(f"{self.name}: already started")
        self._threads.append(threading.Thread(target=self._run, name=f"{self.name}-watch", daemon=True))
        if self.resync_period > 0:
            self._threads.append(threading.Thread(target=self._resync_loop, name=f"{self.name}-resync", daemon=True))
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop watching; True when the informer's threads ended within ``timeout``."""
        self._stopping.set()
        with self._watch_lock:
            current = self._watch
        if current is not None:
            current.close()
        for thread in self._threads:
            thread.join(timeout)
        return not any(thread.is_alive() for thread in self._threads)

    def has_synced(self) -> bool:
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    # -- list and watch ------------------------------------------------------------------------------------------
    def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                if not self.resource_version:
                    self._relist()
                self._watch_once()
                failures = 0
            except Gone as exc:
                log.info("%s: resourceVersion %s expired (%s), listing again", self.name, self.resource_version, exc.message)
                self.resource_version = ""
            except Exception as exc:
                if self._stopping.is_set():
                    return
                delay = self.backoff.delay(failures)
                failures += 1
                log.warning("%s: list/watch failed (%s), retrying in %.1fs", self.name, exc, delay)
                if self.on_error is not None:
                    try:
                        self.on_error(exc)
                    except Exception:
                        log.exception("%s: error handler failed", self.name)
                self._stopping.wait(delay)

    def _relist(self) -> None:
        """List and bring the store in line with the listing, delivering what changed."""
        items, resource_version = self.list_watch.list()
        with self._dispatch:
            self.apply_listing(items)
            self.resource_version = resource_version
            self.relists += 1
            self._synced.set()
            if self.on_synced is not None:
                self._call(self.on_synced)

    def apply_listing(self, items: Iterable[Obj]) -> None:
        """Replace the store's content with ``items``: adds, updates (changed ``resourceVersion``) and deletes."""
        with self._dispatch:
            seen: set[str] = set()
            for obj in items:
                key = object_key(obj)
                seen.add(key)
                old = self.store.get(key)
                if old is None:
                    self.store.upsert(obj)
                    self._added(obj)
                elif resource_version_of(old) != resource_version_of(obj) or not resource_version_of(obj):
                    self.store.upsert(obj)
                    self._updated(old, obj)
            for key in self.store.keys():
                if key not in seen:
                    gone = self.store.delete(key)
                    if gone is not None:
                        self._deleted(gone)

    def _watch_once(self) -> None:
        events = self.list_watch.watch(self.resource_version, self.watch_timeout)
        with self._watch_lock:
            self._watch = events
        try:
            if self._stopping.is_set():
                return
            for event in events:
                if self._stopping.is_set():
                    return
                self.apply_event(event)
        finally:
            with self._watch_lock:
                self._watch = None
            events.close()

    def apply_event(self, event: Mapping[str, Any]) -> None:
        """One watch event; an ``ERROR`` event raises its Status as a `KubeError` (`Gone` for 410)."""
        event_type = str(event.get("type") or "")
        obj = event.get("object")
        if not isinstance(obj, dict):
            return
        if event_type == "ERROR":
            raise from_status(obj, method="WATCH")
        resource_version = resource_version_of(obj)
        with self._dispatch:
            if event_type in ("ADDED", "MODIFIED"):
                old = self.store.upsert(obj)
                if old is None:
                    self._added(obj)
                else:
                    self._updated(old, obj)
            elif event_type == "DELETED":
                stored = self.store.delete(object_key(obj))
                self._deleted(obj if resource_version else (stored or obj))
            if resource_version:  # BOOKMARK events carry only this
                self.resource_version = resource_version

    def resync(self) -> None:
        """Deliver every stored object again as an update to itself."""
        with self._dispatch:
            for obj in self.store.list():
                self._updated(obj, obj)

    def _resync_loop(self) -> None:
        while not self._stopping.wait(self.resync_period):
            if self._synced.is_set():
                self.resync()
