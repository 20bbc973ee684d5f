"""MutatingPolicy ``mutateExisting`` in a cluster: patch objects that exist already, as Kyverno's background
controller does for its CELMutate update requests.

What triggers it:

* an admitted request the policy's ``matchConstraints`` and ``matchConditions`` select (the MutatingPolicy's own
  webhook reports it, with the policy names its path carries; admission-disabled policies are never triggered so),
  a subresource request (``pods/exec`` CONNECT, ``pods/eviction`` CREATE) included when its rules name the
  subresource: its object (never stored) is the trigger as the request carried it;
* a policy appearing or changing (leader): without a target expression, every target that exists is mutated on
  behalf of itself; with one, every existing trigger resolves its targets.

Which objects are mutated: ``targetMatchConstraints`` resource rules when the policy has them (and no expression),
else its ``matchConstraints``, listed per resource (``resourceNames``, ``namespaceSelector``, ``objectSelector``;
a namespaced policy's own namespace only); or the objects ``targetMatchConstraints.expression`` returns for the
trigger (a DELETE trigger is its deleted object).  Each target then passes ``targetMatchConditions`` and the
mutations run with ``object`` = the target and ``request`` = the trigger's request.  A target whose result equals
it is left alone; otherwise it is written back with a PUT (recomputed on a conflict).  A target the Kyverno
ConfigMap's ``resourceFilters`` name is skipped, as Kyverno's background processor skips it.

Requests by the background controller (the configured background user, Kyverno's background controller service
account, or the user our controllers write as: the generate controller's test) trigger only policies that set
``spec.evaluation.skipBackgroundRequests: false``.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stockade.celpolicy.model import CelPolicy
from stockade.celpolicy.request import AdmissionInput
from stockade.controllers.clusterdata import ClusterCelResources, ClusterData, api_version_of, object_path
from stockade.controllers.reports import PROCESS_BACKGROUND, submit_rule_result
from stockade.engine.kyvernoconfig import KyvernoConfig
from stockade.engine.match import ResourceKind, selector_matches
from stockade.engine.response import ERROR, PASS
from stockade.errors import StockadeError
from stockade.kube.errors import KubeError, NotFound, retry_on_conflict
from stockade.wildcard import match as wildcard_match

log = logging.getLogger("stockade.celmutate")

MUTATING_POLICY_KINDS = ("MutatingPolicy", "NamespacedMutatingPolicy")
CONFLICT_ATTEMPTS = 4


def target_expression(policy: CelPolicy) -> str:
    constraints = policy.spec.get("targetMatchConstraints")
    return str(constraints.get("expression") or "") if isinstance(constraints, dict) else ""


def target_constraints(policy: CelPolicy) -> dict[str, Any]:
    """The constraints that list a policy's targets: ``targetMatchConstraints`` with resource rules (and no
    expression), else ``matchConstraints``."""
    constraints = policy.spec.get("targetMatchConstraints")
    if isinstance(constraints, dict) and constraints.get("resourceRules") and not constraints.get("expression"):
        return constraints
    matched = policy.spec.get("matchConstraints")
    return matched if isinstance(matched, dict) else {}


def target_subresource(policy: CelPolicy, resource: Any) -> str:
    """The subresource a target is written through (Kyverno's resolveTargetRoute): the first target resource rule
    naming the target's group, version and resource, when it names ``resource/subresource`` (``pods/resize`` changes
    a Pod's resources in place, which a write of the Pod itself may not)."""
    constraints = policy.spec.get("targetMatchConstraints")
    if not (isinstance(constraints, dict) and constraints.get("resourceRules")):
        constraints = {} if target_expression(policy) else target_constraints(policy)
    for rule in constraints.get("resourceRules") or []:
        if not isinstance(rule, dict):
            continue
        if not any(wildcard_match(str(group), resource.group) for group in rule.get("apiGroups") or []):
            continue
        if not any(wildcard_match(str(version), resource.version) for version in rule.get("apiVersions") or []):
            continue
        for name in rule.get("resources") or []:
            base, _, subresource = str(name).partition("/")
            if wildcard_match(base, resource.resource):
                return subresource
    return ""


def policy_key(policy: CelPolicy) -> str:
    """How Kyverno names a policy in webhook paths and update requests: ``namespace/name`` when namespaced."""
    return f"{policy.namespace}/{policy.name}" if policy.namespace else policy.name


def mutating_policies(snapshot: Any) -> list[CelPolicy]:
    """The loaded (Namespaced)MutatingPolicies with mutateExisting enabled."""
    return [p for p in getattr(snapshot, "cel_policies", None) or [] if p.kind in MUTATING_POLICY_KINDS and p.mutates_existing]


@dataclass(frozen=True)
class CelMutateTrigger:
    """An admitted request reported by a MutatingPolicy webhook: which policies it named (None: any) and the request."""

    operation: str
    object: dict[str, Any]
    old_object: dict[str, Any]
    user_info: dict[str, Any] = field(default_factory=dict)
    policies: tuple[str, ...] | None = None
    namespaced: bool | None = None  # the webhook's family: cluster-wide or namespaced policies (None: both)
    # a subresource request (``pods/exec`` CONNECT, ``pods/eviction`` CREATE): the subresource, the parent resource's
    # (group, version, request kind, plural) it is matched by, and the request's name (a PodExecOptions has none)
    subresource: str = ""
    parent: tuple[str, str, str, str] | None = None
    request_name: str = ""

    @property
    def subject(self) -> dict[str, Any]:
        return self.object or self.old_object

    def describe(self) -> str:
        metadata = self.subject.get("metadata") or {}
        namespace = metadata.get("namespace") or ""
        name = metadata.get("name") or self.request_name
        what = f"{self.subject.get('kind', '')}/{namespace + '/' if namespace else ''}{name}"
        return f"{what} ({self.subresource})" if self.subresource else what


class TriggerNotStored(StockadeError):
    """A CREATE/UPDATE trigger is not (yet) readable: its targets are resolved once it is."""


@dataclass
class CelMutateStats:
    mutated: int = 0
    unchanged: int = 0
    conflicts: int = 0
    failures: int = 0
    errors: list[str] = field(default_factory=list)


class CelMutateExisting:
    """Resolves and writes the targets of mutateExisting MutatingPolicies (the generate worker queues the work)."""

    def __init__(
        self,
        cluster: ClusterData,
        snapshot: Callable[[], Any],
        *,
        background_username: str = "",
        is_background: Callable[[str], bool] | None = None,
        events: Any = None,
        reports: Any = None,
        kyverno_config: Callable[[], KyvernoConfig] | None = None,
    ) -> None:
        self.cluster = cluster
        self.snapshot = snapshot
        # Kyverno's ConfigMap as it is now: its resourceFilters keep targets out (None: Kyverno's defaults, no filter)
        self.kyverno_config = kyverno_config
        self.background_username = background_username
        # whether a user name is the background controller's (the generate controller's own test, so generate and
        # mutateExisting agree on it); without one, the configured background user alone
        self._is_background = is_background
        self.events = events
        # a ReportWriter: each evaluated target's result goes into its own report (Kyverno's mutateExisting reports)
        self.reports = reports
        self.stats = CelMutateStats()
        self._known: dict[str, Any] | None = None

    # -- inputs ----------------------------------------------------------------------------------------------------
    def policies(self) -> list[CelPolicy]:
        return mutating_policies(self.snapshot())

    def evaluator(self) -> Any:
        from stockade.celpolicy.evaluator import CelPolicyEvaluator

        snapshot = self.snapshot()
        exceptions = [
            CelPolicy(d.data, d.origin)
            for d in (getattr(snapshot, "documents", ()) or ())
            if d.kind == "PolicyException" and str(d.data.get("apiVersion", "")).startswith("policies.kyverno.io/")
        ]
        return CelPolicyEvaluator(providers={"resource": ClusterCelResources(self.cluster)}, exceptions=exceptions)

    def is_background_request(self, user_info: dict[str, Any]) -> bool:
        username = str(user_info.get("username") or "")
        if self._is_background is not None:
            return self._is_background(username)
        return bool(self.background_username) and username == self.background_username

    # -- admission triggers ----------------------------------------------------------------------------------------
    def wanted(self, trigger: CelMutateTrigger) -> list[CelPolicy]:
        """The admission-enabled mutateExisting policies this trigger's webhook named."""
        names = set(trigger.policies) if trigger.policies is not None else None
        background = self.is_background_request(trigger.user_info)
        chosen = []
        for policy in self.policies():
            if not policy.admission:
                continue  # admission-disabled policies run on policy events only
            if trigger.namespaced is not None and policy.is_namespaced != trigger.namespaced:
                continue
            if names is not None and policy.name not in names and policy_key(policy) not in names:
                continue
            if background and policy.skips_background_requests:
                continue
            chosen.append(policy)
        return chosen

    def process_trigger(self, trigger: CelMutateTrigger) -> list[str]:
        """Mutate the targets of every policy the trigger selects; returns the failures (empty when all went well).
        Raises TriggerNotStored when a policy must read the trigger and it is not stored yet."""
        policies = self.wanted(trigger)
        if not policies:
            return []
        evaluator = self.evaluator()
        request = self._request(
            trigger.operation,
            trigger.object or None,
            trigger.old_object or None,
            trigger.user_info,
            subresource=trigger.subresource,
            parent=trigger.parent,
            request_name=trigger.request_name,
        )
        failures: list[str] = []
        for policy in policies:
            try:
                if not evaluator.triggers_mutate_existing(policy, request):
                    continue
                failures.extend(self._apply(evaluator, policy, request, refetch=True))
            except TriggerNotStored:
                raise
            except Exception as exc:  # one broken policy must not stop the others
                failures.append(f"{policy.key} on {trigger.describe()}: {type(exc).__name__}: {exc}")
        return failures

    def _request(
        self,
        operation: str,
        obj: dict[str, Any] | None,
        old: dict[str, Any] | None,
        user_info: dict[str, Any],
        *,
        subresource: str = "",
        parent: tuple[str, str, str, str] | None = None,
        request_name: str = "",
    ) -> AdmissionInput:
        subject = obj or old or {}
        namespace = str((subject.get("metadata") or {}).get("namespace") or "")
        namespace_object = None
        if namespace and subject.get("kind") != "Namespace":
            try:
                namespace_object = self.cluster.get_object("v1", "Namespace", "", namespace, cached=False)
            except KubeError as exc:
                log.warning("could not read namespace %s: %s", namespace, exc)
        return AdmissionInput(
            object=obj,
            old_object=old,
            operation=operation,
            user_info=dict(user_info),
            namespace_object=namespace_object,
            subresource=subresource,
            parent=parent,
            request_name=request_name,
        )

    # -- policy events ---------------------------------------------------------------------------------------------
    def reconcile(self) -> None:
        """Apply policies that are new or changed since the last call to what exists now (leader)."""
        current = {p.key: p for p in self.policies()}
        previous = self._known or {}
        for key, policy in current.items():
            known = previous.get(key)
            if known is not None and known.raw.get("spec") == policy.raw.get("spec"):
                continue
            for failure in self.apply_policy(policy):
                log.warning("mutate existing on policy event: %s", failure)
        self._known = current

    def apply_policy(self, policy: CelPolicy) -> list[str]:
        """The policy over what exists: each existing trigger when it has a target expression, else each target on
        behalf of itself (an UPDATE of the target), as Kyverno's policy-event update requests do."""
        evaluator = self.evaluator()
        failures: list[str] = []
        if target_expression(policy):
            for trigger in self.list_matching(policy, policy.spec.get("matchConstraints") or {}):
                request = self._request("UPDATE", trigger, None, {})
                try:
                    failures.extend(self._apply(evaluator, policy, request, refetch=False))
                except Exception as exc:
                    failures.append(f"{policy.key} on {_describe(trigger)}: {type(exc).__name__}: {exc}")
            return failures
        for target in self.list_matching(policy, target_constraints(policy)):
            if self.filtered(policy, target):
                continue
            failures.extend(self._mutate(evaluator, policy, target, AdmissionInput(object=target, operation="UPDATE")))
        return failures

    # -- targets ---------------------------------------------------------------------------------------------------
    def filtered(self, policy: CelPolicy, target: dict[str, Any]) -> bool:
        """Whether the ConfigMap's ``resourceFilters`` name the target (by its kind, the subresource it is written
        through, namespace and name): Kyverno's background processor leaves such a target alone, so e.g. the
        default filters keep objects in ``kube-system`` and ``kyverno`` out of a policy's reach."""
        if self.kyverno_config is None:
            return False
        api_version = str(target.get("apiVersion") or "")
        group, _, version = api_version.rpartition("/")
        metadata = target.get("metadata") or {}
        resource = self.cluster.resolve_kind(api_version, str(target.get("kind") or ""))
        subresource = target_subresource(policy, resource) if resource is not None else ""
        gvk = ResourceKind(group, version, str(target.get("kind") or ""), subresource)
        return self.kyverno_config().is_filtered(gvk, str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))

    def _apply(self, evaluator: Any, policy: CelPolicy, trigger: AdmissionInput, *, refetch: bool) -> list[str]:
        if target_expression(policy):
            # the expression reads the trigger as stored now; a subresource request's object (an Eviction, a
            # PodExecOptions) is never stored, so it reads the object the request carried
            if refetch and trigger.operation != "DELETE" and not trigger.subresource:
                trigger = self._stored(trigger)
            try:
                targets = evaluator.expression_targets(policy, trigger) or []
            except Exception as exc:
                return [f"{policy.key}: target expression failed: {exc}"]
        else:
            targets = self.list_matching(policy, target_constraints(policy))
        failures: list[str] = []
        for target in targets:
            if self.filtered(policy, target):
                continue
            failures.extend(self._mutate(evaluator, policy, target, trigger))
        return failures

    def _audit(self, policy: CelPolicy, target: dict[str, Any], response: Any, rule: Any) -> None:
        """Kyverno's audit of an evaluated target, whether it changed or already was as the policy wants it: the
        result in the target's report, and the Events its admission webhook would write for it (a PolicyApplied
        "<Kind> <ns>/<name> is successfully mutated" when the ConfigMap enables success Events)."""
        if self.events is not None:
            from stockade.controllers.events import audit_events

            config = self.kyverno_config() if self.kyverno_config is not None else None
            for spec in audit_events(target, [response], config):
                self.events.submit(spec)
        if self.reports is None or not (target.get("metadata") or {}).get("uid"):
            return
        submit_rule_result(self.reports, policy, target, rule, process=PROCESS_BACKGROUND, existing=True)

    def _stored(self, trigger: AdmissionInput) -> AdmissionInput:
        """The trigger as stored now (Kyverno resolves target expressions against the stored trigger)."""
        subject = trigger.subject
        metadata = subject.get("metadata") or {}
        try:
            stored = self.cluster.get_object(
                str(subject.get("apiVersion") or ""), str(subject.get("kind") or ""), str(metadata.get("namespace") or ""), str(metadata.get("name") or ""), cached=False
            )
        except KubeError as exc:
            raise TriggerNotStored(f"reading {_describe(subject)}: {exc}") from None
        if stored is None:
            raise TriggerNotStored(f"{_describe(subject)} is not stored yet")
        stored.setdefault("apiVersion", subject.get("apiVersion"))
        stored.setdefault("kind", subject.get("kind"))
        return AdmissionInput(
            object=stored,
            old_object=trigger.old_object,
            operation=trigger.operation,
            user_info=trigger.user_info,
            namespace_object=trigger.namespace_object,
        )

    def list_matching(self, policy: CelPolicy, constraints: dict[str, Any]) -> list[dict[str, Any]]:
        """Objects of the constraints' resource rules (Kyverno's collectGVK then a listing per namespace): names,
        namespace selector and object selector applied; a namespaced policy lists only its own namespace."""
        namespaces: list[str] | None = None  # None: every namespace
        if policy.is_namespaced:
            namespaces = [policy.namespace]
        elif constraints.get("namespaceSelector"):
            selector = constraints["namespaceSelector"]
            namespaces = [
                str((ns.get("metadata") or {}).get("name") or "")
                for ns in self.cluster.list_objects("v1", "Namespace", cached=False)
                if selector_matches(selector, ((ns.get("metadata") or {}).get("labels") or {}))
            ]
        object_selector = constraints.get("objectSelector")
        found: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        for rule in constraints.get("resourceRules") or []:
            if not isinstance(rule, dict):
                continue
            names = [str(n) for n in rule.get("resourceNames") or []]
            for group in rule.get("apiGroups") or []:
                for version in rule.get("apiVersions") or []:
                    for plural in rule.get("resources") or []:
                        base = str(plural).split("/", 1)[0]
                        resource = self.cluster.resolve_resource(str(group), str(version), base)
                        if resource is None:
                            continue  # wildcards and kinds the server does not serve name nothing listable
                        listings = [""] if namespaces is None or not resource.namespaced else namespaces
                        for namespace in listings:
                            for obj in self.cluster.list_resource(resource, namespace, cached=False):
                                metadata = obj.get("metadata") or {}
                                if names and str(metadata.get("name") or "") not in names:
                                    continue
                                if object_selector and not selector_matches(object_selector, metadata.get("labels") or {}):
                                    continue
                                key = (api_version_of(resource), resource.kind, str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
                                found.setdefault(key, obj)
        return list(found.values())

    def _mutate(self, evaluator: Any, policy: CelPolicy, target: dict[str, Any], trigger: AdmissionInput) -> list[str]:
        """Evaluate the policy on one target and write the result back when it changes something; a write that
        lost a resourceVersion race is evaluated again on the object read afresh (``retry_on_conflict``)."""
        state: dict[str, Any] = {"target": target, "stale": False}

        def attempt() -> list[str]:
            current: dict[str, Any] = state["target"]
            if state["stale"]:
                self.stats.conflicts += 1
                resource = self.cluster.resolve_kind(str(current.get("apiVersion") or ""), str(current.get("kind") or ""))
                metadata = current.get("metadata") or {}
                fresh = None if resource is None else self.cluster.get_object(
                    api_version_of(resource), resource.kind, str(metadata.get("namespace") or ""), str(metadata.get("name") or ""), cached=False
                )
                if resource is None or fresh is None:
                    return []
                fresh.setdefault("apiVersion", api_version_of(resource))
                fresh.setdefault("kind", resource.kind)
                current = state["target"] = fresh
            response = evaluator.mutate_target(policy, current, trigger, None, prematched=True)
            rule = response.rules[0] if response is not None and response.rules else None
            if rule is None or rule.status not in (PASS, ERROR):
                return []
            if rule.status == ERROR:
                self.stats.failures += 1
                log.warning("mutate existing %s on %s: %s", policy.key, _describe(current), rule.message)
                return []  # Kyverno writes nothing for a failed evaluation
            patched = rule.patched_target
            if patched is None or _same(patched, current):
                self.stats.unchanged += 1
                self._audit(policy, current, response, rule)
                return []
            resource = self.cluster.resolve_kind(str(current.get("apiVersion") or ""), str(current.get("kind") or ""))
            if resource is None:
                return [f"{policy.key}: kind {current.get('apiVersion')}/{current.get('kind')} is not served"]
            metadata = current.get("metadata") or {}
            body = copy.deepcopy(patched)
            body.setdefault("metadata", {})["resourceVersion"] = metadata.get("resourceVersion")
            state["stale"] = True  # if the write below conflicts
            path = object_path(resource, str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
            subresource = target_subresource(policy, resource)
            self.cluster.request("PUT", f"{path}/{subresource}" if subresource else path, body)
            self.stats.mutated += 1
            log.info("mutated %s (policy %s)", _describe(current), policy.key)
            self._audit(policy, current, response, rule)
            return []

        try:
            return retry_on_conflict(attempt, attempts=CONFLICT_ATTEMPTS)
        except NotFound:
            return []  # deleted since it was listed
        except KubeError as exc:
            self.stats.failures += 1
            return [f"{policy.key}: updating {_describe(state['target'])} failed: {exc}"]


def _same(patched: dict[str, Any], target: dict[str, Any]) -> bool:
    return bool(_normalised(patched) == _normalised(target))


def _normalised(obj: Any) -> Any:
    """Compare as Kubernetes' semantic equality does for JSON: empty maps and lists equal absent ones."""
    if isinstance(obj, dict):
        return {k: _normalised(v) for k, v in obj.items() if v not in ({}, [], None)}
    if isinstance(obj, list):
        return [_normalised(v) for v in obj]
    return obj


def _describe(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace") or ""
    return f"{obj.get('kind', '')}/{namespace + '/' if namespace else ''}{metadata.get('name', '')}"

