"""Durable generate and mutate-existing work: Kyverno's ``kyverno.io/v2`` UpdateRequests.

An admitted request that triggers generate or mutate-existing rules of a ClusterPolicy/Policy is written down as
UpdateRequests in our namespace before the admission review is answered, the way Kyverno's webhooks record them:

* ``requestType: generate``: one per policy, ``ruleContext`` naming each rule with its trigger and whether the
  request removes that rule's downstream (``deleteDownstream``: the trigger went away or stopped matching, or a
  clone source was deleted);
* ``requestType: mutate``: one per policy and rule, ``resource`` naming the trigger (a DELETE only for the rules
  whose match names the DELETE operation, as Kyverno's webhook records them: `mutateexisting.rules_for_trigger`);
* ``requestType: cel-generate``: one per (Namespaced)GeneratingPolicy whose resource rules select the request, its one
  ``ruleContext`` named after the policy (Kyverno's gpol webhook);
* ``requestType: cel-mutate``: one per (Namespaced)MutatingPolicy with ``mutateExisting`` whose resource rules select
  a request its webhook admitted (Kyverno's mpol webhook); no ``resource``, the admission request says it all;
* ``context.userInfo`` (requester and roles) and ``context.admissionRequestInfo`` (the admission request itself)
  let any replica replay the request later.

A subresource request (a ``pods/eviction`` CREATE, a ``pods/exec`` CONNECT, a ``pods/binding``) is recorded the same
way, its rules matched by the parent's kind with the subresource (``Pod/eviction``), a CEL policy's by its resource
rules naming ``pods/eviction`` (a MutatingPolicy's ``cel-mutate`` request included); its object is never stored, so
the replay takes the trigger from the recorded admission request (``subResource`` and the parent ``resource`` say
how policies match it) and never waits for it, as Kyverno's background controller does when it finds no stored
trigger.

The leader lists them when it starts leading (recovery after a crash, restart or leader change), follows a watch
(an informer; no periodic listing), and replays each one through the generate controller's own code.  A success
is marked ``Completed`` and deleted (Kyverno's clean-up); a failure is retried with exponential backoff, its
``retryCount`` and reason written to the status, and after the last attempt the request is left ``Failed`` for an operator to read.  A request whose
trigger was replaced by another object of the same name (the admission was refused after all) fails at once.

Selecting the rules at admission is deliberately generous (match blocks only, no preconditions, no context; for
the CEL kinds resource rules only, no selectors or match conditions): the replay evaluates the rules properly, so a
request recorded once too often costs one write, never a wrong object.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from stockade.celpolicy.matching import resource_rules_match
from stockade.celpolicy.model import CelPolicy
from stockade.celpolicy.request import AdmissionInput
from stockade.controllers.celmutate import CelMutateTrigger, policy_key
from stockade.controllers.mutateexisting import rules_for_trigger
from stockade.controllers.clusterdata import ClusterData
from stockade.controllers.downstreamwatch import WATCH_BACKOFF, WATCH_TIMEOUT_SECONDS, KindListWatch
from stockade.kube.controller import InformerController, Result
from stockade.kube.errors import Conflict, KubeError, NotFound
from stockade.kube.informer import Informer, ListWatch
from stockade.kube.workqueue import ItemExponentialBackoff
from stockade.engine.match import RequestInfo, ResourceKind, match_reasons, rejected_by_kind
from stockade.policy.model import KyvernoPolicy, Rule

log = logging.getLogger("stockade.updaterequest")

API_VERSION = "kyverno.io/v2"
KIND = "UpdateRequest"
GENERATE = "generate"
MUTATE = "mutate"
CEL_GENERATE = "cel-generate"
CEL_MUTATE = "cel-mutate"
PENDING = "Pending"
COMPLETED = "Completed"
FAILED = "Failed"
SKIP = "Skip"
# Kyverno's labels on UpdateRequests
GENERATE_POLICY_LABEL = "generate.kyverno.io/policy-name"
MUTATE_POLICY_LABEL = "mutate.updaterequest.kyverno.io/policy-name"
MUTATE_TRIGGER_NAME_LABEL = "mutate.updaterequest.kyverno.io/trigger-name"
MUTATE_TRIGGER_NAMESPACE_LABEL = "mutate.updaterequest.kyverno.io/trigger-namespace"
MUTATE_TRIGGER_KIND_LABEL = "mutate.updaterequest.kyverno.io/trigger-kind"
MUTATE_TRIGGER_API_VERSION_LABEL = "mutate.updaterequest.kyverno.io/trigger-apiversion"
WRITE_TIMEOUT_SECONDS = 2.0  # one UpdateRequest create; admission falls back to in-memory work beyond it
WRITE_BUDGET_SECONDS = 4.0  # all the creates of one admission request
UNSERVED_PAUSE_SECONDS = 60.0  # the CRD is missing: admission stops trying for this long
MAX_RETRIES = 10  # Kyverno's background controller gives a request this many retries
_LOOKUP_KEYS = ("namespaceSelector", "roles", "clusterRoles")


# -- building UpdateRequests (pure, unit-tested) --------------------------------------------------------------------
def collection_path(namespace: str) -> str:
    return f"/apis/{API_VERSION}/namespaces/{namespace}/updaterequests"


def resource_spec(obj: dict[str, Any]) -> dict[str, str]:
    """Kyverno's ResourceSpec of an object (empty fields left out, as Go's omitempty does)."""
    metadata = obj.get("metadata") or {}
    spec = {
        "apiVersion": str(obj.get("apiVersion") or ""),
        "kind": str(obj.get("kind") or ""),
        "namespace": str(metadata.get("namespace") or ""),
        "name": str(metadata.get("name") or ""),
        "uid": str(metadata.get("uid") or ""),
    }
    return {key: value for key, value in spec.items() if value}


def _trim(value: str, limit: int = 63) -> str:
    return value[:limit]


@dataclass(frozen=True)
class RuleContext:
    """One rule of a generate UpdateRequest: what triggered it and whether its downstream goes away."""

    rule: str
    trigger: dict[str, str]
    delete_downstream: bool = False
    synchronize: bool = False

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"rule": self.rule, "deleteDownstream": self.delete_downstream, "trigger": dict(self.trigger)}
        if self.synchronize:
            body["synchronize"] = True
        return body


def admission_request(review: Any) -> dict[str, Any]:
    """The admission request as Kyverno's UpdateRequest stores it (``context.admissionRequestInfo.admissionRequest``)."""
    kind = review.kind
    resource = dict(getattr(review, "resource", None) or {})
    info = review.user_info
    request: dict[str, Any] = {
        "uid": str(review.uid),
        "kind": {"group": kind.group, "version": kind.version, "kind": kind.kind},
        "resource": {"group": str(resource.get("group") or ""), "version": str(resource.get("version") or ""), "resource": str(resource.get("resource") or "")},
        "name": str(review.name or ""),
        "namespace": str(review.namespace or ""),
        "operation": str(review.operation),
        "userInfo": _user_info(info),
        "object": review.object or None,
        "oldObject": review.old_object or None,
        "dryRun": bool(review.dry_run),
    }
    if review.sub_resource:
        request["subResource"] = str(review.sub_resource)
    return {key: value for key, value in request.items() if value is not None}


def _user_info(info: RequestInfo) -> dict[str, Any]:
    user: dict[str, Any] = {}
    if info.username:
        user["username"] = info.username
    if info.uid:
        user["uid"] = info.uid
    if info.groups:
        user["groups"] = list(info.groups)
    if info.extra:
        user["extra"] = {key: list(value) if isinstance(value, (list, tuple)) else [str(value)] for key, value in info.extra.items()}
    return user


def request_context(review: Any) -> dict[str, Any]:
    """``spec.context``: who asked (with the roles Kyverno computes) and the admission request."""
    info: RequestInfo = review.user_info
    user: dict[str, Any] = {"userInfo": _user_info(info)}
    if info.roles:
        user["roles"] = list(info.roles)
    if info.cluster_roles:
        user["clusterRoles"] = list(info.cluster_roles)
    return {"userInfo": user, "admissionRequestInfo": {"admissionRequest": admission_request(review), "operation": str(review.operation)}}


def generate_request(namespace: str, policy: KyvernoPolicy, contexts: list[RuleContext], review: Any) -> dict[str, Any]:
    """A ``requestType: generate`` UpdateRequest for one policy's rules."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"generateName": "ur-", "namespace": namespace, "labels": {GENERATE_POLICY_LABEL: _trim(policy.name)}},
        "spec": {
            "requestType": GENERATE,
            "policy": policy.key,
            "rule": "",
            "deleteDownstream": False,
            "resource": {},
            "ruleContext": [context.as_dict() for context in contexts],
            "context": request_context(review),
        },
    }


def mutate_request(namespace: str, policy: KyvernoPolicy, rule: Rule, trigger: dict[str, Any], review: Any) -> dict[str, Any]:
    """A ``requestType: mutate`` UpdateRequest for one mutate-existing rule and its trigger."""
    spec = resource_spec(trigger)
    labels = {
        MUTATE_POLICY_LABEL: _trim(policy.name),
        MUTATE_TRIGGER_NAME_LABEL: _trim(spec.get("name", "")),
        MUTATE_TRIGGER_NAMESPACE_LABEL: spec.get("namespace", ""),
        MUTATE_TRIGGER_KIND_LABEL: spec.get("kind", ""),
    }
    if spec.get("apiVersion"):
        labels[MUTATE_TRIGGER_API_VERSION_LABEL] = spec["apiVersion"].replace("/", "-")
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"generateName": "ur-", "namespace": namespace, "labels": labels},
        "spec": {
            "requestType": MUTATE,
            "policy": policy.key,
            "rule": rule.name,
            "deleteDownstream": False,
            "resource": spec,
            "context": request_context(review),
        },
    }


def _uses_lookups(raw: dict[str, Any]) -> bool:
    """Whether a rule's match/exclude selects on namespace labels or RBAC roles (not known cheaply at admission)."""

    def walk(value: Any) -> bool:
        if isinstance(value, dict):
            return any(key in _LOOKUP_KEYS or walk(item) for key, item in value.items())
        if isinstance(value, list):
            return any(walk(item) for item in value)
        return False

    return walk(raw.get("match")) or walk(raw.get("exclude"))


