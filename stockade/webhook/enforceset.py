"""Which ClusterPolicy/Policy validate results answer an admission request, as Kyverno's validating webhook decides.

Kyverno's policy cache hands its validating webhook two sets of rules per request: the rules whose action for the
request's namespace is Enforce (``admission_failure_action``), evaluated before the answer, and the Audit ones,
evaluated after the answer has gone back.  Only the first set can deny the request, name itself in the denial, or
(with the ``spec.emitWarning`` policies' Audit rules) come back as warnings; Audit rules never deny, not even when
they error under ``failurePolicy: Fail``.  Stockade evaluates both sets in one pass and splits the results here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from stockade.engine.engine import admission_failure_action
from stockade.engine.response import ERROR, FAIL, PASS, SKIP, EngineResponse
from stockade.identitymemo import IdentityMemo
from stockade.policy.model import KyvernoPolicy, Rule


def _synchronous_rules(policy: KyvernoPolicy, namespace: str | None, namespace_labels: dict[str, str]) -> dict[str, bool]:
    """Rule name → whether it runs before the answer.  Rules without ``validate`` (verifyImages checks) always do:
    Kyverno adds their policies to the synchronous set whole.  Worked out once per policy unless an override makes
    it depend on the request's namespace."""
    static = _STATIC_SETS.get(policy, _static_set)
    if static is not None:
        return static
    return _rule_set(policy, namespace, namespace_labels)


def _rule_set(policy: KyvernoPolicy, namespace: str | None, namespace_labels: dict[str, str]) -> dict[str, bool]:
    return {
        rule.name: not rule.has_validate() or admission_failure_action(policy, rule, namespace, namespace_labels) == "Enforce"
        for rule in policy.rules
    }


def _has_overrides(policy: KyvernoPolicy, rule: Rule) -> bool:
    return bool((rule.validate or {}).get("failureActionOverrides") or policy.validation_failure_action_overrides)


def _static_set(policy: KyvernoPolicy) -> dict[str, bool] | None:
    if any(_has_overrides(policy, rule) for rule in policy.rules):
        return None
    return _rule_set(policy, None, {})


_STATIC_SETS: IdentityMemo[KyvernoPolicy, dict[str, bool] | None] = IdentityMemo(4096)


def _always_synchronous(policy: KyvernoPolicy) -> bool:
    """The policy has rules, and every one runs before the answer whatever the request (then so does a result naming
    none of them)."""
    static = _STATIC_SETS.get(policy, _static_set)
    return static is not None and bool(static) and all(static.values())


_ALWAYS_SYNCHRONOUS: IdentityMemo[KyvernoPolicy, bool] = IdentityMemo(4096)


def split_responses(
    responses: Iterable[EngineResponse], namespace: str | None, namespace_labels: dict[str, str]
) -> tuple[list[EngineResponse], list[EngineResponse]]:
    """(results Kyverno evaluates before answering, results it evaluates after), each response reduced to the rules
    of its set and left out when none remain.  A result whose rule the policy does not name (a timeout standing in
    for a policy that never ran) counts as synchronous when any of the policy's rules does."""
    synchronous: list[EngineResponse] = []
    deferred: list[EngineResponse] = []
    for response in responses:
        policy = response.policy
        if not isinstance(policy, KyvernoPolicy):
            synchronous.append(response)
            continue
        if _ALWAYS_SYNCHRONOUS.get(policy, _always_synchronous):
            synchronous.append(response)  # the usual Enforce policy: nothing to split
            continue
        in_set = _synchronous_rules(policy, namespace, namespace_labels)
        unnamed = any(in_set.values())
        now = [rule for rule in response.rules if in_set.get(rule.name, unnamed)]
        later = [rule for rule in response.rules if not in_set.get(rule.name, unnamed)]
        if now:
            synchronous.append(response if len(now) == len(response.rules) else dataclasses.replace(response, rules=now))
        if later:
            deferred.append(response if len(later) == len(response.rules) else dataclasses.replace(response, rules=later))
    return synchronous, deferred


def request_blocked(synchronous: Iterable[EngineResponse], fail_closed: bool) -> bool:
    """Kyverno's block decision over the synchronous results: a failed rule whose own action is Enforce, or any
    error when the webhook's failurePolicy is Fail."""
    for response in synchronous:
        for rule in response.rules:
            if rule.status == FAIL and rule.failure_action == "Enforce":
                return True
            if rule.status == ERROR and fail_closed:
                return True
    return False


def unsuccessful_rules(responses: Iterable[EngineResponse]) -> dict[str, dict[str, str]]:
    """policy → rule → message of every result that neither passed nor was skipped: what a denial lists (every
    synchronous result that went wrong, not only the ones that caused the denial)."""
    listed: dict[str, dict[str, str]] = {}
    for response in responses:
        reasons = {rule.name: rule.message for rule in response.rules if rule.status not in (PASS, SKIP)}
        if reasons:
            listed[response.policy_name] = reasons  # keyed by name alone: a later namespaced namesake replaces it
    return listed


def override_namespace(kind: str, operation: str, namespace: str, old_object: dict[str, Any], namespace_labels: dict[str, str]) -> tuple[str | None, dict[str, str]]:
    """The namespace (and its labels) Kyverno matches failure-action overrides against: the request's, as found
    among existing namespaces.  A Namespace's own request names that Namespace, which exists (labelled as stored)
    except while it is being created; a cluster-scoped request has none."""
    if not namespace:
        return None, {}
    if kind != "Namespace":
        return namespace, namespace_labels
    if operation == "CREATE" or not old_object:
        return None, {}
    labels = (old_object.get("metadata") or {}).get("labels") or {}
    return namespace, {str(key): str(value) for key, value in labels.items()} if isinstance(labels, dict) else {}
