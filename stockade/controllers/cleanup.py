"""Scheduled deletion: (Namespaced)DeletingPolicies and Kyverno's CleanupPolicy/ClusterCleanupPolicy.

Like Kyverno's cleanup controller, each policy fires on its cron ``schedule``: the first time after its
``status.lastExecutionTime`` (or its creation), then after each run.  A run lists the resources the policy names
(in its namespace for the namespaced kinds), keeps those that match and pass the conditions, and deletes them with
the policy's ``deletionPropagationPolicy``; each deletion (or failure) becomes an Event regarding the policy, and
``status.lastExecutionTime`` records the run.

* DeletingPolicy: ``matchConstraints`` (resources, object/namespace selectors) and CEL ``conditions``, evaluated by
  the celpolicy evaluator with the cluster's ``resource`` library.
* CleanupPolicy: ``match``/``exclude`` (stockade.engine.match), ``context`` entries loaded once per run, and
  ``conditions`` with Kyverno's operators over ``target`` and ``request.namespace``.

Only the leader deletes.  The clock and the tick are injectable so tests need not wait for a minute to pass.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stockade.controllers.clusterdata import (
    ClusterCelHttp,
    ClusterCelResources,
    ClusterData,
    ClusterGlobalContext,
    object_path,
    resources_for_rules,
)
from stockade.controllers.periodic import LeaderPeriodicWorker
from stockade.controllers.schedule import ScheduleError, parse_schedule
from stockade.controllers.webhookconfig import ApiResource
from stockade.policy.model import ObjectView
from stockade.kube.errors import Forbidden, KubeError, MethodNotAllowed, NotFound, Unauthorized

log = logging.getLogger("stockade.cleanup")

DELETING_POLICY_KINDS = ("DeletingPolicy", "NamespacedDeletingPolicy")
CLEANUP_POLICY_KINDS = ("CleanupPolicy", "ClusterCleanupPolicy")
REASON_APPLIED = "PolicyApplied"
REASON_ERROR = "PolicyError"
ACTION_CLEANED_UP = "Resource Cleaned Up"
ACTION_NONE = "None"
PROPAGATION_POLICIES = ("Orphan", "Background", "Foreground")

Clock = Callable[[], dt.datetime]


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def parse_timestamp(value: Any) -> dt.datetime | None:
    """An RFC 3339 ``metav1.Time`` as written by the API server, or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(dt.timezone.utc)
    except ValueError:
        return None


def format_timestamp(moment: dt.datetime) -> str:
    return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ScheduledPolicy(ObjectView):
    """One deleting or cleanup policy as the controller schedules it (the store already required its name)."""

    raw: dict[str, Any]

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"

    @property
    def is_cleanup(self) -> bool:
        return self.kind in CLEANUP_POLICY_KINDS

    def due_after(self) -> dt.datetime | None:
        """When the next run is counted from: the last run, else the creation."""
        return parse_timestamp((self.raw.get("status") or {}).get("lastExecutionTime")) or parse_timestamp(self.metadata.get("creationTimestamp"))

    def propagation(self) -> str:
        value = str(self.spec.get("deletionPropagationPolicy") or "")
        return value if value in PROPAGATION_POLICIES else ""


def scheduled_policies(snapshot: Any) -> list[ScheduledPolicy]:
    """Deleting and cleanup policies of a snapshot that the store did not reject."""
    from stockade.webhook.policystore import accepted_documents

    return [ScheduledPolicy(document.data) for document in accepted_documents(snapshot, _is_scheduled_policy)]


def _is_scheduled_policy(data: dict[str, Any]) -> bool:
    api_version = str(data.get("apiVersion") or "")
    kind = str(data.get("kind") or "")
    return (kind in DELETING_POLICY_KINDS and api_version.startswith("policies.kyverno.io/")) or (
        kind in CLEANUP_POLICY_KINDS and api_version.startswith("kyverno.io/")
    )


def cleanup_kinds(spec: dict[str, Any]) -> list[str]:
    """Every ``kinds`` entry of a cleanup policy's match block."""
    match = spec.get("match") or {}
    kinds: list[str] = []
    for block in [*(match.get("any") or []), *(match.get("all") or []), match]:
        for kind in ((block or {}).get("resources") or {}).get("kinds") or []:
            if str(kind) not in kinds:
                kinds.append(str(kind))
    return kinds


@dataclass
class CleanupStats:
    runs: int = 0
    deleted: int = 0
    failures: int = 0
    skipped: list[str] = field(default_factory=list)


