"""``validate.allowExistingViolations``: on UPDATE, an Enforce rule that the old object already violated is skipped.

Kyverno (pkg/engine/handlers/validation) re-evaluates such a rule against the old object as if it were being
created; when both old and new fail, the new failure is reported as a skip so objects that predate a policy can still
be updated.  It covers the pattern/anyPattern/deny/foreach handler (at the rule's top level) and podSecurity, not
cel, manifests or verifyImages.  The old object is matched with a placeholder requester, because the user updating
the object need not be the one who created it.
"""

from __future__ import annotations

from collections.abc import Callable

from stockade.engine.match import RequestInfo, ResourceKind, match_reasons
from stockade.engine.policycontext import PolicyContext
from stockade.engine.preconditions import ConditionEvaluationError, evaluate_conditions
from stockade.engine.response import FAIL, RuleResponse, rule_skip
from stockade.policy.model import RULE_TYPE_VALIDATION, Rule

PRE_EXISTING_VIOLATION_MESSAGE = "skipping the rule evaluation as pre-existing violations are allowed"

# Matches no subjects/roles a policy could name: rules selecting by requester never match the old object.
_OLD_OBJECT_REQUESTER = RequestInfo(
    username="kyverno:kyverno-invalid-controller",
    uid="kyverno:invaliduid",
    groups=("kyverno:invalidgroup",),
    roles=("kyverno:invalidrole",),
    cluster_roles=("kyverno:invalidrole",),
)

OldObjectEvaluator = Callable[[PolicyContext], "RuleResponse | None"]


def rule_enforces(pctx: PolicyContext, rule: Rule) -> bool:
    """The rule's own ``failureAction``, else the policy's ``validationFailureAction`` (Kyverno ignores the
    namespace overrides for this decision)."""
    action = (rule.validate or {}).get("failureAction") or pctx.policy.validation_failure_action
    return str(action).lower() == "enforce"


def allows_existing_violations(rule: Rule) -> bool:
    """``validate.allowExistingViolations``, true unless set to false."""
    value = (rule.validate or {}).get("allowExistingViolations")
    return value is not False


def is_update_request(pctx: PolicyContext) -> bool:
    return pctx.operation == "UPDATE" or bool(pctx.old_resource and pctx.new_resource)


def skip_if_pre_existing(pctx: PolicyContext, rule: Rule, response: RuleResponse | None, evaluate: OldObjectEvaluator) -> RuleResponse | None:
    """``response`` unless it is an Enforce failure on UPDATE that the old object shares; then Kyverno's skip."""
    if response is None or response.status != FAIL:
        return response
    if not (is_update_request(pctx) and rule_enforces(pctx, rule) and allows_existing_violations(rule)):
        return response
    if not pctx.old_resource:
        return response
    prior = evaluate_as_created(pctx, rule, evaluate)
    if prior is not None and prior.status == FAIL:
        return rule_skip(rule.name, RULE_TYPE_VALIDATION, PRE_EXISTING_VIOLATION_MESSAGE)
    return response


def evaluate_as_created(pctx: PolicyContext, rule: Rule, evaluate: OldObjectEvaluator) -> RuleResponse | None:
    """Run ``evaluate`` with the old object in place of the new one and operation CREATE; ``None`` when the old
    object does not match the rule or its preconditions.  The policy context is restored afterwards."""
    old, new, operation, element = pctx.old_resource, pctx.new_resource, pctx.operation, pctx.element
    ctx = pctx.json_context
    ctx.checkpoint()
    try:
        pctx.new_resource, pctx.old_resource, pctx.operation, pctx.element = old, {}, "CREATE", None
        request = dict(ctx.get("request") or {})
        request.update(object=old, operation="CREATE")
        request.pop("oldObject", None)
        ctx.set("request", request)
        if not _preconditions_hold(pctx, rule):
            return None
        reasons = match_reasons(
            rule.raw,
            old,
            ResourceKind.of(old),
            info=_OLD_OBJECT_REQUESTER,
            namespace_labels=pctx.namespace_labels,
            operation="CREATE",
            policy_namespace=pctx.policy.namespace,
        )
        if reasons:
            return None
        return evaluate(pctx)
    finally:
        ctx.reset()
        pctx.new_resource, pctx.old_resource, pctx.operation, pctx.element = new, old, operation, element


def _preconditions_hold(pctx: PolicyContext, rule: Rule) -> bool:
    if rule.preconditions is None:
        return True
    try:
        ok, _ = evaluate_conditions(rule.preconditions, pctx.json_context, is_delete=False)
    except ConditionEvaluationError:
        return False
    return ok
