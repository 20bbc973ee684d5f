"""Folder isolation for the e2e runner: put the control plane back to its standard install between chainsaw units.

Kyverno's CI gives every folder a fresh kind cluster; the runner reuses one control plane, so whatever a folder left
behind would leak into the next.  Chainsaw deletes what its own operations created, but not what a ``script`` step
created (``kubectl apply`` of a policy, a namespace, a CRD): one such policy that denies every Pod fails every later
folder.  So the runner takes a `Baseline` right after the install (every object's identity, read through
metadata-only lists of every listable resource) and, after each unit, deletes

- every object of a policy kind, wherever it is: Kyverno's and Stockade's policy kinds as the webhook watches them
  (``policywatch.WATCHED_KINDS``), UpdateRequests, GlobalContextEntries and Kubernetes' admission policies and
  their bindings (the standard install has none of them);
- every namespace the baseline did not have (the namespace controller removes its content);
- every other object, cluster-scoped or in a baseline namespace, that the baseline did not have, except the
  volatile kinds the control plane itself keeps writing (Events, Leases, Endpoints...), objects with an owner
  (the garbage collector follows their owner) and the webhook configurations Stockade manages.

Then it waits for the deleted namespaces to be gone and for ``stockade serve``'s policy cache to hold no more
documents than at the baseline (its readiness endpoint reports the count), so the next unit starts as the first did.

`plan_cleanup` is the pure decision; `ClusterCleaner` does the I/O.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stockade.controllers.policywatch import ADMISSION_POLICY_WATCHES, WATCHED_KINDS
from stockade.controllers.registration import discover_resources
from stockade.controllers.webhookconfig import WEBHOOK_NAMINGS
from stockade.errors import StockadeError
from stockade.kube.client import KubeClient
from stockade.kube.errors import KubeError, MethodNotAllowed, NotFound
from stockade.kube.informer import collection_path

GroupResource = tuple[str, str]

# Every object of these is removed: the policy kinds the webhook serves or acts on, and what they leave in flight.
ALWAYS_REMOVED: frozenset[GroupResource] = frozenset(
    {(kind.group, kind.plural) for kind in WATCHED_KINDS}
    | {(kind.group, kind.plural) for kinds in ADMISSION_POLICY_WATCHES.values() for kind in kinds}
    | {("kyverno.io", "updaterequests"), ("kyverno.io", "globalcontextentries")}
)

# Written by the control plane itself all the time, or not objects a test owns: never diffed.
VOLATILE: frozenset[GroupResource] = frozenset(
    {
        ("", "events"),
        ("events.k8s.io", "events"),
        ("coordination.k8s.io", "leases"),
        ("", "endpoints"),
        ("discovery.k8s.io", "endpointslices"),
        ("apiregistration.k8s.io", "apiservices"),  # registered automatically for every served group (CRDs too)
        ("", "componentstatuses"),
        ("internal.apiserver.k8s.io", "storageversions"),
    }
)

MANAGED_BY = {naming.managed_by_label: naming.managed_by_value for naming in WEBHOOK_NAMINGS.values()}


class CleanupError(StockadeError, RuntimeError):
    """The cluster could not be read or cleaned; the message names the call that failed."""


@dataclass(frozen=True, order=True)
class ObjectKey:
    """An object's identity across a run: resource (group and plural), namespace ('' when cluster-scoped) and name."""

    group: str
    resource: str
    namespace: str
    name: str


@dataclass(frozen=True)
class ClusterObject:
    key: ObjectKey
    kind: str
    version: str
    owned: bool = False  # it has ownerReferences: the garbage collector removes it with its owner
    managed: bool = False  # a webhook configuration Stockade keeps (its managed-by label)
    deleting: bool = False  # it already has a deletionTimestamp

    @property
    def label(self) -> str:
        where = f"{self.key.namespace}/" if self.key.namespace else ""
        return f"{self.kind}/{where}{self.key.name}"

    @property
    def api_version(self) -> str:
        return f"{self.key.group}/{self.version}" if self.key.group else self.version


