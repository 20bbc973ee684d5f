"""watch_objects, the list/watch stream loop the policy and ConfigMap watches share, against scripted streams."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from stockade.controllers import kubetyped
from stockade.controllers.kubetyped import WatchStream, watch_objects


class ScriptedStream:
    """Replays events, then ends like a server-side watch timeout, leaving ``resource_version`` at ``ends_at``."""

    def __init__(self, events: list[dict[str, Any]], ends_at: str | None, on_end: Callable[[], None] = lambda: None) -> None:
        self.events = events
        self.ends_at = ends_at
        self.on_end = on_end
        self.resource_version: str | None = None
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.stopped = False

    def stream(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.calls.append((args, kwargs))
        yield from self.events
        self.resource_version = self.ends_at
        self.on_end()

    def stop(self) -> None:
        self.stopped = True


def list_things(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the scripted stream never calls the list function")


def test_events_are_filtered_and_each_stream_resumes_where_the_last_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    stopping = threading.Event()
    config_map = {"metadata": {"name": "kyverno"}}
    first = ScriptedStream(
        [
            {"type": "ADDED", "raw_object": config_map},
            {"type": "BOOKMARK", "raw_object": {"metadata": {"resourceVersion": "7"}}},
            {"type": "MODIFIED", "raw_object": "not an object"},
            {"type": "ERROR", "raw_object": {"code": 500}},
            {"type": "DELETED", "raw_object": config_map},
        ],
        ends_at="7",
    )
    second = ScriptedStream([], ends_at=None, on_end=stopping.set)  # a timeout without bookmarks keeps "7"
    streams = iter([first, second])
    monkeypatch.setattr(kubetyped, "new_watch", lambda: next(streams))
    seen: list[tuple[str, dict[str, Any]]] = []
    tracked: list[WatchStream | None] = []

    watch_objects(
        list_things,
        "kyverno",
        field_selector="metadata.name=kyverno",
        resource_version="3",
        timeout_seconds=60,
        stopping=stopping,
        on_event=lambda event_type, obj: seen.append((event_type, obj)),
        on_stream=tracked.append,
    )

    assert seen == [("ADDED", config_map), ("DELETED", config_map)]
    assert tracked == [first, None, second, None]
    assert first.calls == [
        (
            ("kyverno",),
            {
                "resource_version": "3",
                "allow_watch_bookmarks": True,
                "timeout_seconds": 60,
                "_request_timeout": 90,
                "field_selector": "metadata.name=kyverno",
            },
        )
    ]
    assert second.calls[0][1]["resource_version"] == "7"


def test_an_event_after_stop_is_not_delivered_and_ends_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    stopping = threading.Event()
    seen: list[str] = []

    def on_event(event_type: str, obj: dict[str, Any]) -> None:
        seen.append(event_type)
        stopping.set()

    only = ScriptedStream([{"type": "ADDED", "raw_object": {}}, {"type": "MODIFIED", "raw_object": {}}], ends_at="9")
    monkeypatch.setattr(kubetyped, "new_watch", lambda: only)
    watch_objects(list_things, resource_version="1", timeout_seconds=5, stopping=stopping, on_event=on_event, on_stream=lambda _: None)
    assert seen == ["ADDED"]
    assert only.stopped


def test_a_failing_stream_is_untracked_and_the_failure_reaches_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    class Gone(Exception):
        pass

    def fail() -> None:
        raise Gone("410")

    broken = ScriptedStream([], ends_at=None, on_end=fail)
    monkeypatch.setattr(kubetyped, "new_watch", lambda: broken)
    tracked: list[WatchStream | None] = []
    with pytest.raises(Gone):
        watch_objects(list_things, resource_version="1", timeout_seconds=5, stopping=threading.Event(), on_event=lambda *_: None, on_stream=tracked.append)
    assert tracked == [broken, None]
