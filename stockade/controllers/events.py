"""Kubernetes Events for admission decisions, written in the background and aggregated.

The Events follow Kyverno's admission webhook (``GenerateEvents`` in pkg/webhooks/utils): a policy whose rules
failed or errored gets a Warning ``PolicyViolation`` Event per such rule ("<Kind> <ns>/<name>: [<rule>] fail
(blocked); <message>", action "Resource Blocked" when the request was denied, "Resource Passed" otherwise); when the
request was admitted the resource also gets one per rule of that policy; a policy that applied cleanly gets a Normal
``PolicyApplied`` Event (only when the ConfigMap's ``generateSuccessEvents`` allows it); rules skipped by
PolicyExceptions give ``PolicySkipped`` Events on the exception and the policy.  They report as
``kyverno-admission``, as Kyverno's do, so tools reading Kyverno's Events find them.

Admission never waits for the API: ``submit`` only touches an in-memory table and a bounded queue.  Repeats of the
same Event (same object, reason and message) that arrive while one is pending are folded into its count, and later
repeats bump ``count``/``lastTimestamp`` of the Event already written instead of creating a new object, so a denial
storm costs a handful of writes rather than one per request.

Dry-run requests produce no Events: the webhooks are registered with ``sideEffects: NoneOnDryRun``, which promises
the apiserver exactly that.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from stockade.engine.kyvernoconfig import KyvernoConfig
from stockade.engine.response import ERROR, FAIL, PASS, SKIP, EngineResponse
from stockade.kube.client import MERGE_PATCH, KubeClient
from stockade.kube.errors import NotFound
from stockade.policy.model import kyverno_reference_api_version
from stockade.webhook.admission import (
    AdmissionDecision,
    AdmissionRequest,
    blocking_rules,
    blocking_rules_for_mutation,
    subject_namespace,
)

log = logging.getLogger("stockade.events")

REASON_POLICY_VIOLATION = "PolicyViolation"
REASON_POLICY_APPLIED = "PolicyApplied"
REASON_POLICY_SKIPPED = "PolicySkipped"
REASON_POLICY_ERROR = "PolicyError"
ACTION_BLOCKED = "Resource Blocked"
ACTION_PASSED = "Resource Passed"
ACTION_MUTATED = "Resource Mutated"
ACTION_GENERATED = "Resource Generated"
ACTION_NONE = "None"
CLUSTER_EVENT_NAMESPACE = "default"

# Which part of the controller reports an Event; Kyverno names its reportingController after it.
SOURCE_ADMISSION = "admission"
SOURCE_SCAN = "scan"
SOURCE_GENERATE = "generate"
SOURCE_MUTATE = "mutate"
SOURCE_CLEANUP = "cleanup"
EVENT_SOURCES = (SOURCE_ADMISSION, SOURCE_SCAN, SOURCE_GENERATE, SOURCE_MUTATE, SOURCE_CLEANUP)
# Flux's image controllers (stockade images controller) report under their own controller names.
SOURCE_IMAGE_REFLECTOR = "image-reflector-controller"
SOURCE_IMAGE_AUTOMATION = "image-automation-controller"
FLUX_EVENT_SOURCES = (SOURCE_IMAGE_REFLECTOR, SOURCE_IMAGE_AUTOMATION)
# ``--event-components``: "kyverno" reports as Kyverno's controllers do (kyverno-admission, kyverno-scan, ...), so
# tooling that selects Events by reportingComponent (and Kyverno's e2e suite) works unchanged; "stockade" reports
# every Event as "stockade"; "flux" reports the image controllers' Events as Flux's (image-reflector-controller,
# image-automation-controller), for `flux events` and tooling selecting on the source. Flux sources never get a
# kyverno- prefix: Kyverno has no such controllers to imitate.
COMPONENTS_KYVERNO = "kyverno"
COMPONENTS_STOCKADE = "stockade"
COMPONENTS_FLUX = "flux"
EVENT_COMPONENT_STYLES = (COMPONENTS_KYVERNO, COMPONENTS_STOCKADE, COMPONENTS_FLUX)


def reporting_component(style: str, source: str) -> str:
    """The reportingComponent of an Event from ``source`` under the ``--event-components`` style."""
    if style == COMPONENTS_STOCKADE:
        return "stockade"
    if source in FLUX_EVENT_SOURCES:
        return source
    if style == COMPONENTS_KYVERNO:
        return f"kyverno-{source}"
    return "stockade"
MAX_MESSAGE_LENGTH = 1024  # the apiserver rejects Event messages much longer than this
AGGREGATION_WINDOW_SECONDS = 600.0  # a repeat within this window updates the existing Event

Reference = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class EventSpec:
    """One Event to write; ``regarding``/``related`` are core/v1 ObjectReferences as (field, value) pairs and
    ``source`` the reporting component (the recorder's own when empty)."""

    namespace: str
    regarding: Reference
    reason: str
    message: str
    type: str = "Warning"
    action: str = ACTION_BLOCKED
    source: str = SOURCE_ADMISSION
    related: Reference = ()  # the resource an Event about a policy concerns (Kyverno's "related")

    @property
    def key(self) -> tuple[Any, ...]:
        # the source too: the same violation reported by admission and by a scan are two Events, as in Kyverno
        return (self.namespace, self.regarding, self.reason, self.type, self.message, self.related, self.source)

    @property
    def digest(self) -> bytes:
        """A fixed-size stand-in for ``key`` where Events are remembered after they are written: a scan of a large
        cluster writes thousands, and their messages and references would otherwise stay in memory."""
        return hashlib.blake2b(repr(self.key).encode(), digest_size=16).digest()

    @property
    def regarding_dict(self) -> dict[str, str]:
        return dict(self.regarding)

    @property
    def related_dict(self) -> dict[str, str]:
        return dict(self.related)


def object_reference(obj: Mapping[str, Any]) -> Reference:
    """The core/v1 ObjectReference of an Event about ``obj``, without its empty fields."""
    metadata = obj.get("metadata") or {}
    fields = {
        "apiVersion": str(obj.get("apiVersion") or ""),
        "kind": str(obj.get("kind") or ""),
        "name": str(metadata.get("name") or ""),
        "namespace": str(metadata.get("namespace") or ""),
        "uid": str(metadata.get("uid") or ""),
    }
    return tuple((k, v) for k, v in fields.items() if v)


def _policy_reference(policy: Any) -> Reference:
    raw = getattr(policy, "raw", None)
    if isinstance(raw, dict):
        return object_reference({**raw, "apiVersion": kyverno_reference_api_version(str(raw.get("apiVersion") or ""))})
    return (("kind", str(getattr(policy, "kind", ""))), ("name", str(getattr(policy, "name", ""))))


def _truncate(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE_LENGTH else message[: MAX_MESSAGE_LENGTH - 3] + "..."


def _is_enforce_policy(response: EngineResponse) -> bool:
    """Whether Kyverno's policy cache files the policy under enforce (spec, override or any rule's failureAction),
    or the response carries a rule that denies: only those policies' responses explain a denial."""
    if blocking_rules([response]) or blocking_rules_for_mutation([response]):
        return True
    if any(rule.failure_action == "Enforce" for rule in response.rules):
        return True
    spec = getattr(response.policy, "spec", None)
    if not isinstance(spec, dict):
        return False
    if str(spec.get("validationFailureAction") or "").lower() == "enforce":
        return True
    overrides = list(spec.get("validationFailureActionOverrides") or [])
    for rule in spec.get("rules") or []:
        validate = (rule or {}).get("validate") or {}
        if str(validate.get("failureAction") or "").lower() == "enforce":
            return True
        overrides += list(validate.get("failureActionOverrides") or [])
    return any(str((override or {}).get("action") or "").lower() == "enforce" for override in overrides)


def _applied_event(response: EngineResponse, label: str, resource: Reference) -> EventSpec:
    """Kyverno's NewPolicyAppliedEvent: "pass" unless the policy only mutates."""
    policy = response.policy
    if hasattr(policy, "has_validate"):
        only_mutates = not policy.has_validate() and not policy.has_verify_images() and policy.has_mutate()
    else:
        only_mutates = str(getattr(policy, "kind", "")).endswith("MutatingPolicy")
    action, message = (ACTION_MUTATED, f"{label} is successfully mutated") if only_mutates else (ACTION_PASSED, f"{label}: pass")
    return EventSpec(
        namespace=str(getattr(policy, "namespace", "") or "") or CLUSTER_EVENT_NAMESPACE,
        regarding=_policy_reference(policy),
        reason=REASON_POLICY_APPLIED,
        message=_truncate(message),
        type="Normal",
        action=action,
        related=resource,
        source=SOURCE_ADMISSION,
    )


def _exception_events(response: EngineResponse, rule_name: str, exceptions: list[str], key: str, resource: Reference) -> list[EventSpec]:
    """Kyverno's NewPolicyExceptionEvents: one on each PolicyException, one on the policy (Kyverno policies only)."""
    policy = response.policy
    if not hasattr(policy, "has_validate"):
        return []
    policy_namespace = str(getattr(policy, "namespace", "") or "")
    rule_path = f"{policy_namespace}/{policy.name}/{rule_name}" if policy_namespace else f"{policy.name}/{rule_name}"
    events: list[EventSpec] = []
    for exception in exceptions:
        namespace, _, name = exception.rpartition("/")
        regarding = tuple((k, v) for k, v in (("apiVersion", "kyverno.io/v2"), ("kind", "PolicyException"), ("name", name), ("namespace", namespace)) if v)
        events.append(
            EventSpec(
                namespace=namespace or CLUSTER_EVENT_NAMESPACE,
                regarding=regarding,
                reason=REASON_POLICY_SKIPPED,
                message=_truncate(f"resource {key} was skipped from policy rule {rule_path}"),
                type="Normal",
                action=ACTION_PASSED,
                related=resource,
                source=SOURCE_ADMISSION,
            )
        )
    names = ", ".join(e if "/" in e else f"/{e}" for e in exceptions)
    events.append(
        EventSpec(
            namespace=policy_namespace or CLUSTER_EVENT_NAMESPACE,
            regarding=_policy_reference(policy),
            reason=REASON_POLICY_SKIPPED,
            message=_truncate(f"resource {key} was skipped from rule {rule_name} due to policy exceptions {names}"),
            type="Normal",
            action=ACTION_PASSED,
            related=resource,
            source=SOURCE_ADMISSION,
        )
    )
    return events


def _policy_violation(response: EngineResponse, rule: Any, label: str, resource: Reference, blocked: bool, source: str) -> EventSpec:
    """Kyverno's PolicyViolation on the policy: "<Kind> <ns>/<name>: [<rule>] <status>[ (blocked)]; <message>"."""
    policy = response.policy
    text = f"{label}: [{rule.name}] {rule.status}" + (" (blocked)" if blocked else "") + (f"; {rule.message}" if rule.message else "")
    return EventSpec(
        namespace=str(getattr(policy, "namespace", "") or "") or CLUSTER_EVENT_NAMESPACE,
        regarding=_policy_reference(policy),
        reason=REASON_POLICY_VIOLATION,
        message=_truncate(text),
        action=ACTION_BLOCKED if blocked else ACTION_PASSED,
        related=resource,
        source=source,
    )


def _resource_violation(response: EngineResponse, rule: Any, namespace: str, resource: Reference, source: str) -> EventSpec:
    """Kyverno's PolicyViolation on the resource itself (admitted requests and scans): "policy <p>/<rule> <status>: <msg>"."""
    return EventSpec(
        namespace=namespace or CLUSTER_EVENT_NAMESPACE,
        regarding=resource,
        reason=REASON_POLICY_VIOLATION,
        message=_truncate(f"policy {response.policy_name}/{rule.name} {rule.status}: {rule.message}"),
        action=ACTION_PASSED,
        source=source,
    )


def admission_events(request: AdmissionRequest, decision: AdmissionDecision, config: KyvernoConfig | None = None) -> list[EventSpec]:
    """The Events Kyverno's admission webhook writes for one decision (see the module docstring); PolicyApplied
    Events only when ``config`` enables ``generateSuccessEvents`` (and lists their action, if it lists any)."""
    if request.dry_run:
        return []
    blocked = not decision.allowed
    subject = request.subject
    metadata = subject.get("metadata") or {}
    kind = str(subject.get("kind") or request.kind.kind)
    namespace = subject_namespace(subject, request)
    name = str(metadata.get("name") or "")
    if not name:
        return []  # Kyverno writes nothing for objects without a name of their own (generateName, CONNECT options)
    label = f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
    key = f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"
    resource = object_reference({**subject, "kind": kind, "metadata": {**metadata, "name": name, "namespace": namespace}})
    # A denial is explained by the enforce policies only: Kyverno evaluates audit policies after admitting.
    responses = [r for r in decision.responses if _is_enforce_policy(r)] if blocked else list(decision.responses)
    events: list[EventSpec] = []
    for response in responses:
        events.extend(_response_events(response, label, key, namespace, resource, blocked, config))
    return events


def _response_events(
    response: EngineResponse, label: str, key: str, namespace: str, resource: Reference, blocked: bool, config: KyvernoConfig | None
) -> list[EventSpec]:
    """Kyverno's ``GenerateEvents`` for one policy's response on one resource (admission and its audit paths)."""
    events: list[EventSpec] = []
    if not response.rules:
        return events
    if any(rule.status in (FAIL, ERROR) for rule in response.rules):
        for rule in response.rules:
            if rule.status in (FAIL, ERROR):
                events.append(_policy_violation(response, rule, label, resource, blocked, SOURCE_ADMISSION))
            if not blocked:
                events.append(_resource_violation(response, rule, namespace, resource, SOURCE_ADMISSION))
    elif any(rule.status == SKIP for rule in response.rules):
        if not blocked:
            for rule in response.rules:
                if rule.status == SKIP and rule.exceptions:
                    events.extend(_exception_events(response, rule.name, rule.exceptions, key, resource))
    elif config is not None and config.generate_success_events:
        applied = _applied_event(response, label, resource)
        if config.emits_success_event(applied.action):
            events.append(applied)
    return events


def audit_events(obj: dict[str, Any], responses: list[EngineResponse], config: KyvernoConfig | None = None) -> list[EventSpec]:
    """The Events of an evaluation outside admission that Kyverno reports as its webhook would for an admitted
    request (``GenerateEvents(responses, false)``): the MutatingPolicy background processor's audit of each target
    it evaluated.  PolicyApplied only when ``config`` enables success Events."""
    metadata = obj.get("metadata") or {}
    kind = str(obj.get("kind") or "")
    namespace = str(metadata.get("namespace") or "")
    name = str(metadata.get("name") or "")
    if not name:
        return []
    label = f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
    key = f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"
    resource = object_reference(obj)
    return [spec for response in responses for spec in _response_events(response, label, key, namespace, resource, False, config)]


def scan_events(obj: dict[str, Any], responses: list[EngineResponse], config: KyvernoConfig | None = None) -> list[EventSpec]:
    """The Events Kyverno's background scan writes for one resource (source ``scan``): for each rule that neither
    passed nor was skipped, a PolicyViolation on the resource and one on the policy (nothing is blocked in a scan);
    PolicySkipped Events for exceptions; PolicyApplied for clean responses when ``generateSuccessEvents`` is on."""
    metadata = obj.get("metadata") or {}
    kind = str(obj.get("kind") or "")
    namespace = str(metadata.get("namespace") or "")
    name = str(metadata.get("name") or "")
    label = f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
    key = f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"
    resource = object_reference(obj)
    events: list[EventSpec] = []
    for response in responses:
        violated = [rule for rule in response.rules if rule.status not in (PASS, SKIP)]
        for rule in violated:
            events.append(_resource_violation(response, rule, namespace, resource, SOURCE_SCAN))
            events.append(_policy_violation(response, rule, label, resource, False, SOURCE_SCAN))
        for rule in response.rules:
            if rule.status == SKIP and rule.exceptions:
                events.extend(replace(e, source=SOURCE_SCAN) for e in _exception_events(response, rule.name, rule.exceptions, key, resource))
        if not violated and response.rules and config is not None and config.generate_success_events:
            applied = replace(_applied_event(response, label, resource), source=SOURCE_SCAN)
            if config.emits_success_event(applied.action):
                events.append(applied)
    return events


def generate_events(policy: Any, rule_name: str, generated: list[dict[str, Any]]) -> list[EventSpec]:
    """Kyverno's events after a generate rule ran for a trigger (source ``generate``): on each generated resource
    "Created <Kind> <name> as a result of applying policy <policy>/<rule>", and on the policy "resource
    generated" with the resource as related (Kyverno fills the policy reference's apiVersion as kyverno.io/v1)."""
    policy_namespace = str(getattr(policy, "namespace", "") or "")
    policy_ref = dict(_policy_reference(policy))
    policy_ref["apiVersion"] = "kyverno.io/v1"
    regarding_policy = tuple((k, policy_ref[k]) for k in ("apiVersion", "kind", "name", "namespace", "uid") if policy_ref.get(k))
    events: list[EventSpec] = []
    for obj in generated:
        resource = object_reference(obj)
        fields = dict(resource)
        events.append(
            EventSpec(
                namespace=fields.get("namespace") or CLUSTER_EVENT_NAMESPACE,
                regarding=resource,
                reason=REASON_POLICY_APPLIED,
                message=_truncate(f"Created {fields.get('kind', '')} {fields.get('name', '')} as a result of applying policy {getattr(policy, 'name', '')}/{rule_name}"),
                type="Normal",
                action=ACTION_NONE,
                source=SOURCE_GENERATE,
            )
        )
        events.append(
            EventSpec(
                namespace=policy_namespace or CLUSTER_EVENT_NAMESPACE,
                regarding=regarding_policy,
                reason=REASON_POLICY_APPLIED,
                message="resource generated",
                type="Normal",
                action=ACTION_GENERATED,
                related=resource,
                source=SOURCE_GENERATE,
            )
        )
    return events


def generate_failure_event(policy: Any, rule_name: str, error: str, trigger: Mapping[str, Any], *, trigger_api_version: bool = False) -> EventSpec:
    """Kyverno's Warning after a generate rule (or GeneratingPolicy) failed for a trigger in the background: on the
    policy (apiVersion written as kyverno.io/v1, as Kyverno does), reason PolicyError, "policy <name>/<rule> error:
    <error>" ("policy <name> error: ..." without a rule), the trigger as related object (kind, namespace, name)."""
    policy_ref = dict(_policy_reference(policy))
    policy_ref["apiVersion"] = "kyverno.io/v1"
    regarding = tuple((k, policy_ref[k]) for k in ("apiVersion", "kind", "name", "namespace", "uid") if policy_ref.get(k))
    name = str(getattr(policy, "name", "") or "")
    message = f"policy {name}/{rule_name} error: {error}" if rule_name else f"policy {name} error: {error}"
    # Kyverno names a ClusterPolicy/Policy trigger by kind, namespace and name; a GeneratingPolicy's also by apiVersion
    kept = ("apiVersion", "kind", "namespace", "name") if trigger_api_version else ("kind", "namespace", "name")
    related = tuple((k, v) for k, v in object_reference(trigger) if k in kept)
    return EventSpec(
        namespace=str(getattr(policy, "namespace", "") or "") or CLUSTER_EVENT_NAMESPACE,
        regarding=regarding,
        reason=REASON_POLICY_ERROR,
        message=_truncate(message),
        type="Warning",
        action=ACTION_NONE,
        related=related,
        source=SOURCE_GENERATE,
    )


@dataclass
class _Pending:
    spec: EventSpec
    count: int = 1
    first_seen: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc))
    last_seen: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc))


