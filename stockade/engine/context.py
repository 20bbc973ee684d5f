"""The JSON document that ``{{ }}`` variables query, with cheap checkpoints for per-rule isolation.

Writes copy only the dictionaries on the written path, so a checkpoint is a reference to the old root and restoring
it costs nothing — rules and foreach iterations checkpoint constantly on the hot path.
"""

from __future__ import annotations

import csv
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stockade.jmespath import JMESPathError, compile_expression
from stockade.errors import StockadeError


class ContextError(StockadeError):
    """A query could not be answered (bad expression, unknown key, failed deferred load)."""


DeferredLoader = Callable[["EngineContext"], None]


@dataclass(frozen=True)
class _Deferred:
    """A registered lazy entry: ``layers`` are its (registration order, loader) pairs, oldest first -- a name defined
    twice has two.  Kyverno's rule: an entry being loaded may pull in only entries registered before it, so a variable
    defined between two definitions of ``foo`` sees the first ``foo`` (the later layers stay deferred)."""

    matcher: re.Pattern[str]
    layers: tuple[tuple[int, DeferredLoader], ...]

    @property
    def order(self) -> int:
        return self.layers[0][0]


@functools.lru_cache(maxsize=1024)
def _name_matcher(name: str) -> re.Pattern[str]:
    """Kyverno's deferred-loader match: the name as a word not preceded by ``.`` or a letter/digit, so ``x`` is
    wanted by ``x.y`` and ``f(x)`` but not by ``y.x`` or ``xy``.  Cached: every policy evaluation registers the
    same few names (``images`` for each policy of each review), and escaping + compiling showed in profiles."""
    return re.compile(r"(?:\A|\s|[^.0-9A-Za-z])" + re.escape(name) + r"\b", re.ASCII)


class EngineContext:
    """Variables visible to one policy evaluation: ``request``, context entries, ``element`` and friends."""

    __slots__ = ("_data", "_checkpoints", "_deferred", "_registered", "_loading_below")

    def __init__(self, data: dict[str, Any] | None = None) -> None:
        self._data: dict[str, Any] = dict(data or {})
        self._checkpoints: list[tuple[dict[str, Any], dict[str, _Deferred]]] = []
        self._deferred: dict[str, _Deferred] = {}
        self._registered = 0
        self._loading_below: int | None = None

    @property
    def data(self) -> dict[str, Any]:
        return self._data

    def query(self, expression: str) -> Any:
        """Evaluate a JMESPath expression against the document (Kyverno's dialect and functions)."""
        expression = expression.strip()
        if self._deferred:
            self._load_deferred_for(expression)
        try:
            return compile_expression(expression).search(self._data)
        except JMESPathError:
            raise
        except Exception as exc:  # parse errors from the jmespath package surface here
            raise ContextError(f"incorrect query {expression}: {exc}") from exc

    def has(self, top_level_key: str) -> bool:
        return top_level_key in self._data

    def get(self, top_level_key: str, default: Any = None) -> Any:
        return self._data.get(top_level_key, default)

    def set(self, key: str, value: Any) -> None:
        """Set a top-level key (context entry, ``element``...)."""
        self._deferred.pop(key, None)
        data = dict(self._data)
        data[key] = value
        self._data = data

    def set_many(self, values: dict[str, Any]) -> None:
        """Set several top-level keys with one copy of the root (foreach sets four per element)."""
        for key in values:
            self._deferred.pop(key, None)
        data = dict(self._data)
        data.update(values)
        self._data = data

    def add_variable(self, dotted_key: str, value: Any) -> None:
        """Merge a value at a dotted path (``request.object.metadata.name``), creating maps along the way."""
        keys = split_dotted_key(dotted_key)
        self._deferred.pop(keys[0], None)
        self._data = _set_path(self._data, keys, value)

    def add_deferred(self, name: str, loader: DeferredLoader) -> None:
        """Register a context entry that is loaded only when a query first mentions it (Kyverno's deferred
        loading).  A second entry of the same name loads after the first, so the later one wins as when eager."""
        earlier = self._deferred.get(name)
        layers = (earlier.layers if earlier is not None else ()) + ((self._registered, loader),)
        self._deferred[name] = _Deferred(_name_matcher(name), layers)
        self._registered += 1

    def _load_deferred_for(self, expression: str) -> None:
        for name in self._deferred:
            if name in expression:
                break
        else:
            return  # the usual case (``images`` registered, not used): a name's matcher needs the name verbatim
        for name, entry in list(self._deferred.items()):
            if name not in expression:
                continue
            if self._loading_below is not None and entry.order >= self._loading_below:
                continue
            if self._deferred.get(name) is not entry or not entry.matcher.search(expression):
                continue
            bound = self._loading_below
            due = [layer for layer in entry.layers if bound is None or layer[0] < bound]
            later = tuple(layer for layer in entry.layers if bound is not None and layer[0] >= bound)
            del self._deferred[name]
            try:
                for order, load in due:
                    self._loading_below = order
                    load(self)
            finally:
                self._loading_below = bound
            if later:  # definitions registered after the loading entry: still deferred for later queries
                self._deferred[name] = _Deferred(entry.matcher, later)

    def checkpoint(self) -> None:
        self._checkpoints.append((self._data, dict(self._deferred)))

    def restore(self) -> None:
        """Return to the last checkpoint and keep it for another restore."""
        self._data, deferred = self._checkpoints[-1]
        self._deferred = dict(deferred)

    def reset(self) -> None:
        """Return to the last checkpoint and drop it."""
        self._data, self._deferred = self._checkpoints.pop()


def split_dotted_key(key: str) -> list[str]:
    """Split ``a.b."c.d"`` into ``[a, b, c.d]``: dots inside double quotes belong to the key, as in Kyverno."""
    if '"' not in key:
        return key.split(".")
    return next(csv.reader([key], delimiter="."))


def _set_path(root: dict[str, Any], keys: list[str], value: Any) -> dict[str, Any]:
    copied = dict(root)
    if len(keys) == 1:
        existing = copied.get(keys[0])
        if isinstance(existing, dict) and isinstance(value, dict):
            copied[keys[0]] = _merge(existing, value)
        else:
            copied[keys[0]] = value
        return copied
    child = copied.get(keys[0])
    copied[keys[0]] = _set_path(child if isinstance(child, dict) else {}, keys[1:], value)
    return copied


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(merged.get(key), dict) and isinstance(value, dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged
