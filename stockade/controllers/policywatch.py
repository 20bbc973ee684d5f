"""Policies from the cluster: list + watch of Kyverno's policy CRDs, and the status each policy gets back.

`ClusterPolicySource` is a `PolicySource` for `stockade.webhook.policystore.PolicyStore`, built on the controller
runtime (`stockade.kube`): a discovery controller keyed by kind finds the version each kind is served under and runs
one `Informer` per served kind (list, then watch from the list's resourceVersion; a 410 Gone lists again and delivers
the difference; other failures back off).  Every change that matters bumps a counter, which is the source's fingerprint, and tells the store's
subscribed callback (``subscribe``), which rebuilds the snapshot at once on its rebuild thread (the store's periodic
`reload_if_changed()` remains a safety net).  Changes to `status` alone (our own write-back, or Kyverno's) do not bump
it: otherwise every status write would trigger a reload, which would write status again.  What remains between a
change and its enforcement is the API server's watch delivery (usually milliseconds) plus one rebuild.

Kinds whose CRD is not installed are skipped with one log line and looked for again every `rediscover_interval`;
an informer told NotFound (CRD deleted) sends its kind back to discovery, which drops the kind's policies.

`publish_status` (a store listener) queues the snapshot for a one-key status controller, which writes each policy's status through the status subresource, only when it
differs from what the object already carries: ClusterPolicy/Policy get `status.conditions[type=Ready]`,
`status.rulecount` and `status.autogen.rules` as Kyverno writes them; the policies.kyverno.io kinds get
`status.conditionStatus` as Kyverno's policy status controller writes it (`WebhookConfigured` and
`RBACPermissionsGranted` conditions, `ready`, and `message` when Stockade cannot serve the policy).
It only ever sees installed snapshots, and the store hands a snapshot to the evaluation workers before installing it
(``before_install``), so readiness is written only for a policy that every review decided from then on is evaluated
with (and, with registration, after the webhook configurations were updated for it: that listener runs first).
"""

from __future__ import annotations

import copy
import datetime
import logging
import threading
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from stockade.celpolicy.autogen import autogen_configs
from stockade.kube.client import MERGE_PATCH, KubeClient
from stockade.kube.controller import Controller, FunctionReconciler, Result
from stockade.kube.errors import Backoff, KubeError, NotFound
from stockade.kube.informer import Informer, ListWatch, RawListWatch
from stockade.kube.workqueue import DefaultRateLimiter, ItemExponentialBackoff, WorkQueue
from stockade.policy.loader import Document
from stockade.webhook.policystore import PolicyIdentity, PolicySnapshot, describe_identity, policy_identity

log = logging.getLogger("stockade.controllers.policywatch")

STATUS_KYVERNO = "kyverno"  # status.conditions / rulecount / autogen (kyverno.io ClusterPolicy, Policy)
STATUS_CEL = "conditionStatus"  # status.conditionStatus (policies.kyverno.io policy kinds)
READY = "Ready"
MAX_MESSAGE = 32768  # metav1.Condition.message limit
STATUS_KEY = "snapshot"  # the status writer's one work-queue key: the latest installed snapshot


@dataclass(frozen=True)
class WatchedKind:
    """A policy kind and the API versions to watch it under, most preferred first (one is enough: a CRD serves the
    same objects under every version)."""

    group: str
    kind: str
    plural: str
    namespaced: bool
    versions: tuple[str, ...]
    status: str = ""

    @property
    def label(self) -> str:
        return f"{self.kind}.{self.group}"