def may_match(policy: KyvernoPolicy, rule: Rule, obj: dict[str, Any], gvk: ResourceKind, info: RequestInfo, operation: str) -> bool:
    """Whether ``rule`` may apply to ``obj``: its match/exclude blocks, and only its kinds when they select on
    namespace labels or roles.  Over-inclusion is harmless (the replay decides), missing a rule is not."""
    if not obj:
        return False
    if policy.namespace and policy.namespace != str((obj.get("metadata") or {}).get("namespace") or ""):
        return False
    if rejected_by_kind(rule.raw, gvk):
        return False
    if _uses_lookups(rule.raw):
        return True
    return not match_reasons(rule.raw, obj, gvk, info=info, operation=operation, policy_namespace=policy.namespace)


def _trigger_from_labels(labels: dict[str, Any]) -> dict[str, str]:
    group, version = str(labels.get("generate.kyverno.io/trigger-group") or ""), str(labels.get("generate.kyverno.io/trigger-version") or "")
    spec = {
        "apiVersion": f"{group}/{version}" if group else version,
        "kind": str(labels.get("generate.kyverno.io/trigger-kind") or ""),
        "namespace": str(labels.get("generate.kyverno.io/trigger-namespace") or ""),
        "name": str(labels.get("generate.kyverno.io/trigger-name") or ""),
        "uid": str(labels.get("generate.kyverno.io/trigger-uid") or ""),
    }
    return {key: value for key, value in spec.items() if value}


def generate_contexts(policy: KyvernoPolicy, review: Any) -> list[RuleContext]:
    """The rules of ``policy`` an admitted request gives generate work (see the module docstring)."""
    from stockade.controllers.generate import (
        MANAGED_BY_LABEL,
        MANAGED_BY_VALUE,
        POLICY_NAME_LABEL,
        POLICY_NAMESPACE_LABEL,
        RULE_NAME_LABEL,
        cloned_from,
        clones,
        downstream_kinds,
        matches_delete_operation,
        synchronize,
    )

    operation = str(review.operation)
    new, old, gvk, info = review.object or {}, review.old_object or {}, review.kind, review.user_info
    contexts: dict[str, RuleContext] = {}
    old_labels = (old.get("metadata") or {}).get("labels") or {}
    downstream_of_policy = (
        old_labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE
        and old_labels.get(POLICY_NAME_LABEL) == policy.name
        and str(old_labels.get(POLICY_NAMESPACE_LABEL) or "") == policy.namespace
    )
    for rule in policy.rules:
        if not rule.has_generate():
            continue
        synchronized = synchronize(rule)
        if operation in ("CREATE", "UPDATE") and may_match(policy, rule, new, gvk, info, operation):
            contexts[rule.name] = RuleContext(rule.name, resource_spec(new), False, synchronized)
            continue
        if operation not in ("UPDATE", "DELETE") or not old:
            continue
        generate_on_delete = operation == "DELETE" and matches_delete_operation(rule)
        if (synchronized or generate_on_delete) and may_match(policy, rule, old, gvk, info, "DELETE" if generate_on_delete else "CREATE"):
            contexts[rule.name] = RuleContext(rule.name, resource_spec(old), not generate_on_delete, synchronized)
            continue
        if not synchronized:
            continue
        if downstream_of_policy and old_labels.get(RULE_NAME_LABEL) == rule.name:
            contexts[rule.name] = RuleContext(rule.name, _trigger_from_labels(old_labels), False, True)  # a downstream object changed
            continue
        source_kind = (str(old.get("apiVersion") or ""), str(old.get("kind") or ""))
        copies_this_kind = any(kind == source_kind[1] and api_version in ("", source_kind[0]) for api_version, kind in downstream_kinds(rule))
        if clones(rule) and (cloned_from(rule, old, new or None) or copies_this_kind):
            contexts[rule.name] = RuleContext(rule.name, resource_spec(old), operation == "DELETE", True)  # a clone source changed
    return list(contexts.values())


