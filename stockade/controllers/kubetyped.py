"""Typed seams into the kubernetes client, so the controllers stay checkable by ``mypy --strict``: its watch helper
carries no annotations, and its API methods name model classes for request bodies although they serialize the
plain dicts the controllers build just as well."""

from __future__ import annotations

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


def request_body(body: dict[str, Any]) -> Any:
    """A plain-dict body for an API method whose signature names a model class (the client accepts both)."""
    return body