_CEL_VERSIONS = ("v1", "v1beta1", "v1alpha1")
WATCHED_KINDS: tuple[WatchedKind, ...] = (
    WatchedKind("kyverno.io", "ClusterPolicy", "clusterpolicies", False, ("v1", "v2beta1"), STATUS_KYVERNO),
    WatchedKind("kyverno.io", "Policy", "policies", True, ("v1", "v2beta1"), STATUS_KYVERNO),
    WatchedKind("kyverno.io", "PolicyException", "policyexceptions", True, ("v2", "v2beta1")),
    WatchedKind("kyverno.io", "CleanupPolicy", "cleanuppolicies", True, ("v2", "v2beta1")),
    WatchedKind("kyverno.io", "ClusterCleanupPolicy", "clustercleanuppolicies", False, ("v2", "v2beta1")),
    WatchedKind("policies.kyverno.io", "ValidatingPolicy", "validatingpolicies", False, _CEL_VERSIONS, STATUS_CEL),
    WatchedKind("policies.kyverno.io", "NamespacedValidatingPolicy", "namespacedvalidatingpolicies", True, _CEL_VERSIONS, STATUS_CEL),
    WatchedKind("policies.kyverno.io", "MutatingPolicy", "mutatingpolicies", False, _CEL_VERSIONS, STATUS_CEL),
    WatchedKind("policies.kyverno.io", "NamespacedMutatingPolicy", "namespacedmutatingpolicies", True, _CEL_VERSIONS, STATUS_CEL),
    WatchedKind("policies.kyverno.io", "GeneratingPolicy", "generatingpolicies", False, _CEL_VERSIONS, STATUS_CEL),
    WatchedKind("policies.kyverno.io", "NamespacedGeneratingPolicy", "namespacedgeneratingpolicies", True, _CEL_VERSIONS, STATUS_CEL),
    WatchedKind("policies.kyverno.io", "DeletingPolicy", "deletingpolicies", False, _CEL_VERSIONS, STATUS_CEL),
    WatchedKind("policies.kyverno.io", "NamespacedDeletingPolicy", "namespaceddeletingpolicies", True, _CEL_VERSIONS, STATUS_CEL),
    WatchedKind("policies.kyverno.io", "ImageValidatingPolicy", "imagevalidatingpolicies", False, _CEL_VERSIONS, STATUS_CEL),
    WatchedKind("policies.kyverno.io", "NamespacedImageValidatingPolicy", "namespacedimagevalidatingpolicies", True, _CEL_VERSIONS, STATUS_CEL),
    WatchedKind("policies.kyverno.io", "PolicyException", "policyexceptions", True, _CEL_VERSIONS),
)

# Kubernetes' admission policies and their bindings, watched only to report on them (Kyverno's reports controller
# with --validatingAdmissionPolicyReports / --mutatingAdmissionPolicyReports): the API server enforces them itself
ADMISSION_POLICY_WATCHES: dict[str, tuple[WatchedKind, ...]] = {
    "ValidatingAdmissionPolicy": (
        WatchedKind("admissionregistration.k8s.io", "ValidatingAdmissionPolicy", "validatingadmissionpolicies", False, ("v1", "v1beta1")),
        WatchedKind("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings", False, ("v1", "v1beta1")),
    ),
    "MutatingAdmissionPolicy": (
        WatchedKind("admissionregistration.k8s.io", "MutatingAdmissionPolicy", "mutatingadmissionpolicies", False, ("v1", "v1beta1", "v1alpha1")),
        WatchedKind("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding", "mutatingadmissionpolicybindings", False, ("v1", "v1beta1", "v1alpha1")),
    ),
}


@dataclass(frozen=True)
class ClusterDocument(Document):
    """A document read from the cluster; it remembers which kind/version it was watched under, for status writes."""

    watched: WatchedKind | None = None
    version: str = ""

    @property
    def origin(self) -> str:
        return self.source


_VOLATILE_METADATA = ("resourceVersion", "managedFields", "generation")


def _content(obj: dict[str, Any]) -> dict[str, Any]:
    """What a policy means: everything but status and bookkeeping metadata (status writes change only those)."""
    content = {key: value for key, value in obj.items() if key != "status"}
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        content["metadata"] = {key: value for key, value in metadata.items() if key not in _VOLATILE_METADATA}
    return content


def _generation(obj: dict[str, Any]) -> Any:
    return (obj.get("metadata") or {}).get("generation")