def plan_update_requests(
    namespace: str, policies: Iterable[KyvernoPolicy], review: Any, generating: Iterable[CelPolicy] = (), *, kind: ResourceKind | None = None
) -> list[dict[str, Any]]:
    """The UpdateRequests an admitted request needs; empty for the great majority of requests.
    ``generating``: the (Namespaced)GeneratingPolicies that may run for it (background requests already left out);
    ``kind``: for a subresource request, the kind policies match it by (the parent's, with the subresource:
    ``Pod/exec``), without which it records nothing."""
    if getattr(review, "dry_run", False):
        return []
    if review.sub_resource:
        return plan_subresource_requests(namespace, policies, review, kind, generating) if kind is not None else []
    if review.operation not in ("CREATE", "UPDATE", "DELETE"):
        return []
    requests: list[dict[str, Any]] = []
    trigger = review.object if review.operation != "DELETE" else review.old_object
    for policy in policies:
        if policy.has_generate():
            contexts = generate_contexts(policy, review)
            if contexts:
                requests.append(generate_request(namespace, policy, contexts, review))
        for rule in rules_for_trigger(policy, str(review.operation), False):
            if may_match(policy, rule, trigger or {}, review.kind, review.user_info, review.operation):
                requests.append(mutate_request(namespace, policy, rule, trigger or {}, review))
    for gpol in generating:
        context = gpol_context(gpol, review)
        if context is not None:
            requests.append(cel_request(namespace, CEL_GENERATE, gpol, review, [context]))
    return requests


def plan_subresource_requests(namespace: str, policies: Iterable[KyvernoPolicy], review: Any, kind: ResourceKind, generating: Iterable[CelPolicy] = ()) -> list[dict[str, Any]]:
    """The UpdateRequests of a subresource request (``pods/eviction`` CREATE, ``pods/exec`` CONNECT ...), matched by
    ``kind``; the trigger is the request's own object (an Eviction, a PodExecOptions), which is never stored, so
    the replay takes it from the recorded admission request, as Kyverno's background controller does when it
    finds no stored trigger.  There is no downstream to keep in step: generate runs for any operation but DELETE
    and records nothing to synchronize or delete; mutate-existing runs for every operation."""
    operation = str(review.operation)
    if operation not in ("CREATE", "UPDATE", "DELETE", "CONNECT"):
        return []
    trigger = (review.object if operation != "DELETE" else review.old_object) or {}
    if not trigger:
        return []
    spec, info = resource_spec(trigger), review.user_info
    requests: list[dict[str, Any]] = []
    for policy in policies:
        if operation != "DELETE":
            contexts = [RuleContext(rule.name, spec) for rule in policy.rules if rule.has_generate() and may_match(policy, rule, trigger, kind, info, operation)]
            if contexts:
                requests.append(generate_request(namespace, policy, contexts, review))
        for rule in rules_for_trigger(policy, operation, False):
            if may_match(policy, rule, trigger, kind, info, operation):
                requests.append(mutate_request(namespace, policy, rule, trigger, review))
    if operation != "DELETE":
        for gpol in generating:
            if resource_rules_select(gpol, review):
                requests.append(cel_request(namespace, CEL_GENERATE, gpol, review, [RuleContext(policy_key(gpol), spec)]))
    return requests


def _as_input(review: Any) -> AdmissionInput:
    """The review as the CEL matcher reads it, with the request's own resource (exact plural, subresource)."""
    resource = dict(getattr(review, "resource", None) or {})
    parent = (str(resource.get("group") or ""), str(resource.get("version") or ""), review.kind.kind, str(resource.get("resource") or ""))
    return AdmissionInput(
        object=review.object or None, old_object=review.old_object or None, operation=str(review.operation), subresource=str(review.sub_resource or ""), parent=parent, request_name=str(review.name or "")
    )


def resource_rules_select(policy: CelPolicy, review: Any, *, any_operation: bool = False) -> bool:
    """Whether the policy's ``matchConstraints`` resource rules (and its namespace, for a namespaced policy) may select
    the review; ``any_operation``: whatever operations the rules list.  Selectors and match conditions are left to
    the replay, which evaluates them against the cluster as it is then."""
    if policy.is_namespaced and policy.namespace != str(review.namespace or ""):
        return False
    constraints = policy.spec.get("matchConstraints") if isinstance(policy.spec, dict) else None
    if not isinstance(constraints, dict):
        return False
    if not any(isinstance(rule, dict) for rule in constraints.get("resourceRules") or []):
        return False  # no rule, no webhook: the API server never sends such a policy a request
    # generous, as the module says: the exclusions keep their operations, so one listing only CREATE does not drop
    # the UPDATE a synchronized policy receives whatever operations its rules list
    return resource_rules_match(constraints, _as_input(review), any_operation, exclude_by_operation=True)