class ScheduledDeletionController(LeaderPeriodicWorker):
    """Runs deleting and cleanup policies on their schedules (leader only)."""

    def __init__(
        self,
        api_client: Any,
        store: Any,
        *,
        cluster_data: ClusterData | None = None,
        events: Any = None,
        is_leader: Callable[[], bool] = lambda: True,
        clock: Clock = utc_now,
        tick_seconds: float = 10.0,
        write_status: bool = True,
        acting_user: str = "",
    ) -> None:
        self.store = store
        self.cluster = cluster_data or ClusterData(api_client, ttl_seconds=0.0)
        # Kyverno's cleanup controller lists and deletes targets with its own account, so an object its RBAC does
        # not cover stays; ``acting_user`` is that account (impersonated), empty to act with our own rights
        self.acting = ClusterData(self.cluster.api_client, ttl_seconds=0.0, impersonate=acting_user) if acting_user else self.cluster
        self.events = events
        self.clock = clock
        self.tick_seconds = tick_seconds
        LeaderPeriodicWorker.__init__(self, is_leader, tick_seconds)
        self.write_status = write_status
        self.stats = CleanupStats()
        self._last_run: dict[str, dt.datetime] = {}  # our own runs: the snapshot does not follow status writes

    thread_name = "scheduled-deletion"

    def run_once(self) -> object:
        return self.run_due()

    # -- scheduling --------------------------------------------------------------------------------------------------
    def next_run(self, policy: ScheduledPolicy) -> dt.datetime | None:
        """When the policy fires next; None when its schedule is invalid or it has no reference time."""
        since = self._last_run.get(policy.key) or policy.due_after()
        if since is None:
            since = self.clock()
            self._last_run[policy.key] = since
        try:
            return parse_schedule(str(policy.spec.get("schedule") or "")).next_after(since)
        except ScheduleError as exc:
            if policy.key not in self.stats.skipped:
                self.stats.skipped.append(policy.key)
                log.error("%s: spec.schedule: %s", policy.key, exc)
            return None

    def run_due(self) -> list[str]:
        """Run every policy whose time has come; returns their keys."""
        now = self.clock()
        ran: list[str] = []
        live = {policy.key for policy in scheduled_policies(self.store.snapshot)}
        for key in [k for k in self._last_run if k not in live]:
            del self._last_run[key]
        for policy in scheduled_policies(self.store.snapshot):
            due = self.next_run(policy)
            if due is None or now < due:
                continue
            self.execute(policy)
            self._last_run[policy.key] = now
            self._write_status(policy, now)
            ran.append(policy.key)
        return ran

    # -- one run -------------------------------------------------------------------------------------------------------
    def execute(self, policy: ScheduledPolicy) -> int:
        """Delete what the policy selects now; returns how many objects were deleted."""
        self.stats.runs += 1
        try:
            candidates = self._cleanup_candidates(policy) if policy.is_cleanup else self._deleting_candidates(policy)
        except KubeError as exc:
            log.warning("%s: %s", policy.key, exc)
            return 0
        deleted = 0
        for obj in candidates:
            deleted += self._delete(policy, obj)
        return deleted

    def _list(self, resource: ApiResource, namespace: str, policy: ScheduledPolicy) -> list[dict[str, Any]]:
        try:
            return self.acting.list_resource(resource, namespace, cached=False)
        except (Unauthorized, Forbidden, NotFound, MethodNotAllowed) as exc:  # access restrictions: skip the kind, as Kyverno does
            log.info("%s: skipping %s: %s", policy.key, resource.resource, exc)
            return []

    def _namespace_object(self, namespace: str, cache: dict[str, dict[str, Any] | None]) -> dict[str, Any] | None:
        if not namespace:
            return None
        if namespace not in cache:
            cache[namespace] = self.cluster.get_object("v1", "Namespace", "", namespace, cached=False)
        return cache[namespace]

    def _deleting_candidates(self, policy: ScheduledPolicy) -> list[dict[str, Any]]:
        from stockade.celpolicy.evaluator import CelPolicyEvaluator
        from stockade.celpolicy.model import CelPolicy

        cel_policy = CelPolicy(policy.raw)
        evaluator = CelPolicyEvaluator(
            providers={"resource": ClusterCelResources(self.cluster), "http": ClusterCelHttp(), "globalContext": ClusterGlobalContext(self.cluster)}
        )
        rules = (policy.spec.get("matchConstraints") or {}).get("resourceRules") or []
        namespaces: dict[str, dict[str, Any] | None] = {}
        chosen: list[dict[str, Any]] = []
        for resource in resources_for_rules(self.cluster.api_resources(), rules):
            if policy.namespace and not resource.namespaced:
                log.warning("%s: cluster-scoped %s cannot be deleted by a namespaced policy", policy.key, resource.resource)
                continue
            for obj in self._list(resource, policy.namespace, policy):
                namespace = str((obj.get("metadata") or {}).get("namespace") or "")
                response = evaluator.delete(cel_policy, obj, self._namespace_object(namespace, namespaces))
                if response is None or not response.rules:
                    continue
                result = response.rules[0]
                if result.status == "pass":
                    chosen.append(obj)
                elif result.status == "error":
                    self.stats.failures += 1
                    log.warning("%s on %s: %s", policy.key, _describe(obj), result.message)
        return chosen

    def _cleanup_candidates(self, policy: ScheduledPolicy) -> list[dict[str, Any]]:
        from stockade.engine.context import EngineContext
        from stockade.engine.contextloader import ContextLoader
        from stockade.engine.match import ResourceKind, match_reasons
        from stockade.engine.preconditions import evaluate_conditions

        spec = policy.spec
        ctx = EngineContext()
        loader = ContextLoader(self.cluster.providers(), policy.name, policy.namespace)
        try:
            loader.load(spec.get("context") or [], ctx, "")
        except Exception as exc:
            self.stats.failures += 1
            log.warning("%s: loading context failed: %s", policy.key, exc)
            return []
        rule = {"match": spec.get("match") or {}, "exclude": spec.get("exclude") or {}}
        labels_of: dict[str, dict[str, str]] = {}
        chosen: list[dict[str, Any]] = []
        seen: set[tuple[str, str]] = set()
        for selector in cleanup_kinds(spec):
            for resource in self.cluster.resources_for_selector(selector):
                if (resource.group, resource.resource) in seen:
                    continue
                seen.add((resource.group, resource.resource))
                for obj in self._list(resource, policy.namespace, policy):
                    namespace = str((obj.get("metadata") or {}).get("namespace") or "")
                    if namespace and namespace not in labels_of:
                        labels_of[namespace] = self.cluster.namespace_labels(namespace)
                    reasons = match_reasons(
                        rule, obj, ResourceKind.of(obj), namespace_labels=labels_of.get(namespace, {}), policy_namespace=policy.namespace
                    )
                    if reasons:
                        continue
                    if spec.get("conditions") is not None:
                        ctx.checkpoint()
                        try:
                            ctx.set("target", obj)
                            ctx.set("request", {"namespace": namespace})
                            passed, _ = evaluate_conditions(spec.get("conditions"), ctx)
                        except Exception as exc:
                            self.stats.failures += 1
                            log.warning("%s on %s: conditions: %s", policy.key, _describe(obj), exc)
                            continue
                        finally:
                            ctx.restore()
                        if not passed:
                            continue
                    chosen.append(obj)
        return chosen

    def _delete(self, policy: ScheduledPolicy, obj: dict[str, Any]) -> int:
        metadata = obj.get("metadata") or {}
        resource = self.cluster.resolve_kind(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
        if resource is None:
            return 0
        query = {"propagationPolicy": policy.propagation()} if policy.propagation() else None
        what = f"{obj.get('kind')}/{metadata.get('namespace') or ''}/{metadata.get('name')}"
        try:
            self.acting.request("DELETE", object_path(resource, str(metadata.get("namespace") or ""), str(metadata.get("name") or "")), query=query)
        except NotFound:
            return 0
        except KubeError as exc:
            self.stats.failures += 1
            verb = "clean up" if policy.is_cleanup else "delete"
            self._event(policy, obj, REASON_ERROR, f"failed to {verb} the target resource {what}: {exc}", "Warning", ACTION_NONE)
            log.warning("%s: deleting %s failed: %s", policy.key, what, exc)
            return 0
        self.stats.deleted += 1
        verb = "cleaned up" if policy.is_cleanup else "deleted"
        self._event(policy, obj, REASON_APPLIED, f"successfully {verb} the target resource {what}", "Normal", ACTION_CLEANED_UP)
        log.info("%s deleted %s", policy.key, what)
        return 1

    def _event(self, policy: ScheduledPolicy, obj: dict[str, Any], reason: str, message: str, event_type: str, action: str) -> None:
        if self.events is None:
            return
        from stockade.controllers.events import SOURCE_CLEANUP, EventSpec

        regarding = {
            "apiVersion": "kyverno.io/v2" if policy.is_cleanup else str(policy.raw.get("apiVersion") or ""),
            "kind": policy.kind,
            "name": policy.name,
            "namespace": policy.namespace,
            "uid": str(policy.metadata.get("uid") or ""),
        }
        self.events.submit(
            EventSpec(
                namespace=policy.namespace or "default",
                regarding=tuple((k, v) for k, v in regarding.items() if v),
                reason=reason,
                message=message,
                type=event_type,
                action=action,
                source=SOURCE_CLEANUP,
            )
        )

    def _write_status(self, policy: ScheduledPolicy, moment: dt.datetime) -> None:
        if not self.write_status:
            return
        group, _, version = str(policy.raw.get("apiVersion") or "").rpartition("/")
        plural = {
            "DeletingPolicy": "deletingpolicies",
            "NamespacedDeletingPolicy": "namespaceddeletingpolicies",
            "CleanupPolicy": "cleanuppolicies",
            "ClusterCleanupPolicy": "clustercleanuppolicies",
        }[policy.kind]
        resource = ApiResource(group, version, plural, policy.kind, bool(policy.namespace))
        path = object_path(resource, policy.namespace, policy.name) + "/status"
        body = {"status": {"lastExecutionTime": format_timestamp(moment)}}
        try:
            self.cluster.request("PATCH", path, body, content_type="application/merge-patch+json")
        except KubeError as exc:
            log.warning("%s: writing status.lastExecutionTime failed: %s", policy.key, exc)


def _describe(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{obj.get('kind', '')}/{metadata.get('namespace') or ''}/{metadata.get('name', '')}"

