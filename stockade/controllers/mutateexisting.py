"""Mutate existing (``mutate.targets``) in a cluster: patch other, already stored objects when a trigger is admitted.

The engine computes each patched target (``RuleResponse.patched_target``); this module writes them back through the
API server, the way Kyverno's background mutate-existing controller does:

* an admitted CREATE/UPDATE/DELETE of a trigger runs the policy's mutate-existing rules on it (for a DELETE the
  deleted object stands in for ``request.object``, as in Kyverno's background context); as Kyverno's webhook
  handler chooses them, a DELETE runs only the rules whose match names the DELETE operation, and a request of the
  background controller itself only the rules with ``skipBackgroundRequests: false`` (`rules_for_trigger`);
* every patched target is written with a PUT carrying the ``resourceVersion`` it was computed from; on a conflict the
  rule is evaluated again on the fresh object (a few times), then the event goes back to the shared retry queue;
* ``mutateExistingOnPolicyUpdate: true`` (rule-level, or the deprecated policy-level field): when a policy is created
  or its spec changes, every such rule of it is applied to the triggers that exist already, evaluated with no
  operation (Kyverno's policy controller builds that context without one, so a rule whose match lists
  ``operations`` never applies there and ``request.operation`` is empty);
* every result of a trigger's evaluation goes into the trigger's report (passes with the patched target, skips,
  errors), before the writes, as Kyverno's background controller reports them;
* each written target produces Kyverno's ``PolicyApplied`` "resource mutated" Event on the policy (a success Event:
  only when the ConfigMap's ``generateSuccessEvents`` allows it) and each failed write a ``PolicyError`` "policy
  <name>/<rule> error: …" Event, both naming the target as the related object; a rule that fails or errors before
  any target is patched has no target, and Kyverno then writes no Event (the trigger event is retried).

It has no queue of its own: ``GenerateController`` feeds it trigger events, policy changes and retries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stockade.controllers.clusterdata import ClusterData, describe_object, object_identity, object_path
from stockade.controllers.reports import resource_reference, submit_rule_results
from stockade.engine.engine import Engine, Request
from stockade.engine.match import RequestInfo, ResourceKind
from stockade.engine.response import ERROR, FAIL, PASS, WARN, EngineResponse, RuleResponse
from stockade.policy.model import RULE_TYPE_MUTATION, KyvernoPolicy, Rule
from stockade.errors import StockadeError
from stockade.kube.errors import Conflict, KubeError, retry_on_conflict

log = logging.getLogger("stockade.mutateexisting")

EVENT_SOURCE = "kyverno-mutate"  # Kyverno's event source for mutate existing
REASON_APPLIED = "PolicyApplied"
REASON_ERROR = "PolicyError"
ACTION_MUTATED = "Resource Mutated"
ACTION_NONE = "None"
CONFLICT_ATTEMPTS = 4  # evaluations per target before a conflict goes to the shared retry queue (retry_on_conflict)


class TriggerFailure(StockadeError):
    """A rule that could not be applied for one trigger event (a generate rule, or a mutate-existing target); the
    generate controller's worker retries the event with backoff."""

    def __init__(self, policy: str, rule: str, resource: str, message: str) -> None:
        super().__init__(f"policy {policy} rule {rule} on {resource}: {message}")
        self.policy = policy
        self.rule = rule
        self.resource = resource


def mutate_existing_rules(policy: KyvernoPolicy) -> dict[str, Rule]:
    return {rule.name: rule for rule in policy.rules if rule.has_mutate_existing()}


def rules_for_trigger(policy: KyvernoPolicy, operation: str, background_request: bool) -> list[Rule]:
    """The mutate-existing rules an admitted request runs, as Kyverno's webhook handler picks them: for a DELETE
    only the rules whose match names the DELETE operation (deleting a trigger is no reason to patch its targets
    otherwise), and for a request of the background controller only the rules that set
    ``skipBackgroundRequests: false`` (the default skips them, so our own writes do not trigger us again)."""
    from stockade.controllers.generate import matches_delete_operation, skips_background_requests

    rules = list(mutate_existing_rules(policy).values())
    if operation == "DELETE":
        rules = [rule for rule in rules if matches_delete_operation(rule)]
    if background_request:
        rules = [rule for rule in rules if not skips_background_requests(rule)]
    return rules


