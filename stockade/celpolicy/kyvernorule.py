"""``validate.cel`` rules of ClusterPolicy/Policy: Kubernetes ValidatingAdmissionPolicy semantics inside a rule.

The engine's handler of this rule type lives here, with the CEL policy code it needs, and is registered into the
engine's handler registry when ``stockade.celpolicy`` is imported: the dependency points down, never engine -> here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stockade.celpolicy.errors import PolicyCompileError
from stockade.celpolicy.evaluator import CelPolicyEvaluator, RequesterAuthorizer
from stockade.celpolicy.request import AdmissionInput
from stockade.engine.contextloader import ContextLoadError, ContextProviders, KindScopeResolver
from stockade.engine.handlers.generate import ResourceLookup
from stockade.engine.handlers.registry import DEFAULT_HANDLERS, VALIDATE_CEL, HandlerRegistry, HandlerResult, HandlerServices
from stockade.engine.match import selector_matches
from stockade.engine.policycontext import PolicyContext
from stockade.engine.response import RuleResponse, rule_error, rule_fail, rule_pass, rule_skip
from stockade.policy.model import RULE_TYPE_VALIDATION, Rule
from stockade.policy.resources import is_cluster_scoped

# Shared so every rule's expressions are compiled once per policy for the life of the process.
_EVALUATOR = CelPolicyEvaluator()


def _param_lookup(
    lookup: ResourceLookup | None, kind_namespaced: KindScopeResolver | None = None
) -> Callable[[dict[str, Any], dict[str, Any], str], list[Any]]:
    def collect(param_kind: dict[str, Any], param_ref: dict[str, Any], namespace: str) -> list[Any]:
        if lookup is None:
            raise LookupError("no cluster resources available to resolve paramRef")
        api_version, kind = str(param_kind.get("apiVersion") or ""), str(param_kind.get("kind") or "")
        # Kyverno asks discovery, so a cluster-scoped CRD as paramKind is known as such; offline only built-ins are.
        served_namespaced = kind_namespaced(api_version, kind) if kind_namespaced is not None else None
        namespaced = served_namespaced if served_namespaced is not None else not is_cluster_scoped({"kind": kind})
        params_namespace = ""
        if namespaced:
            params_namespace = str(param_ref.get("namespace") or namespace)
            if not params_namespace:
                raise LookupError("can't use namespaced paramRef to match cluster-scoped resources")
        elif param_ref.get("namespace"):
            raise LookupError("paramRef.namespace must not be provided for a cluster-scoped `paramKind`")
        found: list[Any] = []
        if param_ref.get("name"):
            found = lookup(api_version, kind, params_namespace, str(param_ref["name"]))
            if not found:
                raise LookupError(f'{kind} "{param_ref["name"]}" not found')
            return found[:1]
        if param_ref.get("selector") is not None:
            found = [
                obj
                for obj in lookup(api_version, kind, params_namespace, None)
                if selector_matches(param_ref["selector"], (obj.get("metadata") or {}).get("labels") or {})
            ]
        if not found and str(param_ref.get("parameterNotFoundAction") or "") == "Deny":
            raise LookupError("no params found")
        return found

    return collect


def validate_cel_rule(
    pctx: PolicyContext, rule: Rule, lookup: ResourceLookup | None = None, providers: ContextProviders | None = None
) -> RuleResponse:
    """Evaluate ``rule.validate.cel`` against the policy context's request."""
    cluster = providers or ContextProviders()
    request = AdmissionInput(
        object=pctx.new_resource or None,
        old_object=pctx.old_resource or None,
        operation=pctx.operation,
        subresource=pctx.gvk.subresource if pctx.gvk else "",
        user_info=pctx.request_info.user_info_dict(),
        namespace_labels=dict(pctx.namespace_labels),
    )
    namespace = request.namespace
    if namespace and cluster.namespaces is not None:
        # In a cluster Kyverno reads the Namespace (its labels included) and errors when it cannot.
        try:
            found = cluster.namespaces(namespace)
        except ContextLoadError as error:
            return rule_error(rule.name, RULE_TYPE_VALIDATION, "Error getting the resource's namespace", error)
        if found is None:
            return rule_error(rule.name, RULE_TYPE_VALIDATION, "Error getting the resource's namespace", f'namespaces "{namespace}" not found')
        request.namespace_object = found
    elif namespace:
        # Kyverno hands the rule a Namespace carrying only its name when it works without a cluster.
        request.namespace_object = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    policy_key = f"{pctx.policy.kind}/{pctx.policy.namespace}/{pctx.policy.name}"
    extra = {"authorizer": RequesterAuthorizer(cluster.authorizer, request.user_info)} if cluster.authorizer is not None else None
    try:
        status, message = _EVALUATOR.validate_cel_rule(policy_key, rule.raw, request, _param_lookup(lookup, cluster.kind_namespaced), extra)
    except PolicyCompileError as error:
        return rule_error(rule.name, RULE_TYPE_VALIDATION, "Error while compiling CEL expressions", error)
    if status == "pass":
        return rule_pass(rule.name, RULE_TYPE_VALIDATION, message)
    if status == "fail":
        return rule_fail(rule.name, RULE_TYPE_VALIDATION, message)
    if status == "skip":
        return rule_skip(rule.name, RULE_TYPE_VALIDATION, message)
    return rule_error(rule.name, RULE_TYPE_VALIDATION, message)


def _validate_cel_handler(pctx: PolicyContext, rule: Rule, resource: dict[str, Any], services: HandlerServices) -> HandlerResult:
    return resource, validate_cel_rule(pctx, rule, services.resource_lookup, services.providers)


def register_validate_cel(registry: HandlerRegistry = DEFAULT_HANDLERS) -> None:
    """Give ``registry`` the ``validate.cel`` handler (done for the default registry on import of the package)."""
    registry.register(VALIDATE_CEL, _validate_cel_handler)