@dataclass(slots=True)
class _Written:
    name: str
    count: int
    first_timestamp: str
    written_at: float


def events_path(namespace: str) -> str:
    """The REST path of the core/v1 Events of ``namespace``."""
    return f"/api/v1/namespaces/{namespace}/events"


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
        client: KubeClient | None = None,
        clock: Callable[[], float] = time.monotonic,
        start: bool = True,
        kyverno_config: Callable[[], KyvernoConfig] | None = None,
    ) -> None:
        self.client = client if client is not None else KubeClient(api_client, timeout=None)
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
        self._written: dict[bytes, _Written] = {}  # by EventSpec.digest
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
        """The hook the webhook calls after denying."""
        self.record(request, decision)

    def record_success(self, request: AdmissionRequest, decision: AdmissionDecision) -> None:
        """The hook the webhook calls after admitting."""
        self.record(request, decision)

    def record(self, request: AdmissionRequest, decision: AdmissionDecision) -> None:
        """Queue Kyverno's admission Events for one decision; success Events follow the live Kyverno ConfigMap."""
        config = self.kyverno_config() if self.kyverno_config is not None else None
        for spec in admission_events(request, decision, config):
            self.submit(spec)

    def submit_success(self, spec: EventSpec) -> None:
        """Queue a PolicyApplied Event from a controller: like Kyverno's event generator, only when the ConfigMap
        enables ``generateSuccessEvents`` (and lists the Event's action in ``successEventActions``, if it lists any)."""
        config = self.kyverno_config() if self.kyverno_config is not None else None
        if config is not None and config.generate_success_events and config.emits_success_event(spec.action):
            self.submit(spec)

    def record_scan(self, obj: dict[str, Any], responses: list[EngineResponse]) -> None:
        """Queue Kyverno's background-scan Events for one scanned resource."""
        config = self.kyverno_config() if self.kyverno_config is not None else None
        for spec in scan_events(obj, responses, config):
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
        previous = self._written.get(spec.digest)
        if previous is not None and self.clock() - previous.written_at < AGGREGATION_WINDOW_SECONDS:
            count = previous.count + pending.count
            body = {"count": count, "lastTimestamp": _timestamp(pending.last_seen)}
            try:
                self.client.request("PATCH", f"{events_path(spec.namespace)}/{previous.name}", body, content_type=MERGE_PATCH)
                self._written[spec.digest] = _Written(previous.name, count, previous.first_timestamp, self.clock())
                self.updated += 1
                return
            except NotFound:  # gone (expired): write a fresh one below
                pass
        self._create(pending)

    def _create(self, pending: _Pending) -> None:
        spec = pending.spec
        regarding = spec.regarding_dict
        name = f"{regarding.get('name') or 'object'}.{uuid.uuid4().hex[:16]}"
        first = _timestamp(pending.first_seen)
        component = reporting_component(self.components, spec.source)
        body: dict[str, Any] = {
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
        if spec.related:
            body["related"] = spec.related_dict
        self.client.request("POST", events_path(spec.namespace), body)
        self.created += 1
        if len(self._written) > 10 * self.capacity:
            self._written.clear()
        self._written[spec.digest] = _Written(name, pending.count, first, self.clock())
