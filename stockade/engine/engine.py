"""The engine: runs a policy's rules of one phase (mutate, validate, generate) against one resource.

Mirrors Kyverno's flow: match/exclude → context → preconditions → exceptions → rule handler, with a JSON-context
checkpoint around every rule so context entries never leak between rules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stockade.engine.context import ContextError
from stockade.engine.contextloader import ContextLoader, ContextLoadError, ContextProviders
from stockade.engine.exceptions import exception_keys, matching_exceptions
from stockade.engine.handlers.generate import ResourceLookup, generate_rule
from stockade.engine.handlers.mutate import mutate_resource_rule
from stockade.engine.handlers.podsecurity import validate_pod_security_rule
from stockade.engine.handlers.validate import validate_resource_rule
from stockade.engine.match import RequestInfo, ResourceKind, match_reasons, rejected_by_kind
from stockade.engine.policycontext import PolicyContext, build_json_context
from stockade.engine.preconditions import ConditionEvaluationError, evaluate_conditions
from stockade.engine.response import FAIL, PASS, EngineResponse, RuleResponse, rule_error, rule_skip
from stockade.engine.variables import SubstitutionError
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

# A handler may answer with several responses for one rule (mutate.targets: one per target object).
RuleHandler = Callable[[PolicyContext, Rule, dict[str, Any]], tuple[dict[str, Any], "RuleResponse | list[RuleResponse] | None"]]


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


_MAX_KINDS_PER_POLICY = 256
_RULES_BY_KIND: dict[int, tuple[list[Rule], dict[ResourceKind, list[Rule]]]] = {}


def rules_for_kind(policy: KyvernoPolicy, gvk: ResourceKind) -> list[Rule]:
    """The policy's rules minus those whose match blocks name kinds that exclude ``gvk`` (they could never apply),
    computed once per policy and kind: autogen triples a Pod policy's rules and a Pod review needs only a third."""
    rules = policy.rules
    cached = _RULES_BY_KIND.get(id(rules))
    if cached is None or cached[0] is not rules:
        if len(_RULES_BY_KIND) > 4096:
            _RULES_BY_KIND.clear()
        cached = _RULES_BY_KIND[id(rules)] = (rules, {})
    by_kind = cached[1]
    chosen = by_kind.get(gvk)
    if chosen is None:
        if len(by_kind) >= _MAX_KINDS_PER_POLICY:
            by_kind.clear()
        chosen = by_kind[gvk] = [rule for rule in rules if not rejected_by_kind(rule.raw, gvk)]
    return chosen


_STATIC_ACTIONS: dict[int, tuple[dict[str, Any], dict[str, Any], str]] = {}