class ClusterPolicySource:
    """Policy documents from the cluster, kept current by watches; start() before the store's first load()."""

    def __init__(
        self,
        api_client: Any,
        *,
        kinds: tuple[WatchedKind, ...] = WATCHED_KINDS,
        write_status: bool = True,
        watch_timeout: int = 300,
        rediscover_interval: float = 60.0,
        max_backoff: float = 30.0,
        status_retry_interval: float = 10.0,
        reporting_permissions: Callable[[dict[str, Any]], list[str]] | None = None,
    ) -> None:
        self.kinds = tuple(kinds)
        self._by_label = {watched.label: watched for watched in self.kinds}
        # policy document -> the reports controller's missing permissions (serve --reports-service-account)
        self.reporting_permissions = reporting_permissions
        # every installed kind keeps one watch connection open: a client of our own, with a pool that fits them
        self.api_client = _dedicated_client(api_client, len(self.kinds) + 4)
        self.client = KubeClient(self.api_client, timeout=None)  # discovery; status writes carry their own timeout
        self.write_status = write_status
        self.watch_timeout = watch_timeout
        self.rediscover_interval = rediscover_interval
        self.max_backoff = max_backoff
        self.status_retry_interval = status_retry_interval
        self._lock = threading.Lock()
        self._objects: dict[tuple[WatchedKind, str, str], tuple[str, dict[str, Any]]] = {}
        self._generation = 0
        self._synced: set[WatchedKind] = set()
        self._synced_event = threading.Event()
        self._missing: set[WatchedKind] = set()
        self._stopping = threading.Event()
        self._informers: dict[WatchedKind, tuple[str, Informer]] = {}
        self._pending_snapshot: PolicySnapshot | None = None
        self.status_writes = 0
        self._subscribers: list[Callable[[], None]] = []
        # the document handed out for each cached object, reused while the object stays the same (no deep copy and
        # no content hashing of unchanged policies on every rebuild)
        self._handed_out: dict[tuple[WatchedKind, str, str], tuple[dict[str, Any], ClusterDocument]] = {}
        # which version of each kind is served, found again after rediscover_interval while it is missing and when
        # its informer is told NotFound (CRD deleted, version dropped); failures back off per kind
        self.discovery = Controller(
            "policy-kinds",
            FunctionReconciler(self.reconcile_kind),
            workers=2,
            needs_leadership=False,
            queue_factory=lambda: WorkQueue[str](DefaultRateLimiter(ItemExponentialBackoff(base=1.0, cap=max_backoff)), name="policy-kinds"),
        )
        # the status of each snapshot's policies (one key: the latest snapshot); failed writes come back later
        self.status_writer = Controller(
            "policy-status",
            FunctionReconciler(self.reconcile_status),
            workers=1,
            needs_leadership=False,
            queue_factory=lambda: WorkQueue[str](
                DefaultRateLimiter(ItemExponentialBackoff(base=1.0, cap=max(status_retry_interval, 1.0))), name="policy-status"
            ),
        )

    # -- lifecycle ----------------------------------------------------------------------------------------------------
    def start(self) -> None:
        for watched in self.kinds:
            self.discovery.enqueue(watched.label)
        self.discovery.start()
        if self.write_status:
            self.status_writer.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self.discovery.stop(timeout=timeout)
        self.status_writer.stop(timeout=timeout)
        with self._lock:
            informers = [informer for _, informer in self._informers.values()]
            self._informers.clear()
        stopped = all([informer.stop(timeout / max(len(informers), 1)) for informer in informers])
        if self.api_client is not None and stopped:
            self.api_client.close()

    def wait_synced(self, timeout: float | None = None) -> bool:
        """True once every kind has been listed (or found not installed)."""
        return self._synced_event.wait(timeout)

    @property
    def missing_kinds(self) -> list[str]:
        with self._lock:
            return sorted(watched.label for watched in self._missing)

    # -- PolicySource ---------------------------------------------------------------------------------------------------
    def fingerprint(self) -> int:
        with self._lock:
            return self._generation

    def subscribe(self, callback: Callable[[], None]) -> None:
        """``callback()`` runs (on a watch thread) after every change that bumped the fingerprint."""
        self._subscribers.append(callback)

    def _changed(self) -> None:
        for callback in list(self._subscribers):
            try:
                callback()
            except Exception:
                log.exception("policy change notification failed")

    def documents(self) -> list[Document]:
        with self._lock:
            entries = sorted(self._objects.items(), key=lambda item: (item[0][0].group, item[0][0].kind, item[0][1], item[0][2]))
        documents: list[Document] = []
        handed_out: dict[tuple[WatchedKind, str, str], tuple[dict[str, Any], ClusterDocument]] = {}
        for key, (version, obj) in entries:
            previous = self._handed_out.get(key)
            if previous is not None and previous[0] is obj:
                document = previous[1]
            else:
                watched, namespace, name = key
                where = f"{namespace}/{name}" if namespace else name
                # a deep copy: the snapshot must not change under a request when the watch updates the cache
                document = ClusterDocument(copy.deepcopy(obj), f"cluster {watched.kind}/{where}", 0, watched, version)
            handed_out[key] = (obj, document)
            documents.append(document)
        self._handed_out = handed_out
        return documents

    # -- cache ----------------------------------------------------------------------------------------------------------
    @staticmethod
    def _clean(watched: WatchedKind, version: str, obj: dict[str, Any]) -> dict[str, Any]:
        obj = dict(obj)
        obj.setdefault("apiVersion", f"{watched.group}/{version}")
        obj.setdefault("kind", watched.kind)
        metadata = dict(obj.get("metadata") or {})
        metadata.pop("managedFields", None)
        obj["metadata"] = metadata
        return obj

    @staticmethod
    def _key(watched: WatchedKind, obj: dict[str, Any]) -> tuple[WatchedKind, str, str]:
        metadata = obj.get("metadata") or {}
        return watched, str(metadata.get("namespace") or ""), str(metadata.get("name") or "")

    def apply_event(self, watched: WatchedKind, version: str, event_type: str, obj: dict[str, Any]) -> bool:
        """Fold one watch event into the cache; True when it changed what the policies mean (and bumped the counter)."""
        obj = self._clean(watched, version, obj)
        key = self._key(watched, obj)
        with self._lock:
            previous = self._objects.get(key)
            if event_type == "DELETED":
                if previous is None:
                    return False
                del self._objects[key]
                self._generation += 1
            else:
                self._objects[key] = (version, obj)
                if previous is not None and _content(previous[1]) == _content(obj):
                    return False  # status or bookkeeping only
                self._generation += 1
        self._changed()
        return True

    def replace_kind(self, watched: WatchedKind, version: str, items: list[dict[str, Any]]) -> bool:
        """Install a fresh list of one kind; True when anything that matters differs from the cache."""
        fresh = {}
        for item in items:
            obj = self._clean(watched, version, item)
            fresh[self._key(watched, obj)] = (version, obj)
        with self._lock:
            current = {key: value for key, value in self._objects.items() if key[0] == watched}
            changed = current.keys() != fresh.keys() or any(_content(current[key][1]) != _content(fresh[key][1]) for key in fresh)
            for key in current:
                del self._objects[key]
            self._objects.update(fresh)
            if changed:
                self._generation += 1
        if changed:
            self._changed()
        return changed

    def _mark_synced(self, watched: WatchedKind) -> None:
        with self._lock:
            self._synced.add(watched)
            if len(self._synced) == len(self.kinds):
                self._synced_event.set()

    # -- discovery and informers -------------------------------------------------------------------------------------------
    def served_version(self, watched: WatchedKind) -> str | None:
        """The most preferred version under which the API server serves this kind, None when no CRD provides it."""
        for version in watched.versions:
            try:
                listing = self.client.request("GET", f"/apis/{watched.group}/{version}")
            except NotFound:
                continue
            if any(isinstance(resource, dict) and resource.get("name") == watched.plural for resource in listing.get("resources") or []):
                return version
        return None

    def list_watch(self, watched: WatchedKind, version: str) -> ListWatch:
        """How one kind is listed and watched (every namespace)."""
        return RawListWatch.for_resource(self.api_client, f"{watched.group}/{version}", watched.plural)

    def informer(self, watched: WatchedKind) -> Informer | None:
        with self._lock:
            entry = self._informers.get(watched)
        return entry[1] if entry is not None else None

    def reconcile_kind(self, label: str) -> Result | None:
        """Bring one kind's informer in line with discovery: none while no CRD serves the kind (its policies leave
        the cache; looked for again after ``rediscover_interval``), one on the most preferred served version."""
        watched = self._by_label.get(label)
        if watched is None or self._stopping.is_set():
            return None
        version = self.served_version(watched)
        with self._lock:
            current = self._informers.get(watched)
            replaced = current if current is not None and current[0] != version else None
            if replaced is not None:
                del self._informers[watched]
        if replaced is not None:
            replaced[1].stop()
        if version is None:
            self._kind_missing(watched)
            return Result(requeue_after=self.rediscover_interval)
        if current is not None and replaced is None:
            return None  # already watched under this version: the informer relists and backs off by itself
        self._kind_found(watched, version)
        informer = self._new_informer(watched, version)
        with self._lock:
            if self._stopping.is_set():
                return None
            self._informers[watched] = (version, informer)
        informer.start()
        return None

    def _new_informer(self, watched: WatchedKind, version: str) -> Informer:
        informer: Informer

        def on_synced() -> None:
            # a complete listing (the first, or after 410 Gone): the cache holds exactly what was listed
            if self.replace_kind(watched, version, informer.store.list()):
                log.info("%s: %d listed", watched.label, len(informer.store))
            self._mark_synced(watched)

        def on_event(event_type: str, obj: dict[str, Any]) -> None:
            if not informer.has_synced():
                return  # the first listing arrives whole through on_synced
            if self.apply_event(watched, version, event_type, obj):
                metadata = obj.get("metadata") or {}
                log.info("%s %s/%s %s", watched.label, metadata.get("namespace") or "-", metadata.get("name"), event_type.lower())

        def on_error(exc: Exception) -> None:
            if isinstance(exc, NotFound):
                self.discovery.enqueue(watched.label)  # the CRD or this version went away: discover again

        informer = Informer(
            self.list_watch(watched, version),
            name=f"policywatch-{watched.plural}.{watched.group}",
            watch_timeout=self.watch_timeout,
            backoff=Backoff(initial=1.0, factor=2.0, cap=self.max_backoff, jitter=0.1),
            on_error=on_error,
            on_synced=on_synced,
        )
        informer.add_handlers(
            on_add=lambda obj: on_event("ADDED", obj),
            on_update=lambda _old, new: on_event("MODIFIED", new),
            on_delete=lambda obj: on_event("DELETED", obj),
        )
        return informer

    def _kind_missing(self, watched: WatchedKind) -> None:
        with self._lock:
            first = watched not in self._missing
            self._missing.add(watched)
        if first:
            log.info("%s is not served by the API server (CRD not installed): skipped", watched.label)
        self.replace_kind(watched, "", [])  # a CRD deleted while we ran takes its policies with it
        self._mark_synced(watched)

    def _kind_found(self, watched: WatchedKind, version: str) -> None:
        with self._lock:
            was_missing = watched in self._missing
            self._missing.discard(watched)
        if was_missing:
            log.info("%s is now served (%s): watching it", watched.label, version)

    # -- status write-back ------------------------------------------------------------------------------------------------
    def publish_status(self, snapshot: PolicySnapshot) -> None:
        """Store listener: hand the snapshot to the status writer (no network calls on the caller's thread)."""
        if not self.write_status:
            return
        with self._lock:
            self._pending_snapshot = snapshot
        self.status_writer.enqueue(STATUS_KEY)

    def reconcile_status(self, key: str) -> Result | None:
        """Write the statuses of the latest snapshot; failed writes are tried again after ``status_retry_interval``."""
        with self._lock:
            snapshot = self._pending_snapshot
        if key != STATUS_KEY or snapshot is None:
            return None
        if self.write_statuses(snapshot):
            return Result(requeue_after=self.status_retry_interval)
        return None

    def write_statuses(self, snapshot: PolicySnapshot) -> int:
        """Write every changed status for the cluster documents of ``snapshot``; returns the number of failed writes."""
        failures = 0
        for document in snapshot.documents:
            if not isinstance(document, ClusterDocument) or document.watched is None or not document.watched.status:
                continue
            watched = document.watched
            identity = policy_identity(document.data)
            key = self._key(watched, document.data)
            with self._lock:
                cached = self._objects.get(key)
            if cached is None or _generation(cached[1]) != _generation(document.data):
                continue  # deleted or changed since this snapshot: the next snapshot writes its status
            version, current = cached
            missing: list[str] = []
            if self.reporting_permissions is not None and watched.status == STATUS_CEL and reporting_checked(document.data):
                missing = self.reporting_permissions(document.data)
                failures += bool(missing)  # asked again after the retry interval: permissions may be granted later
            patch = status_patch(watched, document.data, snapshot, identity, current.get("status"), missing)
            if patch is None:
                continue
            try:
                updated = self._patch_status(watched, version, key[1], key[2], patch)
            except NotFound:
                continue
            except KubeError as exc:
                failures += 1
                log.warning("status of %s not written: %s", describe_identity(identity), exc)
                continue
            self.status_writes += 1
            if isinstance(updated, dict):
                self.apply_event(watched, version, "MODIFIED", updated)
        return failures

    def _patch_status(self, watched: WatchedKind, version: str, namespace: str, name: str, patch: dict[str, Any]) -> Any:
        base = f"/apis/{watched.group}/{version}"
        path = f"{base}/namespaces/{namespace}/{watched.plural}/{name}" if watched.namespaced else f"{base}/{watched.plural}/{name}"
        return self.client.request("PATCH", f"{path}/status", {"status": patch}, content_type=MERGE_PATCH, timeout=30)


