"""A bounded memo keyed by object identity, for values derived from parsed policy objects.

Policy documents are plain dicts and lists (unhashable, and equal-but-distinct copies must not share an entry: a
re-parsed policy gets fresh work), so several engine caches key on ``id(obj)``.  An id is only unique while its
object lives, so each entry keeps a reference to its key; a freed key's id can then never be handed to a new object
that would be served the old value.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class IdentityMemo(Generic[K, V]):
    """``build(obj)`` worked out once per live object, for at most ``limit`` objects (the oldest entry goes first).

    Thread safety: a hit is one ``OrderedDict.get``, atomic under the GIL, with no lock; a miss builds outside any
    lock (a build may use other memos) and stores under a lock, so concurrent misses on one object may build twice
    but every caller gets the single stored value.  Builds must therefore be pure functions of the object.
    """

    __slots__ = ("_entries", "_find", "_limit", "_lock")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"an IdentityMemo needs room for at least one entry, not {limit}")
        self._entries: OrderedDict[int, tuple[K, V]] = OrderedDict()
        self._find = self._entries.get  # bound once: a hit is on every rule of every review
        self._limit = limit
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, obj: K, build: Callable[[K], V]) -> V:
        """The value for ``obj``, built and kept on the first call for this object."""
        entry = self._find(id(obj))
        if entry is not None and entry[0] is obj:
            return entry[1]
        value = build(obj)
        with self._lock:
            entry = self._entries.get(id(obj))
            if entry is not None and entry[0] is obj:
                return entry[1]
            if len(self._entries) >= self._limit:
                self._entries.popitem(last=False)
            self._entries[id(obj)] = (obj, value)
        return value
