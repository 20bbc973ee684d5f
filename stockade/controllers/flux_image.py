"""Flux image reflection in the cluster: reconcile ImageRepository and ImagePolicy objects and write their status.

The decisions (when to scan, which tag wins, conditions, events) are the reflector's reconcilers, the same
code `stockade images reconcile` runs on files; this module only feeds them cluster objects, writes `status`
back through the status subresource, records their Events and honours suspend, generation changes and
`reconcile.fluxcd.io/requestedAt`.

In the cluster (`flux_runtime.FluxImageRuntime`) objects come from informers (list, then watch) and each one is
reconciled by key when an event concerns it, then again after the delay its reconcile asked for (the scan
`interval`): `reconcile_repository_key` / `reconcile_policy_key`. As Flux, the objects carry the finalizer
`finalizers.fluxcd.io`, added on the first reconcile and removed when the object is being deleted (with the
repository's tags). `run_once` reconciles what is due in one pass over a listing (tests, one-shot use).
"""

from __future__ import annotations

import logging
import time

from stockade.errors import StockadeError
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from stockade.kube.client import JSON_PATCH, MERGE_PATCH, KubeClient
from stockade.kube.errors import Conflict, Invalid, KubeError, NotFound
from stockade.controllers.events import ACTION_NONE, SOURCE_IMAGE_REFLECTOR, EventRecorder, EventSpec, object_reference
from stockade.reflector import models
from stockade.reflector.imagepolicy import ImagePolicyReconciler
from stockade.reflector.models import ObjectKey, ReconcileResult, object_key
from stockade.reflector.repository import RECONCILE_REQUEST_ANNOTATION, ClientFactory, ImageRepositoryReconciler, default_client_factory
from stockade.reflector.store import TagStore

log = logging.getLogger("stockade.controllers.flux_image")

GROUP = models.API_GROUP
VERSION = "v1"
REPOSITORIES = "imagerepositories"
POLICIES = "imagepolicies"
EVENT_SOURCE = SOURCE_IMAGE_REFLECTOR
DEFAULT_RESYNC_SECONDS = 5.0
REQUEST_TIMEOUT_SECONDS = 30.0
FINALIZER = "finalizers.fluxcd.io"  # Flux's finalizer on its image and automation objects


class FinalizerConflict(StockadeError, RuntimeError):
    """The object changed between our read and the finalizer patch; the key is retried with the new version."""


class ClusterObjects:
    """Reads and status writes of Flux image objects, Secrets and ServiceAccounts, as plain JSON dicts."""

    def __init__(self, api_client: Any) -> None:
        self.client = KubeClient(api_client, timeout=REQUEST_TIMEOUT_SECONDS)

    @staticmethod
    def _object(data: Any) -> dict[str, Any]:
        return data if isinstance(data, dict) else {}

    def _get(self, path: str) -> dict[str, Any] | None:
        try:
            return self._object(self.client.request("GET", path))
        except NotFound:
            return None

    def list(self, plural: str, version: str = VERSION, group: str = GROUP) -> list[dict[str, Any]]:
        listing = self._object(self.client.request("GET", f"/apis/{group}/{version}/{plural}"))
        return [item for item in listing.get("items") or [] if isinstance(item, dict)]

    def get(self, plural: str, key: ObjectKey, version: str = VERSION, group: str = GROUP) -> dict[str, Any] | None:
        return self._get(_object_path(group, version, plural, key))

    def write_status(self, plural: str, obj: Mapping[str, Any], version: str = VERSION, group: str = GROUP) -> None:
        """Merge-patch `status` (the status subresource ignores everything else)."""
        path = _object_path(group, version, plural, object_key(obj)) + "/status"
        self.client.request("PATCH", path, {"status": obj.get("status") or {}}, content_type=MERGE_PATCH)

    def set_finalizer(self, plural: str, obj: Mapping[str, Any], present: bool, version: str = VERSION, group: str = GROUP) -> None:
        """Add or remove Flux's finalizer with a JSON patch guarded by the object's resourceVersion, so other
        finalizers are never lost; a conflict raises FinalizerConflict (the watch brings the new version)."""
        metadata = obj.get("metadata") or {}
        finalizers = list(metadata.get("finalizers") or [])
        guard = {"op": "test", "path": "/metadata/resourceVersion", "value": metadata.get("resourceVersion")}
        change: dict[str, Any]
        if present:
            if FINALIZER in finalizers:
                return
            change = ({"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER} if finalizers
                      else {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]})
        else:
            if FINALIZER not in finalizers:
                return
            change = {"op": "remove", "path": f"/metadata/finalizers/{finalizers.index(FINALIZER)}"}
        key = object_key(obj)
        try:
            self.client.request("PATCH", _object_path(group, version, plural, key), [guard, change], content_type=JSON_PATCH)
        except NotFound:
            if present:
                raise
        except (Conflict, Invalid) as exc:  # the JSON patch test failed: another version is on its way
            raise FinalizerConflict(f"{plural} {key}: changed meanwhile ({exc})") from None

    def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(f"/api/v1/namespaces/{namespace}/secrets/{name}")

    def service_account(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}")

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        try:
            found = self._object(self.client.request("GET", f"/api/v1/namespaces/{namespace}"))
        except KubeError:
            return {"kubernetes.io/metadata.name": namespace}
        labels = dict((found.get("metadata") or {}).get("labels") or {})
        labels.setdefault("kubernetes.io/metadata.name", namespace)
        return labels


