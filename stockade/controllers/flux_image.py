"""Flux image reflection in the cluster: reconcile ImageRepository and ImagePolicy objects and write their status.

The decisions (when to scan, which tag wins, conditions, events) are the reflector's reconcilers, the same
code `stockade images reconcile` runs on files; this module only feeds them cluster objects, writes `status`
back through the status subresource, records their Events and honours suspend, generation changes and
`reconcile.fluxcd.io/requestedAt`.

Objects are found by listing on a short resync period rather than by watches: a scan is due on its interval
anyway, so a resync of a few seconds only delays a spec change by that much, and a missed watch event can
never leave an object unreconciled. Only the leader (controllers/leader.py) reconciles.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from stockade.controllers.events import ACTION_NONE, SOURCE_IMAGE_REFLECTOR, EventRecorder, EventSpec, object_reference
from stockade.controllers.periodic import LeaderPeriodicWorker
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


class ClusterObjects:
    """Reads and status writes of Flux image objects, Secrets and ServiceAccounts, as plain JSON dicts."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)

    @staticmethod
    def _json(response: Any) -> dict[str, Any]:
        data = json.loads(response.data)
        return data if isinstance(data, dict) else {}

    def list(self, plural: str, version: str = VERSION, group: str = GROUP) -> list[dict[str, Any]]:
        response = self.custom.list_cluster_custom_object(
            group, version, plural, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS
        )
        return [item for item in self._json(response).get("items") or [] if isinstance(item, dict)]

    def get(self, plural: str, key: ObjectKey, version: str = VERSION, group: str = GROUP) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self._json(self.custom.get_namespaced_custom_object(
                group, version, key.namespace, plural, key.name,
                _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def write_status(self, plural: str, obj: Mapping[str, Any], version: str = VERSION, group: str = GROUP) -> None:
        """Merge-patch `status` (the status subresource ignores everything else)."""
        key = object_key(obj)
        self.custom.patch_namespaced_custom_object_status(
            group, version, key.namespace, plural, key.name, {"status": obj.get("status") or {}},
            _request_timeout=REQUEST_TIMEOUT_SECONDS,
        )

    def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self._json(self.core.read_namespaced_secret(
                name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def service_account(self, namespace: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self._json(self.core.read_namespaced_service_account(
                name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        from kubernetes.client.exceptions import ApiException

        try:
            found = self._json(self.core.read_namespace(
                namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS))
        except ApiException:
            return {"kubernetes.io/metadata.name": namespace}
        labels = dict((found.get("metadata") or {}).get("labels") or {})
        labels.setdefault("kubernetes.io/metadata.name", namespace)
        return labels


@dataclass
class _Schedule:
    """What the last reconcile of one object saw, and when it is due again (monotonic seconds)."""

    generation: object
    requested_at: object
    due: float
    repository_revision: object = None


def _requested_at(obj: Mapping[str, Any]) -> object:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(RECONCILE_REQUEST_ANNOTATION)


class ImageReflectorController(LeaderPeriodicWorker):
    """One pass: reconcile every ImageRepository that is due, then every ImagePolicy that is due or whose
    repository's tags changed. Status is written only when it changed."""

    thread_name = "flux-image-reflector"

    def __init__(
        self,
        objects: ClusterObjects,
        store: TagStore,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        resync: float = DEFAULT_RESYNC_SECONDS,
        recorder: EventRecorder | None = None,
        client_factory: ClientFactory = default_client_factory,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(is_leader, resync)
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
            self._known_repositories.get,
            secrets=objects.secret,
            service_accounts=objects.service_account,
            client_factory=client_factory,
            namespace_labels=objects.namespace_labels,
        )
        self._schedules: dict[tuple[str, ObjectKey], _Schedule] = {}

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
        repository = self._known_repositories.get(key)
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
