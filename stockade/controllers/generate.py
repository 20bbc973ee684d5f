"""Generate rules in a cluster: create and keep in step the downstream resources the engine computes.

The engine (``Engine.generate``) only says *what* a trigger should produce; this controller makes it so, the way
Kyverno's background controller does:

* ``submit(review)`` after an allowed admission queues the trigger; a worker thread evaluates the policies' generate
  rules on it and creates the downstream objects (data, clone, cloneList), labelled like Kyverno's
  (``generate.kyverno.io/policy-name``, ``…/rule-name``, ``…/trigger-*``, ``app.kubernetes.io/managed-by``).
* ``synchronize: true`` keeps them in step: an UPDATE re-applies the rule (or, when the trigger no longer matches,
  deletes its downstream), a DELETE of the trigger deletes them, and ``resync()`` (leader only) restores deleted or
  edited downstream objects and follows clone-source changes.
* When a policy (or one of its generate rules) disappears, synchronized downstream objects are deleted unless the
  rule sets ``orphanDownstreamOnPolicyDelete``; when one appears with ``generateExisting``, it is applied to the
  triggers that already exist.

(Namespaced)GeneratingPolicies flow through the same queue, retries and resync: the CEL evaluator computes what
``generator.Apply`` produced, and the controller labels it as Kyverno's CEL generate controller does (no rule name;
``trigger-name`` and, for clones, ``source-uid``), honouring ``spec.evaluation.synchronize``,
``orphanDownstreamOnPolicyDelete`` and ``generateExisting``.  An existing object that is not already this policy's
downstream of this trigger is left alone, never adopted.

Work runs as keys on the controller runtime's keyed queue (``stockade.kube``, one worker): each admitted event, each
watched object, a policy change and the periodic resync.  Failures are logged with policy, rule and resource and
retried after the key's backoff; nothing is dropped for a full queue.  Admitted ClusterPolicy/Policy work that must
survive a crash is recorded as UpdateRequests instead (``updaterequest``).

The lifecycle, event by event (Kyverno 1.19's policy controller, webhook generation handler and background generate
controller; "sync" = ``synchronize: true``, "orphan" = ``orphanDownstreamOnPolicyDelete``; every downstream object
carries ``app.kubernetes.io/managed-by: kyverno``, ``generate.kyverno.io/policy-name|policy-namespace|rule-name`` and
``trigger-group|version|kind|namespace|uid``; a copy also ``clone-source`` and ``source-group|version|kind|namespace|uid``):

=============================  ==============================================================================================
event                          what happens
=============================  ==============================================================================================
policy created                 (only a policy Kyverno can process in the background: a generate or mutate-existing rule, no
                               requester variables) generateExisting rules run on every existing trigger (create only what
                               is missing; nosync leaves existing targets alone); sync data rules re-apply to triggers that
                               have downstream
policy spec changed            (a metadata-only change does nothing; an update leaving no background rule, or needing the
                               requester, is ignored altogether) a removed rule, sync and not orphan: its downstream (data,
                               clone, cloneList, foreach kinds) is deleted [deviation: a removed *clone* rule keeps its copies while the policy stays, as the
                               suite's cpol-clone-sync-delete-rule expects]; no rule removed: a rule whose target (kind,
                               name, namespace, clone source) or cloneList changed has its old downstream unlabelled (left in
                               place, no longer managed); then every sync *data* rule is re-applied to each trigger named by
                               its downstream labels (changed data, removed list elements reach them; a trigger it no longer
                               applies to keeps them and yields a PolicyError Event); then every generateExisting rule
policy deleted                 sync and not orphan: all downstream of the rule deleted, except the copies of a single
                               ``clone`` (kept: Kyverno's stated intent, kyverno/kyverno#1401, although its cleanup code
                               would delete them too; cloneList copies are deleted); orphan or nosync: left in place
trigger CREATE/UPDATE, passes  the rule applies: missing targets created (sync or not); sync: targets that differ from the
                               rendering rewritten (what others added goes too; server-set metadata aside)
trigger UPDATE, fails          (``no_longer_applies``: new object does not match but the old did, or new fails preconditions
                               the old passed) sync: the trigger's downstream of the rule's kinds deleted; nosync: nothing
trigger UPDATE, never matched  nothing (neither object matched, or both failed preconditions): downstream stays, also when it
                               came from an earlier match (namespace labels changed, policy changed)
trigger DELETE                 once stored (the object gone or terminating; a refused DELETE changes nothing) and the old
                               object matches the rule (operations included), sync: downstream deleted by policy + trigger
                               labels (any rule of the policy, the rule's kinds); a rule matching DELETE generates; a
                               trigger a PolicyException exempts keeps its downstream (on UPDATE too)
downstream edited / deleted    sync: re-applied from the trigger named by its labels (reverted / re-created), unless the
                               rule's match/exclude select the object for that operation (preconditions aside); nosync: left alone (a later trigger UPDATE re-creates a
                               missing target, never rewrites one)
clone source edited            sync: every copy naming it by source-uid is re-applied from its trigger (no other trigger
                               gains a copy)
clone source deleted           sync: the trigger's downstream of the rule's kinds is deleted (cloneList: all its copies)
generate fails                 (clone source missing, API error, rule error, no longer applies when re-applied) a Warning
                               Event, reason PolicyError, on the policy: "policy <name>/<rule> error: <error>", related
                               to the trigger; the work is retried with backoff
periodic resync                the policy-change pass again: sync data rules re-applied to their downstream's triggers,
                               generateExisting rules applied to existing triggers; a sync rule without generateExisting
                               never reaches a trigger it did not see; nothing is ever deleted by it
GeneratingPolicy               same cells with spec.evaluation.synchronize / orphanDownstreamOnPolicyDelete /
                               generateExisting; a sync policy's creation, spec change and periodic pass re-apply it to
                               the triggers its downstream names (deleting what it no longer produces, all of it when the
                               trigger no longer matches; none known: only its kinds are learnt), generateExisting runs
                               over every existing trigger; an UPDATE whose trigger no longer matches deletes its downstream
=============================  ==============================================================================================
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from stockade.celpolicy.evaluator import GeneratedPlacement
from stockade.celpolicy.model import CelPolicy
from stockade.controllers.background import requester_dependency
from stockade.controllers.celmutate import CelMutateExisting, CelMutateTrigger, TriggerNotStored, mutating_policies, policy_key
from stockade.controllers.clusterdata import (
    ClusterCelHttp,
    ClusterCelResources,
    ClusterData,
    ClusterGlobalContext,
    api_version_of,
    collection_path,
    describe_object,
    object_identity,
    object_path,
    resources_for_rules,
)
from stockade.controllers.downstreamwatch import DownstreamWatcher
from stockade.controllers.webhookconfig import ApiResource
from stockade.controllers.events import generate_events, generate_failure_event
from stockade.controllers.mutateexisting import MutateExisting, TriggerFailure
from stockade.controllers.reports import submit_rule_result
from stockade.engine.engine import Engine, Request
from stockade.engine.match import RequestInfo, ResourceKind, match_reasons, selector_matches
from stockade.engine.response import ERROR, PASS, SKIP, EngineResponse
from stockade.policy.model import KyvernoPolicy, Rule
from stockade.errors import StockadeError
from stockade.kube.controller import Controller, FunctionReconciler, Result
from stockade.kube.errors import AlreadyExists, Conflict, KubeError, NotFound
from stockade.kube.workqueue import ItemExponentialBackoff, WorkQueue

log = logging.getLogger("stockade.generate")

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "kyverno"  # Kyverno's value: downstream objects stay recognisable to Kyverno tooling
POLICY_NAME_LABEL = "generate.kyverno.io/policy-name"
POLICY_NAMESPACE_LABEL = "generate.kyverno.io/policy-namespace"
RULE_NAME_LABEL = "generate.kyverno.io/rule-name"
TRIGGER_UID_LABEL = "generate.kyverno.io/trigger-uid"
TRIGGER_NAMESPACE_LABEL = "generate.kyverno.io/trigger-namespace"
TRIGGER_KIND_LABEL = "generate.kyverno.io/trigger-kind"
TRIGGER_GROUP_LABEL = "generate.kyverno.io/trigger-group"
TRIGGER_VERSION_LABEL = "generate.kyverno.io/trigger-version"
TRIGGER_NAME_LABEL = "generate.kyverno.io/trigger-name"
SOURCE_UID_LABEL = "generate.kyverno.io/source-uid"
SOURCE_GROUP_LABEL = "generate.kyverno.io/source-group"
SOURCE_VERSION_LABEL = "generate.kyverno.io/source-version"
SOURCE_KIND_LABEL = "generate.kyverno.io/source-kind"
SOURCE_NAMESPACE_LABEL = "generate.kyverno.io/source-namespace"
CLONE_SOURCE_LABEL = "generate.kyverno.io/clone-source"
GENERATING_POLICY_KINDS = ("GeneratingPolicy", "NamespacedGeneratingPolicy")
FIELD_MANAGER = "stockade-generate"
SELF_SUBJECT_REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
PENDING_BACKOFF_SECONDS = 0.02  # first re-check of a trigger whose admission is still being persisted
PENDING_ATTEMPTS = 12
UPDATE_SETTLE_SECONDS = 1.0  # longest wait for an admitted UPDATE of a trigger to be stored

APPLY = "apply"
POLICY_DOES_NOT_APPLY = "policy does not apply to resource"  # Kyverno's error when a regenerated trigger no longer matches
DELETE = "delete"
NOTHING = "none"


# -- pure decisions (unit-tested) ------------------------------------------------------------------------------------
def label_selector(labels: dict[str, str]) -> str:
    """``k=v,…`` (an empty value selects objects whose label is present and empty, as Kubernetes does)."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def downstream_selector(policy_name: str, policy_namespace: str, rule_name: str | None = None, trigger_uid: str | None = None) -> dict[str, str]:
    """Labels that find the downstream objects of a policy, optionally narrowed to one rule and one trigger."""
    selector = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, POLICY_NAME_LABEL: policy_name, POLICY_NAMESPACE_LABEL: policy_namespace}
    if rule_name is not None:
        selector[RULE_NAME_LABEL] = rule_name
    if trigger_uid is not None:
        selector[TRIGGER_UID_LABEL] = trigger_uid
    return selector


def synchronize(rule: Rule) -> bool:
    return bool((rule.generate or {}).get("synchronize", False))


def orphan_on_policy_delete(rule: Rule) -> bool:
    return bool((rule.generate or {}).get("orphanDownstreamOnPolicyDelete", False))


def generate_existing(policy: KyvernoPolicy, rule: Rule) -> bool:
    """The rule's ``generateExisting`` wins over the policy's (and its legacy ``generateExistingOnPolicyUpdate``)."""
    value = (rule.generate or {}).get("generateExisting")
    if value is not None:
        return bool(value)
    return bool(policy.spec.get("generateExisting", policy.spec.get("generateExistingOnPolicyUpdate", False)))


def matches_delete_operation(rule: Rule) -> bool:
    """Whether a rule names DELETE among its match operations: Kyverno then generates when the trigger is deleted."""
    match = rule.raw.get("match") if isinstance(rule.raw.get("match"), dict) else {}
    assert isinstance(match, dict)
    blocks = [match.get("resources") or {}]
    for key in ("any", "all"):
        blocks += [(entry or {}).get("resources") or {} for entry in match.get(key) or [] if isinstance(entry, dict)]
    return any("DELETE" in (block.get("operations") or []) for block in blocks if isinstance(block, dict))


def _target(spec: dict[str, Any]) -> tuple[Any, ...]:
    return (spec.get("apiVersion"), spec.get("kind"), spec.get("name"), spec.get("namespace"), spec.get("clone") or None)


def retargeted_kinds(old: Rule, new: Rule) -> list[tuple[str, str]]:
    """(apiVersion, kind) of the downstream objects a rule update leaves behind: Kyverno unlabels them (they stop
    being the rule's) when the target (apiVersion, kind, name, namespace, clone source) or the cloneList changed.
    Only the rule's own target counts: for a changed foreach entry Kyverno looks up the rule-level kind, which a
    foreach rule does not have, so its old downstream stays the rule's (and goes with the trigger)."""
    old_generate, new_generate = old.generate or {}, new.generate or {}
    kinds: list[tuple[str, str]] = []
    for before, after in [(old_generate, new_generate)]:
        if _target(before) != _target(after) and before.get("kind"):
            kinds.append((str(before.get("apiVersion") or ""), str(before["kind"])))
        if (before.get("cloneList") or None) != (after.get("cloneList") or None):
            for entry in (before.get("cloneList") or {}).get("kinds") or []:
                api_version, _, kind = str(entry).rpartition("/")
                kinds.append((api_version, kind))
    return list(dict.fromkeys(kinds))


