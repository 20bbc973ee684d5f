"""A keyed work queue for reconcilers running in threads, after client-go's ``workqueue``.

The guarantees a controller relies on:

- a key is queued at most once: adding a key that is already waiting does nothing;
- a key is processed by one worker at a time: adding a key while a worker holds it marks it dirty, and ``done()``
  queues it again, so the change that arrived during processing is not missed;
- nothing is dropped: the queue has no capacity limit, and a delayed key waits until it is due;
- ``add_rate_limited`` delays a key by the larger of its own exponential backoff (``base * 2**failures``, capped)
  and an overall token bucket; ``forget`` resets the key's failures after a success;
- ``add_after(key, delay)`` queues a key later; a key already waiting keeps the earlier of the two times;
- ``shutdown()`` stops handing out keys; with ``drain=True`` it first lets workers finish every queued key and
  returns the delayed keys that never came due, so the caller knows what was left.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)


class RateLimiter(Protocol[K_contra]):
    """How long a key must wait before its next attempt."""

    def when(self, key: K_contra) -> float: ...

    def forget(self, key: K_contra) -> None: ...

    def failures(self, key: K_contra) -> int: ...


class ItemExponentialBackoff(Generic[K]):
    """``base * 2**n`` for a key's n-th consecutive failure, never more than ``cap``."""

    def __init__(self, base: float = 0.005, cap: float = 300.0) -> None:
        if base <= 0 or cap < base:
            raise ValueError("need 0 < base <= cap")
        self.base = base
        self.cap = cap
        self._failures: dict[K, int] = {}
        self._lock = threading.Lock()

    def when(self, key: K) -> float:
        with self._lock:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        if failures >= 64:  # 2**64 * base is far past any cap; avoid float overflow
            return self.cap
        return float(min(self.cap, self.base * 2.0**failures))

    def forget(self, key: K) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        with self._lock:
            return self._failures.get(key, 0)


