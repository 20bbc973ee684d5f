"""Shapes shared by the ImageRepository / ImagePolicy reconcilers: refs, conditions, events, results.

Objects stay plain Kubernetes-style dicts (as read from YAML) so a round trip through the CLI never drops
fields we do not model; these helpers only read and write the parts the reconcilers own.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from stockade.units.duration import DurationError, parse_duration
from stockade.errors import StockadeError

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "Event",
    "ImageRef",
    "ObjectKey",
    "ReconcileResult",
    "SpecError",
    "condition",
    "duration_seconds",
    "format_time",
    "is_ready",
    "mark_ready",
    "mark_not_ready",
    "mark_stalled",
    "migrate_policy_status",
    "object_key",
    "parse_time",
]

API_GROUP = "image.toolkit.fluxcd.io"
API_VERSION = f"{API_GROUP}/v1"
KIND_REPOSITORY = "ImageRepository"
KIND_POLICY = "ImagePolicy"

READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"

# Reasons (Flux's names, so dashboards and alerts written for Flux keep matching).
SUCCEEDED = "Succeeded"
PROGRESSING = "Progressing"
IMAGE_URL_INVALID = "ImageURLInvalid"
AUTHENTICATION_FAILED = "AuthenticationFailed"
READ_OPERATION_FAILED = "ReadOperationFailed"
DEPENDENCY_NOT_READY = "DependencyNotReady"
ACCESS_DENIED = "AccessDenied"
INVALID_POLICY = "InvalidPolicy"
INTERVAL_NOT_CONFIGURED = "IntervalNotConfigured"
FAILURE = "Failure"
FAILED = "Failed"
INVALID_EXCLUSION_LIST = "InvalidExclusionList"
INVALID_SPEC = "InvalidSpec"

EVENT_NORMAL = "Normal"
EVENT_WARNING = "Warning"
EVENT_TRACE = "Trace"


class SpecError(StockadeError, ValueError):
    """A spec field that can never work as written; reconcilers stall instead of retrying."""


@dataclass(frozen=True)
class ObjectKey:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def object_key(obj: Mapping[str, Any], default_namespace: str = "default") -> ObjectKey:
    metadata = obj.get("metadata") or {}
    return ObjectKey(str(metadata.get("namespace") or default_namespace), str(metadata.get("name") or ""))


@dataclass(frozen=True)
class ImageRef:
    """`status.latestRef`: `name` is the repository's `spec.image` exactly as written."""

    name: str
    tag: str
    digest: str = ""

    def __str__(self) -> str:
        text = f"{self.name}:{self.tag}"
        return f"{text}@{self.digest}" if self.digest else text

    def to_dict(self) -> dict[str, str]:
        data = {"name": self.name, "tag": self.tag}
        if self.digest:
            data["digest"] = self.digest
        return data

    @classmethod
    def from_dict(cls, data: object) -> ImageRef | None:
        if not isinstance(data, Mapping) or not data.get("name") or not data.get("tag"):
            return None
        return cls(str(data["name"]), str(data["tag"]), str(data.get("digest") or ""))

    @classmethod
    def from_image_string(cls, image: object) -> ImageRef | None:
        """Split a pre-latestRef `latestImage` string at its last `:` (the way Flux migrated it)."""
        if not isinstance(image, str) or ":" not in image:
            return None
        name, _, tag = image.rpartition(":")
        if not name or not tag or "/" in tag:
            return None
        return cls(name, tag)


def migrate_policy_status(status: MutableMapping[str, Any]) -> None:
    """Turn `latestImage`/`observedPreviousImage` (older writers) into refs, then drop the old strings."""
    if ImageRef.from_dict(status.get("latestRef")) is None:
        migrated = ImageRef.from_image_string(status.get("latestImage"))
        if migrated is not None:
            status["latestRef"] = migrated.to_dict()
    if ImageRef.from_dict(status.get("observedPreviousRef")) is None:
        previous = ImageRef.from_image_string(status.get("observedPreviousImage"))
        if previous is not None:
            status["observedPreviousRef"] = previous.to_dict()
    status.pop("latestImage", None)
    status.pop("observedPreviousImage", None)


@dataclass(frozen=True)
class Event:
    """What Flux would record as a Kubernetes event (`Trace` ones are only logged)."""

    type: str
    reason: str
    message: str