def kyverno_labels_only_if_untyped(labels: Any) -> dict[str, Any]:
    """A generated object's labels as Kyverno writes them: when one of the rule's label values is not a string
    (``elementIndex: '{{ elementIndex }}'`` substitutes a number), Kyverno cannot read the rule's labels and keeps only
    the managed-by and generate.kyverno.io labels it sets itself."""
    found: dict[str, Any] = dict(labels) if isinstance(labels, dict) else {}
    if all(isinstance(value, str) for value in found.values()):
        return found
    return {key: value for key, value in found.items() if key == MANAGED_BY_LABEL or str(key).startswith("generate.kyverno.io/")}


def current_targets(rule: Rule) -> set[tuple[str, str]]:
    """(kind, name) of the objects a rule names without variables (its own downstream, whatever the trigger)."""
    generate = rule.generate or {}
    targets: set[tuple[str, str]] = set()
    for spec in [generate, *[g for g in generate.get("foreach") or [] if isinstance(g, dict)]]:
        kind, name = str(spec.get("kind") or ""), str(spec.get("name") or "")
        if kind and name and "{{" not in name:
            targets.add((kind, name))
    return targets


def clones(rule: Rule) -> bool:
    """Whether a generate rule copies existing objects (clone/cloneList, also inside foreach) rather than data."""
    generate = rule.generate or {}
    specs = [generate, *[g for g in generate.get("foreach") or [] if isinstance(g, dict)]]
    return any(spec.get("clone") or spec.get("cloneList") for spec in specs)


def clones_single(rule: Rule) -> bool:
    """Whether a generate rule copies one named object (``clone``, also inside foreach), not a ``cloneList``."""
    generate = rule.generate or {}
    specs = [generate, *[g for g in generate.get("foreach") or [] if isinstance(g, dict)]]
    return any(spec.get("clone") for spec in specs) and not any(spec.get("cloneList") for spec in specs)


def reacts_to_policy_events(policy: KyvernoPolicy) -> bool:
    """Kyverno's ``canBackgroundProcess``: a policy's creation, spec change and the periodic pass only reach its
    downstream when it has generate or mutate-existing rules and needs no requester (no ``request.userInfo``-like
    variables, no roles/subjects in match/exclude); its deletion cleans up regardless."""
    if not any(rule.has_generate() or rule.has_mutate_existing() for rule in policy.rules):
        return False
    return not requester_dependency(policy)


def skips_background_requests(rule: Rule) -> bool:
    """``skipBackgroundRequests`` (default true): the rule ignores requests made by the generate controller itself."""
    return rule.raw.get("skipBackgroundRequests", True) is not False


def rules_for_request(policy: KyvernoPolicy, background_request: bool) -> tuple[KyvernoPolicy, dict[str, Rule]]:
    """The generate rules a request may run: a background request skips the rules with skipBackgroundRequests (the
    policy is narrowed to the others)."""
    rules = generate_rules(policy)
    if background_request:
        rules = {name: rule for name, rule in rules.items() if not skips_background_requests(rule)}
        policy = policy.with_rules(list(rules.values()))
    return policy, rules


def trigger_action(operation: str, rule_applies: bool, synchronized: bool, generate_on_delete: bool = False) -> str:
    """What a trigger event does to one rule's downstream objects.

    CREATE/UPDATE of a matching trigger applies the rule; with ``synchronized`` (the rule synchronizes *and* the
    trigger matched it before: ``no_longer_applies`` for an UPDATE, the old object matching for a DELETE) an UPDATE
    that no longer applies and a DELETE remove the trigger's downstream objects; otherwise nothing.  A rule matching
    the DELETE operation generates from the deleted trigger instead."""
    if operation == "DELETE" and generate_on_delete:
        return APPLY if rule_applies else NOTHING
    if operation in ("CREATE", "UPDATE") and rule_applies:
        return APPLY
    if operation in ("UPDATE", "DELETE") and synchronized:
        return DELETE
    return NOTHING


def no_longer_applies(new_result: Any, old_result: Any) -> bool:
    """Kyverno's "fail" verdict for an UPDATE of a synchronized rule's trigger, which deletes its downstream: the new
    object does not match the rule but the old one did, or the new one matches but fails the preconditions the old one
    passed.  When neither matched (or both failed the preconditions) nothing happens: the downstream stays, as it
    does when a PolicyException exempts the new object (Kyverno's background check skips such a trigger)."""
    if new_result is None:
        return old_result is not None
    if exempted(new_result):
        return False
    return new_result.status != PASS and new_result.status != ERROR and old_result is not None and old_result.status == PASS


def exempted(result: Any) -> bool:
    """Whether a rule's result is a skip by PolicyExceptions: Kyverno neither generates nor cleans up for it."""
    return result is not None and result.status == SKIP and bool(getattr(result, "exceptions", None))


_UNSTORED_METADATA = ("resourceVersion", "managedFields", "generation")


def update_not_persisted(old: dict[str, Any], new: dict[str, Any], stored: dict[str, Any]) -> bool:
    """Whether the stored object is still the one an admitted UPDATE replaces: same resourceVersion as the old
    object although the update changes something (a no-op update keeps the resourceVersion, and status is not
    written through the main resource)."""
    old_version = str((old.get("metadata") or {}).get("resourceVersion") or "")
    if not old_version or str((stored.get("metadata") or {}).get("resourceVersion") or "") != old_version:
        return False

    def content(obj: dict[str, Any]) -> dict[str, Any]:
        body = {k: v for k, v in obj.items() if k != "status"}
        body["metadata"] = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _UNSTORED_METADATA}
        return body

    return content(old) != content(new)


# metadata the API server sets itself: never part of what a rule renders, so never a difference
_SERVER_SET_METADATA = frozenset({"uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"})


def should_update(desired: dict[str, Any], current: dict[str, Any], synchronized: bool) -> bool:
    """Whether an existing downstream object is rewritten: only for synchronized rules, and whenever it differs from
    what the rule renders.  Kyverno replaces a synchronized data target on every regeneration and a copy unless it
    equals its source, so anything another writer added (a label, an annotation, a field) goes; a difference that is
    only the server's defaults makes a write the server finds to be a no-op."""
    if not synchronized:
        return False
    return _rendered_content(desired) != _rendered_content(current)