def gpol_context(policy: CelPolicy, review: Any) -> RuleContext | None:
    """The one rule context of a GeneratingPolicy's request, as Kyverno's gpol webhook builds it: the trigger (the old
    object of a DELETE); a DELETE the policy does not match itself removes the downstream when it synchronizes; an
    UPDATE is synchronized when the policy is.  None when the policy has nothing to do with the request."""
    from stockade.controllers.generate import evaluation_enabled, gpol_matches_delete

    operation = str(review.operation)
    synchronized = evaluation_enabled(policy, "synchronize")
    # an UPDATE or DELETE reaches a synchronized policy's webhook whatever operations it lists (its downstream follows)
    if not resource_rules_select(policy, review, any_operation=synchronized and operation in ("UPDATE", "DELETE")):
        return None
    trigger = review.object or review.old_object or {}
    if operation == "DELETE":
        if gpol_matches_delete(policy):
            return RuleContext(policy_key(policy), resource_spec(trigger), False, False)
        return RuleContext(policy_key(policy), resource_spec(trigger), True, False) if synchronized else None
    return RuleContext(policy_key(policy), resource_spec(trigger), False, synchronized and operation == "UPDATE")


def plan_mutating_requests(namespace: str, policies: Iterable[CelPolicy], review: Any) -> list[dict[str, Any]]:
    """The ``cel-mutate`` UpdateRequests of a request a MutatingPolicy webhook admitted: ``policies`` are the
    mutateExisting policies its path names (admission-enabled, background requests already left out).  As Kyverno's
    mpol webhook, any request the policy's resource rules select records one, a subresource request (a ``pods/exec``
    CONNECT, a ``pods/eviction`` CREATE) included: rules naming ``pods/exec`` select it, rules naming ``pods`` do not;
    a dry run records nothing."""
    if getattr(review, "dry_run", False) or review.operation not in ("CREATE", "UPDATE", "DELETE", "CONNECT"):
        return []
    return [cel_request(namespace, CEL_MUTATE, policy, review) for policy in policies if resource_rules_select(policy, review)]


def cel_mutate_trigger(admission: dict[str, Any], info: RequestInfo, policies: tuple[str, ...] | None, namespaced: bool | None) -> CelMutateTrigger:
    """The MutatingPolicy trigger an admission request makes, read from the request in the form an UpdateRequest
    records it (`admission_request`), so the admitting webhook and a later replay see the same request: its
    objects, requester and, for a subresource request, the subresource, the parent resource it is matched by and
    the request's name (the object of a subresource request is never stored: the replay takes it from here)."""
    new, old = admission.get("object"), admission.get("oldObject")
    subresource = str(admission.get("subResource") or "")
    parent: tuple[str, str, str, str] | None = None
    if subresource:
        resource = admission.get("resource") if isinstance(admission.get("resource"), dict) else {}
        kind = admission.get("kind") if isinstance(admission.get("kind"), dict) else {}
        assert isinstance(resource, dict) and isinstance(kind, dict)
        parent = (str(resource.get("group") or ""), str(resource.get("version") or ""), str(kind.get("kind") or ""), str(resource.get("resource") or ""))
    user = {"username": info.username, "uid": info.uid, "groups": list(info.groups), "extra": dict(info.extra)}
    return CelMutateTrigger(
        str(admission.get("operation") or "CREATE"),
        new if isinstance(new, dict) else {},
        old if isinstance(old, dict) else {},
        user,
        policies,
        namespaced,
        subresource=subresource,
        parent=parent,
        request_name=str(admission.get("name") or ""),
    )


def cel_request(namespace: str, request_type: str, policy: CelPolicy, review: Any, contexts: list[RuleContext] | None = None) -> dict[str, Any]:
    """A ``cel-generate`` or ``cel-mutate`` UpdateRequest: Kyverno labels neither."""
    spec: dict[str, Any] = {"requestType": request_type, "policy": policy_key(policy), "rule": "", "deleteDownstream": False, "resource": {}}
    if contexts:
        spec["ruleContext"] = [context.as_dict() for context in contexts]
    spec["context"] = request_context(review)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"generateName": "ur-", "namespace": namespace}, "spec": spec}


# -- processing decisions (pure, unit-tested) -----------------------------------------------------------------------
def state_of(request: dict[str, Any]) -> str:
    """A request without a state (just created, Kyverno's webhook sets Pending in a second write) is Pending."""
    return str(((request.get("status") or {}).get("state")) or PENDING)