def _dedicated_client(api_client: Any, connections: int) -> Any:
    """A connection of its own with ``connections`` sockets; None stays None (offline tests run without a cluster)."""
    return api_client.with_pool_size(connections) if api_client is not None else None


# -- desired status ---------------------------------------------------------------------------------------------------------


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _readiness(snapshot: PolicySnapshot, identity: PolicyIdentity) -> tuple[bool, str, str]:
    """(ready, reason, message) of one policy in this snapshot."""
    error = snapshot.errors.get(identity)
    if error is not None:
        return False, "Failed", error[:MAX_MESSAGE]
    if identity in snapshot.unsupported_identities:
        return False, "Unsupported", f"{identity[1]} is not enforced by the stockade admission webhook yet"
    return True, "Succeeded", "Ready"


def _ready_condition(conditions: Any, ready: bool, reason: str, message: str, generation: Any) -> list[dict[str, Any]]:
    """``conditions`` with the Ready condition set; lastTransitionTime moves only when its status changes."""
    existing = [c for c in conditions if isinstance(c, dict)] if isinstance(conditions, list) else []
    previous = next((c for c in existing if c.get("type") == READY), None)
    status = "True" if ready else "False"
    condition: dict[str, Any] = {"type": READY, "status": status, "reason": reason, "message": message}
    if isinstance(generation, int):
        condition["observedGeneration"] = generation
    if previous is not None and previous.get("status") == status and previous.get("lastTransitionTime"):
        condition["lastTransitionTime"] = previous["lastTransitionTime"]
    else:
        condition["lastTransitionTime"] = _now()
    return [condition if c.get("type") == READY else c for c in existing] if previous is not None else [*existing, condition]