class TokenBucket:
    """``qps`` tokens a second, at most ``burst`` saved up.  ``reserve()`` takes a token now or books a future one
    and says how long to wait for it, so a burst of retries is spread out instead of refused."""

    def __init__(self, qps: float = 10.0, burst: int = 100, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("need qps > 0 and burst >= 1")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._stamp = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
            self._stamp = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps


class DefaultRateLimiter(Generic[K]):
    """The larger of a key's exponential backoff and the shared token bucket's wait, like client-go's default."""

    def __init__(self, per_key: ItemExponentialBackoff[K] | None = None, bucket: TokenBucket | None = None) -> None:
        self.per_key: ItemExponentialBackoff[K] = per_key or ItemExponentialBackoff()
        self.bucket = bucket or TokenBucket()

    def when(self, key: K) -> float:
        return max(self.per_key.when(key), self.bucket.reserve())

    def forget(self, key: K) -> None:
        self.per_key.forget(key)

    def failures(self, key: K) -> int:
        return self.per_key.failures(key)


class WorkQueue(Generic[K]):
    """See the module docstring.  Workers loop on ``get()`` / process / ``done(key)`` until ``get()`` gives None."""

    def __init__(self, rate_limiter: RateLimiter[K] | None = None, name: str = "") -> None:
        self.name = name
        self.rate_limiter: RateLimiter[K] = rate_limiter if rate_limiter is not None else DefaultRateLimiter()
        self._cond = threading.Condition()
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()  # queued, or to be queued again when its worker is done
        self._processing: set[K] = set()
        self._waiting: dict[K, float] = {}  # delayed key -> when it is due (monotonic)
        self._heap: list[tuple[float, int, K]] = []  # (due, seq, key); stale entries skipped on pop
        self._seq = itertools.count()
        self._shutting_down = False
        self._draining = False

    # -- adding --------------------------------------------------------------------------------------------------
    def add(self, key: K) -> bool:
        """Queue ``key`` now (a no-op if it is already queued).  False once the queue is shut down."""
        with self._cond:
            if self._shutting_down and not self._draining:
                return False
            self._waiting.pop(key, None)  # due now: an earlier add_after is superseded
            self._add_locked(key)
            return True

    def _add_locked(self, key: K) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            self._cond.notify()

    def add_after(self, key: K, delay: float) -> bool:
        """Queue ``key`` once ``delay`` seconds have passed; a key already waiting keeps the earlier due time."""
        if delay <= 0:
            return self.add(key)
        with self._cond:
            if self._shutting_down and not self._draining:
                return False
            due = time.monotonic() + delay
            current = self._waiting.get(key)
            if current is not None and current <= due:
                return True
            self._waiting[key] = due
            heapq.heappush(self._heap, (due, next(self._seq), key))
            self._cond.notify_all()  # a sleeping get() may have to wake up earlier
            return True

    def add_rate_limited(self, key: K) -> bool:
        """Queue ``key`` after its backoff (one more failure counted) or the token bucket's wait, the longer."""
        return self.add_after(key, self.rate_limiter.when(key))

    def forget(self, key: K) -> None:
        """The key succeeded: its next failure starts the backoff again from the bottom."""
        self.rate_limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        return self.rate_limiter.failures(key)

    # -- taking --------------------------------------------------------------------------------------------------
    def _promote_locked(self, now: float) -> float | None:
        """Move due keys into the queue; seconds until the next one is due (None: nothing waits)."""
        while self._heap:
            due, _, key = self._heap[0]
            if self._waiting.get(key) != due:
                heapq.heappop(self._heap)  # superseded by an earlier due time or an immediate add
                continue
            if due > now:
                return due - now
            heapq.heappop(self._heap)
            del self._waiting[key]
            self._add_locked(key)
        return None

    def get(self, timeout: float | None = None) -> K | None:
        """The next key, marked as being processed; blocks until one is ready.  None when the queue has shut down
        (after draining, if it drains) or ``timeout`` passed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._shutting_down:
                    return None
                next_due = self._promote_locked(time.monotonic())
                if self._queue:
                    key = self._queue.popleft()
                    self._processing.add(key)
                    self._dirty.discard(key)
                    return key
                wait = next_due
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    wait = remaining if wait is None else min(wait, remaining)
                self._cond.wait(wait)

    def done(self, key: K) -> None:
        """The worker finished ``key``; if it was added meanwhile it is queued again now."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty and not self._shutting_down:
                self._queue.append(key)
                self._cond.notify()
            self._cond.notify_all()  # a draining shutdown waits for processing to end

    # -- state ---------------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Keys ready to be processed (not those being processed or waiting for a delay)."""
        with self._cond:
            self._promote_locked(time.monotonic())
            return len(self._queue)

    def waiting(self) -> int:
        with self._cond:
            return len(self._waiting)

    def processing(self) -> int:
        with self._cond:
            return len(self._processing)

    def pending(self) -> list[K]:
        """After a shutdown: keys that were added again while a worker still held them (never handed out)."""
        with self._cond:
            return [key for key in self._dirty if key not in self._processing]

    @property
    def shutting_down(self) -> bool:
        with self._cond:
            return self._shutting_down

    def shutdown(self, drain: bool = False, timeout: float | None = None) -> list[K]:
        """Stop handing out keys.  With ``drain``, first wait (up to ``timeout``) until the queued keys were
        processed and no worker holds one; keys added while draining are still processed.  Returns the keys still
        waiting for a delay (and, after a timeout, those still queued): the caller decides what they mean."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if drain:
                self._draining = True
                while True:
                    self._promote_locked(time.monotonic())
                    if not self._queue and not self._processing:
                        break
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        break
                    self._cond.wait(remaining if remaining is not None else 0.5)
            self._draining = False
            self._shutting_down = True
            left = [*self._queue, *sorted(self._waiting, key=lambda k: self._waiting[k])]
            self._queue.clear()
            self._waiting.clear()
            self._heap.clear()
            self._dirty.difference_update(left)
            self._cond.notify_all()
            return left