def _object_path(group: str, version: str, plural: str, key: ObjectKey) -> str:
    return f"/apis/{group}/{version}/namespaces/{key.namespace}/{plural}/{key.name}"


@dataclass
class _Schedule:
    """What the last reconcile of one object saw, and when it is due again (monotonic seconds)."""

    generation: object
    requested_at: object
    due: float
    repository_revision: object = None


def _requested_at(obj: Mapping[str, Any]) -> object:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(RECONCILE_REQUEST_ANNOTATION)


def being_deleted(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def finalize(objects: ClusterObjects, plural: str, obj: Mapping[str, Any], version: str = VERSION, group: str = GROUP) -> bool:
    """Flux's finalizer handling before a reconcile: an object being deleted loses our finalizer (True: nothing
    more to do); any other object gets it if it lacks it."""
    deleting = being_deleted(obj)
    objects.set_finalizer(plural, obj, not deleting, version=version, group=group)
    return deleting


class ImageReflectorController:
    """Reconciles ImageRepositories and ImagePolicies by key (from watches) or in one pass (`run_once`): every
    ImageRepository that is due, then every ImagePolicy that is due or whose repository's tags changed. Status
    is written only when it changed."""

    def __init__(
        self,
        objects: ClusterObjects,
        store: TagStore,
        *,
        recorder: EventRecorder | None = None,
        client_factory: ClientFactory = default_client_factory,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.objects = objects
        self.store = store
        self.recorder = recorder
        self.clock = clock
        self.repositories = ImageRepositoryReconciler(
            store, secrets=objects.secret, service_accounts=objects.service_account, client_factory=client_factory
        )
        self._known_repositories: dict[ObjectKey, dict[str, Any]] = {}
        self.policies = ImagePolicyReconciler(
            store,
            self._repository,
            secrets=objects.secret,
            service_accounts=objects.service_account,
            client_factory=client_factory,
            namespace_labels=objects.namespace_labels,
        )
        self._schedules: dict[tuple[str, ObjectKey], _Schedule] = {}

    def _repository(self, key: ObjectKey) -> dict[str, Any] | None:
        known = self._known_repositories.get(key)
        return known if known is not None else self.objects.get(REPOSITORIES, key)

    # -- by key, from watches ---------------------------------------------------------------------------------------
    def reconcile_repository_key(self, key: ObjectKey) -> float | None:
        """Reconcile one ImageRepository as it is now; the seconds until it should be looked at again."""
        repository = self.objects.get(REPOSITORIES, key)
        if repository is None:
            self._schedules.pop((REPOSITORIES, key), None)
            return None
        if finalize(self.objects, REPOSITORIES, repository):
            self.store.delete_tags(key)  # Flux drops the repository's tags with the object
            return None
        if (repository.get("spec") or {}).get("suspend"):
            return None
        result = self.repositories.reconcile(repository)
        self._finish(REPOSITORIES, repository, result, None)
        return result.requeue_after

    def reconcile_policy_key(self, key: ObjectKey) -> float | None:
        """Reconcile one ImagePolicy against its repository's current tags."""
        policy = self.objects.get(POLICIES, key)
        if policy is None:
            self._schedules.pop((POLICIES, key), None)
            return None
        if finalize(self.objects, POLICIES, policy):
            return None
        if (policy.get("spec") or {}).get("suspend"):
            return None
        result = self.policies.reconcile(policy)
        self._finish(POLICIES, policy, result, self._repository_revision(policy))
        return result.requeue_after

    # -- one pass ---------------------------------------------------------------------------------------------------
    def run_once(self) -> int:
        """Returns how many objects were reconciled (for tests and logs)."""
        done = 0
        repositories = self.objects.list(REPOSITORIES)
        self._known_repositories.clear()
        for repository in repositories:
            self._known_repositories[object_key(repository)] = repository
        seen: set[tuple[str, ObjectKey]] = set()
        for repository in repositories:
            key = object_key(repository)
            seen.add((REPOSITORIES, key))
            if self._due(REPOSITORIES, repository, None):
                result = self.repositories.reconcile(repository)
                self._known_repositories[key] = result.object
                self._finish(REPOSITORIES, repository, result, None)
                done += 1
        for policy in self.objects.list(POLICIES):
            key = object_key(policy)
            seen.add((POLICIES, key))
            revision = self._repository_revision(policy)
            if self._due(POLICIES, policy, revision):
                self._finish(POLICIES, policy, self.policies.reconcile(policy), revision)
                done += 1
        for gone in set(self._schedules) - seen:
            del self._schedules[gone]
        return done

    def _repository_revision(self, policy: Mapping[str, Any]) -> object:
        ref = (policy.get("spec") or {}).get("imageRepositoryRef") or {}
        key = ObjectKey(str(ref.get("namespace") or object_key(policy).namespace), str(ref.get("name") or ""))
        repository = self._repository(key)
        if repository is None:
            return None
        status = repository.get("status") or {}
        return ((status.get("lastScanResult") or {}).get("revision"), models.is_ready(repository))

    def _due(self, plural: str, obj: Mapping[str, Any], revision: object) -> bool:
        if (obj.get("spec") or {}).get("suspend"):
            return False
        schedule = self._schedules.get((plural, object_key(obj)))
        if schedule is None:
            return True
        metadata = obj.get("metadata") or {}
        return (
            schedule.generation != metadata.get("generation")
            or schedule.requested_at != _requested_at(obj)
            or schedule.repository_revision != revision
            or self.clock() >= schedule.due
        )

    def _finish(self, plural: str, before: Mapping[str, Any], result: ReconcileResult, revision: object) -> None:
        key = object_key(before)
        if (before.get("status") or {}) != result.status:
            try:
                self.objects.write_status(plural, result.object)
            except Exception as exc:  # the object may be gone or changed; the next pass retries it
                log.warning("writing status of %s %s failed: %s", plural, key, exc)
                self._schedules.pop((plural, key), None)
                return
        for event in result.events:
            if event.type == models.EVENT_TRACE:
                log.debug("%s %s: %s", plural, key, event.message)
            elif self.recorder is not None:
                self.recorder.submit(EventSpec(
                    namespace=key.namespace, regarding=object_reference(result.object), reason=event.reason,
                    message=event.message, type=event.type, action=ACTION_NONE, source=EVENT_SOURCE))
        for warning in result.warnings:
            log.warning("%s %s: %s; ignored", plural, key, warning)
        wait = result.requeue_after
        metadata = before.get("metadata") or {}
        self._schedules[(plural, key)] = _Schedule(
            generation=metadata.get("generation"),
            requested_at=_requested_at(before),
            due=self.clock() + (wait if wait is not None else float("inf")),
            repository_revision=revision,
        )