def on_policy_update(policy: KyvernoPolicy, rule: Rule) -> bool:
    """The rule's ``mutateExistingOnPolicyUpdate`` wins over the policy's deprecated one."""
    value = (rule.mutate or {}).get("mutateExistingOnPolicyUpdate")
    if value is not None:
        return bool(value)
    return bool(policy.spec.get("mutateExistingOnPolicyUpdate", False))


def success_message() -> str:
    return "resource mutated"


def failure_message(policy: KyvernoPolicy, rule: str, error: str) -> str:
    return f"policy {policy.name}/{rule} error: {error}" if rule else f"policy {policy.name} error: {error}"


@dataclass
class MutateExistingStats:
    mutated: int = 0
    conflicts: int = 0
    failures: int = 0
    skipped: int = 0
    errors: list[str] = field(default_factory=list)


class MutateExisting:
    """Applies mutate-existing rules for the generate controller's worker (which owns queueing and retries)."""

    def __init__(
        self,
        cluster: ClusterData,
        engine_factory: Callable[[], Engine],
        *,
        events: Any = None,
        reports: Any = None,
        is_background: Callable[[str], bool] | None = None,
    ) -> None:
        self.cluster = cluster
        self.engine_factory = engine_factory
        # whether a requester is the background controller (the generate controller's test, so generate and mutate
        # existing agree on it); None: no request is one
        self.is_background = is_background
        self.events = events  # EventRecorder-like: submit(EventSpec)
        self.reports = reports  # ReportWriter-like: the trigger's report gets each mutated target (Kyverno's)
        self.stats = MutateExistingStats()
        self._known: dict[str, tuple[KyvernoPolicy, dict[str, Rule]]] | None = None

    # -- admission events ------------------------------------------------------------------------------------------
    def process(
        self, policies: list[KyvernoPolicy], operation: str, trigger: dict[str, Any], old: dict[str, Any], info: RequestInfo, gvk: ResourceKind | None
    ) -> list[TriggerFailure]:
        """Run the mutate-existing rules of ``policies`` that ``operation`` and the requester select
        (`rules_for_trigger`) on one admitted trigger; returns what failed."""
        failures: list[TriggerFailure] = []
        background = self.is_background is not None and bool(info.username) and self.is_background(info.username)
        for policy in policies:
            rules = rules_for_trigger(policy, operation, background)
            if rules:
                failures.extend(self.apply(policy, rules, operation, trigger, old, info, gvk))
        return failures

    def apply(
        self,
        policy: KyvernoPolicy,
        rules: list[Rule],
        operation: str,
        trigger: dict[str, Any],
        old: dict[str, Any],
        info: RequestInfo,
        gvk: ResourceKind | None,
    ) -> list[TriggerFailure]:
        """Evaluate and write; the targets whose writes conflicted are recomputed from their fresh state and written
        again (``retry_on_conflict``), the others are not written twice."""
        failures: list[TriggerFailure] = []
        # the targets whose last write conflicted: identity -> (rule, target, the Conflict); None before the first try
        conflicted: dict[tuple[str, str, str, str], tuple[str, dict[str, Any], Conflict]] | None = None

        def attempt() -> None:
            nonlocal conflicted
            pending = None if conflicted is None else set(conflicted)
            if pending:
                self.stats.conflicts += len(pending)
            try:
                response = self.evaluate(policy, rules, operation, trigger, old, info, gvk)
            except Exception as exc:  # one broken policy must not stop the others
                failures.append(TriggerFailure(policy.key, "*", describe_object(trigger), f"{type(exc).__name__}: {exc}"))
                conflicted = {}
                return
            conflicted = {}
            if pending is None:
                self._report(policy, trigger, response)
            for result in response.rules:
                target = result.patched_target
                if pending is not None and (target is None or object_identity(target) not in pending):
                    continue
                try:
                    failure = self._write(policy, result, trigger)
                except Conflict as exc:
                    conflicted[object_identity(target or {})] = (result.name, target or {}, exc)
                    continue
                if failure is not None:
                    failures.append(failure)
            if conflicted:
                raise next(iter(conflicted.values()))[2]

        try:
            retry_on_conflict(attempt, attempts=CONFLICT_ATTEMPTS)
        except Conflict:
            for rule_name, target, exc in (conflicted or {}).values():
                self.stats.failures += 1
                self._event(policy, rule_name, target, str(exc))
                failures.append(TriggerFailure(policy.key, rule_name, describe_object(target), str(exc)))
        return failures

    def evaluate(
        self, policy: KyvernoPolicy, rules: list[Rule], operation: str, trigger: dict[str, Any], old: dict[str, Any], info: RequestInfo, gvk: ResourceKind | None
    ) -> EngineResponse:
        engine = self.engine_factory()
        namespace = str((trigger.get("metadata") or {}).get("namespace") or "")
        labels = self.cluster.namespace_labels(namespace) if namespace else {}
        # the operation as given: empty for the policy-update pass, as Kyverno's policy controller evaluates it
        request = Request(resource=trigger, operation=operation, old_resource=old, info=info, namespace_labels=labels, gvk=gvk)
        pctx = engine.policy_context(policy.with_rules(rules), request)
        if operation == "DELETE":
            # Kyverno's background context loads the trigger (the deleted object) as request.object
            pctx.json_context.add_variable("request.object", trigger)
        return engine.mutate(pctx, include_existing=True)

    def _write(self, policy: KyvernoPolicy, result: RuleResponse, trigger: dict[str, Any]) -> TriggerFailure | None:
        """Write one rule's patched target; its `Conflict` propagates (the caller recomputes the target).  A rule that
        failed, erred or warned patched nothing: a failure to retry, without an Event (it names no target)."""
        if result.status in (ERROR, FAIL, WARN):
            message = f"failed to mutate existing resource, rule {result.name}, response {result.status}: {result.message}"
            self.stats.failures += 1
            return TriggerFailure(policy.key, result.name, describe_object(trigger), message)
        if result.status != PASS:
            self.stats.skipped += 1
            return None
        target = result.patched_target
        if target is None:
            return TriggerFailure(policy.key, result.name, describe_object(trigger), "empty resource to patch")
        resource = self.cluster.resolve_kind(str(target.get("apiVersion") or ""), str(target.get("kind") or ""))
        if resource is None:
            message = f"kind {target.get('apiVersion')}/{target.get('kind')} is not served"
            self._event(policy, result.name, target, message)
            return TriggerFailure(policy.key, result.name, describe_object(target), message)
        metadata = target.get("metadata") or {}
        path = object_path(resource, str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
        if result.target_subresource:
            path += "/" + result.target_subresource  # e.g. a Node/status target: written through its status
        try:
            self.cluster.request("PUT", path, target)
        except Conflict:
            raise
        except KubeError as exc:
            self.stats.failures += 1
            self._event(policy, result.name, target, str(exc))
            return TriggerFailure(policy.key, result.name, describe_object(target), str(exc))
        self.stats.mutated += 1
        log.info("mutated %s (policy %s, rule %s)", describe_object(target), policy.key, result.name)
        self._event(policy, result.name, target, "")
        return None

    def _report(self, policy: KyvernoPolicy, trigger: dict[str, Any], response: EngineResponse) -> None:
        """The trigger's report gets every result of the evaluation, as Kyverno's background controller reports it
        before writing: a patched target ("mutated <Kind>/<name> ...", the target in ``patched-target``), a target
        whose preconditions failed (skip), a rule that erred (a named target missing).  The report's filters
        (``--enableReporting``, allowed results) apply as for any report."""
        if self.reports is None or not (trigger.get("metadata") or {}).get("uid") or not response.rules:
            return
        results = EngineResponse(policy, trigger, trigger)
        for result in response.rules:
            target = result.patched_target
            properties = {**result.properties, "patched-target": resource_reference(target)} if target is not None else dict(result.properties)
            results.rules.append(RuleResponse(result.name, RULE_TYPE_MUTATION, result.status, result.message, properties=properties, exceptions=list(result.exceptions)))
        submit_rule_results(self.reports, trigger, results, existing=True)

    def _event(self, policy: KyvernoPolicy, rule: str, target: dict[str, Any], error: str) -> None:
        """Kyverno's mutate-existing Event on the policy about one target: PolicyError when writing it failed, else
        PolicyApplied (a success Event, subject to ``generateSuccessEvents``).  The related object is the target
        by kind, namespace and name, as Kyverno names it."""
        if self.events is None:
            return
        from stockade.controllers.events import SOURCE_MUTATE, EventSpec

        regarding = {
            "apiVersion": "kyverno.io/v1",
            "kind": policy.kind,
            "name": policy.name,
            "namespace": policy.namespace,
            "uid": str((policy.raw.get("metadata") or {}).get("uid") or ""),
        }
        metadata = target.get("metadata") or {}
        related = {"kind": str(target.get("kind") or ""), "name": str(metadata.get("name") or ""), "namespace": str(metadata.get("namespace") or "")}
        namespace = policy.namespace or "default"
        regarding_ref = tuple((k, v) for k, v in regarding.items() if v)
        related_ref = tuple((k, v) for k, v in related.items() if v)
        if error:
            message = failure_message(policy, rule, error)
            self.events.submit(
                EventSpec(namespace, regarding_ref, REASON_ERROR, message, type="Warning", action=ACTION_NONE, source=SOURCE_MUTATE, related=related_ref)
            )
        else:
            self.events.submit_success(
                EventSpec(namespace, regarding_ref, REASON_APPLIED, success_message(), type="Normal", action=ACTION_MUTATED, source=SOURCE_MUTATE, related=related_ref)
            )

    # -- policy changes --------------------------------------------------------------------------------------------
    def reconcile(self, policies: list[KyvernoPolicy]) -> None:
        """When a policy is new or its spec changed (any part of it, as Kyverno's policy controller compares), apply
        each of its rules with ``mutateExistingOnPolicyUpdate`` to the triggers that exist now (leader)."""
        current = {policy.key: (policy, mutate_existing_rules(policy)) for policy in policies}
        previous = self._known or {}
        for key, (policy, rules) in current.items():
            known = previous.get(key)
            if known is not None and known[0].raw.get("spec") == policy.raw.get("spec"):
                continue
            for rule in rules.values():
                if on_policy_update(policy, rule):
                    self.apply_to_existing(policy, rule)
        self._known = current

    def apply_to_existing(self, policy: KyvernoPolicy, rule: Rule) -> int:
        """One rule over every existing trigger of its kinds, evaluated with no operation as Kyverno's policy-update
        pass does (its background context carries none)."""
        from stockade.controllers.webhookconfig import rule_kinds

        failed = 0
        seen: set[tuple[str, str]] = set()
        for selector in rule_kinds(rule):
            try:
                resources = self.cluster.resources_for_selector(selector)
            except KubeError as exc:
                log.warning("discovery for %s failed: %s", selector, exc)
                continue
            for resource in resources:
                if (resource.group, resource.kind) in seen:
                    continue
                seen.add((resource.group, resource.kind))
                try:
                    triggers = self.cluster.list_resource(resource, policy.namespace, cached=False)
                except KubeError as exc:
                    log.warning("listing %s for policy %s failed: %s", resource.kind, policy.key, exc)
                    continue
                for trigger in triggers:
                    for failure in self.apply(policy, [rule], "", trigger, {}, RequestInfo(), None):
                        failed += 1
                        log.warning("mutate existing on policy update: %s", failure)
        return failed
