"""What `stockade serve` runs against the cluster besides answering reviews, started and stopped in a safe order.

Every replica answers admission requests, writes reports and emits events.  Work that must happen once per cluster
(webhook registration, policy status writes, background scans, generate resync) belongs to the leader; without
leader election this replica is the leader.  On a clean stop the webhook configurations are removed only when no
other replica is alive, so a rolling update never leaves the cluster unprotected while uninstalling leaves nothing.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stockade.controllers.webhookconfig import STOCKADE_NAMING, WebhookNaming
from stockade.kube.client import KubeClient
from stockade.kube.errors import Forbidden, NotFound

log = logging.getLogger("stockade.controllers.manager")


class WebhookRegistration:
    """Keeps the webhook configurations in step with the loaded policies and the CA (leader only)."""

    def __init__(
        self,
        api_client: Any,
        certs: Any,
        store: Any,
        target: Any,
        *,
        excluded_namespaces: list[str],
        timeout_seconds: int,
        is_leader: Callable[[], bool] = lambda: True,
        kyverno_config: Callable[[], Any] | None = None,
        naming: WebhookNaming = STOCKADE_NAMING,
    ) -> None:
        from stockade.controllers.registration import WebhookRegistrar, discovery_resolver

        self.kyverno_config = kyverno_config  # () -> KyvernoConfig: webhooks selectors, matchConditions, labels
        self.naming = naming
        self.registrar = WebhookRegistrar(api_client, naming)
        self.api_client = api_client
        self.certs = certs
        self.store = store
        self.target = target
        self.excluded = excluded_namespaces
        self.timeout = timeout_seconds
        self.is_leader = is_leader
        self._discovery = discovery_resolver
        self._lock = threading.Lock()  # snapshot listener, CA rotation and leadership changes may race
        store.listeners.append(lambda _snapshot: self.apply_if_leader())
        # called from the event loop during certificate refresh: talk to the API server from a thread instead
        certs.on_ca_change = lambda _bundle: threading.Thread(target=self.apply_if_leader, name="webhook-ca-update", daemon=True).start()

    def apply_if_leader(self) -> None:
        if not self.is_leader():
            return
        try:
            self.apply()
        except Exception:
            log.exception("updating webhook configurations failed")

    def apply(self) -> None:
        from stockade.controllers.webhookconfig import (
            build_configurations,
            build_policy_mutation_configuration,
            build_policy_validation_configuration,
            build_verify_mutation_configuration,
        )
        from stockade.controllers.generate import generating_policies

        snapshot = self.store.snapshot
        if snapshot is None:
            return
        kyverno_config = self.kyverno_config() if self.kyverno_config is not None else None
        with self._lock:
            mutating, validating = build_configurations(
                snapshot.policies,
                self.target,
                self.certs.ca_bundle,
                self._discovery(self.api_client),
                excluded_namespaces=self.excluded,
                timeout_seconds=self.timeout,
                cel_policies=[*snapshot.cel_policies, *generating_policies(snapshot)],
                kyverno_config=kyverno_config,
                naming=self.naming,
            )
            policy_validation = build_policy_validation_configuration(
                self.target, self.certs.ca_bundle, timeout_seconds=self.timeout, kyverno_config=kyverno_config, naming=self.naming
            )
            fixed = (
                build(self.target, self.certs.ca_bundle, timeout_seconds=self.timeout, kyverno_config=kyverno_config, naming=self.naming)
                for build in (build_policy_mutation_configuration, build_verify_mutation_configuration)
            )
            self.registrar.apply(mutating, validating, policy_validation, [body for body in fixed if body is not None])

    def remove(self) -> int:
        with self._lock:
            return self.registrar.remove_all()


class DeduplicatingSubmitter:
    """The API server may call one webhook more than once for one request (retries, reinvocation); each webhook's
    work is taken on once per request.  Different webhooks receiving the same request hand on different work (each
    its own policies'), so the key is the request's uid and the webhook's route."""

    def __init__(self, target: Any, memory: int = 4096) -> None:
        self.target = target
        self._seen: collections.OrderedDict[tuple[str, Any], None] = collections.OrderedDict()
        self._memory = memory
        self._lock = threading.Lock()

    def _first(self, key: tuple[str, Any]) -> bool:
        with self._lock:
            if key in self._seen:
                return False
            self._seen[key] = None
            if len(self._seen) > self._memory:
                self._seen.popitem(last=False)
        return True

    def submit(self, review: Any, *, served: Any = None, route: Any = None) -> Any:
        """The target's answer: a function that records the work durably, to run before the review is answered."""
        if not self._first((str(review.uid), route)):
            return None
        return self.target.submit(review, served=served, route=route)

    def submit_mutating(self, review: Any, policies: tuple[str, ...] | None, namespaced: bool | None) -> Any:
        """A MutatingPolicy webhook's admitted review (mutateExisting triggers), once per review and webhook."""
        if not self._first((str(review.uid), ("mutating", namespaced, policies))):
            return None
        return self.target.submit_mutating(review, policies, namespaced)


@dataclass
class LeadershipOptions:
    namespace: str
    leader_election: bool = True
    lease_name: str = "stockade-leader"


class BackgroundComponent:
    """A background component as a `stockade.kube.controller.Runnable`: leader-only when it declares
    ``needs_leadership``, otherwise every replica runs it."""

    def __init__(self, component: Any) -> None:
        self.component = component

    @property
    def name(self) -> str:
        name = getattr(self.component, "name", None)
        return name if isinstance(name, str) else type(self.component).__name__

    @property
    def needs_leadership(self) -> bool:
        return bool(getattr(self.component, "needs_leadership", False))

    def start(self) -> None:
        self.component.start()

    def stop(self) -> None:
        self.component.stop()


class LeadershipHook:
    """Tells a component that runs on every replica when this replica starts leading: its leader-only part (the
    generate controller's reaction to the loaded policies, generateExisting above all) may have been skipped while
    the replica was not leading yet, including in the moment between start and the first leadership."""

    needs_leadership = True

    def __init__(self, component: Any) -> None:
        self.component = component
        self.name = f"{BackgroundComponent(component).name}-leadership"

    def start(self) -> None:
        self.component.leadership_gained()

    def stop(self) -> None:
        pass


class LeaderDuties:
    """What a replica does on becoming the leader: register the webhooks and write policy status (from a thread of
    its own, so the elector keeps renewing)."""

    name = "leader-duties"
    needs_leadership = True

    def __init__(self, services: ClusterServices) -> None:
        self.services = services

    def start(self) -> None:
        log.info("leading: registering webhooks and running background work")
        threading.Thread(target=self.services._lead, name="leader-work", daemon=True).start()

    def stop(self) -> None:
        log.info("no longer leading")


class ClusterServices:
    """Leader election, membership and the leader-only work; ``start()`` then ``stop()``.

    A `stockade.kube.controller.Manager` runs the background components: those that declare ``needs_leadership``
    start when this replica gains leadership and stop when it loses it; the others run on every replica.
    """

    def __init__(
        self,
        api_client: Any,
        options: LeadershipOptions,
        *,
        registration: WebhookRegistration | None = None,
        status_publisher: Any = None,  # ClusterPolicySource: writes policy status for each snapshot
        store: Any = None,
        background: list[Any] | None = None,  # Runnables (or start/stop objects every replica runs)
    ) -> None:
        from stockade.kube.controller import Manager

        self.api_client = api_client
        self.options = options
        self.registration = registration
        self.status_publisher = status_publisher
        self.store = store
        self.background = list(background or [])
        self.crd_watch: Any = None  # a CrdWatch among ``background``, for components that follow CRD changes
        self.membership: Any = None
        # not leading before start(): registering webhooks before the server listens would send the apiserver
        # to a closed port
        self.manager = Manager(self._elector if options.leader_election else None)

    def _elector(self, gained: Callable[[], None], lost: Callable[[], None]) -> Any:
        from stockade.controllers.leader import LeaderElector

        return LeaderElector(
            self.api_client, self.options.namespace, self.options.lease_name, self.membership.identity if self.membership else None,
            on_started_leading=gained, on_stopped_leading=lost,
        )

    def is_leader(self) -> bool:
        return self.manager.is_leader()

    def check_namespace(self) -> None:
        """Leases live in our namespace: without it membership cannot work, and a stopping replica could not tell
        whether it is the last one."""
        try:
            KubeClient(self.api_client, timeout=None).request("GET", f"/api/v1/namespaces/{self.options.namespace}")
        except NotFound:
            raise RuntimeError(
                f"namespace {self.options.namespace} does not exist: create it (the chart does) or pass --no-leader-election"
            ) from None
        except Forbidden:  # may not read namespaces: the Lease writes will tell
            pass

    def start(self) -> None:
        """Without leader election, registration happens here and a failure raises (serve then exits)."""
        for component in self.background:
            self.manager.add(BackgroundComponent(component))
            if callable(getattr(component, "leadership_gained", None)):
                self.manager.add(LeadershipHook(component))
        if self.options.leader_election:
            from stockade.controllers.leader import ReplicaMembership, make_identity

            self.check_namespace()
            self.membership = ReplicaMembership(self.api_client, self.options.namespace, identity=make_identity())
            self.membership.start()
            self.manager.add(LeaderDuties(self))
        else:
            if self.registration is not None:
                self.registration.apply()
        self.manager.start()
        if not self.options.leader_election:
            self._publish_status()

    def _lead(self) -> None:
        if self.registration is not None:
            self.registration.apply_if_leader()
        self._publish_status()

    def _publish_status(self) -> None:
        if self.status_publisher is not None and self.store is not None and self.store.snapshot is not None:
            try:
                self.status_publisher.publish_status(self.store.snapshot)
            except Exception:
                log.exception("writing policy status failed")

    def publish_status_if_leader(self, snapshot: Any) -> None:
        """A store listener: only the leader writes policy status (every replica computes the same)."""
        if self.status_publisher is not None and self.is_leader():
            self.status_publisher.publish_status(snapshot)

    def stop(self) -> int:
        """Stops background work, hands leadership back, and removes the webhook configurations when this is the last
        replica.  Returns how many configurations were removed."""
        self.manager.stop()  # leader-only work, then the elector (which releases the lease), then the rest
        others_alive = False
        if self.membership is not None:
            self.membership.stop(release=True)
            others_alive = self.membership.others_alive()
        if self.registration is None:
            return 0
        if others_alive:
            log.info("other replicas are running: leaving the webhook configurations to them")
            return 0
        return self.registration.remove()
