"""Typed seams into the kubernetes client, so the controllers stay checkable by ``mypy --strict``: its watch helper
carries no annotations, and its API methods name model classes for request bodies although they serialize the
plain dicts the controllers build just as well."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol


class WatchStream(Protocol):
    """What the controllers use of ``kubernetes.watch.Watch``."""

    resource_version: str | None

    def stream(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]: ...

    def stop(self) -> None: ...


def new_watch() -> WatchStream:
    from kubernetes import watch

    factory: Callable[[], WatchStream] = watch.Watch
    return factory()


WATCH_EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED")


def watch_objects(
    list_call: Callable[..., Any],
    *args: Any,
    resource_version: str,
    timeout_seconds: int,
    stopping: threading.Event,
    on_event: Callable[[str, dict[str, Any]], None],
    on_stream: Callable[[WatchStream | None], None],
    **kwargs: Any,
) -> None:
    """Watch what ``list_call(*args, **kwargs)`` lists, from ``resource_version``, until ``stopping`` is set.

    Each server-side timeout resumes from the last resourceVersion seen (bookmarks keep it fresh); every ADDED,
    MODIFIED or DELETED event carrying an object goes to ``on_event``.  ``on_stream`` learns each watch stream
    before it starts and ``None`` once it ended, so a ``stop()`` from another thread can cut the current one short.
    A 410 Gone or any other failure propagates: the caller lists again.
    """
    while not stopping.is_set():
        stream = new_watch()
        on_stream(stream)
        try:
            for event in stream.stream(
                list_call,
                *args,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                _request_timeout=timeout_seconds + 30,
                **kwargs,
            ):
                if stopping.is_set():
                    stream.stop()
                    break
                event_type = event.get("type")
                obj = event.get("raw_object")
                if event_type in WATCH_EVENT_TYPES and isinstance(obj, dict):
                    on_event(str(event_type), obj)
        finally:
            on_stream(None)
        resource_version = stream.resource_version or resource_version


def request_body(body: dict[str, Any]) -> Any:
    """A plain-dict body for an API method whose signature names a model class (the client accepts both)."""
    return body
