"""Evaluating CEL policy kinds against one admission request, producing engine responses.

Responses reuse :mod:`stockade.engine.response` so the CLI reports them like ClusterPolicy results.  Ruleless kinds
name their single rule response after the policy.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from stockade.cel import CelError, CelEvalError
from stockade.celpolicy.autogen import autogen_specs
from stockade.celpolicy.compiler import PolicyCompiler
from stockade.celpolicy.errors import PolicyCompileError
from stockade.celpolicy.matching import constraints_match, has_selector
from stockade.celpolicy.model import CelPolicy
from stockade.engine.contextloader import AuthorizationResolver, KindScopeResolver
from stockade.celpolicy.mutation import apply_configuration, apply_json_patch
from stockade.celpolicy.request import AdmissionInput
from stockade.celpolicy.scope import ConditionError, Scope
from stockade.celpolicy.template import render_template
from stockade.engine.response import EngineResponse, RuleResponse

SOURCE_UID_LABEL = "generate.kyverno.io/source-uid"
GENERATED_MESSAGE = "policy evaluated successfully"
VALIDATION = "Validation"
MUTATION = "Mutation"
GENERATION = "Generation"
DELETION = "Deletion"
EXCEPTION_RULE = "exception"  # Kyverno's rule name for a MutatingPolicy result decided by a PolicyException


@dataclass
class _Outcome:
    """What evaluating a policy's body produced; ``None`` status means the request was not matched."""

    status: str | None
    message: str = ""
    patched: dict[str, Any] | None = None
    generated: list[dict[str, Any]] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    rule: str = ""  # the rule response's name when not the policy's (Kyverno names a MutatingPolicy's exemption "exception")
    properties: dict[str, str] = field(default_factory=dict)  # report result properties (audit annotations)


class _GeneratorSink:
    """Collects ``generator.Apply`` calls: the CLI reports generated resources instead of creating them."""

    def __init__(self, namespace: str = "") -> None:
        self.namespace = namespace  # a namespaced policy's own namespace: where generator.Apply(resources) writes
        self.calls: list[tuple[str, list[dict[str, Any]]]] = []

    def apply(self, namespace: str, resources: list[Mapping[str, Any]]) -> None:
        self.calls.append((namespace, [copy.deepcopy(dict(r)) for r in resources]))


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise CelEvalError(f"{what} must evaluate to a bool, got {type(value).__name__}")
    return value


class RequesterAuthorizer:
    """The CEL ``authorizer`` of one request: checks built on ``authorizer`` itself ask about the requester, those
    built on ``authorizer.serviceAccount(ns, name)`` about that account; the cluster answers both."""

    def __init__(self, resolve: AuthorizationResolver, requester: dict[str, Any]) -> None:
        self.resolve = resolve
        self.requester = requester

    def check(self, attributes: Mapping[str, Any]) -> tuple[str, str]:
        checked = dict(attributes)
        user = checked.pop("user", None)
        return self.resolve({"username": user} if user else self.requester, checked)