@dataclass(frozen=True)
class Baseline:
    """What the standard install has: object identities, its namespaces and the webhook's policy document count."""

    keys: frozenset[ObjectKey]
    namespaces: frozenset[str]
    documents: int = 0


def take_baseline(objects: Iterable[ClusterObject], documents: int = 0) -> Baseline:
    objects = list(objects)
    namespaces = frozenset(o.key.name for o in objects if o.key.group == "" and o.key.resource == "namespaces")
    # objects with an owner are never removed (their owner's controller replaces them, e.g. a rollout's Pods), so
    # they are not part of the install either: their replacement is no "install object deleted by the tests"
    return Baseline(frozenset(o.key for o in objects if (o.key.group, o.key.resource) not in VOLATILE and not o.owned), namespaces, documents)


def plan_cleanup(baseline: Baseline, current: Iterable[ClusterObject]) -> list[ClusterObject]:
    """What to delete so the cluster is back to ``baseline``, policies first (so nothing is judged by a leftover
    policy while the rest goes) and namespaces last.  Objects in namespaces that are themselves removed are left to
    the namespace controller, except policies, which go at once so the webhook drops them sooner."""
    policies: list[ClusterObject] = []
    others: list[ClusterObject] = []
    namespaces: list[ClusterObject] = []
    for obj in current:
        group_resource = (obj.key.group, obj.key.resource)
        if obj.deleting:
            continue
        if group_resource in ALWAYS_REMOVED:
            policies.append(obj)
            continue
        if group_resource in VOLATILE or obj.key in baseline.keys or obj.owned or obj.managed:
            continue
        if group_resource == ("", "namespaces"):
            namespaces.append(obj)
        elif not obj.key.namespace or obj.key.namespace in baseline.namespaces:
            others.append(obj)
    return sorted(policies, key=lambda o: o.key) + sorted(others, key=lambda o: o.key) + sorted(namespaces, key=lambda o: o.key)


def missing_since_baseline(baseline: Baseline, current: Iterable[ClusterObject]) -> list[ObjectKey]:
    """Baseline objects that are gone (a test deleted them): reported, since they cannot be put back generically."""
    present = {o.key for o in current}
    return sorted(key for key in baseline.keys if key not in present)


def object_from_metadata(group: str, version: str, resource: str, kind: str, metadata: Mapping[str, Any]) -> ClusterObject:
    labels = metadata.get("labels") or {}
    return ClusterObject(
        ObjectKey(group, resource, str(metadata.get("namespace") or ""), str(metadata.get("name") or "")),
        kind,
        version,
        owned=bool(metadata.get("ownerReferences")),
        managed=any(labels.get(label) == value for label, value in MANAGED_BY.items()),
        deleting=bool(metadata.get("deletionTimestamp")),
    )


@dataclass
class CleanupReport:
    removed: list[str] = field(default_factory=list)  # labels of the objects deleted
    missing: list[str] = field(default_factory=list)  # baseline objects a test deleted
    stuck: list[str] = field(default_factory=list)  # deleted but still there when the wait ended
    seconds: float = 0.0

    def describe(self, limit: int = 12) -> str:
        parts = []
        if self.removed:
            shown = ", ".join(self.removed[:limit]) + (f", ... ({len(self.removed) - limit} more)" if len(self.removed) > limit else "")
            parts.append(f"removed {len(self.removed)} left behind: {shown}")
        if self.stuck:
            parts.append(f"still terminating: {', '.join(self.stuck[:limit])}")
        if self.missing:
            parts.append(f"{len(self.missing)} install objects deleted by the tests: {', '.join(self.missing[:limit])}")
        return "; ".join(parts) if parts else "nothing left behind"


METADATA_LIST = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"