def retry_count(request: dict[str, Any]) -> int:
    try:
        return int((request.get("status") or {}).get("retryCount") or 0)
    except (TypeError, ValueError):
        return 0


@dataclass(frozen=True)
class Outcome:
    """What one attempt leaves behind: the status to write and whether to delete the request.  A Pending outcome
    (a failure with retries left) means: try again after a backoff."""

    state: str
    message: str = ""
    retry_count: int = 0
    delete: bool = False


def outcome(failures: list[str], attempts_before: int, *, max_retries: int, permanent: bool = False) -> Outcome:
    """Success is Completed and deleted; a failure leaves the request Pending, ``retryCount`` counting the failed
    attempts, until ``max_retries`` retries were spent (or the failure is final): then Failed."""
    if not failures:
        return Outcome(COMPLETED, "", attempts_before, delete=True)
    message = "; ".join(failures)
    count = attempts_before + 1
    if permanent or count > max_retries:
        return Outcome(FAILED, message, count)
    return Outcome(PENDING, message, count)


def with_status(request: dict[str, Any], result: Outcome, generated: list[dict[str, str]] | None = None) -> dict[str, Any]:
    body = dict(request)
    status: dict[str, Any] = {"state": result.state}
    if result.message:
        status["message"] = result.message
    if result.retry_count:
        status["retryCount"] = result.retry_count
    if generated:
        status["generatedResources"] = generated
    body["status"] = status
    return body


def recorded_admission(request: dict[str, Any]) -> dict[str, Any]:
    """The admission request an UpdateRequest records (``spec.context.admissionRequestInfo.admissionRequest``);
    empty for a request without one (a policy's own)."""
    context = (request.get("spec") or {}).get("context") or {}
    admission = ((context.get("admissionRequestInfo") or {}).get("admissionRequest")) or {}
    return admission if isinstance(admission, dict) else {}


def replayed_request(request: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any], RequestInfo, ResourceKind | None]:
    """(operation, object, oldObject, requester, kind) of the admission request an UpdateRequest records."""
    spec = request.get("spec") or {}
    context = spec.get("context") or {}
    admission = recorded_admission(request)
    user = context.get("userInfo") or {}
    who = user.get("userInfo") or admission.get("userInfo") or {}
    info = RequestInfo(
        username=str(who.get("username") or ""),
        uid=str(who.get("uid") or ""),
        groups=tuple(str(group) for group in who.get("groups") or ()),
        extra=dict(who.get("extra") or {}),
        roles=tuple(str(role) for role in user.get("roles") or ()),
        cluster_roles=tuple(str(role) for role in user.get("clusterRoles") or ()),
    )
    operation = str(admission.get("operation") or (context.get("admissionRequestInfo") or {}).get("operation") or "CREATE")
    new = admission.get("object") if isinstance(admission.get("object"), dict) else {}
    old = admission.get("oldObject") if isinstance(admission.get("oldObject"), dict) else {}
    kind = admission.get("kind") if isinstance(admission.get("kind"), dict) else None
    gvk = ResourceKind(str(kind.get("group") or ""), str(kind.get("version") or ""), str(kind.get("kind") or ""), str(admission.get("subResource") or "")) if kind else None
    assert isinstance(new, dict) and isinstance(old, dict)
    return operation, new, old, info, gvk


@dataclass(frozen=True)
class RecordedSubresource:
    """The subresource request an UpdateRequest records: the parent's resource (group, version, plural), the
    subresource and the request's name (the parent object's; a PodExecOptions carries none)."""

    group: str
    version: str
    resource: str
    subresource: str
    name: str


def recorded_subresource(request: dict[str, Any]) -> RecordedSubresource | None:
    """The subresource request behind an UpdateRequest, None when it records a request of a resource itself."""
    admission = recorded_admission(request)
    subresource = str(admission.get("subResource") or "")
    if not subresource:
        return None
    resource = admission.get("resource") if isinstance(admission.get("resource"), dict) else {}
    assert isinstance(resource, dict)
    return RecordedSubresource(
        str(resource.get("group") or ""), str(resource.get("version") or ""), str(resource.get("resource") or ""), subresource, str(admission.get("name") or "")
    )


