"""Reconcilers, controllers and a small manager, after controller-runtime and Kyverno's ``pkg/utils/controller``.

A `Reconciler` brings one object, named by its key (``namespace/name`` or ``name``), in line with what it should be,
and answers how the key should come back:

- it returns (None or ``Result()``): done; the key's backoff is reset;
- ``Result(requeue_after=N)``: done for now, look again in N seconds (backoff reset);
- ``Result(requeue=True)``: not done, try again after the key's backoff;
- it raises `TerminalError`: the key cannot succeed as it is; logged, not retried until an event brings it back;
- it raises anything else: retried after the key's backoff (growing per failure up to the queue's cap), for ever
  unless the controller has ``max_retries``.

A `Controller` feeds the keys of its informers' events into a `WorkQueue` and runs ``workers`` threads that take
keys and reconcile them; the queue makes sure one key is never reconciled by two workers at once and that an event
arriving during a reconcile brings the key back afterwards.  Workers start once every informer has synced.

A `Manager` starts and stops `Runnable`s.  Those that declare ``needs_leadership`` run only while this replica
leads: with an elector (``stockade.controllers.leader.LeaderElector`` is wrapped through ``elector_factory``) they
start when leadership is gained and stop when it is lost; without one, this replica leads from the start.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from stockade.errors import StockadeError
from stockade.kube.informer import Informer, Obj, object_key
from stockade.kube.workqueue import WorkQueue

log = logging.getLogger("stockade.kube.controller")


@dataclass(frozen=True)
class Result:
    requeue: bool = False
    requeue_after: float | None = None


class TerminalError(StockadeError):
    """Raised by a reconciler: retrying this key cannot help (bad spec, missing reference); do not retry."""


class Reconciler(Protocol):
    def reconcile(self, key: str) -> Result | None: ...


class FunctionReconciler:
    """A plain function as a `Reconciler`."""

    def __init__(self, fn: Callable[[str], Result | None]) -> None:
        self.fn = fn

    def reconcile(self, key: str) -> Result | None:
        return self.fn(key)


class Runnable(Protocol):
    """Something the `Manager` starts and stops; ``needs_leadership`` ones run only on the leader."""

    @property
    def name(self) -> str: ...

    @property
    def needs_leadership(self) -> bool: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Outcome:
    """What `Controller.handle` did with a key (for logs and tests)."""

    DONE = "done"
    REQUEUED_AFTER = "requeued-after"
    RATE_LIMITED = "rate-limited"
    TERMINAL = "terminal"
    DROPPED = "dropped"


class Controller:
    """See the module docstring.  Restartable: each ``start()`` gets a fresh queue."""

    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        *,
        workers: int = 1,
        needs_leadership: bool = True,
        max_retries: int | None = None,
        queue_factory: Callable[[], WorkQueue[str]] | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self._name = name
        self.reconciler = reconciler
        self.workers = workers
        self._needs_leadership = needs_leadership
        self.max_retries = max_retries
        self._queue_factory = queue_factory or (lambda: WorkQueue[str](name=name))
        self.queue: WorkQueue[str] = self._queue_factory()
        self.informers: list[Informer] = []
        self._sources: list[tuple[Informer, Callable[[Obj], Iterable[str]]]] = []
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self._name

    @property
    def needs_leadership(self) -> bool:
        return self._needs_leadership

    # -- event sources -------------------------------------------------------------------------------------------
    def watch(
        self,
        informer: Informer,
        *,
        keys: Callable[[Obj], Iterable[str]] | None = None,
        update_filter: Callable[[Obj, Obj], bool] | None = None,
    ) -> None:
        """Enqueue the keys of ``informer``'s events: the object's own key, or ``keys(obj)`` (e.g. an owner's).
        ``update_filter(old, new)`` False skips an update (resyncs deliver ``old is new``)."""
        key_fn: Callable[[Obj], Iterable[str]] = keys or (lambda obj: (object_key(obj),))
        self.informers.append(informer)
        self._sources.append((informer, key_fn))

        def enqueue(obj: Obj) -> None:
            for key in key_fn(obj):
                self.queue.add(key)

        def on_update(old: Obj, new: Obj) -> None:
            if update_filter is None or update_filter(old, new):
                enqueue(old)
                enqueue(new)

        informer.add_handlers(on_add=enqueue, on_update=on_update, on_delete=enqueue)

    def enqueue(self, key: str) -> None:
        """Queue ``key`` from outside the informers (a timer, another controller)."""
        self.queue.add(key)

    # -- running -------------------------------------------------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            if self._threads:
                return
            if self.queue.shutting_down:
                # restarted (leadership regained): events that came while stopped were not queued; look at all
                self.queue = self._queue_factory()
                for informer, key_fn in self._sources:
                    for obj in informer.store.list():
                        for key in key_fn(obj):
                            self.queue.add(key)
            self._stopping.clear()
            self._threads = [threading.Thread(target=self._worker, name=f"{self._name}-worker-{i}", daemon=True) for i in range(self.workers)]
            for thread in self._threads:
                thread.start()

    def stop(self, drain: bool = False, timeout: float = 10.0) -> None:
        """Stop taking keys (after finishing the queued ones with ``drain``) and wait for the workers."""
        with self._lock:
            self._stopping.set()
            left = self.queue.shutdown(drain=drain, timeout=timeout if drain else None)
            if left:
                log.info("%s: stopped with %d keys still queued or waiting", self._name, len(left))
            for thread in self._threads:
                thread.join(timeout)
            self._threads = []

    def _synced(self) -> bool:
        return all(informer.has_synced() for informer in self.informers)

    def _worker(self) -> None:
        while not self._synced():
            if self._stopping.wait(0.1):
                return
        queue = self.queue
        while True:
            key = queue.get()
            if key is None:
                return
            try:
                self.process(key, queue)
            finally:
                queue.done(key)

    def process(self, key: str, queue: WorkQueue[str] | None = None) -> str:
        """Reconcile ``key`` and file it by the outcome; returns the `Outcome`."""
        try:
            result = self.reconciler.reconcile(key)
        except TerminalError as exc:
            log.error("%s: %s: %s (not retried)", self._name, key, exc)
            return self.handle(key, None, exc, queue)
        except Exception as exc:
            log.warning("%s: %s: reconcile failed: %s", self._name, key, exc, exc_info=not isinstance(exc, StockadeError))
            return self.handle(key, None, exc, queue)
        return self.handle(key, result, None, queue)

    def handle(self, key: str, result: Result | None, error: BaseException | None, queue: WorkQueue[str] | None = None) -> str:
        """What becomes of ``key`` after a reconcile that returned ``result`` or raised ``error``."""
        queue = queue or self.queue
        if isinstance(error, TerminalError):
            queue.forget(key)
            return Outcome.TERMINAL
        if error is not None:
            if self.max_retries is not None and queue.num_requeues(key) >= self.max_retries:
                log.error("%s: %s: giving up after %d retries: %s", self._name, key, self.max_retries, error)
                queue.forget(key)
                return Outcome.DROPPED
            queue.add_rate_limited(key)
            return Outcome.RATE_LIMITED
        if result is not None and result.requeue_after is not None and result.requeue_after > 0:
            queue.forget(key)
            queue.add_after(key, result.requeue_after)
            return Outcome.REQUEUED_AFTER
        if result is not None and result.requeue:
            queue.add_rate_limited(key)
            return Outcome.RATE_LIMITED
        queue.forget(key)
        return Outcome.DONE


class InformerRunnable:
    """An informer as a `Runnable` every replica runs (the cache serves readers that are not leaders too)."""

    def __init__(self, informer: Informer, needs_leadership: bool = False) -> None:
        self.informer = informer
        self._needs_leadership = needs_leadership

    @property
    def name(self) -> str:
        return self.informer.name

    @property
    def needs_leadership(self) -> bool:
        return self._needs_leadership

    def start(self) -> None:
        self.informer.start()

    def stop(self) -> None:
        if not self.informer.stop():
            log.warning("%s: informer did not stop in time", self.informer.name)


class InformerController:
    """A `Controller` fed by one informer, both built afresh on each ``start()`` (an informer does not restart), as a
    `Runnable`: a leader-only one lists anew each time leadership is gained, so that listing is its recovery pass.
    ``informer`` and ``controller`` are None while stopped."""

    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        make_informer: Callable[[], Informer],
        *,
        needs_leadership: bool = True,
        update_filter: Callable[[Obj, Obj], bool] | None = None,
    ) -> None:
        self._name = name
        self._reconciler = reconciler
        self._make_informer = make_informer
        self._needs_leadership = needs_leadership
        self._update_filter = update_filter
        self.informer: Informer | None = None
        self.controller: Controller | None = None
        self._runnable_lock = threading.Lock()

    @property
    def name(self) -> str:
        return self._name

    @property
    def needs_leadership(self) -> bool:
        return self._needs_leadership

    def start(self) -> None:
        """Starts threads only (the manager calls this from the leader elector's callback)."""
        with self._runnable_lock:
            if self.controller is not None:
                return
            self.informer = self._make_informer()
            self.controller = Controller(self._name, self._reconciler, needs_leadership=self._needs_leadership)
            self.controller.watch(self.informer, update_filter=self._update_filter)
            self.informer.start()
            self.controller.start()

    def stop(self) -> None:
        with self._runnable_lock:
            if self.controller is not None:
                self.controller.stop()
                self.controller = None
            if self.informer is not None:
                if not self.informer.stop():
                    log.warning("%s: informer did not stop in time", self.informer.name)
                self.informer = None


class Elector(Protocol):
    """What the manager needs of a leader elector: it calls back when leadership is gained or lost."""

    def start(self) -> None: ...

    def stop(self) -> Any: ...


class Manager:
    """Starts and stops `Runnable`s in order; leader-only ones follow leadership.

    ``elector_factory(on_started_leading, on_stopped_leading)`` builds the elector (for instance
    ``lambda gained, lost: LeaderElector(api, ns, lease, identity, on_started_leading=gained,
    on_stopped_leading=lost)``); None means no election: this replica leads.
    """

    def __init__(self, elector_factory: Callable[[Callable[[], None], Callable[[], None]], Elector] | None = None) -> None:
        self.elector_factory = elector_factory
        self.elector: Elector | None = None
        self.runnables: list[Runnable] = []
        self._running: list[Runnable] = []
        self._lock = threading.RLock()
        self._started = False
        self._leading = threading.Event()

    def add(self, runnable: Runnable) -> Runnable:
        with self._lock:
            self.runnables.append(runnable)
            if self._started and (not runnable.needs_leadership or self._leading.is_set()):
                self._start(runnable)
        return runnable

    def is_leader(self) -> bool:
        return self._leading.is_set()

    def running(self) -> list[str]:
        with self._lock:
            return [runnable.name for runnable in self._running]

    def _start(self, runnable: Runnable) -> None:
        if runnable in self._running:
            return
        try:
            runnable.start()
        except Exception:
            log.exception("starting %s failed", runnable.name)
            return
        self._running.append(runnable)

    def _stop(self, runnable: Runnable) -> None:
        if runnable not in self._running:
            return
        self._running.remove(runnable)
        try:
            runnable.stop()
        except Exception:
            log.exception("stopping %s failed", runnable.name)

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
            for runnable in self.runnables:
                if not runnable.needs_leadership:
                    self._start(runnable)
        if self.elector_factory is None:
            self.leadership_gained()
        else:
            self.elector = self.elector_factory(self.leadership_gained, self.leadership_lost)
            self.elector.start()

    def leadership_gained(self) -> None:
        """Start the leader-only runnables (an elector callback: quick, it only starts threads)."""
        with self._lock:
            if not self._started:
                return
            self._leading.set()
            for runnable in self.runnables:
                if runnable.needs_leadership:
                    self._start(runnable)

    def leadership_lost(self) -> None:
        """Stop the leader-only runnables, newest first."""
        with self._lock:
            self._leading.clear()
            for runnable in reversed(list(self._running)):
                if runnable.needs_leadership:
                    self._stop(runnable)

    def stop(self) -> None:
        """Leader-only runnables first, then the elector (which releases the lease), then everything else."""
        self.leadership_lost()
        if self.elector is not None:
            try:
                self.elector.stop()
            except Exception:
                log.exception("stopping the leader elector failed")
            self.elector = None
        with self._lock:
            for runnable in reversed(list(self._running)):
                self._stop(runnable)
            self._started = False
