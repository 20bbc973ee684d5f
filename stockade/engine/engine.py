"""The engine: runs a policy's rules of one phase (mutate, validate, generate) against one resource.

Mirrors Kyverno's flow: match/exclude → context → preconditions → exceptions → rule handler, with a JSON-context
checkpoint around every rule so context entries never leak between rules.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stockade.engine.context import ContextError, EngineContext
from stockade.engine.contextloader import ContextLoader, ContextLoadError, ContextProviders
from stockade.engine.exceptions import exception_keys, matching_exceptions
from stockade.engine.handlers.generate import ResourceLookup
from stockade.engine.jsonutil import go_string
from stockade.engine.handlers.podsecurity import validate_pod_security_rule
from stockade.engine.handlers.validate import static_pattern_key, validate_static_pattern_rule
from stockade.engine.handlers.registry import (
    DEFAULT_HANDLERS,
    GENERATE,
    VALIDATE_PATTERN,
    MUTATE,
    MUTATE_EXISTING,
    HandlerRegistry,
    HandlerResult,
    HandlerServices,
    UnknownRuleType,
    mutate_type,
    validate_type,
)
from stockade.engine.handlers.verify_images import VerificationCache, VerificationRecord, verify_and_patch
from stockade.engine.match import RequestInfo, ResourceKind, match_reasons, rejected_by_kind, selector_matches, selects_on_kinds_only
from stockade.engine.policycontext import PolicyContext, build_json_context
from stockade.engine.preconditions import ConditionEvaluationError, evaluate_conditions
from stockade.engine.response import FAIL, PASS, EngineResponse, RuleResponse, rule_error, rule_skip
from stockade.engine.variables import SubstitutionError, substitute_all
from stockade.engine.wildcard import match as wildcard_match
from stockade.identitymemo import IdentityMemo
from stockade.images.verifier_api import ImageSignatureVerifier
from stockade.jmespath import JMESPathError
from stockade.policy.model import (
    RULE_TYPE_GENERATION,
    RULE_TYPE_IMAGE_VERIFY,
    RULE_TYPE_MUTATION,
    RULE_TYPE_VALIDATION,
    KyvernoPolicy,
    PolicyException,
    Rule,
)

# A phase's handler: picks the registered handler of the rule's type. It may answer with several responses for one
# rule (mutate.targets: one per target object).
PhaseHandler = Callable[[PolicyContext, Rule, dict[str, Any]], HandlerResult]


@dataclass
class Request:
    """An admission request reduced to what policies can see."""

    resource: dict[str, Any]
    operation: str = "CREATE"
    old_resource: dict[str, Any] = field(default_factory=dict)
    info: RequestInfo = field(default_factory=RequestInfo)
    namespace_labels: dict[str, str] = field(default_factory=dict)
    subresource: str = ""
    values: dict[str, Any] = field(default_factory=dict)
    gvk: ResourceKind | None = None
    operation_forced: bool = False
    # More fields of an AdmissionReview request (name, uid, kind, resource, subResource, dryRun), which Kyverno's
    # admission context carries under ``request``; empty offline and in background scans, where there is no request
    admission: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PreparedRequest:
    """A request made ready for evaluation by several policies (``Engine.prepare``)."""

    request: Request
    new_resource: dict[str, Any]
    old_resource: dict[str, Any]
    gvk: ResourceKind
    json_context: EngineContext


_MAX_PLAN_LISTS_PER_POLICY = 1024  # a plan list per kind, and per kind and phase filter


class RulePlan:
    """What the rule driver needs of one rule for one kind, worked out once (``kind_plans``) instead of on every
    review: the rule, whether its kinds are all it selects on (then it matches every resource of that kind, unless
    its policy is namespaced: the namespaces must agree), its own failureAction and whether it has overrides, and
    ``static_pattern`` (``static_pattern_key``'s answer: a pattern check of the resource alone)."""

    __slots__ = ("rule", "kinds_only", "own_action", "has_overrides", "static_pattern")

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.kinds_only = selects_on_kinds_only(rule.raw)
        self.own_action, self.has_overrides = _RULE_ACTIONS.get(rule.raw, _rule_own_action)
        self.static_pattern = static_pattern_key(rule)


class PolicyPlan:
    """What the rule driver needs of one policy, worked out once: whether it stops at the first applied rule, whether
    it is namespaced, its validationFailureAction and whether it has overrides, and its rule plans per kind and
    phase filter (``rule_plans``).  Plans live as long as the policy object they were built from: a policy document
    never changes once loaded, and a changed policy (e.g. in a new snapshot) is a new object with new plans."""

    __slots__ = ("policy", "apply_one", "namespaced", "action", "has_overrides", "_lists")

    def __init__(self, policy: KyvernoPolicy) -> None:
        self.policy = policy
        self.apply_one = policy.apply_rules == "One"
        self.namespaced = bool(policy.namespace)
        self.action, self.has_overrides = _POLICY_ACTIONS.get(policy.raw, _policy_action)
        # keyed by the kind's fields (strings hash and compare in C; a ResourceKind's dataclass methods do not)
        self._lists: dict[tuple[Any, ...], list[RulePlan]] = {}

    def rule_plans(self, gvk: ResourceKind, wants: Callable[[Rule], bool] | None = None) -> list[RulePlan]:
        """The plans of the policy's rules that can apply to ``gvk`` (rules whose match blocks name kinds that
        exclude it never can: autogen triples a Pod policy's rules and a Pod review needs only a third), in order;
        with ``wants`` only those of the rules it picks (a phase's filter: a pure function of the rule, defined
        once, since it is part of the key)."""
        lists = self._lists
        key = (gvk.group, gvk.version, gvk.kind, gvk.subresource, wants)
        chosen = lists.get(key)
        if chosen is None:
            if len(lists) >= _MAX_PLAN_LISTS_PER_POLICY:
                lists.clear()
            every_key = (gvk.group, gvk.version, gvk.kind, gvk.subresource, None)
            every = lists.get(every_key)
            if every is None:
                every = lists[every_key] = [RulePlan(rule) for rule in self.policy.rules if not rejected_by_kind(rule.raw, gvk)]
            chosen = lists[key] = every if wants is None else [plan for plan in every if wants(plan.rule)]
        return chosen


_POLICY_PLANS: IdentityMemo[KyvernoPolicy, PolicyPlan] = IdentityMemo(4096)


def policy_plan(policy: KyvernoPolicy) -> PolicyPlan:
    return _POLICY_PLANS.get(policy, PolicyPlan)


def kind_plans(policy: KyvernoPolicy, gvk: ResourceKind, wants: Callable[[Rule], bool] | None = None) -> list[RulePlan]:
    """``PolicyPlan.rule_plans`` of the policy."""
    return policy_plan(policy).rule_plans(gvk, wants)


def rules_for_kind(policy: KyvernoPolicy, gvk: ResourceKind) -> list[Rule]:
    """The policy's rules minus those whose match blocks name kinds that exclude ``gvk`` (they could never apply)."""
    return [plan.rule for plan in kind_plans(policy, gvk)]


def add_report_properties(pctx: PolicyContext, report_properties: dict[str, Any], responses: list[RuleResponse]) -> None:
    """A rule's ``reportProperties``, its variables substituted in the rule's context, join the properties of its
    report results (Kyverno's rule field); a property whose variables do not resolve is left out."""
    for key, template in report_properties.items():
        try:
            value = substitute_all(template, pctx.json_context, is_delete=pctx.is_delete)
        except (SubstitutionError, ContextError, JMESPathError):
            continue
        text = value if isinstance(value, str) else go_string(value)
        for response in responses:
            response.properties = {**response.properties, str(key): text}


# The rule's own failureAction and the policy's are cached apart, each keyed by its own document: YAML aliases can make
# two policies share one rule dict while their validationFailureAction differs.  Each entry: (the action, whether
# the document has overrides that need the request to decide).
_RULE_ACTIONS: IdentityMemo[dict[str, Any], tuple[str | None, bool]] = IdentityMemo(50_000)
_POLICY_ACTIONS: IdentityMemo[dict[str, Any], tuple[str, bool]] = IdentityMemo(4096)


def _normalized_action(action: object) -> str:
    return "Enforce" if str(action).lower() == "enforce" else "Audit"


def _rule_own_action(rule_raw: dict[str, Any]) -> tuple[str | None, bool]:
    validate = rule_raw.get("validate") or {}
    action = validate.get("failureAction")
    return (_normalized_action(action) if action else None), bool(validate.get("failureActionOverrides"))


def _policy_action(policy_raw: dict[str, Any]) -> tuple[str, bool]:
    policy = KyvernoPolicy(policy_raw)
    return _normalized_action(policy.validation_failure_action), bool(policy.validation_failure_action_overrides)


def _matching_override(overrides: Any, pctx: PolicyContext) -> str:
    """The action of the first valid override whose ``namespaces`` (wildcards) and ``namespaceSelector`` both accept
    the resource's namespace; an override naming neither applies everywhere.  "" when none matches."""
    if not isinstance(overrides, list):
        return ""
    namespace = str(((pctx.new_resource or pctx.old_resource).get("metadata") or {}).get("namespace") or "")
    for override in overrides:
        if not isinstance(override, dict) or str(override.get("action") or "").lower() not in ("enforce", "audit"):
            continue
        namespaces = override.get("namespaces")
        selector = override.get("namespaceSelector")
        if namespaces is None:
            if selector is None or selector_matches(selector, pctx.namespace_labels):
                return str(override["action"])
            continue
        if any(wildcard_match(str(ns), namespace) for ns in namespaces or []):
            if selector is None or selector_matches(selector, pctx.namespace_labels):
                return str(override["action"])
    return ""


def admission_failure_action(policy: KyvernoPolicy, rule: Rule, namespace: str | None, namespace_labels: dict[str, str]) -> str:
    """The action Kyverno's admission policy cache files a validate rule under for a request in ``namespace`` (None:
    cluster-scoped, or a namespace that does not exist yet): Enforce rules are evaluated before the answer and may
    deny it, Audit rules only after it.  This differs from the action of a rule's result (``_failure_action``): the
    rule's ``failureActionOverrides`` replace the policy's overrides instead of falling back to them, either
    overrides list outranks the rule's own ``failureAction``, and an override matches by its namespaces or by its
    namespaceSelector (either one; an override naming neither matches every request)."""
    validate = rule.validate or {}
    overrides = validate.get("failureActionOverrides") or policy.validation_failure_action_overrides
    for override in overrides if isinstance(overrides, list) else []:
        if not isinstance(override, dict):
            continue
        namespaces = override.get("namespaces") or []
        selector = override.get("namespaceSelector")
        matched = (
            (not namespaces and selector is None)
            or (namespace is not None and any(wildcard_match(str(pattern), namespace) for pattern in namespaces))
            or (namespace is not None and isinstance(selector, dict) and selector_matches(selector, namespace_labels))
        )
        if matched:
            return _normalized_action(override.get("action"))
    return _normalized_action(validate.get("failureAction") or policy.validation_failure_action)


class Engine:
    """Evaluates Kyverno ClusterPolicy/Policy rules. Stateless apart from configuration; safe to reuse."""

    def __init__(
        self,
        *,
        providers: ContextProviders | None = None,
        exceptions: list[PolicyException] | None = None,
        resource_lookup: ResourceLookup | None = None,
        default_registry: str = "docker.io",
        registry_mutation: bool = True,
        image_verifier: ImageSignatureVerifier | None = None,
        verification_cache: VerificationCache | None = None,
        handlers: HandlerRegistry | None = None,
    ) -> None:
        self.image_verifier = image_verifier
        self.verification_cache = verification_cache
        self.providers = providers or ContextProviders()
        self.exceptions = list(exceptions or [])
        self.resource_lookup = resource_lookup
        self.default_registry = default_registry
        # Kyverno's enableDefaultRegistryMutation: whether `images` report the default registry of short names
        self.registry_mutation = registry_mutation
        # Looked up per rule, so handlers registered after construction (stockade.celpolicy's) are found.
        self.handlers = handlers or DEFAULT_HANDLERS
        self._validate_handler: tuple[ContextProviders, ResourceLookup | None, PhaseHandler] | None = None

    # -- policy context -------------------------------------------------------------------------------------------
    def policy_context(self, policy: KyvernoPolicy, request: Request) -> PolicyContext:
        return self.bind(policy, self.prepare(request))

    def prepare(self, request: Request) -> PreparedRequest:
        """What every policy's evaluation of ``request`` shares: the resources as the engine sees them and one JSON
        context, built once per request as Kyverno's admission handlers do, not once per policy."""
        new_resource = {} if request.operation == "DELETE" else request.resource
        old_resource = request.old_resource
        if request.operation == "DELETE" and not old_resource:
            old_resource = request.resource
        if request.operation == "UPDATE" and not old_resource:
            old_resource = request.resource
        gvk = request.gvk or ResourceKind.of(request.resource, request.subresource)
        ctx = build_json_context(
            new_resource,
            old_resource,
            request.operation,
            request.info,
            gvk,
            default_registry=self.default_registry,
            registry_mutation=self.registry_mutation,
            admission=request.admission,
        )
        for key, value in request.values.items():
            ctx.add_variable(key, value)
        request_data = ctx.get("request") or {}
        if request.values:
            # values may rewrite the object under review (e.g. request.object.metadata.name)
            new_resource = request_data.get("object") or {} if request.operation != "DELETE" else {}
            old_resource = request_data.get("oldObject") or old_resource
        return PreparedRequest(request, new_resource, old_resource, gvk, ctx)

    def bind(self, policy: KyvernoPolicy, prepared: PreparedRequest) -> PolicyContext:
        """A policy's context over a prepared request.  Contexts bound to one PreparedRequest share its JSON context:
        evaluate them one after another (every phase checkpoints the context and restores it when done), never
        interleaved, and never after a mutation changed the resource (mutation rebuilds per policy)."""
        request = prepared.request
        return PolicyContext(
            policy=policy,
            new_resource=prepared.new_resource,
            old_resource=prepared.old_resource,
            operation=request.operation,
            json_context=prepared.json_context,
            gvk=prepared.gvk,
            request_info=request.info,
            namespace_labels=request.namespace_labels,
            context_loader=ContextLoader(self.providers, policy.name, policy.namespace),
            exceptions=self.exceptions,
        )

    # -- shared rule driver ----------------------------------------------------------------------------------------
    @staticmethod
    def _mismatch_reasons(pctx: PolicyContext, rule: Rule, resource: dict[str, Any]) -> list[str]:
        """Why the rule does not apply (match/exclude), empty when it does: kept in the response for debug logs
        and ``stockade explain``."""
        # Kyverno matches the old object only when there is no new one (DELETE): on UPDATE a rule that selected
        # only the old object (e.g. a label that the update removes) does not apply.
        subject = resource or pctx.old_resource
        if not subject:
            return ["resource is empty"]
        return match_reasons(
            rule.raw, subject, pctx.gvk, info=pctx.request_info, namespace_labels=pctx.namespace_labels, operation=pctx.operation, policy_namespace=pctx.policy.namespace
        )

    def _run_rules(
        self,
        pctx: PolicyContext,
        rule_type: str,
        wants: Callable[[Rule], bool],
        handler: PhaseHandler,
    ) -> EngineResponse:
        ctx = pctx.json_context
        resource = pctx.new_resource
        plan_of_policy = policy_plan(pctx.policy)
        response = EngineResponse(pctx.policy, pctx.new_resource or pctx.old_resource, resource, namespace_labels=pctx.namespace_labels)
        applied = 0
        apply_one, namespaced = plan_of_policy.apply_one, plan_of_policy.namespaced
        policy_action, policy_has_overrides = plan_of_policy.action, plan_of_policy.has_overrides
        # a rule that checks a pattern against the resource alone skips the generic steps (context, preconditions,
        # exceptions, handler dispatch) when none of them could change its result here
        static_patterns = (
            rule_type == RULE_TYPE_VALIDATION
            and not pctx.exceptions
            and not pctx.context_loader.has_values
            and self.handlers.handler_or_none(VALIDATE_PATTERN) is DEFAULT_HANDLERS.handler_or_none(VALIDATE_PATTERN)
        )
        ctx.checkpoint()
        try:
            for plan in plan_of_policy.rule_plans(pctx.gvk, wants):
                rule = plan.rule
                # a rule selecting on kinds alone, listed for this kind, matches any resource (match_reasons' answer)
                if not plan.kinds_only or namespaced or not (resource or pctx.old_resource):
                    mismatch = self._mismatch_reasons(pctx, rule, resource)
                    if mismatch:
                        response.unmatched.append((rule.name, mismatch))
                        continue
                ctx.checkpoint()
                rule_started, clock_started = time.time_ns(), time.perf_counter_ns()
                before = resource
                try:
                    if static_patterns and plan.static_pattern is not None:
                        rule_response: RuleResponse | list[RuleResponse] | None = validate_static_pattern_rule(pctx, rule, plan.static_pattern)
                    else:
                        resource, rule_response = self._invoke(pctx, rule, rule_type, resource, handler)
                finally:
                    ctx.reset()  # also drops what the rule recorded in request.object: it is recorded again below
                rule_duration = time.perf_counter_ns() - clock_started
                if rule_type in (RULE_TYPE_MUTATION, RULE_TYPE_IMAGE_VERIFY) and (resource is not before or resource is not pctx.new_resource):
                    pctx.set_resource(resource)
                if rule_response is None:
                    continue
                if plan.has_overrides or policy_has_overrides:
                    action = self._failure_action(pctx, rule)
                else:
                    action = plan.own_action or policy_action
                for single in rule_response if isinstance(rule_response, list) else [rule_response]:
                    single.failure_action = action
                    single.started_ns, single.duration_ns = rule_started, rule_duration
                    response.rules.append(single)
                    if single.status in (PASS, FAIL):
                        applied += 1
                if apply_one and applied > 0:
                    break
        finally:
            ctx.reset()
        response.patched_resource = resource
        return response

    def _invoke(
        self, pctx: PolicyContext, rule: Rule, rule_type: str, resource: dict[str, Any], handler: PhaseHandler
    ) -> HandlerResult:
        raw = rule.raw
        loader = pctx.context_loader
        if raw.get("context") or loader.has_values:
            try:
                loader.load(rule.context, pctx.json_context, rule.name, is_delete=pctx.is_delete)
            except (ContextLoadError, JMESPathError, ContextError, SubstitutionError) as exc:
                return resource, rule_error(rule.name, rule_type, "failed to load context", exc)
        preconditions = raw.get("preconditions")
        if preconditions is not None:
            try:
                ok, message = evaluate_conditions(preconditions, pctx.json_context, is_delete=pctx.is_delete)
            except ConditionEvaluationError as exc:
                return resource, rule_error(rule.name, rule_type, "failed to evaluate preconditions", exc, precondition_error=True)
            if not ok:
                return resource, rule_skip(rule.name, rule_type, "; ".join(m for m in ("preconditions not met", message) if m))
        exceptions = matching_exceptions(pctx, rule.name)
        if exceptions:
            if (rule.validate or {}).get("podSecurity") is None:
                keys = exception_keys(exceptions)
                return resource, rule_skip(rule.name, rule_type, "rule is skipped due to policy exceptions" + ", ".join(keys), exceptions=keys)
            # Kyverno: one matching exception without podSecurity controls exempts the whole rule, whatever
            # narrower podSecurity-scoped exceptions also match.
            whole_rule = next((e for e in exceptions if not e.pod_security), None)
            if whole_rule is not None:
                keys = exception_keys([whole_rule])
                return resource, rule_skip(rule.name, rule_type, "rule is skipped due to policy exception " + keys[0], exceptions=keys)
            extra = [control for e in exceptions for control in e.pod_security]
            return resource, validate_pod_security_rule(pctx, rule, extra, exception_keys(exceptions))
        resource, outcome = handler(pctx, rule, resource)
        report_properties = raw.get("reportProperties")
        if outcome is not None and isinstance(report_properties, dict) and report_properties:
            add_report_properties(pctx, report_properties, outcome if isinstance(outcome, list) else [outcome])
        return resource, outcome

    @staticmethod
    def _failure_action(pctx: PolicyContext, rule: Rule) -> str:
        """Kyverno's per-rule action: the rule's first matching ``failureActionOverrides`` entry, else its
        ``failureAction``, else the policy's first matching ``validationFailureActionOverrides`` entry, else its
        ``validationFailureAction``."""
        own_action, rule_has_overrides = _RULE_ACTIONS.get(rule.raw, _rule_own_action)
        policy_action, policy_has_overrides = _POLICY_ACTIONS.get(pctx.policy.raw, _policy_action)
        if not rule_has_overrides and not policy_has_overrides:
            return own_action or policy_action
        validate = rule.validate or {}
        rule_overrides = validate.get("failureActionOverrides")
        policy_overrides = pctx.policy.validation_failure_action_overrides
        action = (
            _matching_override(rule_overrides, pctx)
            or validate.get("failureAction")
            or _matching_override(policy_overrides, pctx)
            or pctx.policy.validation_failure_action
        )
        return "Enforce" if str(action).lower() == "enforce" else "Audit"

    # -- phases ----------------------------------------------------------------------------------------------------
    def _services(self, verification_record: VerificationRecord | None = None) -> HandlerServices:
        return HandlerServices(providers=self.providers, resource_lookup=self.resource_lookup, verification_record=verification_record)

    def _dispatch(self, rule_type: Callable[[Rule], str], services: HandlerServices) -> PhaseHandler:
        """A phase handler that runs the registered handler of each rule's type."""

        def handler(ctx: PolicyContext, rule: Rule, resource: dict[str, Any]) -> HandlerResult:
            name = rule_type(rule)
            try:
                registered = self.handlers.handler(name)
            except UnknownRuleType as exc:
                return resource, rule_error(rule.name, _PHASE_OF_TYPE.get(name, RULE_TYPE_VALIDATION), "unsupported rule", exc)
            return registered(ctx, rule, resource, services)

        return handler

    def mutate(self, pctx: PolicyContext, include_existing: bool = False) -> EngineResponse:
        """Mutate the resource under review; with ``include_existing`` also compute ``mutate.targets`` patches of
        other objects (offline runs; admission leaves those to a background worker, never to the request)."""

        wants = _wants_any_mutation if include_existing else _wants_resource_mutation
        return self._run_rules(pctx, RULE_TYPE_MUTATION, wants, self._dispatch(mutate_type, self._services()))

    def verify_images(self, pctx: PolicyContext, record: VerificationRecord | None = None) -> tuple[EngineResponse, VerificationRecord]:
        """Mutate phase of verifyImages rules: verify signatures, pin digests, record results (needs a verifier).

        `record` accumulates every policy's results of one request (a fresh one when omitted); the returned record
        is that accumulator, to be written onto the final object with `apply_record` once all policies ran."""
        shared = record if record is not None else VerificationRecord()
        verifier, cache = self.image_verifier, self.verification_cache

        def handler(ctx: PolicyContext, rule: Rule, resource: dict[str, Any]) -> HandlerResult:
            if verifier is None:
                return resource, rule_error(rule.name, RULE_TYPE_IMAGE_VERIFY, "image verification is not configured", "no image verifier")
            ctx.new_resource = resource
            outcome = verify_and_patch(ctx, rule, verifier, cache, shared)
            return outcome.resource, outcome.rule_response

        response = self._run_rules(pctx, RULE_TYPE_IMAGE_VERIFY, Rule.has_verify_images, handler)
        return response, shared

    def validate(self, pctx: PolicyContext, verification_record: VerificationRecord | None = None) -> EngineResponse:
        if verification_record is None:
            handler = self._plain_validate_handler()
        else:
            handler = self._dispatch(validate_type, self._services(verification_record))
        return self._run_rules(pctx, RULE_TYPE_VALIDATION, _wants_validation, handler)

    def _plain_validate_handler(self) -> PhaseHandler:
        """The validate phase's handler without a verification record, built once for the engine's services (the
        admission path asks for it for every policy of every review)."""
        cached = self._validate_handler
        if cached is None or cached[0] is not self.providers or cached[1] is not self.resource_lookup:
            cached = self._validate_handler = (self.providers, self.resource_lookup, self._dispatch(validate_type, self._services()))
        return cached[2]

    def generate(self, pctx: PolicyContext) -> EngineResponse:
        return self._run_rules(pctx, RULE_TYPE_GENERATION, Rule.has_generate, self._dispatch(lambda rule: GENERATE, self._services()))


def _wants_any_mutation(rule: Rule) -> bool:
    return rule.has_mutate()


def _wants_resource_mutation(rule: Rule) -> bool:
    return rule.has_mutate() and not rule.has_mutate_existing()


def _wants_validation(rule: Rule) -> bool:
    return rule.has_validate() or rule.has_verify_images()


_PHASE_OF_TYPE = {MUTATE: RULE_TYPE_MUTATION, MUTATE_EXISTING: RULE_TYPE_MUTATION, GENERATE: RULE_TYPE_GENERATION}