# -- admission side ----------------------------------------------------------------------------------------------------
class UpdateRequestWriter:
    """Creates the UpdateRequests of an admitted request, each bounded by a short timeout."""

    def __init__(
        self, api_client: Any, namespace: str, *, timeout: float = WRITE_TIMEOUT_SECONDS, budget: float = WRITE_BUDGET_SECONDS, cluster: ClusterData | None = None
    ) -> None:
        # writes only (nothing read through it): no cache to keep
        self.cluster = cluster or ClusterData(api_client, ttl_seconds=0.0, request_timeout=timeout)
        self.namespace = namespace
        self.budget = budget
        self._unserved_until = 0.0
        self.written = 0
        self.failed = 0

    @property
    def paused(self) -> bool:
        """The UpdateRequest CRD was missing a moment ago: admitted work is done in memory for a while."""
        return time.monotonic() < self._unserved_until

    def plan(
        self, policies: Iterable[KyvernoPolicy], review: Any, generating: Iterable[CelPolicy] = (), *, kind: ResourceKind | None = None
    ) -> list[dict[str, Any]] | None:
        """The requests to record for an admitted request (``kind``: a subresource request's, see
        `plan_update_requests`); None while paused (the caller does the work in memory)."""
        if self.paused:
            return None
        return plan_update_requests(self.namespace, policies, review, generating, kind=kind)

    def plan_mutating(self, policies: Iterable[CelPolicy], review: Any) -> list[dict[str, Any]] | None:
        if self.paused:
            return None
        return plan_mutating_requests(self.namespace, policies, review)

    def write(self, requests: list[dict[str, Any]]) -> bool:
        """True once every request is stored; False (logged) when any could not be: the caller falls back."""
        deadline = time.monotonic() + self.budget
        for body in requests:
            if time.monotonic() > deadline:
                self.failed += 1
                log.warning("recording UpdateRequests took too long; doing the work in memory")
                return False
            try:
                self.cluster.request("POST", collection_path(self.namespace), body)
                self.written += 1
            except KubeError as exc:
                self.failed += 1
                if isinstance(exc, NotFound):
                    self._unserved_until = time.monotonic() + UNSERVED_PAUSE_SECONDS
                log.warning("could not record an UpdateRequest for policy %s (%s); doing the work in memory", (body.get("spec") or {}).get("policy"), exc)
                return False
        return True