class ClusterCleaner:
    """Reads every listable resource as metadata and deletes what `plan_cleanup` picks."""

    def __init__(self, api_client: Any, policy_documents: Callable[[], int | None] = lambda: None, wait_seconds: float = 120.0) -> None:
        self.api_client = api_client
        self.client = KubeClient(api_client, timeout=30)
        self.policy_documents = policy_documents  # the webhook's cached document count (None: not known)
        self.wait_seconds = wait_seconds
        self._unlistable: set[GroupResource] = set()

    def _request(self, method: str, path: str, query: list[tuple[str, str]] | None = None, accept: str = "application/json", body: Any = None) -> Any:
        return self.client.request(method, path, body, query=query, accept=accept)

    def objects(self) -> list[ClusterObject]:
        seen: set[GroupResource] = set()
        found: list[ClusterObject] = []
        try:
            resources = discover_resources(self.api_client)
        except (KubeError, RuntimeError) as exc:
            raise CleanupError(f"discovery failed: {exc}") from exc
        for resource in resources:  # discovery lists a group's preferred version first: one version is enough
            group_resource = (resource.group, resource.resource)
            if group_resource in seen or group_resource in self._unlistable:
                continue
            seen.add(group_resource)
            api_version = f"{resource.group}/{resource.version}" if resource.group else resource.version
            path = collection_path(api_version, resource.resource)
            token = ""
            while True:
                query = [("limit", "500")] + ([("continue", token)] if token else [])
                try:
                    page = self._request("GET", path, query, accept=METADATA_LIST)
                except (MethodNotAllowed, NotFound):  # create-only resources (reviews, bindings) or a CRD just deleted
                    self._unlistable.add(group_resource)
                    break
                except KubeError as exc:
                    raise CleanupError(f"listing {resource.resource}.{resource.group or 'core'} failed: {exc}") from exc
                for item in page.get("items") or []:
                    found.append(object_from_metadata(resource.group, resource.version, resource.resource, resource.kind, item.get("metadata") or {}))
                token = str((page.get("metadata") or {}).get("continue") or "")
                if not token:
                    break
        return found

    def baseline(self) -> Baseline:
        return take_baseline(self.objects(), self.policy_documents() or 0)

    def _object_path(self, obj: ClusterObject) -> str:
        return collection_path(obj.api_version, obj.key.resource, obj.key.namespace) + "/" + urllib.parse.quote(obj.key.name)

    def clean(self, baseline: Baseline) -> CleanupReport:
        started = time.monotonic()
        current = self.objects()
        report = CleanupReport(missing=[f"{k.resource}/{k.namespace + '/' if k.namespace else ''}{k.name}" for k in missing_since_baseline(baseline, current)])
        doomed = plan_cleanup(baseline, current)
        for obj in doomed:
            try:
                self._request("DELETE", self._object_path(obj), body={"propagationPolicy": "Background"})
            except NotFound:
                continue
            except KubeError as exc:
                raise CleanupError(f"deleting {obj.label} failed: {exc}") from exc
            report.removed.append(obj.label)
        self._wait_gone([o for o in doomed if (o.key.group, o.key.resource) == ("", "namespaces")], baseline, report, started)
        report.seconds = time.monotonic() - started
        return report

    def _wait_gone(self, namespaces: list[ClusterObject], baseline: Baseline, report: CleanupReport, started: float) -> None:
        deadline = started + self.wait_seconds
        pending = list(namespaces)
        while time.monotonic() < deadline:
            still = []
            for obj in pending:
                try:
                    self._request("GET", self._object_path(obj))
                    still.append(obj)
                except NotFound:
                    pass
            pending = still
            documents = self.policy_documents()
            if not pending and (documents is None or documents <= baseline.documents):
                return
            time.sleep(0.25)
        report.stuck = [o.label for o in pending]
        documents = self.policy_documents()
        if documents is not None and documents > baseline.documents:
            report.stuck.append(f"stockade serve still caches {documents} policy documents (install: {baseline.documents})")


def webhook_document_count(port_file: Any) -> Callable[[], int | None]:
    """Reads ``documents`` from `stockade serve`'s readiness endpoint on the port recorded in ``port_file``."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE

    def count() -> int | None:
        try:
            port = int(port_file.read_text())
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/health/readiness", context=context, timeout=5) as response:
                documents = json.loads(response.read()).get("documents")
        except (OSError, ValueError, urllib.error.URLError):
            return None
        return documents if isinstance(documents, int) else None

    return count