def _same_condition(left: list[dict[str, Any]], right: list[dict[str, Any]]) -> bool:
    def essence(conditions: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [(c.get("type"), c.get("status"), c.get("reason"), c.get("message"), c.get("observedGeneration")) for c in conditions]

    return essence(left) == essence(right)


def rule_count(data: dict[str, Any]) -> dict[str, int]:
    """Kyverno's ``status.rulecount``: declared (non-autogen) rules by type; a rule may count under several."""
    from stockade.policy.model import KyvernoPolicy

    counts = {"validate": 0, "generate": 0, "mutate": 0, "verifyimages": 0}
    for rule in KyvernoPolicy(data).declared_rules:
        if rule.name.startswith("autogen-"):
            continue
        counts["validate"] += rule.has_validate()
        counts["generate"] += rule.has_generate()
        counts["mutate"] += rule.has_mutate()
        counts["verifyimages"] += rule.has_verify_images()
    return counts


def _autogen_rules(data: dict[str, Any]) -> list[dict[str, Any]]:
    from stockade.policy.model import KyvernoPolicy

    return [_as_kyverno_stores(copy.deepcopy(rule.raw)) for rule in KyvernoPolicy(data).rules if rule.name.startswith("autogen-")]


def _with_empty_resources(block: Any) -> None:
    """Kyverno serialises a match/exclude block from a Go struct, whose ``resources`` is always written (``{}``)."""
    if not isinstance(block, dict):
        return
    block.setdefault("resources", {})
    for key in ("any", "all"):
        for entry in block.get(key) or []:
            if isinstance(entry, dict):
                entry.setdefault("resources", {})


def _as_kyverno_stores(rule: dict[str, Any]) -> dict[str, Any]:
    """An autogen rule as Kyverno writes it to ``status.autogen``: generated from the API-server-defaulted policy
    (CRD defaults ``skipBackgroundRequests: true``, ``validate.allowExistingViolations: true``,
    ``validate.cel.generate: false``) and serialised from Go structs (``match.resources: {}``)."""
    rule.setdefault("skipBackgroundRequests", True)
    _with_empty_resources(rule.setdefault("match", {}))
    if "exclude" in rule:
        _with_empty_resources(rule["exclude"])
    validate = rule.get("validate")
    if isinstance(validate, dict):
        validate.setdefault("allowExistingViolations", True)
        if isinstance(validate.get("cel"), dict):
            validate["cel"].setdefault("generate", False)
    return rule


WEBHOOK_CONFIGURED = "WebhookConfigured"
RBAC_PERMISSIONS_GRANTED = "RBACPermissionsGranted"
WEBHOOK_CONFIGURED_MESSAGE = "Webhook configured."
WEBHOOK_NOT_CONFIGURED_MESSAGE = "Policy is not configured in the webhook."
REPORTING_READY_MESSAGE = "Policy is ready for reporting."
REPORTING_NOT_NEEDED_MESSAGE = "Background scanning disabled; reporting permissions not required."
# kinds whose status.generated (a VAP/MAP was generated from the policy) Kyverno always writes, false by default
_GENERATED_KINDS = frozenset({"ValidatingPolicy", "NamespacedValidatingPolicy", "MutatingPolicy", "NamespacedMutatingPolicy"})
_WEBHOOK_CONDITION_KINDS = frozenset({"ValidatingPolicy", "ImageValidatingPolicy", "MutatingPolicy", "GeneratingPolicy"})


def _set_condition(conditions: list[dict[str, Any]], kind: str, ok: bool, message: str, generation: Any) -> list[dict[str, Any]]:
    """Kyverno's SetReadyByCondition: reason Succeeded/Failed from the status; lastTransitionTime moves only when
    the status changes; other conditions stay where they are."""
    status = "True" if ok else "False"
    previous = next((c for c in conditions if c.get("type") == kind), None)
    condition: dict[str, Any] = {"type": kind, "status": status, "reason": "Succeeded" if ok else "Failed", "message": message}
    if isinstance(generation, int):
        condition["observedGeneration"] = generation
    if previous is not None and previous.get("status") == status and previous.get("lastTransitionTime"):
        condition["lastTransitionTime"] = previous["lastTransitionTime"]
    else:
        condition["lastTransitionTime"] = _now()
    if previous is None:
        return [*conditions, condition]
    return [condition if c.get("type") == kind else c for c in conditions]


def reporting_checked(data: dict[str, Any]) -> bool:
    """Whether Kyverno checks its reports controller's permissions for this policy: background processing on, and
    not a GeneratingPolicy (reported as granted without a check)."""
    from stockade.celpolicy.model import CelPolicy

    policy = CelPolicy(data)
    return policy.base_kind in _WEBHOOK_CONDITION_KINDS and policy.base_kind != "GeneratingPolicy" and policy.background


def cel_conditions(
    data: dict[str, Any], served: bool, previous: Any, generation: Any, missing_permissions: list[str] | None = None
) -> list[dict[str, Any]]:
    """The ``conditionStatus.conditions`` Kyverno's policy status controller writes for a policies.kyverno.io policy.

    ``WebhookConfigured``: true once the admission webhook serves the policy (here: it loaded without error); left
    out for policies that never reach the webhook (Validating/ImageValidating: admission off and background on;
    Mutating: admission off).  ``RBACPermissionsGranted``: true, with Kyverno's "ready for reporting" message when
    background scans are on and its "not required" message when they are off (Generating: always on).  Stockade's
    reports are written with the server's own credentials, so it does not run Kyverno's SubjectAccessReview of the
    reports-controller service account.  DeletingPolicies get no conditions (Kyverno writes only lastExecutionTime).
    """
    from stockade.celpolicy.model import CelPolicy

    policy = CelPolicy(data)
    base = policy.base_kind
    if base not in _WEBHOOK_CONDITION_KINDS:
        return []
    # the conditions we own are rebuilt; anything else (another writer's) is kept; our former "Ready" goes
    existing = [c for c in previous if isinstance(c, dict) and c.get("type") != READY] if isinstance(previous, list) else []
    background = policy.background if base != "GeneratingPolicy" else True
    if base == "MutatingPolicy":
        background_only = not policy.admission
    elif base == "GeneratingPolicy":
        background_only = False
    else:
        background_only = not policy.admission and background
    conditions = existing
    if background_only:
        conditions = [c for c in conditions if c.get("type") != WEBHOOK_CONFIGURED]
    else:
        message = WEBHOOK_CONFIGURED_MESSAGE if served else WEBHOOK_NOT_CONFIGURED_MESSAGE
        conditions = _set_condition(conditions, WEBHOOK_CONFIGURED, served, message, generation)
    if background and missing_permissions:
        message = f"Policy is not ready for reporting, missing permissions: {'; '.join(missing_permissions)}."
        return _set_condition(conditions, RBAC_PERMISSIONS_GRANTED, False, message, generation)
    reporting = REPORTING_READY_MESSAGE if background else REPORTING_NOT_NEEDED_MESSAGE
    return _set_condition(conditions, RBAC_PERMISSIONS_GRANTED, True, reporting, generation)


def _cel_status_patch(
    watched: WatchedKind, data: dict[str, Any], served: bool, message: str, generation: Any, current: dict[str, Any],
    missing_permissions: list[str] | None = None,
) -> dict[str, Any] | None:
    """``status.conditionStatus`` as Kyverno writes it: the conditions, and ``ready`` true when all of them are true
    (and Stockade serves the policy); ``message`` carries Stockade's reason when it cannot serve the policy."""
    previous = current.get("conditionStatus")
    if not isinstance(previous, dict):
        previous = {}
    if watched.kind.endswith("DeletingPolicy"):
        conditions = _ready_condition(previous.get("conditions"), served, "Succeeded" if served else "Failed", message, generation)
    else:
        conditions = cel_conditions(data, served, previous.get("conditions"), generation, missing_permissions)
    ready = served and all(c.get("status") == "True" for c in conditions)
    patch: dict[str, Any] = {"conditionStatus": {"ready": ready, "conditions": conditions}}
    if not served:
        patch["conditionStatus"]["message"] = message
    elif previous.get("ready") is False and previous.get("message"):
        patch["conditionStatus"]["message"] = ""  # our earlier failure reason; the policy serves now
    if watched.kind in _AUTOGEN_STATUS_KINDS:
        configs = _cel_autogen_configs(data)
        current_autogen = current.get("autogen")
        if not isinstance(current_autogen, dict) or (current_autogen.get("configs") or {}) != configs:
            patch["autogen"] = {"configs": configs or None}  # an empty ``autogen: {}`` when there are none, as Kyverno
    if watched.kind in _GENERATED_KINDS and "generated" not in current and not _native_generation_requested(data):
        # when generation is requested the generator writes ``generated`` itself; writing false here as well could
        # land after its true and undo it
        patch["generated"] = False
    unchanged = (
        previous.get("ready") == ready
        and _same_condition(conditions, previous.get("conditions") or [])
        and all(previous.get(key) == value for key, value in patch["conditionStatus"].items() if key == "message")
        and "generated" not in patch
        and "autogen" not in patch
    )
    return None if unchanged else patch


# Kyverno's policy status controller writes status.autogen for these kinds (an empty ``autogen: {}`` when the policy
# does not autogen)
_AUTOGEN_STATUS_KINDS = frozenset(
    {"ValidatingPolicy", "NamespacedValidatingPolicy", "ImageValidatingPolicy", "NamespacedImageValidatingPolicy", "MutatingPolicy", "NamespacedMutatingPolicy"}
)


def _cel_autogen_configs(data: dict[str, Any]) -> dict[str, Any]:
    """The pod-controller variants Kyverno lists in a ValidatingPolicy's ``status.autogen.configs`` ({} when none)."""
    spec = data.get("spec")
    try:
        return autogen_configs(spec) if isinstance(spec, dict) else {}
    except (KeyError, TypeError, ValueError, AttributeError):  # a malformed spec has no variants to report
        return {}


def _native_generation_requested(data: dict[str, Any]) -> bool:
    """``spec.autogen.validatingAdmissionPolicy.enabled`` / ``mutatingAdmissionPolicy.enabled``."""
    autogen = (data.get("spec") or {}).get("autogen")
    if not isinstance(autogen, dict):
        return False
    return any(isinstance(autogen.get(key), dict) and autogen[key].get("enabled") is True for key in ("validatingAdmissionPolicy", "mutatingAdmissionPolicy"))


def status_patch(
    watched: WatchedKind, data: dict[str, Any], snapshot: PolicySnapshot, identity: PolicyIdentity, current: Any,
    missing_permissions: list[str] | None = None,
) -> dict[str, Any] | None:
    """The merge patch for ``status`` that makes it say what this snapshot knows, or None when it already does."""
    current = current if isinstance(current, dict) else {}
    ready, reason, message = _readiness(snapshot, identity)
    generation = _generation(data)
    if watched.status == STATUS_KYVERNO:
        conditions = _ready_condition(current.get("conditions"), ready, reason, message, generation)
        try:
            counts = rule_count(data)
        except Exception:
            counts = {"validate": 0, "generate": 0, "mutate": 0, "verifyimages": 0}
        autogen = _autogen_rules(data) if ready else []
        current_autogen = (current.get("autogen") or {}).get("rules") or []
        if (
            _same_condition(conditions, current.get("conditions") or [])
            and current.get("rulecount") == counts
            and current_autogen == autogen
        ):
            return None
        return {"conditions": conditions, "rulecount": counts, "autogen": {"rules": autogen or None}}
    if watched.status == STATUS_CEL:
        return _cel_status_patch(watched, data, ready, message, generation, current, missing_permissions)
    return None


__all__ = ["ClusterDocument", "ClusterPolicySource", "WATCHED_KINDS", "WatchedKind", "rule_count", "status_patch"]
