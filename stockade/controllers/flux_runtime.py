"""`stockade images controller` on the controller runtime (`stockade.kube`): informers, watches and work queues.

Informers keep ImageRepositories, ImagePolicies, ImageUpdateAutomations and GitRepositories in memory (every
replica); three controllers reconcile by key, only on the replica holding the lease.  What brings a key back,
as in Flux's controllers:

- an object's own key: created, deleted, or updated with a new ``generation``, a new
  ``reconcile.fluxcd.io/requestedAt`` or a deletion timestamp (status writes, ours included, do not);
- an ImagePolicy: its ImageRepository's scan result or readiness changed;
- an ImageUpdateAutomation: its GitRepository's ``generation`` changed, or the ``latestRef`` of an ImagePolicy
  in its namespace changed;
- every key: the delay its reconcile asked for (``spec.interval`` and the like) as a requeue-after, not a relist.

Secrets and ServiceAccounts are read when needed (as Flux does), never cached.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from stockade.controllers.events import EventRecorder
from stockade.controllers.flux_automation import AUTOMATION_VERSION, AUTOMATIONS, SOURCE_GROUP, SOURCE_VERSION, ImageUpdateAutomationController
from stockade.controllers.flux_image import GROUP, POLICIES, REPOSITORIES, VERSION, ClusterObjects, ImageReflectorController
from stockade.kube.controller import Controller, FunctionReconciler, InformerRunnable, Manager, Result
from stockade.kube.informer import Informer, Obj, RawListWatch, split_key
from stockade.reflector.models import ObjectKey
from stockade.reflector.repository import RECONCILE_REQUEST_ANNOTATION
from stockade.reflector.store import TagStore

log = logging.getLogger("stockade.controllers.flux_runtime")

GIT_REPOSITORIES = "gitrepositories"


class CachedObjects(ClusterObjects):
    """`ClusterObjects` whose lists and gets of the watched kinds are answered from the informers' stores."""

    def __init__(self, api_client: Any, informers: Mapping[str, Informer]) -> None:
        super().__init__(api_client)
        self.informers = informers

    def list(self, plural: str, version: str = VERSION, group: str = GROUP) -> list[dict[str, Any]]:
        informer = self.informers.get(plural)
        if informer is None:
            return super().list(plural, version, group)
        return [dict(obj) for obj in informer.store.list()]

    def get(self, plural: str, key: ObjectKey, version: str = VERSION, group: str = GROUP) -> dict[str, Any] | None:
        informer = self.informers.get(plural)
        if informer is None:
            return super().get(plural, key, version, group)
        found = informer.store.get_by_name(key.namespace, key.name)
        return dict(found) if found is not None else None


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def spec_or_request_changed(old: Obj, new: Obj) -> bool:
    """Flux's predicates for its own objects: a new generation, a new reconcile request, or a deletion."""
    before, after = _metadata(old), _metadata(new)
    return (
        before.get("generation") != after.get("generation")
        or (before.get("annotations") or {}).get(RECONCILE_REQUEST_ANNOTATION)
        != (after.get("annotations") or {}).get(RECONCILE_REQUEST_ANNOTATION)
        or bool(after.get("deletionTimestamp")) != bool(before.get("deletionTimestamp"))
    )