@dataclass
class ReconcileResult:
    """The object with its new status, the events to emit and when to come back (seconds, None = never)."""

    object: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    error: str | None = None
    detail: str = ""  # e.g. why a scan happened; for logs and tests
    warnings: list[str] = field(default_factory=list)  # spec problems Flux's CRD would reject but its reconciler ignores

    @property
    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = self.object.setdefault("status", {})
        return status

    @property
    def ready(self) -> bool:
        return is_ready(self.object)

    @property
    def stalled(self) -> bool:
        found = condition(self.object, STALLED)
        return bool(found and found.get("status") == "True")


# -- time ---------------------------------------------------------------------------------------------------------
def format_time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: object) -> datetime.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)


def duration_seconds(value: object, field_name: str) -> float | None:
    """A Go duration string in seconds; None when unset."""
    if value is None or value == "":
        return None
    try:
        nanos = parse_duration(str(value))
    except DurationError as exc:
        raise SpecError(f"{field_name}: {exc}") from None
    if nanos < 0:
        raise SpecError(f"{field_name}: duration must not be negative")
    return nanos / 1e9


# -- conditions (kstatus: Ready plus abnormal-true Reconciling / Stalled) ----------------------------------------
def condition(obj: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    for entry in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(entry, dict) and entry.get("type") == kind:
            return entry
    return None


def is_ready(obj: Mapping[str, Any]) -> bool:
    found = condition(obj, READY)
    return bool(found and found.get("status") == "True")


def _set_condition(
    obj: dict[str, Any], kind: str, status: str, reason: str, message: str, now: datetime.datetime
) -> None:
    conditions: list[dict[str, Any]] = obj.setdefault("status", {}).setdefault("conditions", [])
    generation = (obj.get("metadata") or {}).get("generation")
    existing = condition(obj, kind)
    entry: dict[str, Any] = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        # The transition time only moves when the status flips, as Kubernetes conditions require.
        "lastTransitionTime": existing["lastTransitionTime"]
        if existing and existing.get("status") == status and existing.get("lastTransitionTime")
        else format_time(now),
    }
    if generation is not None:
        entry["observedGeneration"] = generation
    if existing is not None:
        conditions[conditions.index(existing)] = entry
    else:
        conditions.append(entry)


def _remove_condition(obj: dict[str, Any], kind: str) -> None:
    status = obj.setdefault("status", {})
    status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != kind]


def _observe_generation(obj: dict[str, Any]) -> None:
    generation = (obj.get("metadata") or {}).get("generation")
    if generation is not None:
        obj.setdefault("status", {})["observedGeneration"] = generation


def mark_ready(obj: dict[str, Any], message: str, now: datetime.datetime) -> None:
    _set_condition(obj, READY, "True", SUCCEEDED, message, now)
    _remove_condition(obj, RECONCILING)
    _remove_condition(obj, STALLED)
    _observe_generation(obj)


def mark_not_ready(obj: dict[str, Any], reason: str, message: str, now: datetime.datetime) -> None:
    """A failure worth retrying: Ready=False and Reconciling=True (kstatus "in progress, with retries")."""
    _set_condition(obj, READY, "False", reason, message, now)
    _set_condition(obj, RECONCILING, "True", "ProgressingWithRetry", message, now)
    _remove_condition(obj, STALLED)


def mark_stalled(obj: dict[str, Any], reason: str, message: str, now: datetime.datetime) -> None:
    """A failure only a spec change can fix: no retry loop."""
    _set_condition(obj, READY, "False", reason, message, now)
    _set_condition(obj, STALLED, "True", reason, message, now)
    _remove_condition(obj, RECONCILING)
    _observe_generation(obj)


def notify(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> Event:
    """Flux's event rule: Normal when Ready appears or its message changes, Warning while failing, else Trace."""
    new = condition(after, READY) or {}
    old = condition(before or {}, READY) or {}
    if new.get("status") != "True":
        return Event(EVENT_WARNING, str(new.get("reason") or FAILED), str(new.get("message") or ""))
    if old.get("status") != "True" or old.get("message") != new.get("message"):
        return Event(EVENT_NORMAL, SUCCEEDED, str(new.get("message") or ""))
    return Event(EVENT_TRACE, SUCCEEDED, str(new.get("message") or ""))