def _rendered_content(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as a write would set it: no status, no type fields, no server-set or empty metadata."""
    body = {key: value for key, value in obj.items() if key not in ("status", "apiVersion", "kind", "metadata")}
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(metadata, dict)
    body["metadata"] = {key: value for key, value in metadata.items() if key not in _SERVER_SET_METADATA and value not in (None, {}, [], "")}
    return body


def data_kinds(rule: Rule) -> list[tuple[str, str]]:
    """(apiVersion, kind) of the ``data`` targets of a rule (its own and its foreach entries'), without variables."""
    generate = rule.generate or {}
    kinds: list[tuple[str, str]] = []
    for spec in [generate, *[g for g in generate.get("foreach") or [] if isinstance(g, dict)]]:
        if spec.get("data") is not None and spec.get("kind") and "{{" not in str(spec["kind"]):
            kinds.append((str(spec.get("apiVersion") or ""), str(spec["kind"])))
    return list(dict.fromkeys(kinds))


def downstream_kinds(rule: Rule) -> list[tuple[str, str]]:
    """(apiVersion, kind) of everything a generate rule can produce, to find its downstream objects by label."""
    generate = rule.generate or {}
    kinds: list[tuple[str, str]] = []
    for spec in [generate, *(generate.get("foreach") or [])]:
        if not isinstance(spec, dict):
            continue
        if spec.get("kind"):
            kinds.append((str(spec.get("apiVersion") or ""), str(spec["kind"])))
        for entry in (spec.get("cloneList") or {}).get("kinds") or []:
            api_version, _, kind = str(entry).rpartition("/")
            kinds.append((api_version, kind))
    unique: list[tuple[str, str]] = []
    for item in kinds:
        if item not in unique and "{{" not in item[1]:
            unique.append(item)
    return unique


def evaluation_enabled(policy: CelPolicy, setting: str) -> bool:
    """``spec.evaluation.<setting>.enabled`` of a GeneratingPolicy (synchronize, orphanDownstreamOnPolicyDelete,
    generateExisting); absent means off."""
    evaluation = policy.spec.get("evaluation")
    value = evaluation.get(setting) if isinstance(evaluation, dict) else None
    return bool(value.get("enabled", False)) if isinstance(value, dict) else False


def gpol_matches_delete(policy: CelPolicy) -> bool:
    """Whether a GeneratingPolicy's matchConstraints name the DELETE operation: Kyverno then generates from a deleted
    trigger instead of deleting its downstream."""
    rules = (policy.spec.get("matchConstraints") or {}).get("resourceRules") or []
    return any("DELETE" in (rule.get("operations") or []) for rule in rules if isinstance(rule, dict))


def gpol_selector(policy: CelPolicy, trigger_uid: str | None = None) -> str:
    """Finds a GeneratingPolicy's downstream: Kyverno labels them by policy name (and trigger) without a rule name,
    which also keeps a ClusterPolicy of the same name from claiming them."""
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, POLICY_NAME_LABEL: policy.name}
    if trigger_uid is not None:
        labels[TRIGGER_UID_LABEL] = trigger_uid
    return label_selector(labels) + f",!{RULE_NAME_LABEL}"


def subresource_request_fields(event: "TriggerEvent") -> dict[str, Any]:
    """The request fields a subresource's object does not carry itself (PodExecOptions has no name): Kyverno's
    ``request.name`` is the admission request's."""
    fields: dict[str, Any] = {"name": event.request_name}
    if event.gvk is not None and event.gvk.subresource:
        fields["subResource"] = event.gvk.subresource
    return fields


def gpol_labels(policy: CelPolicy, trigger: dict[str, Any], source_uid: str = "") -> dict[str, str]:
    """The labels Kyverno's CEL generator puts on a downstream object."""
    metadata = trigger.get("metadata") or {}
    api_version = str(trigger.get("apiVersion") or "")
    group, _, version = api_version.rpartition("/")
    labels = {
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
        POLICY_NAME_LABEL: policy.name,
        TRIGGER_NAME_LABEL: str(metadata.get("name") or ""),
        TRIGGER_NAMESPACE_LABEL: str(metadata.get("namespace") or ""),
        TRIGGER_UID_LABEL: str(metadata.get("uid") or ""),
        TRIGGER_KIND_LABEL: str(trigger.get("kind") or ""),
        TRIGGER_GROUP_LABEL: group,
        TRIGGER_VERSION_LABEL: version,
    }
    if source_uid:
        labels[SOURCE_UID_LABEL] = source_uid
    return labels


def owned_by(current: dict[str, Any], policy: CelPolicy, trigger_uid: str) -> bool:
    """Whether an existing object is already this policy's downstream of this trigger (else it is not touched)."""
    labels = (current.get("metadata") or {}).get("labels") or {}
    return (
        labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE
        and labels.get(POLICY_NAME_LABEL) == policy.name
        and labels.get(TRIGGER_UID_LABEL) == trigger_uid
        and RULE_NAME_LABEL not in labels
    )


def generating_policies(snapshot: Any) -> list[CelPolicy]:
    """The snapshot's servable (Namespaced)GeneratingPolicies (documents the store did not reject)."""
    from stockade.webhook.policystore import accepted_documents

    return [CelPolicy(document.data, document.origin) for document in accepted_documents(snapshot, _is_generating_policy)]


def gpols_of_scope(gpols: list[CelPolicy], scope: Any) -> list[CelPolicy]:
    """The GeneratingPolicies a webhook path serves: those its ``gpol``/``ngpol`` path names (a namespaced one in the
    request's namespace is found by name, as Kyverno's handler does), all of them for the catch-all, none for the
    other webhooks."""
    from stockade.webhook.admission import CEL_ROUTES, SCOPE_ALL

    family = getattr(scope, "family", SCOPE_ALL)
    if scope is None or family == SCOPE_ALL:
        return gpols
    # the kind a CEL webhook path serves, as PolicyScope.select picks the policies of the other CEL kinds
    kind = CEL_ROUTES.get(family, ("", ""))[0]
    names = set(getattr(scope, "names", ()) or ())
    return [p for p in gpols if p.kind == kind and p.name in names]


def _is_generating_policy(data: dict[str, Any]) -> bool:
    return str(data.get("kind")) in GENERATING_POLICY_KINDS and str(data.get("apiVersion", "")).startswith("policies.kyverno.io/")


def generate_rules(policy: KyvernoPolicy) -> dict[str, Rule]:
    return {rule.name: rule for rule in policy.rules if rule.has_generate()}


@dataclass(frozen=True)
class DownstreamOrigin:
    """Where a downstream object of a ClusterPolicy/Policy generate rule came from, read from its labels."""

    policy_name: str
    policy_namespace: str
    rule_name: str
    trigger_api_version: str
    trigger_kind: str
    trigger_namespace: str
    trigger_uid: str


def downstream_origin(obj: dict[str, Any]) -> DownstreamOrigin | None:
    """The policy, rule and trigger a Kyverno-labelled downstream object names (None for other objects and for
    GeneratingPolicy downstream, which carries no rule name)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE or not labels.get(POLICY_NAME_LABEL) or not labels.get(RULE_NAME_LABEL):
        return None
    group, version = str(labels.get(TRIGGER_GROUP_LABEL) or ""), str(labels.get(TRIGGER_VERSION_LABEL) or "")
    return DownstreamOrigin(
        str(labels[POLICY_NAME_LABEL]),
        str(labels.get(POLICY_NAMESPACE_LABEL) or ""),
        str(labels[RULE_NAME_LABEL]),
        f"{group}/{version}" if group else version,
        str(labels.get(TRIGGER_KIND_LABEL) or ""),
        str(labels.get(TRIGGER_NAMESPACE_LABEL) or ""),
        str(labels.get(TRIGGER_UID_LABEL) or ""),
    )


def _same_kind(selector_api_version: str, selector_kind: str, obj: dict[str, Any]) -> bool:
    api_version = str(obj.get("apiVersion") or "")
    return selector_kind == obj.get("kind") and (not selector_api_version or selector_api_version == api_version)


def cloned_from(rule: Rule, source: dict[str, Any], old_source: dict[str, Any] | None = None) -> str:
    """How a synchronized rule copies ``source``: ``"clone"`` (its single clone source), ``"cloneList"`` (one of the
    sources its cloneList selects, before or after the change) or ``""``.  Clone coordinates with variables are only
    known per trigger and are not recognised here."""
    generate = rule.generate or {}
    if not synchronize(rule):
        return ""
    metadata = source.get("metadata") or {}
    namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
    for spec in [generate, *[g for g in generate.get("foreach") or [] if isinstance(g, dict)]]:
        clone = spec.get("clone") if isinstance(spec.get("clone"), dict) else None
        if clone and _same_kind(str(spec.get("apiVersion") or ""), str(spec.get("kind") or ""), source):
            if (str(clone.get("namespace") or ""), str(clone.get("name") or "")) == (namespace, name):
                return "clone"
        clone_list = spec.get("cloneList") if isinstance(spec.get("cloneList"), dict) else None
        if clone_list and str(clone_list.get("namespace") or "") == namespace:
            for entry in clone_list.get("kinds") or []:
                api_version, _, kind = str(entry).rpartition("/")
                if not _same_kind(api_version, kind, source):
                    continue
                selector = clone_list.get("selector")
                candidates = [source, *([old_source] if old_source else [])]
                if selector is None or any(selector_matches(selector, (c.get("metadata") or {}).get("labels") or {}) for c in candidates):
                    return "cloneList"
    return ""


# -- work items ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TriggerEvent:
    """An admitted change of a (potential) trigger."""

    operation: str
    resource: dict[str, Any]
    old_resource: dict[str, Any] = field(default_factory=dict)
    info: RequestInfo = field(default_factory=RequestInfo)
    gvk: ResourceKind | None = None
    cel_mutate: CelMutateTrigger | None = None  # set: a MutatingPolicy webhook's request, for mutateExisting only
    subresource: bool = False  # a subresource request (its object is never stored): generate from it, mutate-existing
    # the request's name: a subresource's object (PodExecOptions) carries none of its own (its namespace is set from
    # the request when the review is parsed, as Kyverno's ConvertResource does)
    request_name: str = ""
    # what the event is about (None: everything): the keys of the policies whose generate rules run, the
    # (policy key, rule) pairs of mutate-existing rules, and the GeneratingPolicies that run (Kyverno's names:
    # ``name`` or ``namespace/name``); an UpdateRequest replays one policy (or rule)
    generate_policies: frozenset[str] | None = None
    mutate_rules: frozenset[tuple[str, str]] | None = None
    generating_policies: frozenset[str] | None = None

    @property
    def subject(self) -> dict[str, Any]:
        return self.resource or self.old_resource

    def describe(self) -> str:
        return describe_object(self.subject)


@dataclass(frozen=True)
class WatchedChange:
    """A MODIFIED/DELETED watch event of a resource type GeneratingPolicies produce (``downstreamwatch``)."""

    event_type: str
    obj: dict[str, Any]

    @property
    def operation(self) -> str:
        return "DELETE" if self.event_type == "DELETED" else "UPDATE"

    def describe(self) -> str:
        return f"watched {self.event_type.lower()} {describe_object(self.obj)}"


# keys of the work queue that are not events: a policy change to react to, and the periodic resync
POLICIES_KEY = "policies"
RESYNC_KEY = "resync"


def watched_key(obj: dict[str, Any]) -> str:
    """A watched object's changes share one key: the newest change stands for those not yet processed."""
    metadata = obj.get("metadata") or {}
    return f"watched/{obj.get('apiVersion')}/{obj.get('kind')}/{metadata.get('namespace') or ''}/{metadata.get('name') or ''}"


@dataclass
class GenerateStats:
    """Counters for metrics and tests."""

    created: int = 0
    updated: int = 0
    deleted: int = 0
    failures: int = 0
    retries: int = 0
    processed: int = 0
    resyncs: int = 0


class GenerateController:
    """Applies generate rules in the cluster from admission events and periodic resyncs."""

    def __init__(
        self,
        api_client: Any,
        store: Any,
        *,
        cluster_data: ClusterData | None = None,
        resync_interval: float = 300.0,
        is_leader: Callable[[], bool] = lambda: True,
        max_attempts: int = 6,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 60.0,
        events: Any = None,
        background_username: str = "",
        reports: Any = None,
    ) -> None:
        self.api_client = api_client
        self.store = store
        self.events = events  # an EventRecorder: Kyverno reports each generated resource as Events
        self.reports = reports  # a ReportWriter: GeneratingPolicy results go into the trigger's report, as Kyverno's
        # uncached reads: the controller compares against the live objects it is about to write
        self.cluster = cluster_data or ClusterData(api_client, ttl_seconds=0.0)
        self.resync_interval = resync_interval
        self.is_leader = is_leader
        self.max_attempts = max_attempts
        self.stats = GenerateStats()
        # the work: keys on a keyed queue (one worker), the events they stand for here; a failed key comes back
        # after its backoff, a trigger not stored yet after a much shorter one
        self.backoff = ItemExponentialBackoff[str](base=backoff_seconds, cap=max_backoff_seconds)
        self.pending_backoff = ItemExponentialBackoff[str](base=PENDING_BACKOFF_SECONDS, cap=max_backoff_seconds)
        self.controller = Controller("generate", FunctionReconciler(self.reconcile), needs_leadership=False, queue_factory=lambda: WorkQueue[str](self.backoff, name="generate"))
        self._items: dict[str, TriggerEvent | WatchedChange] = {}
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._known_rules: dict[str, tuple[KyvernoPolicy, dict[str, Rule]]] | None = None
        self._known_gpols: dict[str, CelPolicy] = {}
        # (apiVersion, kind) each GeneratingPolicy has produced: its downstream kinds are only known from expressions
        self._gpol_kinds: dict[str, set[tuple[str, str]]] = {}
        self._own_username: str | None = None
        # Kyverno's backgroundServiceAccountName: its requests are background requests too (skipBackgroundRequests)
        self.background_username = background_username
        self._policies_changed = threading.Event()
        # watches of the kinds synchronized GeneratingPolicies produce (started with the controller in a cluster)
        self.downstream_watch: DownstreamWatcher | None = None
        self._started = False
        # mutate.targets share this queue, retries and leader-only policy reconciliation
        self.mutate_existing = MutateExisting(self.cluster, self._engine, events=events, reports=reports)
        # MutatingPolicy mutateExisting: admission triggers arrive through submit_mutating, policy events here too
        self.cel_mutate = CelMutateExisting(
            self.cluster, lambda: self.store.snapshot, background_username=background_username, is_background=self.is_background_request, events=events, reports=reports
        )
        from stockade.controllers.admissionpolicygen import AdmissionPolicyGenerator

        # ValidatingAdmissionPolicy / MutatingAdmissionPolicy generation follows the same leader-only policy changes
        self.admission_policies = AdmissionPolicyGenerator(self.cluster, events=events)
        # an UpdateRequestWriter: admitted generate/mutate-existing work is recorded in the API server
        self.update_requests: Any = None

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self.store.listeners.append(self._on_snapshot)
        if self.api_client is not None and self.downstream_watch is None:
            self.downstream_watch = DownstreamWatcher(self.cluster, self._on_watched_change)
        self.controller.start()
        self._on_snapshot(None)  # first pass: generateExisting for the policies loaded at start
        if self.resync_interval > 0:
            self.controller.queue.add_after(RESYNC_KEY, self.resync_interval)

    def stop(self, timeout: float = 10.0) -> None:
        if self.downstream_watch is not None:
            self.downstream_watch.stop()
        self.controller.stop(timeout=timeout)
        self._started = False
        try:
            self.store.listeners.remove(self._on_snapshot)
        except ValueError:
            pass

    def leadership_gained(self) -> None:
        """Policy reactions are leader-only and a key handled before leadership is dropped: look again now."""
        if self._started:
            self.controller.enqueue(POLICIES_KEY)

    def _on_snapshot(self, _snapshot: Any) -> None:
        self._policies_changed.set()
        self.controller.enqueue(POLICIES_KEY)

    # -- input -----------------------------------------------------------------------------------------------------
    def submit(self, review: Any, *, served: Collection[KyvernoPolicy] | None = None, route: Any = None) -> Callable[[], None] | None:
        """Take on an allowed, non-dryRun admission (a ``stockade.webhook.admission.AdmissionRequest``); never blocks.
        A subresource request (Pod/eviction, Pod/exec, Pod/binding) triggers generate and mutate-existing rules matched by the
        parent's kind and the subresource; its object (an Eviction, PodExecOptions) is the trigger, recorded with the
        admission request like any other (`updaterequest.plan_subresource_requests`).

        The webhook that admitted the review says whose work it is, as each of Kyverno's webhooks hands on the work of
        its own policies (a review several of them receive is recorded once per policy): ``served``, the
        ClusterPolicies/Policies it serves, and ``route`` (a ``stockade.webhook.admission.Route``), whose scope says
        which GeneratingPolicies; None for either: all of them.

        With ``update_requests`` set, the work is recorded as UpdateRequests: the returned function writes them
        (blocking, bounded by short timeouts) and must have returned before the review is answered; None when nothing
        needs recording."""
        if getattr(review, "dry_run", False) or review.operation not in ("CREATE", "UPDATE", "DELETE", "CONNECT"):
            return None
        snapshot = self.store.snapshot
        if snapshot is None:
            return None
        policies = [p for p in snapshot.policies if p.has_generate() or any(r.has_mutate_existing() for r in p.rules)]
        if policies and served is not None:
            keys = {p.key for p in served}
            policies = [p for p in policies if p.key in keys]
        gpols = gpols_of_scope(generating_policies(snapshot), getattr(route, "scope", None))
        if not policies and not gpols:
            return None
        # this webhook's work: its policies' generate and mutate-existing rules and its GeneratingPolicies
        generate_keys = frozenset(p.key for p in policies if p.has_generate())
        mutate_rules = frozenset((p.key, r.name) for p in policies for r in p.rules if r.has_mutate_existing())
        gpol_keys = frozenset(policy_key(p) for p in gpols)

        def scoped(event: TriggerEvent, request_name: str = "") -> TriggerEvent:
            return dataclasses.replace(event, generate_policies=generate_keys, mutate_rules=mutate_rules, generating_policies=gpol_keys, request_name=request_name)

        kind: ResourceKind | None = None
        if review.sub_resource:
            # CONNECT (pods/exec, pods/attach ...) only ever reaches us as a subresource request
            resource = getattr(review, "resource", None) or {}
            kind = self.subresource_kind(str(resource.get("group") or ""), str(resource.get("version") or ""), str(resource.get("resource") or ""), review.sub_resource)
            if kind is None:
                return None
            event = scoped(TriggerEvent(review.operation, review.object, review.old_object, review.user_info, kind, subresource=True), str(getattr(review, "name", "") or ""))
        elif review.operation == "CONNECT":
            return None
        else:
            event = scoped(TriggerEvent(review.operation, review.object, review.old_object, review.user_info, review.kind))
        writer = self.update_requests
        if writer is None:
            self.submit_event(event)
            return None
        background = self.is_background_request(review.user_info.username)
        gpols = [p for p in gpols if not (background and p.skips_background_requests)]
        return self._recorded(writer, writer.plan(policies, review, gpols, kind=kind), event)

    def _recorded(self, writer: Any, requests: list[dict[str, Any]] | None, event: TriggerEvent) -> Callable[[], None] | None:
        """The function that stores ``requests`` (the caller runs it before answering), falling back to doing the
        whole event in memory when they cannot be stored; None when there is nothing to record (``requests`` None:
        the writer is paused, so the event is queued in memory at once)."""
        if requests is None:
            self.submit_event(event)
            return None
        if not requests:
            return None

        def record() -> None:
            if not writer.write(requests):
                self.submit_event(event)  # fallback: all of it in memory (work done twice is found done)

        return record

    def trigger_replaced(self, event: TriggerEvent) -> str:
        """Why a replayed CREATE/UPDATE can never apply: another object of that name is stored (the request was
        refused after admission); "" when the trigger is stored as admitted, or not stored yet."""
        uid = str((event.resource.get("metadata") or {}).get("uid") or "")
        if not uid:
            return ""
        metadata = event.resource.get("metadata") or {}
        api_version = str(event.resource.get("apiVersion") or "")
        if event.gvk is not None and event.gvk.version:
            api_version = f"{event.gvk.group}/{event.gvk.version}" if event.gvk.group else event.gvk.version
        kind = str(event.resource.get("kind") or (event.gvk.kind if event.gvk else ""))
        stored = self.cluster.get_object(api_version, kind, str(metadata.get("namespace") or ""), str(metadata.get("name") or ""), cached=False)
        stored_uid = str(((stored or {}).get("metadata") or {}).get("uid") or "")
        if stored is None or stored_uid == uid:
            return ""
        return f"trigger {event.describe()} (uid {uid}) is not stored: {kind} {metadata.get('name')} has uid {stored_uid}"

    def subresource_kind(self, group: str, version: str, resource: str, subresource: str) -> ResourceKind | None:
        """``Pod/binding`` for a request of pods/binding (whose own kind is Binding), as policies match it: the kind
        of the parent ``resource`` with ``subresource``; None when the cluster does not serve the parent."""
        try:
            parent = self.cluster.resolve_resource(group, version, resource)
        except KubeError as exc:
            log.warning("could not resolve %s/%s %s: %s", group, version, resource, exc)
            return None
        if parent is None:
            return None
        return ResourceKind(parent.group, parent.version, parent.kind, subresource)

    def submit_mutating(self, review: Any, policies: tuple[str, ...] | None, namespaced: bool | None) -> Callable[[], None] | None:
        """Take on a request a MutatingPolicy webhook admitted (``policies``: the names its path carries, None: any)
        for the mutateExisting policies it triggers; dryRun requests have no side effects.  A subresource request
        (a ``pods/exec`` CONNECT, a ``pods/eviction`` CREATE) triggers the policies whose matchConstraints name the
        subresource, its object (never stored) taken as the request carried it, as Kyverno's mpol webhook and
        background processor do.  With ``update_requests`` set the work is recorded as ``cel-mutate``
        UpdateRequests, as ``submit`` does."""
        from stockade.controllers.updaterequest import admission_request, cel_mutate_trigger

        if getattr(review, "dry_run", False) or review.operation not in ("CREATE", "UPDATE", "DELETE", "CONNECT"):
            return None
        if review.operation == "CONNECT" and not review.sub_resource:
            return None  # CONNECT only ever reaches us as a subresource request
        if not mutating_policies(self.store.snapshot):
            return None
        info = review.user_info
        # one reading of the request for now and for the replay of its UpdateRequest
        trigger = cel_mutate_trigger(admission_request(review), info, policies, namespaced)
        event = TriggerEvent(
            review.operation, review.object, review.old_object, info, review.kind, cel_mutate=trigger, subresource=bool(review.sub_resource), request_name=trigger.request_name
        )
        writer = self.update_requests
        if writer is None:
            self.submit_event(event)
            return None
        return self._recorded(writer, writer.plan_mutating(self.cel_mutate.wanted(trigger), review), event)

    def _on_watched_change(self, event_type: str, obj: dict[str, Any]) -> None:
        self.submit_event(WatchedChange(event_type, obj))

    def submit_event(self, event: TriggerEvent | WatchedChange) -> str:
        """Queue one piece of work; never blocks, never drops.  Each admitted event is its own key; a watched
        object's changes share one (the newest replaces one still waiting).  Returns the key."""
        key = watched_key(event.obj) if isinstance(event, WatchedChange) else f"event/{next(self._seq)}"
        with self._lock:
            self._items[key] = event
        self.controller.enqueue(key)
        return key

    def queued_event(self, key: str) -> TriggerEvent | WatchedChange | None:
        """The event a queued key stands for (None once it is done or given up)."""
        with self._lock:
            return self._items.get(key)

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """For tests and shutdown: True once every queued event (its retries included) and policy change is done."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                pending = bool(self._items)
            if not pending and not self._policies_changed.is_set() and self.controller.queue.processing() == 0:
                return True
            time.sleep(0.05)
        return False

    # -- worker ----------------------------------------------------------------------------------------------------
    def reconcile(self, key: str) -> Result | None:
        """One key of the work queue: a policy change (leader only), the periodic resync (leader only; it comes
        back after ``resync_interval``) or an event.  A failed event comes back after its key's backoff
        (``max_attempts`` attempts in all); a trigger not stored yet comes back within milliseconds."""
        if key == POLICIES_KEY:
            self._policies_changed.clear()
            if self._leader():
                self.reconcile_policies()
            return None  # not leading: the leader reacts; we re-check when policies change again
        if key == RESYNC_KEY:
            if self._leader():
                self.resync()
            return Result(requeue_after=self.resync_interval) if self.resync_interval > 0 else None
        with self._lock:
            event = self._items.get(key)
        if event is None:
            return None
        return self._process(key, event)

    def _leader(self) -> bool:
        try:
            return bool(self.is_leader())
        except Exception:
            return False

    def _finish(self, key: str, event: TriggerEvent | WatchedChange) -> None:
        """The event is done (or given up): forget it and its backoff, unless a newer one took its key meanwhile."""
        with self._lock:
            if self._items.get(key) is event:
                del self._items[key]
        self.backoff.forget(key)
        self.pending_backoff.forget(key)

    def _process(self, key: str, event: TriggerEvent | WatchedChange) -> Result | None:
        try:
            failures = self.process_watched_change(event) if isinstance(event, WatchedChange) else self.process_event(event)
        except KubeError as exc:
            failures = [TriggerFailure("*", "*", event.describe(), str(exc))]
        except TriggerPending as exc:
            # the admission that reported the trigger is still being stored: look again within milliseconds
            if self.pending_backoff.failures(key) + 1 >= PENDING_ATTEMPTS:
                log.error("giving up on %s %s after %d attempts: %s", event.operation, event.describe(), PENDING_ATTEMPTS, exc)
                self._finish(key, event)
                return None
            self.stats.retries += 1
            return Result(requeue_after=self.pending_backoff.when(key))
        except Exception as exc:  # a defect: logged in full, then treated like any failure (retried, then given up)
            log.exception("generate worker failed on %s", event.describe())
            failures = [TriggerFailure("*", "*", event.describe(), f"{type(exc).__name__}: {exc}")]
        self.stats.processed += 1
        if not failures:
            self._finish(key, event)
            return None
        self.stats.failures += len(failures)
        attempt = self.backoff.failures(key) + 1
        for failure in failures:
            log.warning("generate failed (attempt %d): %s", attempt, failure)
        if attempt >= self.max_attempts:
            log.error("giving up on %s %s after %d attempts", event.operation, event.describe(), attempt)
            self._finish(key, event)
            return None
        self.stats.retries += 1
        return Result(requeue=True)

    # -- engine ----------------------------------------------------------------------------------------------------
    def _engine(self) -> Engine:
        snapshot = self.store.snapshot
        exceptions = list(getattr(getattr(getattr(snapshot, "evaluator", None), "engine", None), "exceptions", []) or [])
        return Engine(providers=self.cluster.providers(), exceptions=exceptions, resource_lookup=self.cluster.lookup)

    def _generating(self, event: TriggerEvent | None = None) -> list[CelPolicy]:
        """The loaded GeneratingPolicies, those ``event`` is about when given."""
        chosen = None if event is None else event.generating_policies
        return [p for p in generating_policies(self.store.snapshot) if chosen is None or policy_key(p) in chosen]

    def _cel_evaluator(self) -> Any:
        from stockade.celpolicy.evaluator import CelPolicyEvaluator

        snapshot = self.store.snapshot
        exceptions = [
            CelPolicy(d.data, d.origin)
            for d in (getattr(snapshot, "documents", ()) or ())
            if d.kind == "PolicyException" and str(d.data.get("apiVersion", "")).startswith("policies.kyverno.io/")
        ]
        # the CEL libraries Kyverno's background controller gives GeneratingPolicies: resource, http, globalContext
        providers = {"resource": ClusterCelResources(self.cluster), "http": ClusterCelHttp(), "globalContext": ClusterGlobalContext(self.cluster)}
        return CelPolicyEvaluator(providers=providers, exceptions=exceptions)

    def _evaluate_gpol(
        self,
        evaluator: Any,
        policy: CelPolicy,
        trigger: dict[str, Any],
        operation: str,
        old: dict[str, Any],
        info: RequestInfo,
        subresource: tuple[str, tuple[str, str, str, str]] | None = None,
        request_name: str = "",
    ) -> Any:
        """The policy's single rule response on this trigger, or None when it does not apply.  ``subresource``: the
        request was for (subresource name, the parent's group/version/kind/resource) with ``trigger`` its object;
        ``request_name``: the request's name, for an object without a name of its own."""
        from stockade.celpolicy.request import AdmissionInput

        subject = trigger or old
        namespace = str((subject.get("metadata") or {}).get("namespace") or "")
        namespace_object = None
        if namespace and subject.get("kind") != "Namespace":
            try:
                namespace_object = self.cluster.get_object("v1", "Namespace", "", namespace, cached=False)
            except KubeError as exc:
                log.warning("could not read namespace %s: %s", namespace, exc)
        user = {"username": info.username, "uid": info.uid, "groups": list(info.groups), "extra": dict(info.extra)}
        request = AdmissionInput(
            object=trigger or None,
            old_object=old or None,
            operation=operation,
            user_info=user,
            namespace_object=namespace_object,
            subresource=subresource[0] if subresource else "",
            parent=subresource[1] if subresource else None,
            request_name=request_name,
        )
        placement = GeneratedPlacement(cluster=True, report_only=False, kind_namespaced=self.cluster.kind_namespaced)
        response = evaluator.generate(policy, request, keep_source_uid=True, placement=placement)
        if response is None or not response.rules:
            return None
        return response.rules[0]

    def _policies(self) -> list[KyvernoPolicy]:
        snapshot = self.store.snapshot
        return [p for p in (snapshot.policies if snapshot is not None else []) if p.has_generate()]

    def own_username(self) -> str:
        """The user this controller writes as (a SelfSubjectReview, asked once); "" when it cannot be learned."""
        if self._own_username is None:
            try:
                answer = self.cluster.request("POST", SELF_SUBJECT_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
                self._own_username = str((((answer or {}).get("status") or {}).get("userInfo") or {}).get("username") or "")
            except Exception as exc:
                log.warning("could not learn our own user name (skipBackgroundRequests cannot apply): %s", exc)
                self._own_username = ""
        return self._own_username

    def is_background_request(self, username: str) -> bool:
        """Whether a request comes from the background controller: the configured background account (Kyverno's
        ``backgroundServiceAccountName``) or the user this controller writes as."""
        if not username:
            return False
        return username == self.background_username or username == self.own_username()

    def _evaluate(
        self,
        engine: Engine,
        policy: KyvernoPolicy,
        trigger: dict[str, Any],
        operation: str,
        info: RequestInfo,
        gvk: ResourceKind | None,
        admission: dict[str, Any] | None = None,
    ) -> EngineResponse:
        """``admission``: request fields policies read under ``request`` that the trigger itself may lack."""
        namespace = str((trigger.get("metadata") or {}).get("namespace") or "")
        labels = self.cluster.namespace_labels(namespace) if namespace else {}
        # old_resource left empty: an UPDATE is judged on the new object alone, so "no longer matches" is visible
        request = Request(resource=trigger, operation=operation, info=info, namespace_labels=labels, gvk=gvk, admission=dict(admission or {}))
        pctx = engine.policy_context(policy, request)
        pctx.old_resource = {} if operation != "DELETE" else pctx.old_resource
        return engine.generate(pctx)

    def _old_responses(self, engine: Engine, policy: KyvernoPolicy, event: TriggerEvent) -> dict[str, Any]:
        """The policy's generate rules judged on the object before an UPDATE (did the trigger match before?)."""
        try:
            response = self._evaluate(engine, policy, event.old_resource, "UPDATE", event.info, event.gvk)
        except Exception as exc:
            log.warning("evaluating policy %s on the old %s failed: %s", policy.key, event.describe(), exc)
            return {}
        return {r.name: r for r in response.rules}

    def _failure_event(self, policy: KyvernoPolicy | CelPolicy, rule_name: str, error: str, trigger: dict[str, Any]) -> None:
        """Kyverno's PolicyError Warning on the policy, naming the trigger, after background generation failed."""
        if self.events is not None and trigger:
            self.events.submit(generate_failure_event(policy, rule_name, error, trigger, trigger_api_version=isinstance(policy, CelPolicy)))

    # -- trigger events --------------------------------------------------------------------------------------------
    def process_event(self, event: TriggerEvent) -> list[TriggerFailure]:
        """Apply every generate rule to one trigger event; returns the failures (empty when all went well)."""
        if event.cel_mutate is not None:
            try:
                problems = self.cel_mutate.process_trigger(event.cel_mutate)
            except TriggerNotStored as exc:
                raise TriggerPending(str(exc)) from None
            return [TriggerFailure("MutatingPolicy", "*", event.describe(), problem) for problem in problems]
        policies = [p for p in self._policies() if event.generate_policies is None or p.key in event.generate_policies]
        mutating = _scoped_mutating(self.store.snapshot.policies if self.store.snapshot is not None else [], event.mutate_rules)
        if event.subresource:
            generated = self._generate_for_subresource(policies, event) if policies else []
            generated += self._generate_gpol_for_subresource(event)
            return generated + list(self.mutate_existing.process(mutating, event.operation, event.subject, event.old_resource, event.info, event.gvk))
        if not policies and not self._generating(event) and not mutating:
            return []
        trigger = event.subject
        if event.operation in ("CREATE", "UPDATE"):
            stored = self._stored_trigger(event)
            if stored is None:
                if event.operation == "CREATE":
                    raise TriggerPending(f"trigger {event.describe()} is not stored yet")
                return []  # deleted since; its DELETE event cleans up
            if event.operation == "UPDATE":
                self._await_persisted_update(event, stored)
            trigger = event.resource
        elif event.operation == "DELETE" and policies and not ((event.old_resource.get("metadata") or {}).get("labels") or {}).get(POLICY_NAME_LABEL):
            # Kyverno acts on a trigger's DELETE only once it is persisted: the object still stored (same uid, not
            # terminating) means the request may yet be refused; given up after the pending attempts, nothing happens
            if self._still_stored(event.old_resource, event.gvk):
                raise TriggerPending(f"deleted trigger {event.describe()} is still stored")
        engine = self._engine() if policies else None
        failures: list[TriggerFailure] = []
        uid = str((trigger.get("metadata") or {}).get("uid") or "")
        own_request = self.is_background_request(event.info.username)
        for policy in policies:
            policy, rules = rules_for_request(policy, own_request)
            if not rules:
                continue
            responses: dict[str, Any] = {}
            old_responses: dict[str, Any] | None = None
            deleting = {name for name, rule in rules.items() if event.operation == "DELETE" and matches_delete_operation(rule)}
            if engine is not None and (event.operation != "DELETE" or deleting or any(synchronize(r) for r in rules.values())):
                # a deleted trigger is evaluated as the DELETE request (request.object reads the old object): a rule
                # answers only when the old object matches it, which is when Kyverno cleans up after it
                response = self._evaluate(engine, policy, trigger, event.operation, event.info, event.gvk)
                responses = {r.name: r for r in response.rules}
            for name, rule in rules.items():
                result = responses.get(name)
                if result is not None and result.status == ERROR and (event.operation != "DELETE" or name in deleting):
                    failures.append(TriggerFailure(policy.key, name, event.describe(), result.message))
                    self._failure_event(policy, name, result.message, trigger)
                    continue
                applies = result is not None and result.status == PASS
                if event.operation == "DELETE":
                    matched_before = result is not None and not exempted(result)
                elif event.operation == "UPDATE" and not applies and synchronize(rule) and event.old_resource and engine is not None:
                    if old_responses is None:
                        old_responses = self._old_responses(engine, policy, event)
                    matched_before = no_longer_applies(result, old_responses.get(name))
                else:
                    matched_before = False
                action = trigger_action(event.operation, applies, synchronize(rule) and matched_before, name in deleting)
                try:
                    if action == APPLY and result is not None:
                        written = self.apply_downstream(policy, rule, result.generated_resources)
                        if trigger.get("metadata", {}).get("uid"):
                            self._report_gpol(policy, trigger, dataclasses.replace(result, generated_resources=list(written)))
                        if self.events is not None:
                            for spec in generate_events(policy, name, written):
                                self.events.submit_success(spec)
                    elif action == DELETE and uid:
                        self.delete_downstream(policy, rule, trigger_uid=uid)
                except KubeError as exc:
                    failures.append(TriggerFailure(policy.key, name, event.describe(), str(exc)))
                    self._failure_event(policy, name, str(exc), trigger)
        if engine is not None and event.operation in ("UPDATE", "DELETE") and event.old_resource:
            if not own_request:  # Kyverno ignores its own background writes to downstream objects and sources
                failures.extend(self._process_non_trigger(engine, policies, event))
        failures.extend(self._process_gpol_event(event, trigger, uid))
        failures.extend(self.mutate_existing.process(mutating, event.operation, trigger, event.old_resource, event.info, event.gvk))
        return failures

    def _generate_for_subresource(self, policies: list[KyvernoPolicy], event: TriggerEvent) -> list[TriggerFailure]:
        """Generate rules matching a subresource kind (``Pod/eviction``, ``Pod/exec``): the trigger is the request's
        own object (an Eviction, a PodExecOptions), which is never stored, so there is nothing to wait for, to keep in
        step or to clean up after; matching rules create their downstream, as Kyverno's do.  Any operation but DELETE
        (an eviction is a CREATE, an exec a CONNECT) takes the request's object as it came."""
        if event.operation == "DELETE":
            return []
        engine = self._engine()
        failures: list[TriggerFailure] = []
        own_request = self.is_background_request(event.info.username)
        for policy in policies:
            policy, rules = rules_for_request(policy, own_request)
            if not rules:
                continue
            response = self._evaluate(engine, policy, event.subject, event.operation, event.info, event.gvk, admission=subresource_request_fields(event))
            for result in response.rules:
                rule = rules.get(result.name)
                if rule is None:
                    continue
                if result.status == ERROR:
                    failures.append(TriggerFailure(policy.key, result.name, event.describe(), result.message))
                    self._failure_event(policy, result.name, result.message, event.subject)
                    continue
                if result.status != PASS:
                    continue
                try:
                    written = self.apply_downstream(policy, rule, result.generated_resources)
                except KubeError as exc:
                    failures.append(TriggerFailure(policy.key, result.name, event.describe(), str(exc)))
                    self._failure_event(policy, result.name, str(exc), event.subject)
                    continue
                if self.events is not None:
                    for spec in generate_events(policy, result.name, written):
                        self.events.submit_success(spec)
        return failures

    def _generate_gpol_for_subresource(self, event: TriggerEvent) -> list[TriggerFailure]:
        """GeneratingPolicies whose matchConstraints name a subresource (``pods/eviction``, ``pods/exec``): evaluated
        on the request's own object as a request of the parent's subresource, as Kyverno's background controller
        does when it finds no stored trigger; the downstream is created once (no trigger to keep it in step with)."""
        gpols = self._generating(event)
        if not gpols or event.operation == "DELETE" or event.gvk is None:
            return []
        api_version = f"{event.gvk.group}/{event.gvk.version}" if event.gvk.group else event.gvk.version
        parent = self.cluster.resolve_kind(api_version, event.gvk.kind)
        if parent is None:
            return []
        request_of = (event.gvk.subresource, (parent.group, parent.version, parent.kind, parent.resource))
        evaluator = self._cel_evaluator()
        background = self.is_background_request(event.info.username)
        failures: list[TriggerFailure] = []
        for policy in gpols:
            if background and policy.skips_background_requests:
                continue
            try:
                result = self._evaluate_gpol(
                    evaluator, policy, event.subject, event.operation, {}, event.info, subresource=request_of, request_name=event.request_name
                )
            except Exception as exc:  # a compile error in one policy must not stop the others
                failures.append(TriggerFailure(policy.key, policy.name, event.describe(), f"{type(exc).__name__}: {exc}"))
                continue
            if result is None or result.status not in (PASS, ERROR):
                continue
            message = result.message
            if result.status == PASS:
                try:
                    self.apply_gpol_downstream(policy, event.subject, result.generated_resources)
                    continue
                except KubeError as exc:
                    message = f"failed to generate resources: {exc}"
            failures.append(TriggerFailure(policy.key, policy.name, event.describe(), message))
            self._failure_event(policy, result.name, message, event.subject)
        return failures

    # -- changes of downstream objects and clone sources (Kyverno's "non-trigger" admissions) -----------------------
    def _process_non_trigger(self, engine: Engine, policies: list[KyvernoPolicy], event: TriggerEvent) -> list[TriggerFailure]:
        """An edited or deleted downstream object of a synchronized rule is brought back from its trigger; an edited
        clone source is copied again to every downstream object, a deleted one takes its copies with it."""
        old = event.old_resource
        by_key = {(p.namespace, p.name): p for p in policies}
        failures: list[TriggerFailure] = []
        origin = downstream_origin(old)
        if origin is not None:
            policy = by_key.get((origin.policy_namespace, origin.policy_name))
            rule = generate_rules(policy).get(origin.rule_name) if policy is not None else None
            if policy is not None and rule is not None and synchronize(rule) and not self._matches(policy, rule, old, event):
                try:
                    self._regenerate_for(engine, policy, rule, origin)
                except KubeError as exc:
                    failures.append(TriggerFailure(policy.key, rule.name, event.describe(), str(exc)))
            return failures
        # a clone source: only the copies that name it by their source labels follow it (Kyverno's processRequest
        # finds targets by source labels alone; a trigger without a copy gets none from a source edit)
        self._process_copies_of(engine, by_key, old, event, failures)
        return failures

    def _process_copies_of(
        self, engine: Engine, by_key: dict[tuple[str, str], KyvernoPolicy], source: dict[str, Any], event: TriggerEvent, failures: list[TriggerFailure]
    ) -> set[tuple[str, str, str]]:
        """The copies that name ``source`` by uid (Kyverno's source labels) follow it: regenerated from their
        triggers when it changed, deleted with it.  Returns the (policy namespace, policy, rule) handled."""
        metadata = source.get("metadata") or {}
        uid = str(metadata.get("uid") or "")
        handled: set[tuple[str, str, str]] = set()
        if not uid:
            return handled
        try:
            copies = self.cluster.list_objects(
                str(source.get("apiVersion") or ""), str(source.get("kind") or ""), "", label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE},{SOURCE_UID_LABEL}={uid}", cached=False
            )
        except NotFound:
            return handled
        except KubeError as exc:
            failures.append(TriggerFailure("*", "*", event.describe(), str(exc)))
            return handled
        for copy_ in copies:
            origin = downstream_origin(copy_)
            policy = by_key.get((origin.policy_namespace, origin.policy_name)) if origin is not None else None
            rule = generate_rules(policy).get(origin.rule_name) if policy is not None and origin is not None else None
            if origin is None or policy is None or rule is None or not synchronize(rule):
                continue
            handled.add((policy.namespace, policy.name, rule.name))
            if self._matches(policy, rule, source, event):
                continue  # the source is also the rule's trigger: its trigger handling decided
            try:
                if event.operation == "DELETE":
                    # Kyverno cleans up after the trigger: everything the policy produced for it of the rule's kinds
                    self.delete_downstream(policy, rule, trigger_uid=origin.trigger_uid)
                else:
                    self._regenerate_for(engine, policy, rule, origin)
            except KubeError as exc:
                failures.append(TriggerFailure(policy.key, rule.name, event.describe(), str(exc)))
        return handled

    def _matches(self, policy: KyvernoPolicy, rule: Rule, obj: dict[str, Any], event: TriggerEvent) -> bool:
        """Kyverno's "both the source and the trigger" check: the changed object matches the rule's match/exclude
        blocks for the request's operation (no context, no preconditions), so its trigger handling decides."""
        metadata = obj.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "")
        if obj.get("kind") == "Namespace":
            namespace_labels = dict(metadata.get("labels") or {})
        else:
            namespace_labels = self.cluster.namespace_labels(namespace) if namespace else {}
        gvk = event.gvk or ResourceKind.of(obj)
        return not match_reasons(rule.raw, obj, gvk, info=event.info, namespace_labels=namespace_labels, operation=event.operation, policy_namespace=policy.namespace)

    def _regenerate_for(self, engine: Engine, policy: KyvernoPolicy, rule: Rule, origin: DownstreamOrigin) -> None:
        if not origin.trigger_kind or not origin.trigger_uid:
            return
        try:
            candidates = self.cluster.list_objects(origin.trigger_api_version, origin.trigger_kind, origin.trigger_namespace, cached=False)
        except NotFound:
            return
        trigger = next((c for c in candidates if (c.get("metadata") or {}).get("uid") == origin.trigger_uid), None)
        if trigger is None or (trigger.get("metadata") or {}).get("deletionTimestamp"):
            return  # the trigger is gone: its own DELETE cleans up
        response = self._evaluate(engine, policy.with_rules([rule]), trigger, "CREATE", RequestInfo(), None)
        results = [result for result in response.rules if result.name == rule.name]
        if not results:  # Kyverno's UpdateRequest fails: the policy no longer applies to the trigger
            self._failure_event(policy, rule.name, POLICY_DOES_NOT_APPLY, trigger)
        for result in results:
            if result.status == PASS:
                created: list[dict[str, Any]] = []
                try:
                    self.apply_downstream(policy, rule, result.generated_resources, created)
                except KubeError as exc:
                    self._failure_event(policy, rule.name, str(exc), trigger)
                    raise
                if self.events is not None:  # a re-created downstream object is reported as Kyverno does
                    for spec in generate_events(policy, rule.name, created):
                        self.events.submit_success(spec)
            elif result.status == ERROR:
                self._failure_event(policy, rule.name, result.message, trigger)

    # -- watched changes of GeneratingPolicy downstream objects and clone sources -------------------------------------
    def process_watched_change(self, change: WatchedChange) -> list[TriggerFailure]:
        """A synchronized GeneratingPolicy's downstream object edited or deleted is regenerated from its trigger; a
        clone source edited or deleted (an object its copies name by ``source-uid``) is copied again or takes its
        copies along."""
        gpols = {policy.name: policy for policy in self._generating() if evaluation_enabled(policy, "synchronize")}
        if not gpols:
            return []
        obj = change.obj
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE:
            policy = gpols.get(str(labels.get(POLICY_NAME_LABEL) or ""))
            if policy is None or RULE_NAME_LABEL in labels:
                return []  # not a GeneratingPolicy's: ClusterPolicy downstream is seen by the admission webhook
            return self._regenerate_gpol(policy, labels, change)
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        if not uid:
            return []
        try:
            copies = self.cluster.list_objects(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""), "", label_selector=f"{SOURCE_UID_LABEL}={uid}", cached=False)
        except KubeError as exc:
            return [TriggerFailure("*", "*", change.describe(), str(exc))]
        failures: list[TriggerFailure] = []
        for copy_ in copies:
            copy_labels = (copy_.get("metadata") or {}).get("labels") or {}
            policy = gpols.get(str(copy_labels.get(POLICY_NAME_LABEL) or ""))
            if policy is None:
                continue
            if change.event_type == "DELETED":
                try:
                    self._delete_object(copy_)
                except KubeError as exc:
                    failures.append(TriggerFailure(policy.key, policy.name, change.describe(), str(exc)))
            else:
                failures.extend(self._regenerate_gpol(policy, copy_labels, change))
        return failures

    def _regenerate_gpol(self, policy: CelPolicy, labels: dict[str, Any], change: WatchedChange) -> list[TriggerFailure]:
        try:
            trigger = self._gpol_trigger(labels)
        except KubeError as exc:
            return [TriggerFailure(policy.key, policy.name, change.describe(), str(exc))]
        if trigger is None:
            return []  # the trigger is gone or replaced: its own events decide
        try:
            result = self._evaluate_gpol(self._cel_evaluator(), policy, trigger, "CREATE", {}, RequestInfo())
        except Exception as exc:
            return [TriggerFailure(policy.key, policy.name, change.describe(), f"{type(exc).__name__}: {exc}")]
        if result is None or result.status != PASS:
            return []
        try:
            self.apply_gpol_downstream(policy, trigger, result.generated_resources)
        except KubeError as exc:
            return [TriggerFailure(policy.key, policy.name, change.describe(), str(exc))]
        return []

    def _report_gpol(self, policy: CelPolicy | KyvernoPolicy, trigger: dict[str, Any], result: Any) -> None:
        """The trigger's report gets the GeneratingPolicy's or generate rule's result (Kyverno's generate reports)."""
        if self.reports is not None:
            submit_rule_result(self.reports, policy, trigger, result)

    def _process_gpol_event(self, event: TriggerEvent, trigger: dict[str, Any], uid: str) -> list[TriggerFailure]:
        gpols = self._generating(event)
        if not gpols:
            return []
        deleting = event.operation == "DELETE"
        evaluator = self._cel_evaluator() if not deleting or any(gpol_matches_delete(p) for p in gpols) else None
        failures: list[TriggerFailure] = []
        background = self.is_background_request(event.info.username)
        for policy in gpols:
            if background and policy.skips_background_requests:
                continue  # Kyverno's gpol webhook drops background requests unless the policy opts in
            synchronized = evaluation_enabled(policy, "synchronize")
            generate_on_delete = deleting and gpol_matches_delete(policy)
            result = None
            if evaluator is not None and (not deleting or generate_on_delete):
                try:
                    if generate_on_delete:  # the DELETE request itself: no object, the deleted one as oldObject
                        result = self._evaluate_gpol(evaluator, policy, {}, "DELETE", event.old_resource or trigger, event.info)
                    else:
                        result = self._evaluate_gpol(evaluator, policy, trigger, event.operation, event.old_resource, event.info)
                except Exception as exc:  # a compile error in one policy must not stop the others
                    failures.append(TriggerFailure(policy.key, policy.name, event.describe(), f"{type(exc).__name__}: {exc}"))
                    continue
            if result is not None and result.status == ERROR:
                self._report_gpol(policy, trigger, result)
                failures.append(TriggerFailure(policy.key, policy.name, event.describe(), result.message))
                self._failure_event(policy, result.name, result.message, trigger)
                continue
            applies = result is not None and result.status == PASS
            # an UPDATE deletes only when the trigger no longer matches (Kyverno: no result); a skip by a
            # PolicyException leaves the downstream alone
            action = trigger_action(event.operation, applies, synchronized and (event.operation != "UPDATE" or result is None), generate_on_delete)
            try:
                if action == APPLY and result is not None:
                    written = self.apply_gpol_downstream(policy, trigger, result.generated_resources)
                    if synchronized and event.operation == "UPDATE" and uid:
                        self.delete_gpol_downstream(policy, trigger_uid=uid, keep=written)  # no longer generated
                elif action == DELETE and uid:
                    self.delete_gpol_downstream(policy, trigger_uid=uid)
                if result is not None:
                    self._report_gpol(policy, trigger, result)
            except KubeError as exc:
                if result is not None:  # Kyverno's generator writes during evaluation: a failed write is the rule's error
                    self._report_gpol(policy, trigger, dataclasses.replace(result, status=ERROR, message=f"failed to generate resources: {exc}", generated_resources=[]))
                    self._failure_event(policy, result.name, f"failed to generate resources: {exc}", trigger)
                failures.append(TriggerFailure(policy.key, policy.name, event.describe(), str(exc)))
        return failures

    def _await_persisted_update(self, event: TriggerEvent, stored: dict[str, Any]) -> None:
        """An UPDATE is judged after it is stored, as Kyverno reads the live trigger: clone sources (the trigger
        itself, often) and lookups must see the new state.  Admission runs before persistence, so wait a moment
        (bounded: a request a later webhook refused is never stored) while the stored object is still the old one."""
        deadline = time.monotonic() + UPDATE_SETTLE_SECONDS
        current: dict[str, Any] | None = stored
        while current is not None and update_not_persisted(event.old_resource, event.resource, current) and time.monotonic() < deadline:
            time.sleep(PENDING_BACKOFF_SECONDS)
            current = self._stored_trigger(event)

    def _still_stored(self, deleted: dict[str, Any], gvk: ResourceKind | None) -> bool:
        """Whether a deleted object is still stored as it was (same uid, no deletionTimestamp)."""
        metadata = deleted.get("metadata") or {}
        uid = metadata.get("uid")
        if not uid:
            return False
        api_version = str(deleted.get("apiVersion") or "")
        if gvk is not None and gvk.version:
            api_version = f"{gvk.group}/{gvk.version}" if gvk.group else gvk.version
        kind = str(deleted.get("kind") or (gvk.kind if gvk else ""))
        stored = self.cluster.get_object(api_version, kind, str(metadata.get("namespace") or ""), str(metadata.get("name") or ""), cached=False)
        stored_metadata = (stored or {}).get("metadata") or {}
        return stored is not None and stored_metadata.get("uid") == uid and not stored_metadata.get("deletionTimestamp")

    def _stored_trigger(self, event: TriggerEvent) -> dict[str, Any] | None:
        """The trigger as stored, or None while/after it is not (a CREATE is validated before it is persisted)."""
        trigger = event.resource
        metadata = trigger.get("metadata") or {}
        api_version = str(trigger.get("apiVersion") or "")
        if event.gvk is not None and event.gvk.version:
            api_version = f"{event.gvk.group}/{event.gvk.version}" if event.gvk.group else event.gvk.version
        stored = self.cluster.get_object(api_version, str(trigger.get("kind") or (event.gvk.kind if event.gvk else "")), str(metadata.get("namespace") or ""), str(metadata.get("name") or ""), cached=False)
        if stored is None:
            return None
        if metadata.get("uid") and (stored.get("metadata") or {}).get("uid") != metadata.get("uid"):
            return None
        return stored

    # -- downstream objects ----------------------------------------------------------------------------------------
    def apply_downstream(
        self, policy: KyvernoPolicy, rule: Rule, generated: Iterable[dict[str, Any]], created: list[dict[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        """Create missing downstream objects; rewrite drifted ones of synchronized rules. Returns the downstream
        objects the rule now stands for (created, updated or already in step); ``created`` collects the new ones."""
        server_side = bool(policy.spec.get("useServerSideApply", False))
        handled: list[dict[str, Any]] = []
        for desired in generated:
            desired = copy.deepcopy(desired)
            resource = self.cluster.resolve_kind(str(desired.get("apiVersion") or ""), str(desired.get("kind") or ""))
            if resource is None:
                raise NotFound(f"kind {desired.get('apiVersion')}/{desired.get('kind')} is not served", method="GET", path=str(desired.get("kind")))
            metadata = desired.setdefault("metadata", {})
            metadata["labels"] = kyverno_labels_only_if_untyped(metadata.get("labels"))
            desired["apiVersion"] = api_version_of(resource)
            if resource.namespaced:
                metadata["namespace"] = metadata.get("namespace") or "default"
            else:
                metadata.pop("namespace", None)
            namespace = str(metadata.get("namespace") or "")
            name = str(metadata.get("name") or "")
            clone = (rule.generate or {}).get("clone") or {}
            if clone and (str(clone.get("namespace") or ""), str(clone.get("name") or "")) == (namespace, name):
                continue  # Kyverno skips cloning an object onto itself
            path = object_path(resource, namespace, name)
            handled.append(desired)
            if server_side:
                self.cluster.request(
                    "PATCH", path, desired, query={"fieldManager": FIELD_MANAGER, "force": "true"}, content_type="application/apply-patch+yaml"
                )
                self.stats.updated += 1
                continue
            current = self.cluster.get_object(desired["apiVersion"], str(desired.get("kind")), namespace, name, cached=False)
            if current is None:
                try:
                    self.cluster.request("POST", collection_path(resource, namespace), desired)
                    self.stats.created += 1
                    if created is not None:
                        created.append(desired)
                    log.info("generated %s %s/%s (policy %s, rule %s)", resource.kind, namespace, name, policy.key, rule.name)
                    continue
                except (AlreadyExists, Conflict):  # created meanwhile
                    current = self.cluster.get_object(desired["apiVersion"], str(desired.get("kind")), namespace, name, cached=False)
                    if current is None:
                        raise
            if not should_update(desired, current, synchronize(rule)):
                continue
            desired["metadata"]["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
            self.cluster.request("PUT", path, desired)
            self.stats.updated += 1
            log.info("synchronized %s %s/%s (policy %s, rule %s)", resource.kind, namespace, name, policy.key, rule.name)
        for desired in handled:
            self._tag_clone_source(rule, desired)
        return handled

    def _tag_clone_source(self, rule: Rule, copy_: dict[str, Any]) -> None:
        """Kyverno labels a clone source ``generate.kyverno.io/clone-source: ""`` when it copies it, which is how a
        later change of the source is recognised.  The copy names its source by kind, namespace and uid; the name is
        the rule's clone name or, for cloneList, the copy's own."""
        labels = (copy_.get("metadata") or {}).get("labels") or {}
        uid = str(labels.get(SOURCE_UID_LABEL) or "")
        if not uid:
            return
        group, version = str(labels.get(SOURCE_GROUP_LABEL) or ""), str(labels.get(SOURCE_VERSION_LABEL) or "")
        api_version, kind = (f"{group}/{version}" if group else version), str(labels.get(SOURCE_KIND_LABEL) or copy_.get("kind") or "")
        namespace = str(labels.get(SOURCE_NAMESPACE_LABEL) or "")
        names = [str((copy_.get("metadata") or {}).get("name") or "")]
        generate = rule.generate or {}
        for spec in [generate, *[g for g in generate.get("foreach") or [] if isinstance(g, dict)]]:
            clone = spec.get("clone")
            clone_name = str(clone.get("name") or "") if isinstance(clone, dict) else ""
            if clone_name and "{{" not in clone_name:
                names.insert(0, clone_name)
        try:
            source = next((c for c in (self.cluster.get_object(api_version or "v1", kind, namespace, n, cached=False) for n in names if n) if c and (c.get("metadata") or {}).get("uid") == uid), None)
            if source is None:
                source = next((c for c in self.cluster.list_objects(api_version or "v1", kind, namespace, cached=False) if (c.get("metadata") or {}).get("uid") == uid), None)
            if source is None or CLONE_SOURCE_LABEL in ((source.get("metadata") or {}).get("labels") or {}):
                return
            source.setdefault("metadata", {}).setdefault("labels", {})[CLONE_SOURCE_LABEL] = ""
            resource = self.cluster.resolve_kind(str(source.get("apiVersion") or ""), str(source.get("kind") or ""))
            if resource is not None:
                self.cluster.request("PUT", object_path(resource, namespace, str(source["metadata"].get("name") or "")), source)
        except KubeError as exc:  # as in Kyverno, a source that cannot be labelled does not fail the generation
            log.warning("labelling clone source %s %s/%s failed: %s", kind, namespace, uid, exc)

    def apply_gpol_downstream(self, policy: CelPolicy, trigger: dict[str, Any], generated: Iterable[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
        """Create (or, synchronized, bring back in step) what a GeneratingPolicy produced for one trigger; returns
        the identities of the downstream objects it stands for."""
        server_side = bool(policy.spec.get("useServerSideApply", False))
        trigger_uid = str((trigger.get("metadata") or {}).get("uid") or "")
        written: set[tuple[str, str, str, str]] = set()
        for desired in generated:
            desired = copy.deepcopy(desired)
            metadata = desired.setdefault("metadata", {})
            labels = metadata.get("labels") if isinstance(metadata.get("labels"), dict) else {}
            source_uid = str(labels.pop(SOURCE_UID_LABEL, "") or "")
            if metadata.get("namespace") and (source_uid or metadata.get("ownerReferences")):
                metadata.pop("ownerReferences", None)  # a cloned owner does not exist where the copy lands
            labels.update(gpol_labels(policy, trigger, source_uid))
            metadata["labels"] = labels
            resource = self._remember_gpol_kind(policy, str(desired.get("apiVersion") or ""), str(desired.get("kind") or ""))
            if resource is None:
                raise NotFound(f"kind {desired.get('apiVersion')}/{desired.get('kind')} is not served", method="GET", path=str(desired.get("kind")))
            desired["apiVersion"] = api_version_of(resource)
            if resource.namespaced:
                metadata["namespace"] = metadata.get("namespace") or "default"
            else:
                metadata.pop("namespace", None)
            written.add(object_identity(desired))
            # Kyverno's generator.apply brings an existing object this policy made for this trigger in step with the
            # new rendering whatever `synchronize` says (synchronize adds watching the copies and the source)
            self._upsert(resource, desired, synchronized=True, server_side=server_side, owner=lambda current: owned_by(current, policy, trigger_uid), what=f"policy {policy.key}")
        return written

    def _upsert(self, resource: Any, desired: dict[str, Any], *, synchronized: bool, server_side: bool, owner: Callable[[dict[str, Any]], bool], what: str) -> None:
        """Create a downstream object, or rewrite the existing one when it is ours and drifted (synchronized only)."""
        metadata = desired["metadata"]
        namespace = str(metadata.get("namespace") or "")
        name = str(metadata.get("name") or "")
        path = object_path(resource, namespace, name)
        current = self.cluster.get_object(desired["apiVersion"], str(desired.get("kind")), namespace, name, cached=False)
        if current is None:
            try:
                if server_side:
                    self.cluster.request("PATCH", path, desired, query={"fieldManager": FIELD_MANAGER, "force": "true"}, content_type="application/apply-patch+yaml")
                else:
                    self.cluster.request("POST", collection_path(resource, namespace), desired)
                self.stats.created += 1
                log.info("generated %s %s/%s (%s)", resource.kind, namespace, name, what)
                return
            except (AlreadyExists, Conflict):  # created meanwhile
                current = self.cluster.get_object(desired["apiVersion"], str(desired.get("kind")), namespace, name, cached=False)
                if current is None:
                    raise
        if not owner(current) or not should_update(desired, current, synchronized):
            return
        if server_side:  # our fields are taken back; what other managers added (labels, annotations) stays
            self.cluster.request("PATCH", path, desired, query={"fieldManager": FIELD_MANAGER, "force": "true"}, content_type="application/apply-patch+yaml")
        else:
            desired["metadata"]["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
            self.cluster.request("PUT", path, desired)
        self.stats.updated += 1
        log.info("synchronized %s %s/%s (%s)", resource.kind, namespace, name, what)

    def find_gpol_downstream(self, policy: CelPolicy, trigger_uid: str | None = None) -> list[dict[str, Any]]:
        selector = gpol_selector(policy, trigger_uid)
        found: list[dict[str, Any]] = []
        for api_version, kind in sorted(self._gpol_kinds.get(policy.key, set())):
            try:
                found.extend(self.cluster.list_objects(api_version, kind, "", label_selector=selector, cached=False))
            except NotFound:
                pass
        return found

    def delete_gpol_downstream(
        self, policy: CelPolicy, *, trigger_uid: str | None = None, keep_uids: set[str] | None = None, keep: set[tuple[str, str, str, str]] | None = None
    ) -> int:
        """Delete a GeneratingPolicy's downstream objects (of one trigger; sparing triggers in ``keep_uids`` and the
        objects in ``keep``)."""
        deleted = 0
        for obj in self.find_gpol_downstream(policy, trigger_uid):
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if keep_uids is not None and labels.get(TRIGGER_UID_LABEL) in keep_uids:
                continue
            if keep is not None and object_identity(obj) in keep:
                continue
            deleted += self._delete_object(obj)
        if deleted:
            log.info("deleted %d downstream object(s) of %s", deleted, policy.key)
        return deleted

    def find_downstream(self, policy_name: str, policy_namespace: str, rule: Rule, trigger_uid: str | None = None) -> list[dict[str, Any]]:
        """A rule's downstream objects of the kinds it produces; for one trigger, Kyverno's per-trigger cleanup
        selects by policy and trigger only (any rule of the policy that produced those kinds for that trigger)."""
        selector = label_selector(downstream_selector(policy_name, policy_namespace, rule.name if trigger_uid is None else None, trigger_uid))
        found: list[dict[str, Any]] = []
        for api_version, kind in downstream_kinds(rule):
            try:
                found.extend(self.cluster.list_objects(api_version, kind, "", label_selector=selector, cached=False))
            except NotFound:
                pass
        return found

    def _listed_downstream(self, policy: KyvernoPolicy, rule: Rule, kinds: list[tuple[str, str]]) -> Iterator[dict[str, Any]]:
        """A rule's downstream objects of ``kinds``; a kind that cannot be listed is logged and skipped (the other
        kinds are still handled)."""
        selector = label_selector(downstream_selector(policy.name, policy.namespace, rule.name))
        for api_version, kind in kinds:
            try:
                found = self.cluster.list_objects(api_version, kind, "", label_selector=selector, cached=False)
            except NotFound:
                continue
            except KubeError as exc:
                log.warning("listing %s downstream of policy %s rule %s failed: %s", kind, policy.key, rule.name, exc)
                continue
            yield from found

    def delete_downstream(self, policy: KyvernoPolicy, rule: Rule, *, trigger_uid: str | None = None, keep_uids: set[str] | None = None) -> int:
        """Delete a rule's downstream objects (of one trigger, or all but those of ``keep_uids`` triggers)."""
        deleted = 0
        for obj in self.find_downstream(policy.name, policy.namespace, rule, trigger_uid):
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if keep_uids is not None and labels.get(TRIGGER_UID_LABEL) in keep_uids:
                continue
            deleted += self._delete_object(obj)
        if deleted:
            log.info("deleted %d downstream object(s) of policy %s rule %s", deleted, policy.key, rule.name)
        return deleted

    def _unlabel_downstream(self, policy: KyvernoPolicy, rule: Rule, kinds: list[tuple[str, str]], keep: set[tuple[str, str]] | None = None) -> None:
        """Strip the policy and rule labels from a rule's downstream objects of ``kinds``: they are left as they
        are and no longer synchronized or cleaned up with the rule.  Objects the updated rule itself names
        (``keep``: (kind, name)) stay its own, also when a trigger produced them before this update was seen."""
        for obj in self._listed_downstream(policy, rule, kinds):
            if keep and (str(obj.get("kind") or ""), str((obj.get("metadata") or {}).get("name") or "")) in keep:
                continue
            labels = dict((obj.get("metadata") or {}).get("labels") or {})
            for label in (POLICY_NAME_LABEL, POLICY_NAMESPACE_LABEL, RULE_NAME_LABEL):
                labels.pop(label, None)
            obj["metadata"]["labels"] = labels
            resource = self.cluster.resolve_kind(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
            if resource is None:
                continue
            metadata = obj["metadata"]
            try:
                self.cluster.request("PUT", object_path(resource, str(metadata.get("namespace") or ""), str(metadata.get("name") or "")), obj)
            except KubeError as exc:
                log.warning("unlabelling %s failed: %s", describe_object(obj), exc)

    def _delete_object(self, obj: dict[str, Any]) -> int:
        metadata = obj.get("metadata") or {}
        resource = self.cluster.resolve_kind(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
        if resource is None:
            return 0
        try:
            self.cluster.request("DELETE", object_path(resource, str(metadata.get("namespace") or ""), str(metadata.get("name") or "")))
        except NotFound:
            return 0
        self.stats.deleted += 1
        return 1

    # -- policy changes and resync ---------------------------------------------------------------------------------
    def reconcile_policies(self) -> None:
        """React to loaded policies changing as Kyverno's policy controller does: a policy gone, or rules gone from a
        policy it can process in the background, takes their synchronized downstream along (orphan aside); a new or
        changed policy unlabels the old targets of retargeted rules (when no rule was removed), re-applies its
        synchronized data rules to their downstream and runs every generateExisting rule over existing triggers."""
        current = {policy.key: (policy, generate_rules(policy)) for policy in self._policies()}
        snapshot = self.store.snapshot
        loaded = {policy.key: policy for policy in (snapshot.policies if snapshot is not None else [])}
        previous = self._known_rules or {}
        for key, (old_policy, old_rules) in previous.items():
            kept = loaded.get(key)
            if kept is not None and (kept.raw.get("spec") == old_policy.raw.get("spec") or not reacts_to_policy_events(kept)):
                continue  # Kyverno's policy controller ignores an update of a policy it cannot process in the background
            new_rules = current.get(key, (None, {}))[1]
            for name, rule in old_rules.items():
                if name in new_rules or not synchronize(rule) or orphan_on_policy_delete(rule):
                    continue
                if kept is not None and clones(rule):
                    continue  # a clone rule removed from a policy that stays leaves its copies in place, as in Kyverno
                if kept is None and clones_single(rule):
                    continue  # a deleted policy's single-object copies stay (Kyverno's stated intent, kyverno/kyverno#1401); cloneList copies go
                try:
                    self.delete_downstream(old_policy, rule)
                except KubeError as exc:
                    log.warning("cleaning up downstream of removed rule %s/%s failed: %s", key, name, exc)
        for key, (policy, rules) in current.items():
            previous_policy, old_rules = previous.get(key, (None, {}))
            if previous_policy is not None and previous_policy.raw.get("spec") == policy.raw.get("spec"):
                continue  # Kyverno enqueues a policy only when its spec changed
            if not reacts_to_policy_events(policy):
                continue
            if previous_policy is not None and {r.name for r in previous_policy.rules} <= {r.name for r in policy.rules}:
                # no rule removed: retargeted rules orphan their old objects
                for name, rule in rules.items():
                    if name in old_rules and old_rules[name].raw != rule.raw:
                        kinds = retargeted_kinds(old_rules[name], rule)
                        if kinds:
                            self._unlabel_downstream(policy, old_rules[name], kinds, keep=current_targets(rule))
            self._policy_event(policy, list(rules.values()))
        self._known_rules = current
        self._reconcile_gpols()
        snapshot = self.store.snapshot
        self.mutate_existing.reconcile(_mutate_existing_policies(snapshot.policies if snapshot is not None else []))
        self.cel_mutate.reconcile()
        try:
            self.admission_policies.reconcile(snapshot)
        except KubeError as exc:
            log.warning("generating admission policies failed: %s", exc)

    def _reconcile_gpols(self) -> None:
        current = {policy.key: policy for policy in self._generating()}
        for key, old in self._known_gpols.items():
            if key in current or not evaluation_enabled(old, "synchronize") or evaluation_enabled(old, "orphanDownstreamOnPolicyDelete"):
                continue
            try:
                self.delete_gpol_downstream(old)
            except KubeError as exc:
                log.warning("cleaning up downstream of removed %s failed: %s", key, exc)
        for key, policy in current.items():
            known = self._known_gpols.get(key)
            if known is None or known.raw.get("spec") != policy.raw.get("spec"):  # Kyverno enqueues only spec changes
                self._gpol_policy_event(policy)
        self._known_gpols = current

    def _gpol_policy_event(self, policy: CelPolicy) -> None:
        """Kyverno's policy-controller pass over a GeneratingPolicy (created, spec changed, periodic): synchronized,
        it is re-applied to the triggers its downstream names (or, with no downstream known, only learns what it
        produces, writing nothing: Kyverno's cache-restore pass); with generateExisting it runs over every existing
        trigger."""
        if evaluation_enabled(policy, "synchronize"):
            self._sync_gpol_downstream(policy)
        if evaluation_enabled(policy, "generateExisting"):
            self._apply_gpol_to_existing(policy)

    def resync(self) -> None:
        """Leader-only periodic pass, Kyverno's forced reconciliation: every policy goes through the policy-event pass
        again (synchronized data rules re-applied to their downstream, generateExisting rules over existing triggers;
        a synchronized GeneratingPolicy regenerated for the triggers its downstream names).  A synchronized rule
        without generateExisting never gains downstream for a trigger it never saw, and nothing is deleted for a
        trigger that vanished unseen (its DELETE admission does that)."""
        self.stats.resyncs += 1
        if self._known_rules is None:
            self.reconcile_policies()
        for policy in self._policies():
            if reacts_to_policy_events(policy):
                self._policy_event(policy, list(generate_rules(policy).values()))
        for gpol in self._generating():
            self._gpol_policy_event(gpol)

    def _policy_event(self, policy: KyvernoPolicy, rules: list[Rule]) -> None:
        """Kyverno's ``handleGenerate`` for one policy: sync data rules re-applied to the triggers their downstream
        names, then every generateExisting rule applied to the existing triggers (creating what is missing)."""
        self._sync_data_downstream(policy, rules)
        wanted = [rule for rule in rules if generate_existing(policy, rule)]
        if wanted:
            self._apply_to_existing(policy, wanted, prune=False)

    def _sync_data_downstream(self, policy: KyvernoPolicy, rules: list[Rule]) -> None:
        """Kyverno's policy-event pass over synchronized data rules: every trigger that has downstream objects of
        such a rule (found by their labels) gets the rule applied again, so a changed ``data`` reaches them; a trigger
        the rule no longer applies to keeps them and the policy gets a PolicyError Event."""
        engine: Engine | None = None
        for rule in rules:
            kinds = data_kinds(rule)
            if not synchronize(rule) or not kinds:
                continue
            origins: dict[str, DownstreamOrigin] = {}
            for obj in self._listed_downstream(policy, rule, kinds):
                origin = downstream_origin(obj)
                if origin is not None and origin.trigger_uid:
                    origins.setdefault(origin.trigger_uid, origin)
            for origin in origins.values():
                engine = engine or self._engine()
                try:
                    self._regenerate_for(engine, policy, rule, origin)
                except KubeError as exc:
                    self.stats.failures += 1
                    log.warning("synchronizing policy %s rule %s for trigger %s failed: %s", policy.key, rule.name, origin.trigger_uid, exc)

    def _apply_gpol_to_existing(self, policy: CelPolicy) -> None:
        """generateExisting: the policy over every existing trigger (as CREATE requests, like Kyverno's background
        pass), creating what is missing; synchronized, each trigger's downstream the policy no longer produces goes."""
        evaluator = self._cel_evaluator()
        synchronized = evaluation_enabled(policy, "synchronize")
        triggers, _complete = self._list_gpol_triggers(policy)
        for trigger in triggers:
            uid = str((trigger.get("metadata") or {}).get("uid") or "")
            try:
                result = self._evaluate_gpol(evaluator, policy, trigger, "CREATE", {}, RequestInfo())
            except Exception as exc:
                log.warning("evaluating %s on %s failed: %s", policy.key, describe_object(trigger), exc)
                continue
            if result is None:
                continue
            self._apply_gpol_result(policy, trigger, uid, result, synchronized)

    def _apply_gpol_result(self, policy: CelPolicy, trigger: dict[str, Any], uid: str, result: Any, synchronized: bool) -> None:
        """One trigger's result of a policy-event pass: reported; passed, its downstream written (and, synchronized,
        what it no longer produces for that trigger deleted); failed, logged with a PolicyError Event."""
        self._report_gpol(policy, trigger, result)
        if result.status == ERROR:
            log.warning("%s on %s: %s", policy.key, describe_object(trigger), result.message)
            self._failure_event(policy, result.name, result.message, trigger)
            return
        if result.status != PASS:
            return
        try:
            written = self.apply_gpol_downstream(policy, trigger, result.generated_resources)
            if synchronized and uid:
                self.delete_gpol_downstream(policy, trigger_uid=uid, keep=written)
        except KubeError as exc:
            self.stats.failures += 1
            log.warning("%s on %s: %s", policy.key, describe_object(trigger), exc)

    def _sync_gpol_downstream(self, policy: CelPolicy) -> None:
        """Kyverno's ``createURForGeneratingPolicy``: each trigger named by the policy's downstream is evaluated again
        (a CREATE of the stored trigger): still selected, its downstream is brought in step and what it no longer
        produces deleted; no longer selected, its downstream is deleted; gone, left to its own DELETE.  With no
        downstream known (new policy, restarted process) the pass only learns the kinds it produces."""
        evaluator = self._cel_evaluator()
        origins: dict[str, dict[str, Any]] = {}
        for obj in self.find_gpol_downstream(policy):
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if labels.get(TRIGGER_UID_LABEL):
                origins.setdefault(str(labels[TRIGGER_UID_LABEL]), labels)
        if not origins:
            self._restore_gpol_kinds(policy, evaluator)
            return
        for uid, labels in origins.items():
            try:
                trigger = self._gpol_trigger(labels)
            except KubeError as exc:
                log.warning("reading the trigger of %s downstream failed: %s", policy.key, exc)
                continue
            if trigger is None:
                continue
            try:
                result = self._evaluate_gpol(evaluator, policy, trigger, "CREATE", {}, RequestInfo())
            except Exception as exc:
                log.warning("evaluating %s on %s failed: %s", policy.key, describe_object(trigger), exc)
                continue
            if result is None:
                try:
                    self.delete_gpol_downstream(policy, trigger_uid=uid)  # the trigger no longer matches
                except KubeError as exc:
                    log.warning("deleting downstream of %s for %s failed: %s", policy.key, describe_object(trigger), exc)
                continue
            self._apply_gpol_result(policy, trigger, uid, result, True)

    def _restore_gpol_kinds(self, policy: CelPolicy, evaluator: Any) -> None:
        """Kyverno's cache-restore pass: learn (and watch) the kinds the policy produces from its existing triggers,
        writing nothing."""
        triggers, _complete = self._list_gpol_triggers(policy)
        for trigger in triggers:
            try:
                result = self._evaluate_gpol(evaluator, policy, trigger, "CREATE", {}, RequestInfo())
            except Exception as exc:
                log.warning("evaluating %s on %s failed: %s", policy.key, describe_object(trigger), exc)
                continue
            if result is not None and result.status == PASS:
                for desired in result.generated_resources:
                    self._remember_gpol_kind(policy, str(desired.get("apiVersion") or ""), str(desired.get("kind") or ""))

    def _remember_gpol_kind(self, policy: CelPolicy, api_version: str, kind: str) -> ApiResource | None:
        """Record a kind the policy produces (its downstream is found by listing those kinds) and, synchronized,
        watch it; returns the served resource (None when the kind is not served)."""
        resource = self.cluster.resolve_kind(api_version, kind)
        if resource is None:
            return None
        served_version = api_version_of(resource)
        self._gpol_kinds.setdefault(policy.key, set()).add((served_version, resource.kind))
        if evaluation_enabled(policy, "synchronize") and self.downstream_watch is not None:
            self.downstream_watch.ensure(served_version, resource.kind)
        return resource

    def _gpol_trigger(self, labels: dict[str, Any]) -> dict[str, Any] | None:
        """The stored trigger a GeneratingPolicy's downstream names by its labels; None when it is gone, replaced
        (another uid) or being deleted."""
        group, version = str(labels.get(TRIGGER_GROUP_LABEL) or ""), str(labels.get(TRIGGER_VERSION_LABEL) or "")
        kind, namespace, name = str(labels.get(TRIGGER_KIND_LABEL) or ""), str(labels.get(TRIGGER_NAMESPACE_LABEL) or ""), str(labels.get(TRIGGER_NAME_LABEL) or "")
        if not kind or not name:
            return None
        try:
            trigger = self.cluster.get_object(f"{group}/{version}" if group else version, kind, namespace, name, cached=False)
        except NotFound:
            return None
        metadata = (trigger or {}).get("metadata") or {}
        if trigger is None or metadata.get("uid") != labels.get(TRIGGER_UID_LABEL) or metadata.get("deletionTimestamp"):
            return None
        return trigger

    def _list_gpol_triggers(self, policy: CelPolicy) -> tuple[list[dict[str, Any]], bool]:
        """Existing objects of the resources the policy's matchConstraints name (its namespace when namespaced)."""
        complete = True
        triggers: list[dict[str, Any]] = []
        try:
            served = self.cluster.api_resources()
        except KubeError as exc:
            log.warning("discovery for %s failed: %s", policy.key, exc)
            return [], False
        for resource in resources_for_rules(served, (policy.spec.get("matchConstraints") or {}).get("resourceRules") or []):
            try:
                triggers.extend(self.cluster.list_resource(resource, policy.namespace if policy.is_namespaced else "", cached=False))
            except KubeError as exc:
                complete = False
                log.warning("listing %s for %s failed: %s", resource.kind, policy.key, exc)
        return triggers, complete

    def _apply_to_existing(self, policy: KyvernoPolicy, rules: list[Rule], *, prune: bool) -> None:
        """Evaluate ``rules`` on every existing trigger and apply them; with ``prune``, delete downstream objects
        whose trigger is gone or no longer matches."""
        engine = self._engine()
        for rule in rules:
            applied_uids: set[str] = set()
            triggers, complete = self._list_triggers(policy, rule)
            for trigger in triggers:
                uid = str((trigger.get("metadata") or {}).get("uid") or "")
                try:
                    response = self._evaluate(engine, policy.with_rules([rule]), trigger, "CREATE", RequestInfo(), None)
                except Exception as exc:
                    log.warning("evaluating policy %s rule %s on %s failed: %s", policy.key, rule.name, describe_object(trigger), exc)
                    applied_uids.add(uid)  # unknown: keep its downstream
                    continue
                for result in response.rules:
                    if result.name != rule.name:
                        continue
                    if result.status == ERROR:
                        applied_uids.add(uid)
                        log.warning("policy %s rule %s on %s: %s", policy.key, rule.name, describe_object(trigger), result.message)
                        self._failure_event(policy, rule.name, result.message, trigger)
                    elif result.status == PASS:
                        applied_uids.add(uid)
                        created: list[dict[str, Any]] = []
                        try:
                            self.apply_downstream(policy, rule, result.generated_resources, created)
                        except KubeError as exc:
                            self.stats.failures += 1
                            log.warning("policy %s rule %s on %s: %s", policy.key, rule.name, describe_object(trigger), exc)
                            self._failure_event(policy, rule.name, str(exc), trigger)
                            continue
                        if self.events is not None:  # Kyverno reports the objects a background pass created
                            for spec in generate_events(policy, rule.name, created):
                                self.events.submit_success(spec)
            if prune and complete:  # an incomplete listing must not look like vanished triggers
                try:
                    self.delete_downstream(policy, rule, keep_uids=applied_uids)
                except KubeError as exc:
                    log.warning("pruning downstream of policy %s rule %s failed: %s", policy.key, rule.name, exc)

    def _list_triggers(self, policy: KyvernoPolicy, rule: Rule) -> tuple[list[dict[str, Any]], bool]:
        """Existing objects of the kinds a rule matches (in the policy's namespace for a Policy); False when some
        listing failed."""
        from stockade.controllers.webhookconfig import rule_kinds

        complete = True
        triggers: list[dict[str, Any]] = []
        seen: set[tuple[str, str]] = set()
        for selector in rule_kinds(rule):
            try:
                resources = self.cluster.resources_for_selector(selector)
            except KubeError as exc:
                log.warning("discovery for %s failed: %s", selector, exc)
                complete = False
                continue
            for resource in resources:
                if (resource.group, resource.kind) in seen:
                    continue
                seen.add((resource.group, resource.kind))
                try:
                    triggers.extend(self.cluster.list_resource(resource, policy.namespace, cached=False))
                except KubeError as exc:
                    complete = False
                    log.warning("listing %s for policy %s failed: %s", resource.kind, policy.key, exc)
        return triggers, complete


class TriggerPending(StockadeError):
    """The trigger of a CREATE is not stored yet (its admission is still under way): look again shortly."""


def _mutate_existing_policies(policies: Iterable[KyvernoPolicy]) -> list[KyvernoPolicy]:
    return [policy for policy in policies if any(rule.has_mutate_existing() for rule in policy.rules)]


def _scoped_mutating(policies: Iterable[KyvernoPolicy], scope: frozenset[tuple[str, str]] | None) -> list[KyvernoPolicy]:
    """The mutate-existing policies an event runs: all, or views of them with only the (policy key, rule) in scope."""
    found = _mutate_existing_policies(policies)
    if scope is None:
        return found
    scoped: list[KyvernoPolicy] = []
    for policy in found:
        rules = [rule for rule in policy.rules if rule.has_mutate_existing() and (policy.key, rule.name) in scope]
        if rules:
            scoped.append(policy.with_rules(rules))
    return scoped