def _static_failure_action(policy: KyvernoPolicy, rule: Rule) -> str:
    """A rule's failure action when its policy has no per-namespace overrides: the rule's own ``failureAction``,
    else the policy's; worked out once per rule (held by identity, like the other per-rule caches)."""
    cached = _STATIC_ACTIONS.get(id(rule.raw))
    if cached is not None and cached[0] is rule.raw and cached[1] is policy.raw:
        return cached[2]
    action = (rule.validate or {}).get("failureAction") or policy.validation_failure_action
    resolved = "Enforce" if str(action).lower() == "enforce" else "Audit"
    if len(_STATIC_ACTIONS) > 50_000:
        _STATIC_ACTIONS.clear()
    _STATIC_ACTIONS[id(rule.raw)] = (rule.raw, policy.raw, resolved)
    return resolved


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
        image_verifier: Any = None,
        verification_cache: Any = None,
    ) -> None:
        self.image_verifier = image_verifier
        self.verification_cache = verification_cache
        self.providers = providers or ContextProviders()
        self.exceptions = list(exceptions or [])
        self.resource_lookup = resource_lookup
        self.default_registry = default_registry
        # Kyverno's enableDefaultRegistryMutation: whether `images` report the default registry of short names
        self.registry_mutation = registry_mutation

    # -- policy context -------------------------------------------------------------------------------------------
    def policy_context(self, policy: KyvernoPolicy, request: Request) -> PolicyContext:
        new_resource = {} if request.operation == "DELETE" else request.resource
        old_resource = request.old_resource
        if request.operation == "DELETE" and not old_resource:
            old_resource = request.resource
        if request.operation == "UPDATE" and not old_resource:
            old_resource = request.resource
        gvk = request.gvk or ResourceKind.of(request.resource, request.subresource)
        ctx = build_json_context(new_resource, old_resource, request.operation, request.info, gvk, default_registry=self.default_registry, registry_mutation=self.registry_mutation)
        for key, value in request.values.items():
            ctx.add_variable(key, value)
        request_data = ctx.get("request") or {}
        if request.values:
            # values may rewrite the object under review (e.g. request.object.metadata.name)
            new_resource = request_data.get("object") or {} if request.operation != "DELETE" else {}
            old_resource = request_data.get("oldObject") or old_resource
        loader = ContextLoader(self.providers, policy.name, policy.namespace)
        return PolicyContext(
            policy=policy,
            new_resource=new_resource,
            old_resource=old_resource,
            operation=request.operation,
            json_context=ctx,
            gvk=gvk,
            request_info=request.info,
            namespace_labels=request.namespace_labels,
            context_loader=loader,
            exceptions=self.exceptions,
        )

    # -- shared rule driver ----------------------------------------------------------------------------------------
    def _matches(self, pctx: PolicyContext, rule: Rule, resource: dict[str, Any]) -> bool:
        kwargs = dict(info=pctx.request_info, namespace_labels=pctx.namespace_labels, operation=pctx.operation, policy_namespace=pctx.policy.namespace)
        if resource and not match_reasons(rule.raw, resource, pctx.gvk, **kwargs):
            return True
        # Kyverno matches the old object only when there is no new one (DELETE): on UPDATE a rule that selected
        # only the old object (e.g. a label that the update removes) does not apply.
        if not resource and pctx.old_resource and not match_reasons(rule.raw, pctx.old_resource, pctx.gvk, **kwargs):
            return True
        return False

    def _run_rules(
        self,
        pctx: PolicyContext,
        rule_type: str,
        wants: Callable[[Rule], bool],
        handler: RuleHandler,
    ) -> EngineResponse:
        ctx = pctx.json_context
        resource = pctx.new_resource
        response = EngineResponse(pctx.policy, pctx.new_resource or pctx.old_resource, resource, namespace_labels=pctx.namespace_labels)
        applied = 0
        ctx.checkpoint()
        try:
            for rule in rules_for_kind(pctx.policy, pctx.gvk):
                if not wants(rule):
                    continue
                if not self._matches(pctx, rule, resource):
                    continue
                ctx.checkpoint()
                try:
                    resource, rule_response = self._invoke(pctx, rule, rule_type, resource, handler)
                finally:
                    ctx.reset()
                if rule_type in (RULE_TYPE_MUTATION, RULE_TYPE_IMAGE_VERIFY) and resource is not pctx.new_resource:
                    pctx.set_resource(resource)
                if rule_response is None:
                    continue
                for single in rule_response if isinstance(rule_response, list) else [rule_response]:
                    single.failure_action = self._failure_action(pctx, rule)
                    response.rules.append(single)
                    if single.status in (PASS, FAIL):
                        applied += 1
                if pctx.policy.apply_rules == "One" and applied > 0:
                    break
        finally:
            ctx.reset()
        response.patched_resource = resource
        return response

    def _invoke(
        self, pctx: PolicyContext, rule: Rule, rule_type: str, resource: dict[str, Any], handler: RuleHandler
    ) -> tuple[dict[str, Any], RuleResponse | None]:
        try:
            pctx.context_loader.load(rule.context, pctx.json_context, rule.name, is_delete=pctx.is_delete)
        except (ContextLoadError, JMESPathError, ContextError, SubstitutionError) as exc:
            return resource, rule_error(rule.name, rule_type, "failed to load context", exc)
        try:
            ok, message = evaluate_conditions(rule.preconditions, pctx.json_context, is_delete=pctx.is_delete)
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
        return handler(pctx, rule, resource)

    @staticmethod
    def _failure_action(pctx: PolicyContext, rule: Rule) -> str:
        overrides = pctx.policy.validation_failure_action_overrides
        if not overrides:
            return _static_failure_action(pctx.policy, rule)
        action = (rule.validate or {}).get("failureAction")
        if not action:
            action = pctx.policy.validation_failure_action
        for override in overrides:
            namespaces = override.get("namespaces") or []
            namespace = str(((pctx.new_resource or pctx.old_resource).get("metadata") or {}).get("namespace") or "")
            from stockade.engine.wildcard import match as wildcard_match

            if any(wildcard_match(str(ns), namespace) for ns in namespaces):
                action = override.get("action") or action
        return "Enforce" if str(action).lower() == "enforce" else "Audit"

    # -- phases ----------------------------------------------------------------------------------------------------
    def mutate(self, pctx: PolicyContext, include_existing: bool = False) -> EngineResponse:
        """Mutate the resource under review; with ``include_existing`` also compute ``mutate.targets`` patches of
        other objects (offline runs; admission leaves those to a background worker, never to the request)."""
        lookup = self.resource_lookup

        def wants(rule: Rule) -> bool:
            return rule.has_mutate() and (include_existing or not rule.has_mutate_existing())

        def handler(ctx: PolicyContext, rule: Rule, resource: dict[str, Any]) -> tuple[dict[str, Any], Any]:
            if rule.has_mutate_existing():
                from stockade.engine.handlers.mutate_existing import mutate_existing_rule

                return resource, mutate_existing_rule(ctx, rule, lookup)
            return mutate_resource_rule(ctx, rule, resource)

        return self._run_rules(pctx, RULE_TYPE_MUTATION, wants, handler)

    def verify_images(self, pctx: PolicyContext) -> tuple[EngineResponse, Any]:
        """Mutate phase of verifyImages rules: verify signatures, pin digests, record results (needs a verifier)."""
        from stockade.engine.handlers.verify_images import VerificationRecord, verify_and_patch

        record = VerificationRecord.from_resource({})
        verifier, cache = self.image_verifier, self.verification_cache

        def handler(ctx: PolicyContext, rule: Rule, resource: dict[str, Any]) -> tuple[dict[str, Any], RuleResponse | None]:
            nonlocal record
            ctx.new_resource = resource
            outcome = verify_and_patch(ctx, rule, verifier, cache)
            record = outcome.record
            return outcome.resource, outcome.rule_response

        response = self._run_rules(pctx, RULE_TYPE_IMAGE_VERIFY, Rule.has_verify_images, handler)
        return response, record

    def validate(self, pctx: PolicyContext, verification_record: Any = None) -> EngineResponse:
        def handler(ctx: PolicyContext, rule: Rule, resource: dict[str, Any]) -> tuple[dict[str, Any], RuleResponse | None]:
            if rule.has_verify_images() and not rule.has_validate():
                from stockade.engine.handlers.verify_images import VerificationRecord, validate_verified_images

                # Trust only what this process verified, never an annotation found on the object.
                record = verification_record if verification_record is not None else VerificationRecord.from_resource({})
                return resource, validate_verified_images(ctx, rule, record)
            validate = rule.validate or {}
            if validate.get("podSecurity") is not None:
                return resource, validate_pod_security_rule(ctx, rule)
            if validate.get("manifests") is not None:
                from stockade.engine.handlers.validate_manifests import validate_manifests_rule

                return resource, validate_manifests_rule(ctx, rule)
            if validate.get("cel") is not None:
                return resource, self._validate_cel(ctx, rule)
            return resource, validate_resource_rule(ctx, rule)

        def wants(rule: Rule) -> bool:
            return rule.has_validate() or rule.has_verify_images()

        return self._run_rules(pctx, RULE_TYPE_VALIDATION, wants, handler)

    def _validate_cel(self, pctx: PolicyContext, rule: Rule) -> RuleResponse | None:
        from stockade.engine.handlers.validate_cel import validate_cel_rule

        return validate_cel_rule(pctx, rule, self.resource_lookup, self.providers)

    def generate(self, pctx: PolicyContext) -> EngineResponse:
        lookup = self.resource_lookup

        def handler(ctx: PolicyContext, rule: Rule, resource: dict[str, Any]) -> tuple[dict[str, Any], RuleResponse | None]:
            return resource, generate_rule(ctx, rule, lookup)

        return self._run_rules(pctx, RULE_TYPE_GENERATION, Rule.has_generate, handler)
