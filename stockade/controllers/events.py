"""Kubernetes Events for admission denials, written in the background and aggregated.

A denial produces a Warning ``PolicyViolation`` Event regarding the policy (a ClusterPolicy's Events live in
``default``, as Kyverno's do; a Policy's in its own namespace) and, when the object already exists (UPDATE, DELETE),
one regarding that object.  Admission never waits for the API: ``submit`` only touches an in-memory table and a
bounded queue.  Repeats of the same Event (same object, reason and message) that arrive while one is pending are
folded into its count, and later repeats bump ``count``/``lastTimestamp`` of the Event already written instead of
creating a new object, so a denial storm costs a handful of writes rather than one per request.

Dry-run requests produce no Events: the webhooks are registered with ``sideEffects: NoneOnDryRun``, which promises
the apiserver exactly that.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stockade.engine.kyvernoconfig import KyvernoConfig
from stockade.engine.response import ERROR, FAIL, PASS
from stockade.webhook.admission import (
    AdmissionDecision,
    AdmissionRequest,
    blocking_rules,
    blocking_rules_for_mutation,
)

log = logging.getLogger("stockade.events")

REASON_POLICY_VIOLATION = "PolicyViolation"
REASON_POLICY_APPLIED = "PolicyApplied"
ACTION_BLOCKED = "Resource Blocked"
ACTION_PASSED = "Resource Passed"
ACTION_MUTATED = "Resource Mutated"
CLUSTER_EVENT_NAMESPACE = "default"

# Which part of the controller reports an Event; Kyverno names its reportingController after it.
SOURCE_ADMISSION = "admission"
SOURCE_SCAN = "scan"
SOURCE_GENERATE = "generate"
SOURCE_MUTATE = "mutate"
SOURCE_CLEANUP = "cleanup"
EVENT_SOURCES = (SOURCE_ADMISSION, SOURCE_SCAN, SOURCE_GENERATE, SOURCE_MUTATE, SOURCE_CLEANUP)
# ``--event-components``: "kyverno" reports as Kyverno's controllers do (kyverno-admission, kyverno-scan, ...), so
# tooling that selects Events by reportingComponent (and Kyverno's e2e suite) works unchanged; "stockade" reports
# every Event as "stockade".
COMPONENTS_KYVERNO = "kyverno"
COMPONENTS_STOCKADE = "stockade"
EVENT_COMPONENT_STYLES = (COMPONENTS_KYVERNO, COMPONENTS_STOCKADE)


def reporting_component(style: str, source: str) -> str:
    """The reportingComponent of an Event from ``source`` under the ``--event-components`` style."""
    if style == COMPONENTS_KYVERNO:
        return f"kyverno-{source}"
    return "stockade"
MAX_MESSAGE_LENGTH = 1024  # the apiserver rejects Event messages much longer than this
AGGREGATION_WINDOW_SECONDS = 600.0  # a repeat within this window updates the existing Event


@dataclass(frozen=True)
class EventSpec:
    """One Event to write; ``regarding`` is a core/v1 ObjectReference as a dict."""

    namespace: str
    regarding: tuple[tuple[str, str], ...]
    reason: str
    message: str
    type: str = "Warning"
    action: str = ACTION_BLOCKED
    source: str = SOURCE_ADMISSION

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.namespace, self.regarding, self.reason, self.type, self.message)

    @property
    def regarding_dict(self) -> dict[str, str]:
        return dict(self.regarding)


def _reference(obj: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    metadata = obj.get("metadata") or {}
    fields = {
        "apiVersion": str(obj.get("apiVersion") or ""),
        "kind": str(obj.get("kind") or ""),
        "name": str(metadata.get("name") or ""),
        "namespace": str(metadata.get("namespace") or ""),
        "uid": str(metadata.get("uid") or ""),
    }
    return tuple((k, v) for k, v in fields.items() if v)


def _policy_reference(policy: Any) -> tuple[tuple[str, str], ...]:
    raw = getattr(policy, "raw", None)
    if isinstance(raw, dict):
        return _reference(raw)
    return (("kind", str(getattr(policy, "kind", ""))), ("name", str(getattr(policy, "name", ""))))


def _truncate(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE_LENGTH else message[: MAX_MESSAGE_LENGTH - 3] + "..."


def denial_events(request: AdmissionRequest, decision: AdmissionDecision) -> list[EventSpec]:
    """The Events a denied request produces: one per blocking rule on its policy, plus one on the existing object
    for UPDATE/DELETE; none when the request was allowed or is a dry run."""
    if decision.allowed or request.dry_run:
        return []
    subject = request.subject
    metadata = subject.get("metadata") or {}
    kind = str(subject.get("kind") or request.kind.kind)
    namespace = str(metadata.get("namespace") or request.namespace)
    name = str(metadata.get("name") or request.name or metadata.get("generateName") or "")
    label = f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
    existing = request.old_object if request.operation in ("UPDATE", "DELETE") and request.old_object else None
    events: list[EventSpec] = []
    for response in decision.responses:
        blocked = blocking_rules([response])
        for policy_rules in blocking_rules_for_mutation([response]).values():
            blocked.setdefault(response.policy_name, {}).update(policy_rules)
        rules = blocked.get(response.policy_name) or {}
        if not rules:
            continue
        policy = response.policy
        policy_namespace = str(getattr(policy, "namespace", "") or "")
        statuses = {rule.name: rule.status for rule in response.rules if rule.status in (FAIL, ERROR)}
        for rule_name, message in sorted(rules.items()):
            status = statuses.get(rule_name, FAIL)
            events.append(
                EventSpec(
                    namespace=policy_namespace or CLUSTER_EVENT_NAMESPACE,
                    regarding=_policy_reference(policy),
                    reason=REASON_POLICY_VIOLATION,
                    message=_truncate(f"{label} {request.operation} blocked: rule {rule_name} {status}: {message}"),
                )
            )
            if existing is not None:
                events.append(
                    EventSpec(
                        namespace=namespace or CLUSTER_EVENT_NAMESPACE,
                        regarding=_reference(existing),
                        reason=REASON_POLICY_VIOLATION,
                        message=_truncate(f"{request.operation} blocked by policy {response.policy_name} rule {rule_name} ({status}): {message}"),
                    )
                )
    return events


def success_events(request: AdmissionRequest, decision: AdmissionDecision, config: KyvernoConfig) -> list[EventSpec]:
    """Kyverno's ``generateSuccessEvents``: a Normal ``PolicyApplied`` Event on each policy that applied to an
    admitted object without failing ("<Kind> <ns>/<name>: pass", or "... is successfully mutated" for a policy
    that only mutates), limited to ``successEventActions`` when set.  Nothing unless the ConfigMap enables it."""
    if not config.generate_success_events or not decision.allowed or request.dry_run:
        return []
    subject = request.subject
    metadata = subject.get("metadata") or {}
    kind = str(subject.get("kind") or request.kind.kind)
    namespace = str(metadata.get("namespace") or request.namespace)
    name = str(metadata.get("name") or request.name or metadata.get("generateName") or "")
    label = f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
    events: list[EventSpec] = []
    for response in decision.responses:
        if not any(rule.status == PASS for rule in response.rules) or any(rule.status in (FAIL, ERROR) for rule in response.rules):
            continue
        policy = response.policy
        if hasattr(policy, "has_validate"):  # a Kyverno policy: mutated only when it neither validates nor verifies
            mutated = not policy.has_validate() and not policy.has_verify_images() and policy.has_mutate()
        else:  # a CEL policy: (Namespaced)MutatingPolicy mutates, every other kind passes
            mutated = getattr(policy, "base_kind", "") == "MutatingPolicy"
        action, message = (ACTION_MUTATED, f"{label} is successfully mutated") if mutated else (ACTION_PASSED, f"{label}: pass")
        if not config.emits_success_event(action):
            continue
        events.append(
            EventSpec(
                namespace=str(getattr(policy, "namespace", "") or "") or CLUSTER_EVENT_NAMESPACE,
                regarding=_policy_reference(policy),
                reason=REASON_POLICY_APPLIED,
                message=_truncate(message),
                type="Normal",
                action=action,
            )
        )
    return events


@dataclass
class _Pending:
    spec: EventSpec
    count: int = 1
    first_seen: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc))
    last_seen: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc))


@dataclass
class _Written:
    name: str
    count: int
    first_timestamp: str
    written_at: float


def _timestamp(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Writes Events from a daemon thread; ``submit`` never blocks and drops (counting) when full."""

    def __init__(
        self,
        api_client: Any,
        components: str = COMPONENTS_STOCKADE,
        *,
        capacity: int = 1000,
        instance: str = "",
        core_api: Any = None,
        clock: Callable[[], float] = time.monotonic,
        start: bool = True,
        kyverno_config: Callable[[], KyvernoConfig] | None = None,
    ) -> None:
        if core_api is None:
            from kubernetes import client

            core_api = client.CoreV1Api(api_client)
        self.core = core_api
        if components not in EVENT_COMPONENT_STYLES:
            raise ValueError(f"unknown event component style {components!r}; known: {', '.join(EVENT_COMPONENT_STYLES)}")
        self.components = components
        self.instance = instance or os.environ.get("POD_NAME") or os.uname().nodename
        self.capacity = capacity
        self.clock = clock
        self.kyverno_config = kyverno_config  # generateSuccessEvents / successEventActions, read per request
        self.dropped = 0
        self.created = 0
        self.updated = 0
        self.failed = 0
        self._pending: dict[tuple[Any, ...], _Pending] = {}
        self._written: dict[tuple[Any, ...], _Written] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[Any, ...] | None] = queue.Queue(maxsize=capacity + 1)
        self._thread: threading.Thread | None = None
        if start:
            self.start()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="events", daemon=True)
            self._thread.start()

    def submit(self, spec: EventSpec) -> None:
        """Queue one Event; a repeat of one still pending only bumps its count."""
        now = dt.datetime.now(dt.timezone.utc)
        with self._lock:
            pending = self._pending.get(spec.key)
            if pending is not None:
                pending.count += 1
                pending.last_seen = now
                return
            if len(self._pending) >= self.capacity:
                self.dropped += 1
                return
            self._pending[spec.key] = _Pending(spec, first_seen=now, last_seen=now)
        try:
            self._queue.put_nowait(spec.key)
        except queue.Full:  # cannot happen while pending is bounded by capacity, but never block admission
            with self._lock:
                self._pending.pop(spec.key, None)
                self.dropped += 1

    def record_denial(self, request: AdmissionRequest, decision: AdmissionDecision) -> None:
        """The hook the webhook calls after denying: Events for the denial."""
        for spec in denial_events(request, decision):
            self.submit(spec)

    def record_success(self, request: AdmissionRequest, decision: AdmissionDecision) -> None:
        """The hook the webhook calls after admitting: PolicyApplied Events when Kyverno's ConfigMap enables
        ``generateSuccessEvents``, nothing otherwise."""
        if self.kyverno_config is not None:
            for spec in success_events(request, decision, self.kyverno_config()):
                self.submit(spec)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is pending (bounded by ``timeout``), then stop the thread."""
        if self._thread is None:
            self.start()
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        assert self._thread is not None
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            key = self._queue.get()
            if key is None:
                return
            with self._lock:
                pending = self._pending.pop(key, None)
            if pending is None:
                continue
            try:
                self._write(pending)
            except Exception as exc:  # keep draining; one failed write must not stop Events
                self.failed += 1
                log.warning("writing event %s for %s failed: %s", pending.spec.reason, pending.spec.regarding_dict.get("name"), exc)

    def _write(self, pending: _Pending) -> None:
        spec = pending.spec
        previous = self._written.get(spec.key)
        if previous is not None and self.clock() - previous.written_at < AGGREGATION_WINDOW_SECONDS:
            count = previous.count + pending.count
            body = {"count": count, "lastTimestamp": _timestamp(pending.last_seen)}
            try:
                self.core.patch_namespaced_event(previous.name, spec.namespace, body, _content_type="application/merge-patch+json")
                self._written[spec.key] = _Written(previous.name, count, previous.first_timestamp, self.clock())
                self.updated += 1
                return
            except Exception as exc:
                if getattr(exc, "status", None) != 404:  # gone (expired): write a fresh one below
                    raise
        self._create(pending)

    def _create(self, pending: _Pending) -> None:
        spec = pending.spec
        regarding = spec.regarding_dict
        name = f"{regarding.get('name') or 'object'}.{uuid.uuid4().hex[:16]}"
        first = _timestamp(pending.first_seen)
        component = reporting_component(self.components, spec.source)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": spec.namespace, "labels": {"app.kubernetes.io/managed-by": "stockade"}},
            "involvedObject": regarding,
            "reason": spec.reason,
            "message": spec.message,
            "type": spec.type,
            "action": spec.action,
            "count": pending.count,
            "firstTimestamp": first,
            "lastTimestamp": _timestamp(pending.last_seen),
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": f"{component}-{self.instance}",
        }
        self.core.create_namespaced_event(spec.namespace, body)
        self.created += 1
        if len(self._written) > 10 * self.capacity:
            self._written.clear()
        self._written[spec.key] = _Written(name, pending.count, first, self.clock())