class CelPolicyEvaluator:
    """Evaluates CEL policies; one instance per policy set, reused for every resource (compiled programs cached).

    ``providers`` are the CEL provider objects (``resource``, ``http``, ``globalContext``, ``image``); ``exceptions``
    are policies.kyverno.io PolicyException documents; ``params`` are the parameter objects VAPs and
    ``validate.cel`` rules may refer to; ``authorize`` answers ``authorizer`` checks (bound to each request's user).
    """

    def __init__(
        self,
        *,
        providers: Mapping[str, Any] | None = None,
        exceptions: list[CelPolicy] | None = None,
        params: list[dict[str, Any]] | None = None,
        compiler: PolicyCompiler | None = None,
        authorize: AuthorizationResolver | None = None,
    ) -> None:
        self.providers = dict(providers or {})
        self.authorize = authorize
        self.exceptions = list(exceptions or [])
        self.params = list(params or [])
        self.compiler = compiler or PolicyCompiler()

    # -- helpers ---------------------------------------------------------------------------------------------------
    def _scope(self, key: str, request: AdmissionInput, extra: Mapping[str, Any] | None = None, providers: Mapping[str, Any] | None = None) -> Scope:
        values: dict[str, Any] = {
            "object": request.object,
            "oldObject": request.old_object,
            "request": request.request_map(),
            "namespaceObject": request.namespace_map(),
            "exceptions": {"allowedImages": [], "allowedValues": []},
            "params": None,
            "authorizer": {},
        }
        values.update(extra or {})
        merged = dict(self.providers)
        if self.authorize is not None:
            merged["authorizer"] = RequesterAuthorizer(self.authorize, request.user_info)
        merged.update(providers or {})
        return Scope(self.compiler, key, values, merged)

    def _variants_of(self, policy: CelPolicy) -> list[dict[str, Any]]:
        """The policy's spec followed by its pod-controller autogen variants (validating/mutating kinds)."""
        cached = policy.variants
        if cached is None:
            cached = [policy.spec]
            if policy.base_kind in ("ValidatingPolicy", "MutatingPolicy"):
                cached += autogen_specs(policy.spec)
            policy.variants = cached
        return cached

    def _matching_spec(self, policy: CelPolicy, request: AdmissionInput) -> tuple[int, dict[str, Any]] | None:
        for index, spec in enumerate(self._variants_of(policy)):
            if policy.is_namespaced and request.namespace != policy.namespace:
                return None
            if constraints_match(spec.get("matchConstraints"), request):
                return index, spec
        return None

    def _policy_exceptions(self, policy: CelPolicy, scope: Scope) -> tuple[list[str], list[str], list[str], bool]:
        """(matched keys, allowed images, allowed values, full exemption)."""
        keys: list[str] = []
        images: list[str] = []
        values: list[str] = []
        full = False
        for exception in self.exceptions:
            refs = exception.spec.get("policyRefs") or []
            if not any(str(r.get("name")) == policy.name and (not r.get("kind") or str(r.get("kind")) == policy.kind) for r in refs):
                continue
            if exception.namespace and policy.is_namespaced and exception.namespace != policy.namespace:
                continue
            exception_scope = Scope(scope.compiler, exception.key, scope.values, scope.providers)
            try:
                if not exception_scope.conditions_hold(exception.spec.get("matchConditions"), "spec.matchConditions"):
                    continue
            except ConditionError:
                if full:
                    continue
                raise
            keys.append(f"{exception.namespace}/{exception.name}" if exception.namespace else exception.name)
            exception_images = [str(i) for i in exception.spec.get("images") or []]
            exception_values = [str(v) for v in exception.spec.get("allowedValues") or []]
            if not exception_images and not exception_values:
                full = True
            else:
                images += exception_images
                values += exception_values
        return keys, images, values, full

    def _exception_outcome(self, keys: list[str]) -> _Outcome:
        report = "skip"
        for exception in self.exceptions:
            key = f"{exception.namespace}/{exception.name}" if exception.namespace else exception.name
            if key in keys and str(exception.spec.get("reportResult") or "") == "pass":
                report = "pass"
        verb = "passed" if report == "pass" else "skipped"
        return _Outcome(report, f"rule is {verb} due to policy exception: {', '.join(keys)}", exceptions=keys)

    @staticmethod
    def _response(policy: CelPolicy, request: AdmissionInput, rule_type: str, outcome: _Outcome | None) -> EngineResponse:
        resource = request.subject
        patched = outcome.patched if outcome is not None and outcome.patched is not None else resource
        response = EngineResponse(policy, resource, patched, namespace_labels=dict(request.namespace_labels))
        if outcome is not None and outcome.status is not None:
            rule = RuleResponse(
                outcome.rule or policy.name, rule_type, outcome.status, outcome.message, exceptions=list(outcome.exceptions), properties=dict(outcome.properties)
            )
            rule.generated_resources = list(outcome.generated)
            response.rules.append(rule)
        return response

    # -- ValidatingPolicy -------------------------------------------------------------------------------------------
    def validate(self, policy: CelPolicy, request: AdmissionInput) -> EngineResponse | None:
        """A (Namespaced)ValidatingPolicy; ``None`` when Kyverno's CLI would drop the response (selector mismatch)."""
        matched = self._matching_spec(policy, request)
        if matched is None:
            if has_selector(policy.spec.get("matchConstraints")):
                return None
            return self._response(policy, request, VALIDATION, None)
        index, spec = matched
        key = policy.key if index == 0 else f"{policy.key}#autogen{index}"
        outcome = self._validate_body(policy, key, spec, request)
        return self._response(policy, request, VALIDATION, outcome)

    def validate_json(self, policy: CelPolicy, payload: Any) -> EngineResponse:
        """JSON-mode ValidatingPolicy: ``object`` is the raw payload, no request or namespace."""
        request = AdmissionInput(object=payload if isinstance(payload, dict) else {})
        values = {"object": payload, "variables": {}, "exceptions": {"allowedImages": [], "allowedValues": []}}
        scope = Scope(self.compiler, policy.key, values, self.providers)
        outcome = self._validate_in_scope(policy, policy.spec, scope)
        return self._response(policy, request, VALIDATION, outcome)

    def _validate_body(self, policy: CelPolicy, key: str, spec: dict[str, Any], request: AdmissionInput) -> _Outcome:
        return self._validate_in_scope(policy, spec, self._scope(key, request))

    def _validate_in_scope(self, policy: CelPolicy, spec: dict[str, Any], scope: Scope) -> _Outcome:
        """Exceptions, then matchConditions, then validations (Kyverno's order, for resources and JSON alike)."""
        ignore = str(spec.get("failurePolicy") or "Fail") == "Ignore"
        try:
            keys, images, values, full = self._policy_exceptions(policy, scope)
            if full:
                return self._exception_outcome(keys)
            scope.set("exceptions", {"allowedImages": images, "allowedValues": values})
            if not scope.conditions_hold(spec.get("matchConditions"), "spec.matchConditions", ignore):
                return _Outcome("skip", "skip")
        except (ConditionError, CelError) as error:
            return _Outcome("error", f"failed to evaluate match conditions: {error}")
        return self._run_validations(policy, spec, scope)

    def _run_validations(self, policy: CelPolicy, spec: dict[str, Any], scope: Scope) -> _Outcome:
        validations = spec.get("validations")
        failed = chained_verdict(scope, spec.get("variables"), validations)
        if failed is not None and isinstance(validations, list):
            if failed == len(validations):
                return _Outcome("pass", "success")
            validation = validations[failed]
            if validation.get("messageExpression"):
                scope.bind_variables(spec.get("variables"))  # the message may read variables
            return _Outcome("fail", validation_message(scope, validation, failed))
        scope.bind_variables(spec.get("variables"))
        for index, validation in enumerate(spec.get("validations") or []):
            expression = str(validation.get("expression", ""))
            try:
                ok = _bool(scope.evaluate(f"spec.validations[{index}].expression", expression), "validation")
            except CelError as error:
                return _Outcome("error", f"error: {error}")
            if ok:
                continue
            message = validation_message(scope, validation, index)
            return _Outcome("fail", message)
        return _Outcome("pass", "success")

    # -- ValidatingAdmissionPolicy ---------------------------------------------------------------------------------
    def validate_admission(self, policy: CelPolicy, bindings: list[CelPolicy], request: AdmissionInput, *, live: bool = False) -> EngineResponse:
        """A Kubernetes ValidatingAdmissionPolicy with its bindings (none: the policy alone decides).  ``live``: Kyverno's
        CLI with a cluster client matches the policy's own constraints before its bindings'; without one, only the
        bindings' narrow the request."""
        if live and bindings and not constraints_match(policy.spec.get("matchConstraints"), request):
            return self._response(policy, request, VALIDATION, None)
        if not bindings:
            if not constraints_match(policy.spec.get("matchConstraints"), request):
                return self._response(policy, request, VALIDATION, None)
            return self._response(policy, request, VALIDATION, self._admission_validations(policy, request, None))
        outcome: _Outcome | None = None
        for binding in bindings:
            # Like Kyverno's CLI without a cluster: only the binding's own matchResources narrow the request.
            binding_constraints = binding.spec.get("matchResources")
            if binding_constraints and not constraints_match(binding_constraints, request):
                continue
            params = None
            param_ref = binding.spec.get("paramRef")
            if param_ref:
                params = self._select_params(policy.spec.get("paramKind"), param_ref, request)
            outcome = self._admission_validations(policy, request, params)
        return self._response(policy, request, VALIDATION, outcome)

    def _select_params(self, param_kind: dict[str, Any] | None, param_ref: dict[str, Any], request: AdmissionInput) -> Any:
        from stockade.engine.match import selector_matches

        kind = str((param_kind or {}).get("kind") or "")
        api_version = str((param_kind or {}).get("apiVersion") or "")
        found = []
        for param in self.params:
            if kind and param.get("kind") != kind:
                continue
            if api_version and param.get("apiVersion") != api_version:
                continue
            metadata = param.get("metadata") or {}
            if param_ref.get("name") and metadata.get("name") != param_ref["name"]:
                continue
            if param_ref.get("namespace") and (metadata.get("namespace") or "") != param_ref["namespace"]:
                continue
            if param_ref.get("selector") is not None and not selector_matches(param_ref["selector"], metadata.get("labels") or {}):
                continue
            if param_ref.get("selector") is None:
                return param
            found.append(param)
        if not found:
            return None
        return {"apiVersion": "v1", "kind": "List", "items": found} if len(found) > 1 else found[0]

    def _admission_validations(self, policy: CelPolicy, request: AdmissionInput, params: Any) -> _Outcome:
        spec = policy.spec
        scope = self._scope(policy.key, request, {"params": params})
        ignore = str(spec.get("failurePolicy") or "Fail") == "Ignore"
        try:
            if not scope.conditions_hold(spec.get("matchConditions"), "spec.matchConditions", ignore):
                return _Outcome("skip", "match conditions aren't met")
        except (ConditionError, CelError) as error:
            return _Outcome("error", str(error))
        return self._k8s_validations(scope, spec.get("variables"), spec.get("validations"), ignore, "")

    def _k8s_validations(self, scope: Scope, variables: Any, validations: Any, ignore: bool, default_message: str, deny_errors: bool = False) -> _Outcome:
        """Kubernetes validator semantics: first denial wins; errors obey the failure policy."""
        failed = chained_verdict(scope, variables, validations)
        if failed is not None and isinstance(validations, list):
            if failed == len(validations):
                return _Outcome("pass", "")
            if validations[failed].get("messageExpression"):
                scope.bind_variables(variables)  # the message may read variables
            return _Outcome("fail", _k8s_failure_message(scope, validations[failed], failed, default_message))
        scope.bind_variables(variables)
        for index, validation in enumerate(validations or []):
            expression = str(validation.get("expression", ""))
            try:
                ok = _bool(scope.evaluate(f"spec.validations[{index}].expression", expression), "validation")
            except CelError as error:
                if deny_errors and isinstance(error, PolicyCompileError):
                    raise
                if ignore:
                    continue
                message = f"expression '{expression}' resulted in error: {error.message}"
                return _Outcome("fail" if deny_errors else "error", message)
            if ok:
                continue
            return _Outcome("fail", _k8s_failure_message(scope, validation, index, default_message))
        return _Outcome("pass", "")

    # -- validate.cel in ClusterPolicy/Policy ----------------------------------------------------------------------
    def validate_cel_rule(
        self,
        policy_key: str,
        rule: dict[str, Any],
        request: AdmissionInput,
        param_lookup: Callable[[dict[str, Any], dict[str, Any], str], list[Any]] | None = None,
        providers: Mapping[str, Any] | None = None,
    ) -> tuple[str, str]:
        """A ``validate.cel`` rule: returns (status, message) with Kyverno's wording; ``providers`` add to the
        evaluator's CEL providers for this request (e.g. an ``authorizer`` bound to the requester)."""
        name = str(rule.get("name", ""))
        validate = rule.get("validate") or {}
        cel = validate.get("cel") or {}
        key = f"{policy_key}/rules/{name}"
        param_sets: list[Any] = [None]
        if cel.get("paramKind") or cel.get("paramRef"):
            if param_lookup is None:
                return "error", "error in parameterized resource: no parameter resources available"
            try:
                param_sets = param_lookup(cel.get("paramKind") or {}, cel.get("paramRef") or {}, request.namespace)
            except LookupError as error:
                return "error", f"error in parameterized resource: {error}"
        for params in param_sets:
            scope = self._scope(key, request, {"params": params}, providers)
            try:
                if not scope.conditions_hold(rule.get("celPreconditions"), "celPreconditions"):
                    return "skip", "cel preconditions not met"
            except PolicyCompileError:
                raise  # the engine reports rule compile errors with Kyverno's own wording
            except (ConditionError, CelError) as error:
                return "fail", str(error)
            outcome = self._k8s_validations(
                scope, cel.get("variables"), cel.get("expressions"), False, str(validate.get("message") or ""), deny_errors=True
            )
            if outcome.status != "pass":
                return str(outcome.status), outcome.message
        return "pass", f"Validation rule '{name}' passed."

    # -- MutatingPolicy / MutatingAdmissionPolicy ------------------------------------------------------------------
    def mutate(self, policy: CelPolicy, request: AdmissionInput) -> EngineResponse | None:
        matched = self._matching_spec(policy, request)
        if matched is None:
            if has_selector(policy.spec.get("matchConstraints")):
                return None
            return self._response(policy, request, MUTATION, None)
        index, spec = matched
        key = policy.key if index == 0 else f"{policy.key}#autogen{index}"
        scope = self._scope(key, request)
        ignore = str(spec.get("failurePolicy") or "Fail") == "Ignore"
        try:
            keys, images, values, full = self._policy_exceptions(policy, scope)
            if full:
                return self._response(policy, request, MUTATION, dataclasses.replace(self._exception_outcome(keys), rule=EXCEPTION_RULE))
            scope.set("exceptions", {"allowedImages": images, "allowedValues": values})
            # Kyverno binds the (lazy) variables before the match conditions, which may use them
            scope.bind_variables(spec.get("variables"))
            if not scope.conditions_hold(spec.get("matchConditions"), "spec.matchConditions", ignore):
                return self._response(policy, request, MUTATION, _Outcome("skip", "skip"))
        except (ConditionError, CelError) as error:
            return self._response(policy, request, MUTATION, _Outcome("error", f"failed to evaluate policy: {error}"))
        outcome = self._run_mutations(scope, spec, request, variables_bound=True)
        return self._response(policy, request, MUTATION, outcome)

    @staticmethod
    def mutates_existing(policy: CelPolicy) -> bool:
        return bool(((policy.spec.get("evaluation") or {}).get("mutateExisting") or {}).get("enabled"))

    def selected_targets(self, policy: CelPolicy, trigger: AdmissionInput) -> set[str] | None:
        """``targetMatchConstraints.expression`` evaluated for the trigger: the ``namespace/name`` keys of the
        objects it resolves (one object, or a list under ``items``); ``None`` when the policy has no expression."""
        try:
            found = self.expression_targets(policy, trigger, check_conditions=False)
        except CelError:
            return set()
        if found is None:
            return None
        keys: set[str] = set()
        for item in found:
            metadata = item.get("metadata") or {}
            name, namespace = str(metadata.get("name") or ""), str(metadata.get("namespace") or "")
            if name:
                keys.add(f"{namespace}/{name}" if namespace else name)
        return keys

    def expression_targets(self, policy: CelPolicy, trigger: AdmissionInput, check_conditions: bool = True) -> list[dict[str, Any]] | None:
        """The objects ``targetMatchConstraints.expression`` resolves for the trigger (one object, or the ``items``
        of a list); ``None`` when the policy has no expression.  With ``check_conditions`` the trigger must first pass
        the policy's matchConditions (Kyverno's background controller checks them before resolving targets); on a
        DELETE the deleted object is ``object``.  Raises CelError when the expression fails."""
        expression = str((policy.spec.get("targetMatchConstraints") or {}).get("expression") or "")
        if not expression:
            return None
        if trigger.operation == "DELETE" and not trigger.object and trigger.old_object:
            trigger = dataclasses.replace(trigger, object=trigger.old_object, old_object=None)  # the request's other fields kept
        scope = self._scope(policy.key, trigger)
        scope.bind_variables(policy.spec.get("variables"))
        if check_conditions:
            try:
                if not scope.conditions_hold(policy.spec.get("matchConditions"), "spec.matchConditions"):
                    return []
            except ConditionError:
                return []
        found = scope.evaluate("spec.targetMatchConstraints.expression", expression)
        if not isinstance(found, dict):
            return []
        items = found.get("items")
        if not isinstance(items, list):
            items = [found]
        return [item for item in items if isinstance(item, dict)]

    def triggers_mutate_existing(self, policy: CelPolicy, request: AdmissionInput) -> bool:
        """Whether an admission request triggers a mutateExisting policy (Kyverno's MatchedMutateExistingPolicies):
        its matchConstraints select the request and its matchConditions hold (an error counts as no)."""
        if policy.is_namespaced and request.namespace != policy.namespace:
            return False
        if not constraints_match(policy.spec.get("matchConstraints"), request):
            return False
        scope = self._scope(policy.key, request)
        scope.bind_variables(policy.spec.get("variables"))
        try:
            return scope.conditions_hold(policy.spec.get("matchConditions"), "spec.matchConditions")
        except (ConditionError, CelError):
            return False

    def mutate_target(
        self, policy: CelPolicy, target: dict[str, Any], trigger: AdmissionInput, selected: set[str] | None, *, prematched: bool = False
    ) -> EngineResponse | None:
        """A mutateExisting MutatingPolicy applied to one existing ``target`` on behalf of ``trigger``.

        The target is chosen by ``targetMatchConstraints`` (its expression's result ``selected``, else its resource
        rules, else the policy's ``matchConstraints``; operations never matter), then ``targetMatchConditions``
        decide; ``object`` is the target and ``request`` the trigger's.  A successful mutation carries the patched
        target.  ``None`` when the target is not selected.  ``prematched``: the caller already selected the target
        (a controller that listed it by those constraints), so only the conditions decide."""
        target_request = AdmissionInput(object=target, operation=trigger.operation, user_info=trigger.user_info)
        constraints = policy.spec.get("targetMatchConstraints") or {}
        metadata = target.get("metadata") or {}
        if prematched:
            pass
        elif selected is not None:
            key = f"{metadata.get('namespace')}/{metadata.get('name')}" if metadata.get("namespace") else str(metadata.get("name") or "")
            if key not in selected:
                return None
        else:
            rules = constraints if constraints.get("resourceRules") else policy.spec.get("matchConstraints")
            if not constraints_match(rules, target_request, ignore_operations=True):
                return None
        scope = self._scope(policy.key, target_request, {"request": trigger.request_map(), "oldObject": None})
        response = EngineResponse(policy, trigger.subject, trigger.subject)
        try:
            keys, images, values, full = self._policy_exceptions(policy, scope)
            if full:
                outcome = self._exception_outcome(keys)
                response.rules.append(RuleResponse(EXCEPTION_RULE, MUTATION, str(outcome.status), outcome.message, exceptions=keys))
                return response
            scope.set("exceptions", {"allowedImages": images, "allowedValues": values})
            scope.bind_variables(policy.spec.get("variables"))
            if not scope.conditions_hold(policy.spec.get("targetMatchConditions"), "spec.targetMatchConditions"):
                response.rules.append(RuleResponse(policy.name, MUTATION, "skip", "skip"))
                return response
        except (ConditionError, CelError) as error:
            response.rules.append(RuleResponse(policy.name, MUTATION, "error", f"failed to evaluate policy: {error}"))
            return response
        outcome = self._run_mutations(scope, policy.spec, target_request, variables_bound=True)
        rule = RuleResponse(policy.name, MUTATION, str(outcome.status), outcome.message, properties=dict(outcome.properties))
        if outcome.status == "pass":
            rule.patched_target = outcome.patched
        response.rules.append(rule)
        return response

    def mutate_admission(self, policy: CelPolicy, bindings: list[CelPolicy], request: AdmissionInput) -> EngineResponse | None:
        """A Kubernetes MutatingAdmissionPolicy; ``None`` when neither the policy nor a binding applies."""
        if not constraints_match(policy.spec.get("matchConstraints"), request):
            return None
        params: Any = None
        if bindings:
            applicable = [b for b in bindings if not b.spec.get("matchResources") or constraints_match(b.spec["matchResources"], request)]
            if not applicable:
                return None
            ref = applicable[0].spec.get("paramRef")
            if ref:
                params = self._select_params(policy.spec.get("paramKind"), ref, request)
        scope = self._scope(policy.key, request, {"params": params})
        ignore = str(policy.spec.get("failurePolicy") or "Fail") == "Ignore"
        try:
            if not scope.conditions_hold(policy.spec.get("matchConditions"), "spec.matchConditions", ignore):
                return self._response(policy, request, MUTATION, _Outcome("skip", "match conditions aren't met"))
        except (ConditionError, CelError) as error:
            return self._response(policy, request, MUTATION, _Outcome("error", str(error)))
        return self._response(policy, request, MUTATION, self._run_mutations(scope, policy.spec, request))

    def _run_mutations(self, scope: Scope, spec: dict[str, Any], request: AdmissionInput, variables_bound: bool = False) -> _Outcome:
        if not variables_bound:
            scope.bind_variables(spec.get("variables"))
        current = copy.deepcopy(request.object or {})
        for index, mutation in enumerate(spec.get("mutations") or []):
            patch_type = str(mutation.get("patchType") or "")
            try:
                if patch_type == "ApplyConfiguration" or (not patch_type and mutation.get("applyConfiguration")):
                    expression = str((mutation.get("applyConfiguration") or {}).get("expression", ""))
                    value = scope.evaluate(f"spec.mutations[{index}].applyConfiguration.expression", expression)
                    current = apply_configuration(current, value)
                elif patch_type == "JSONPatch" or mutation.get("jsonPatch"):
                    expression = str((mutation.get("jsonPatch") or {}).get("expression", ""))
                    value = scope.evaluate(f"spec.mutations[{index}].jsonPatch.expression", expression)
                    current = apply_json_patch(current, value)
                else:
                    return _Outcome("error", f"spec.mutations[{index}]: unsupported patchType {patch_type!r}")
            except (CelError, ValueError) as error:
                return _Outcome("error", f"failed to evaluate policy: {error}")
            scope.set("object", current)
        try:
            properties = audit_annotations(scope, spec.get("auditAnnotations"))
        except CelError as error:
            return _Outcome("error", f"failed to evaluate policy: {error}")
        return _Outcome("pass", "success", patched=current, properties=properties)

    # -- GeneratingPolicy -------------------------------------------------------------------------------------------
    def generate(
        self,
        policy: CelPolicy,
        request: AdmissionInput,
        *,
        keep_source_uid: bool = False,
        placement: GeneratedPlacement | None = None,
    ) -> EngineResponse | None:
        """``placement``: how ``generator.Apply`` stores each object (see :class:`GeneratedPlacement`); by default
        Kyverno's offline CLI.  ``keep_source_uid`` (in the cluster, implies a cluster placement): a generated object
        read from the cluster (a clone source, it has a resourceVersion) carries its uid in the
        ``generate.kyverno.io/source-uid`` label, as Kyverno labels clones."""
        if placement is None:
            placement = GeneratedPlacement(cluster=True, report_only=False) if keep_source_uid else GeneratedPlacement()
        spec = policy.spec
        if policy.is_namespaced and request.namespace != policy.namespace:
            return None
        if not constraints_match(spec.get("matchConstraints"), request):
            return None
        sink = _GeneratorSink(policy.namespace if policy.is_namespaced else "")
        scope = self._scope(policy.key, request, providers={"generator": sink})
        try:
            keys, images, values, full = self._policy_exceptions(policy, scope)
            if full:
                return self._response(policy, request, GENERATION, self._exception_outcome(keys))
            scope.set("exceptions", {"allowedImages": images, "allowedValues": values})
            if not scope.conditions_hold(spec.get("matchConditions"), "spec.matchConditions"):
                return None
        except (ConditionError, CelError) as error:
            return self._response(policy, request, GENERATION, _Outcome("error", str(error)))
        scope.bind_variables(spec.get("variables"))
        for index, generate in enumerate(spec.get("generate") or []):
            try:
                if generate.get("template") is not None:
                    rendered = render_template(scope, f"spec.generate[{index}].template", generate["template"])
                    by_namespace: dict[str, list[Mapping[str, Any]]] = {}
                    for resource in rendered:
                        namespace = str((resource.get("metadata") or {}).get("namespace") or "")
                        if policy.is_namespaced:
                            if not namespace:
                                namespace = policy.namespace
                            elif namespace != policy.namespace:
                                raise CelEvalError(
                                    f"cross-namespace generation denied: a policy in namespace {policy.namespace!r} "
                                    f"cannot generate resources into namespace {namespace!r}"
                                )
                        by_namespace.setdefault(namespace, []).append(resource)
                    for namespace, in_namespace in by_namespace.items():
                        sink.apply(namespace, in_namespace)
                    continue
                expression = generate.get("expression")
                if expression:
                    scope.evaluate(f"spec.generate[{index}].expression", str(expression))
            except (CelError, ValueError) as error:
                return self._response(policy, request, GENERATION, _Outcome("error", f"failed to generate resources: {error}"))
        annotations = self._audit_annotations(scope, spec.get("auditAnnotations"))
        generated: list[dict[str, Any]] = []
        try:
            for namespace, resources in sink.calls:
                for resource in _expand_lists(resources):
                    generated.append(placement.place(resource, namespace, policy.namespace if policy.is_namespaced else "",
                                                     keep_source_uid=keep_source_uid))
        except CelEvalError as error:
            return self._response(policy, request, GENERATION, _Outcome("error", f"failed to generate resources: {error}"))
        # Kyverno's message for a generating policy that ran, and its audit annotations as the result's properties
        response = self._response(policy, request, GENERATION, _Outcome("pass", GENERATED_MESSAGE, generated=generated))
        for rule in response.rules:
            rule.properties.update(annotations)
        return response

    @staticmethod
    def _audit_annotations(scope: Any, entries: Any) -> dict[str, str]:
        """``auditAnnotations`` (key, valueExpression): null values are left out; a failing expression too."""
        annotations: dict[str, str] = {}
        for index, entry in enumerate(entries if isinstance(entries, list) else []):
            if not isinstance(entry, dict) or not entry.get("key") or not entry.get("valueExpression"):
                continue
            try:
                value = scope.evaluate(f"spec.auditAnnotations[{index}].valueExpression", str(entry["valueExpression"]))
            except CelError:
                continue
            if value is not None:
                annotations[str(entry["key"])] = str(value)
        return annotations

    # -- DeletingPolicy ---------------------------------------------------------------------------------------------
    def delete(self, policy: CelPolicy, resource: dict[str, Any], namespace_object: dict[str, Any] | None = None) -> EngineResponse | None:
        """A DeletingPolicy decides whether a resource would be deleted: pass = delete, skip/none = keep."""
        request = AdmissionInput(object=resource, namespace_object=namespace_object)
        if policy.is_namespaced and request.namespace != policy.namespace:
            return None
        spec = policy.spec
        # A JSON payload (no apiVersion/kind) has no resource type to match: only the conditions decide.
        typed = bool(resource.get("apiVersion")) and bool(resource.get("kind"))
        if typed and not constraints_match(spec.get("matchConstraints"), request, ignore_operations=True):
            return None
        scope = self._scope(policy.key, request, {"request": None, "oldObject": None})
        try:
            keys, images, values, full = self._policy_exceptions(policy, scope)
            if full:
                return self._response(policy, request, DELETION, self._exception_outcome(keys))
            scope.set("exceptions", {"allowedImages": images, "allowedValues": values})
            scope.bind_variables(spec.get("variables"))
            if not scope.conditions_hold(spec.get("conditions"), "spec.conditions"):
                return self._response(policy, request, DELETION, _Outcome("fail", "resource did not match"))
        except (ConditionError, CelError) as error:
            return self._response(policy, request, DELETION, _Outcome("error", str(error)))
        return self._response(policy, request, DELETION, _Outcome("pass", "resource matched"))