# -- leader side -------------------------------------------------------------------------------------------------------
def worth_a_look(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Which changes of a stored request bring it back to the queue: a new spec, or a state someone else moved to
    Pending (a Failed request reset for another try) or Completed.  Our own status writes (a Pending request whose
    ``retryCount`` grew) and resyncs do not: they would cut the request's backoff short."""
    if (old.get("metadata") or {}).get("generation") != (new.get("metadata") or {}).get("generation"):
        return True
    return state_of(old) != state_of(new) and state_of(new) in (PENDING, COMPLETED)


class UpdateRequestController(InformerController):
    """Replays the UpdateRequests stored in our namespace through the generate controller: a
    `stockade.kube.controller.Runnable` that runs only on the leader.

    Each start (leadership gained) builds an informer on ``kyverno.io/v2`` UpdateRequests in ``namespace`` and a
    `stockade.kube.controller.Controller` around `reconcile`; the informer's first listing is the recovery pass
    after a crash, restart or leader change, and its watch brings every new request.  A request that failed is
    retried after its key's growing backoff; the number of failed attempts lives in its status (``retryCount``), so
    a new leader goes on counting where the old one stopped."""

    def __init__(
        self,
        generator: Any,  # stockade.controllers.generate.GenerateController
        namespace: str,
        *,
        cluster: ClusterData | None = None,
        list_watch: ListWatch | None = None,
        max_retries: int = MAX_RETRIES,
        backoff_seconds: float = 0.1,
        max_backoff_seconds: float = 30.0,
    ) -> None:
        super().__init__("update-requests", self, self._informer, needs_leadership=True, update_filter=worth_a_look)
        self.generator = generator
        self.cluster = cluster or generator.cluster
        self.namespace = namespace
        self.max_retries = max_retries
        self._list_watch = list_watch
        # the delay before a failed request's next attempt (per key, reset when it completes or leaves the queue)
        self.backoff = ItemExponentialBackoff[str](base=backoff_seconds, cap=max_backoff_seconds)
        self.completed = 0
        self.failed = 0
        self.retried = 0

    def _informer(self) -> Informer:
        list_watch = self._list_watch or KindListWatch(self.cluster, API_VERSION, KIND, self.namespace)
        return Informer(list_watch, name="updaterequests", watch_timeout=WATCH_TIMEOUT_SECONDS, backoff=WATCH_BACKOFF)

    def reconcile(self, key: str) -> Result | None:
        """One look at the request ``key`` (``namespace/name``) as the informer has it: Pending is replayed,
        Completed deleted, Failed (and anything else) left for an operator to read."""
        request = self.informer.store.get(key) if self.informer is not None else None
        if request is None:
            self.backoff.forget(key)
            return None
        name = str((request.get("metadata") or {}).get("name") or "")
        path = f"{collection_path(self.namespace)}/{name}"
        state = state_of(request)
        if state == COMPLETED:
            self._delete(path)
            self.backoff.forget(key)
            return None
        if state != PENDING:
            self.backoff.forget(key)
            return None
        failures, permanent = self._replay(request)
        result = outcome(failures, retry_count(request), max_retries=self.max_retries, permanent=permanent)
        try:
            # the stored resourceVersion rides along: a request changed since the informer saw it is a Conflict
            self.cluster.request("PUT", f"{path}/status", with_status(request, result))
        except NotFound:
            self.backoff.forget(key)
            return None
        except Conflict:
            return Result(requeue=True)  # changed meanwhile: look again once the informer has the new version
        policy = (request.get("spec") or {}).get("policy")
        if result.delete:
            self.completed += 1
            self._delete(path)
        elif result.state == PENDING:
            self.retried += 1
            delay = self.backoff.when(key)
            log.info("UpdateRequest %s (policy %s) will be retried in %.1fs: %s", name, policy, delay, result.message)
            return Result(requeue_after=delay)
        else:
            self.failed += 1
            log.error("UpdateRequest %s (policy %s) failed: %s", name, policy, result.message)
        self.backoff.forget(key)
        return None

    def _delete(self, path: str) -> None:
        try:
            self.cluster.request("DELETE", path)
        except NotFound:
            pass

    def _replay(self, request: dict[str, Any]) -> tuple[list[str], bool]:
        """Run the recorded work; (failure messages, whether they are final)."""
        from stockade.controllers.generate import TriggerEvent, TriggerPending

        spec = request.get("spec") or {}
        kind, policy = str(spec.get("requestType") or GENERATE), str(spec.get("policy") or "")
        operation, new, old, info, gvk = replayed_request(request)
        if kind == CEL_MUTATE and not new and not old:
            # a policy's own request (Kyverno's policy controller writes these): the policy over what exists
            return self._apply_mutating_policy(policy)
        if not new and not old:  # no admission request (a policy-update request): the trigger as it is now
            current = self._current(spec)
            if current is None:
                return [f"trigger {spec.get('resource')} not found"], False
            new, operation = current, "CREATE"
        subresource = recorded_subresource(request)
        if subresource is not None:
            # the trigger is the request's own object, never stored: nothing to wait for or to find replaced
            gvk = self.generator.subresource_kind(subresource.group, subresource.version, subresource.resource, subresource.subresource)
            if gvk is None:
                return [f"{subresource.resource}/{subresource.subresource} is not served"], False
            event = TriggerEvent(operation, new, old, info, gvk, subresource=True, request_name=subresource.name)
        else:
            event = TriggerEvent(operation, new, old, info, gvk)
        nothing: frozenset[Any] = frozenset()
        if kind == MUTATE:
            scope = dataclasses.replace(event, generate_policies=nothing, mutate_rules=frozenset({(policy, str(spec.get("rule") or ""))}), generating_policies=nothing)
        elif kind == GENERATE:
            scope = dataclasses.replace(event, generate_policies=frozenset({policy}), mutate_rules=nothing, generating_policies=nothing)
        elif kind == CEL_GENERATE:
            scope = dataclasses.replace(event, generate_policies=nothing, mutate_rules=nothing, generating_policies=frozenset({policy}))
        elif kind == CEL_MUTATE:
            # the trigger as the admitting webhook saw it (a subresource request's object, subresource and name included)
            scope = dataclasses.replace(event, cel_mutate=cel_mutate_trigger(recorded_admission(request), info, (policy,), None))
        else:
            return [f"requestType {kind} is not handled"], True
        if operation in ("CREATE", "UPDATE") and subresource is None:
            replaced = self.generator.trigger_replaced(scope)
            if replaced:
                return [replaced], True
        try:
            failures = self.generator.process_event(scope)
        except TriggerPending as exc:
            return [str(exc)], False
        except KubeError as exc:
            return [str(exc)], False
        return [str(failure) for failure in failures], False

    def _apply_mutating_policy(self, key: str) -> tuple[list[str], bool]:
        """A ``cel-mutate`` request without an admission request names only its policy: apply it to what exists."""
        mutating = self.generator.cel_mutate
        found = [policy for policy in mutating.policies() if policy_key(policy) == key]
        if not found:
            return [f"MutatingPolicy {key} not found"], True
        return mutating.apply_policy(found[0]), False

    def _current(self, spec: dict[str, Any]) -> dict[str, Any] | None:
        resource = spec.get("resource") or {}
        if not resource.get("kind") or not resource.get("name"):
            contexts = spec.get("ruleContext") or []
            resource = (contexts[0].get("trigger") or {}) if contexts and isinstance(contexts[0], dict) else {}
        if not resource.get("kind") or not resource.get("name"):
            return None
        found = self.cluster.get_object(str(resource.get("apiVersion") or ""), str(resource["kind"]), str(resource.get("namespace") or ""), str(resource["name"]), cached=False)
        return found