def _scan_changed(old: Obj, new: Obj) -> bool:
    def seen(obj: Obj) -> object:
        status = obj.get("status") or {}
        ready = [c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"]
        return ((status.get("lastScanResult") or {}).get("revision"), ready)

    return seen(old) != seen(new)


def _latest_ref_changed(old: Obj, new: Obj) -> bool:
    return (old.get("status") or {}).get("latestRef") != (new.get("status") or {}).get("latestRef")


def _generation_changed(old: Obj, new: Obj) -> bool:
    return _metadata(old).get("generation") != _metadata(new).get("generation")


def _keyed(fn: Callable[[ObjectKey], float | None]) -> Callable[[str], Result | None]:
    def reconcile(key: str) -> Result | None:
        namespace, name = split_key(key)
        wait = fn(ObjectKey(namespace, name))
        return Result(requeue_after=wait) if wait is not None and wait > 0 else None

    return reconcile


class FluxImageRuntime:
    """Informers + controllers of the image reflector (and, with ``automation``, ImageUpdateAutomation)."""

    def __init__(
        self,
        api_client: Any,
        store: TagStore,
        *,
        automation: bool = True,
        recorder: EventRecorder | None = None,
        retry_seconds: float = 30.0,
        max_clone_bytes: int | None = None,
        elector_factory: Callable[[Callable[[], None], Callable[[], None]], Any] | None = None,
        watch_timeout: int = 300,
    ) -> None:
        def informer(api_version: str, plural: str) -> Informer:
            return Informer(RawListWatch.for_resource(api_client, api_version, plural), name=f"flux-{plural}",
                            watch_timeout=watch_timeout)

        self.informers: dict[str, Informer] = {
            REPOSITORIES: informer(f"{GROUP}/{VERSION}", REPOSITORIES),
            POLICIES: informer(f"{GROUP}/{VERSION}", POLICIES),
        }
        if automation:
            self.informers[AUTOMATIONS] = informer(f"{GROUP}/{AUTOMATION_VERSION}", AUTOMATIONS)
            self.informers[GIT_REPOSITORIES] = informer(f"{SOURCE_GROUP}/{SOURCE_VERSION}", GIT_REPOSITORIES)
        self.objects = CachedObjects(api_client, self.informers)
        self.reflector = ImageReflectorController(self.objects, store, recorder=recorder)
        repositories, policies = self.informers[REPOSITORIES], self.informers[POLICIES]

        self.repository_controller = Controller("flux-imagerepository", FunctionReconciler(_keyed(self.reflector.reconcile_repository_key)))
        self.repository_controller.watch(repositories, update_filter=spec_or_request_changed)

        self.policy_controller = Controller("flux-imagepolicy", FunctionReconciler(_keyed(self.reflector.reconcile_policy_key)))
        self.policy_controller.watch(policies, update_filter=spec_or_request_changed)
        self.policy_controller.watch(repositories, keys=self._policies_of_repository, update_filter=_scan_changed)
        self.controllers = [self.repository_controller, self.policy_controller]

        self.automation: ImageUpdateAutomationController | None = None
        if automation:
            options: dict[str, Any] = {"recorder": recorder, "retry_seconds": retry_seconds}
            if max_clone_bytes is not None:
                options["max_clone_bytes"] = max_clone_bytes
            self.automation = ImageUpdateAutomationController(self.objects, **options)
            controller = Controller("flux-imageupdateautomation", FunctionReconciler(_keyed(self.automation.reconcile_key)))
            controller.watch(self.informers[AUTOMATIONS], update_filter=spec_or_request_changed)
            controller.watch(self.informers[GIT_REPOSITORIES], keys=self._automations_of_source, update_filter=_generation_changed)
            controller.watch(policies, keys=self._automations_of_policy, update_filter=_latest_ref_changed)
            self.automation_controller = controller
            self.controllers.append(controller)

        self.manager = Manager(elector_factory)
        for watched in self.informers.values():
            self.manager.add(InformerRunnable(watched))
        for controller_ in self.controllers:
            self.manager.add(controller_)

    # -- key mappings ---------------------------------------------------------------------------------------------
    def _policies_of_repository(self, repository: Obj) -> Iterable[str]:
        metadata = _metadata(repository)
        namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
        for policy in self.informers[POLICIES].store.list():
            ref = (policy.get("spec") or {}).get("imageRepositoryRef") or {}
            policy_namespace = str(_metadata(policy).get("namespace") or "")
            if str(ref.get("name") or "") == name and str(ref.get("namespace") or policy_namespace) == namespace:
                yield f"{policy_namespace}/{_metadata(policy).get('name')}"

    def _automations_of_source(self, source: Obj) -> Iterable[str]:
        metadata = _metadata(source)
        namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
        for automation in self.informers[AUTOMATIONS].store.list():
            ref = (automation.get("spec") or {}).get("sourceRef") or {}
            own_namespace = str(_metadata(automation).get("namespace") or "")
            if str(ref.get("name") or "") == name and str(ref.get("namespace") or own_namespace) == namespace:
                yield f"{own_namespace}/{_metadata(automation).get('name')}"

    def _automations_of_policy(self, policy: Obj) -> Iterable[str]:
        namespace = str(_metadata(policy).get("namespace") or "")
        for automation in self.informers[AUTOMATIONS].store.list(namespace=namespace):
            yield f"{namespace}/{_metadata(automation).get('name')}"

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def start(self) -> None:
        self.manager.start()

    def stop(self) -> None:
        self.manager.stop()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return all(informer.wait_for_sync(timeout) for informer in self.informers.values())