def audit_annotations(scope: Scope, annotations: Any) -> dict[str, str]:
    """A MutatingPolicy's ``auditAnnotations`` evaluated on the mutated object: Kyverno reports them as result
    properties (an empty value is left out; a value that is not a string is an error)."""
    properties: dict[str, str] = {}
    for index, annotation in enumerate(annotations or []):
        if not isinstance(annotation, dict):
            continue
        key = str(annotation.get("key") or "")
        value = scope.evaluate(f"spec.auditAnnotations[{index}].valueExpression", str(annotation.get("valueExpression") or ""))
        if value is None:
            continue
        if not isinstance(value, str):
            raise CelEvalError(f"failed to convert auditAnnotation {key!r} expression: expected a string, got {type(value).__name__}")
        if value:
            properties[key] = value
    return properties


def _expand_lists(resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``generator.Apply`` accepts List objects (e.g. a ``resource.List`` result) and generates their items: like
    Kubernetes' unstructured ``IsList``, any object whose ``items`` is a list is one."""
    expanded: list[dict[str, Any]] = []
    for resource in resources:
        items = resource.get("items")
        if isinstance(items, list):
            for item in items:
                if not isinstance(item, dict):
                    raise CelEvalError("failed to generate resources: a List item is not an object")
                expanded.append(copy.deepcopy(item))
        else:
            expanded.append(resource)
    return expanded


@dataclass(frozen=True)
class GeneratedPlacement:
    """What becomes of an object passed to ``generator.Apply(namespace, objects)`` (Kyverno's libs context).

    Offline (``cluster`` False, Kyverno's CLI without clusterResources: its fake context) the object is reported as
    given, with ``metadata.namespace`` set to the call's namespace (removed when that is empty), whatever its kind.

    Against a cluster (the CLI with clusterResources, or in the cluster): a cluster-scoped kind gets no namespace
    (a namespaced policy naming a namespace may not generate one at all), ownerReferences are dropped when the object
    moves out of its source namespace, and uid, resourceVersion, creationTimestamp and managedFields are cleared;
    ``report_only`` (the CLI) clears annotations too, in the cluster selfLink goes and (``keep_source_uid``) a clone
    read from the cluster is labelled with its source uid.  ``kind_namespaced`` answers the kind's scope; a kind it
    does not know is namespaced, as Kyverno's REST mapper fallback has it.
    """

    cluster: bool = False
    report_only: bool = True
    kind_namespaced: KindScopeResolver | None = None

    def is_namespaced(self, api_version: str, kind: str) -> bool:
        if self.kind_namespaced is None or not api_version or not kind:
            return True
        return self.kind_namespaced(api_version, kind) is not False

    def place(self, resource: dict[str, Any], namespace: str, policy_namespace: str, *, keep_source_uid: bool = False) -> dict[str, Any]:
        item = copy.deepcopy(resource)
        metadata = item.get("metadata")
        if not isinstance(metadata, dict):
            metadata = {}
            item["metadata"] = metadata
        if not self.cluster:
            _set_namespace(metadata, namespace)
            return item
        api_version, kind = str(item.get("apiVersion") or ""), str(item.get("kind") or "")
        target = namespace
        if not self.is_namespaced(api_version, kind):
            if namespace and policy_namespace:
                raise CelEvalError(
                    f"cross-scope generation denied: a policy scoped to namespace {namespace!r} cannot generate "
                    f"cluster-scoped resource {api_version}/{kind}"
                )
            target = ""
        source_namespace = str(metadata.get("namespace") or "")
        if source_namespace and source_namespace != target and "ownerReferences" in metadata:
            metadata.pop("ownerReferences")
        if self.report_only:
            cleared: tuple[str, ...] = ("uid", "managedFields", "annotations", "resourceVersion", "creationTimestamp")
        else:
            if keep_source_uid and metadata.get("resourceVersion") and metadata.get("uid"):
                labels = metadata.get("labels")
                metadata["labels"] = {**(labels if isinstance(labels, dict) else {}), SOURCE_UID_LABEL: str(metadata["uid"])}
            cleared = ("uid", "selfLink", "creationTimestamp", "managedFields", "resourceVersion")
        for name in cleared:
            metadata.pop(name, None)
        _set_namespace(metadata, target)
        return item


def _set_namespace(metadata: dict[str, Any], namespace: str) -> None:
    if namespace:
        metadata["namespace"] = namespace
    else:
        metadata.pop("namespace", None)


__all__ = ["CelPolicyEvaluator", "GeneratedPlacement", "PolicyCompileError"]


def _k8s_failure_message(scope: Scope, validation: dict[str, Any], index: int, default_message: str) -> str:
    """Kubernetes' message for a false validation: a non-blank messageExpression result, else message, else the
    rule's default, else the expression."""
    if validation.get("messageExpression"):
        try:
            value = scope.evaluate(f"spec.validations[{index}].messageExpression", str(validation["messageExpression"]))
            if isinstance(value, str) and value.strip():
                return value
        except CelError:
            pass
    return str(validation.get("message") or default_message or "") or f"failed expression: {validation.get('expression', '')}"


def chained_verdict(scope: Scope, variables: Any, validations: Any) -> int | None:
    """The index of the first false validation from the policy's chained program (see
    :mod:`stockade.celpolicy.chain`), ``len(validations)`` when all hold; None when the policy is not chained or the
    program failed, and the validations must be evaluated one by one (which reports any error)."""
    if not isinstance(validations, list) or not (variables is None or isinstance(variables, list)):
        return None
    chain = scope.compiler.validation_chain(scope.policy_key, variables, validations)
    if chain is None:
        return None
    try:
        failed = chain.first_failure(scope.activation)
    except CelError:
        return None
    return len(validations) if failed is None else failed


def validation_message(scope: Any, validation: dict[str, Any], index: int) -> str:
    """The message of a failed validation: messageExpression, else message, else Kubernetes' default wording."""
    message = str(validation.get("message") or "")
    if validation.get("messageExpression"):
        try:
            value = scope.evaluate(f"spec.validations[{index}].messageExpression", str(validation["messageExpression"]))
            message = value if isinstance(value, str) else f"failed to convert message expression to string: {value!r}"
        except CelError as error:
            message = f"failed to evaluate message expression: {error}"
    return message or f"CEL expression validation failed at index {index}"
