"""``generate`` rules: the downstream resources a trigger would create, from ``data``, ``clone`` or ``cloneList``.

The engine only computes them; creating them in a cluster is the controller's job. Clone sources come from a
lookup function the caller provides (test files offline, the API server online).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from stockade.engine.context import ContextError
from stockade.engine.contextloader import ContextLoadError
from stockade.engine.handlers.validate import add_element, evaluate_list
from stockade.engine.match import selector_matches
from stockade.engine.policycontext import PolicyContext
from stockade.engine.preconditions import ConditionEvaluationError, evaluate_conditions
from stockade.engine.response import RuleResponse, rule_error, rule_pass
from stockade.engine.variables import SubstitutionError, substitute_all
from stockade.jmespath import JMESPathError
from stockade.policy.model import RULE_TYPE_GENERATION, Rule
from stockade.errors import StockadeError

GENERATION = RULE_TYPE_GENERATION

# (apiVersion or "", kind, namespace, name or None) -> matching objects
ResourceLookup = Callable[[str, str, str, str | None], list[dict[str, Any]]]

_VOLATILE_METADATA = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "selfLink", "ownerReferences")


class GenerateError(StockadeError):
    pass


def _downstream_labels(pctx: PolicyContext, rule: Rule, trigger: dict[str, Any]) -> dict[str, str]:
    metadata = trigger.get("metadata") or {}
    api_version = str(trigger.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    return {
        "app.kubernetes.io/managed-by": "kyverno",
        "generate.kyverno.io/policy-name": pctx.policy.name,
        "generate.kyverno.io/policy-namespace": pctx.policy.namespace,
        "generate.kyverno.io/rule-name": rule.name,
        "generate.kyverno.io/trigger-group": group,
        "generate.kyverno.io/trigger-version": version,
        "generate.kyverno.io/trigger-kind": str(trigger.get("kind", "")),
        "generate.kyverno.io/trigger-namespace": str(metadata.get("namespace") or ""),
        "generate.kyverno.io/trigger-uid": str(metadata.get("uid") or ""),
    }


def _with_identity(obj: dict[str, Any], spec: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    if spec.get("apiVersion"):
        obj["apiVersion"] = spec["apiVersion"]
    if spec.get("kind"):
        obj["kind"] = spec["kind"]
    metadata = obj.setdefault("metadata", {})
    if spec.get("name"):
        metadata["name"] = spec["name"]
    if spec.get("namespace"):
        metadata["namespace"] = spec["namespace"]
    elif "namespace" in metadata and not spec.get("namespace") and spec.get("kind"):
        metadata.pop("namespace", None)
    metadata["labels"] = {**(metadata.get("labels") or {}), **labels}
    return obj


def _source_labels(source: dict[str, Any]) -> dict[str, str]:
    """Kyverno's labels on a copy naming its clone source, so a change of the source finds its copies."""
    metadata = source.get("metadata") or {}
    group, _, version = str(source.get("apiVersion") or "").rpartition("/")
    return {
        "generate.kyverno.io/clone-source": "",
        "generate.kyverno.io/source-group": group,
        "generate.kyverno.io/source-version": version,
        "generate.kyverno.io/source-kind": str(source.get("kind") or ""),
        "generate.kyverno.io/source-namespace": str(metadata.get("namespace") or ""),
        "generate.kyverno.io/source-uid": str(metadata.get("uid") or ""),
    }


def _clean_clone(source: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(source)
    metadata = obj.setdefault("metadata", {})
    for key in _VOLATILE_METADATA:
        metadata.pop(key, None)
    obj.pop("status", None)
    return obj


def _generate_one(spec: dict[str, Any], pctx: PolicyContext, rule: Rule, lookup: ResourceLookup | None) -> list[dict[str, Any]]:
    trigger = pctx.new_resource or pctx.old_resource
    labels = _downstream_labels(pctx, rule, trigger)
    if not spec.get("clone") and not spec.get("cloneList"):
        data = spec.get("data")
        if not isinstance(data, dict):
            data = {}
        obj = {"apiVersion": spec.get("apiVersion", ""), "kind": spec.get("kind", ""), **data}
        return [_with_identity(obj, spec, labels)]
    if spec.get("clone"):
        clone = spec["clone"]
        if lookup is None:
            raise GenerateError("no clone source available")
        sources = lookup(str(spec.get("apiVersion", "")), str(spec.get("kind", "")), str(clone.get("namespace", "")), str(clone.get("name", "")))
        if not sources:
            raise GenerateError(f"source resource {spec.get('kind')} {clone.get('namespace')}/{clone.get('name')} not found")
        labels = {**labels, **_source_labels(sources[0])}
        return [_with_identity(_clean_clone(sources[0]), spec, labels)]
    if spec.get("cloneList"):
        clone_list = spec["cloneList"]
        if lookup is None:
            raise GenerateError("no clone source available")
        generated = []
        for kind_selector in clone_list.get("kinds") or []:
            api_version, _, kind = str(kind_selector).rpartition("/")
            for source in lookup(api_version, kind, str(clone_list.get("namespace", "")), None):
                labels_of_source = ((source.get("metadata") or {}).get("labels")) or {}
                if clone_list.get("selector") is not None and not selector_matches(clone_list["selector"], labels_of_source):
                    continue
                target = {"namespace": spec.get("namespace"), "name": (source.get("metadata") or {}).get("name")}
                generated.append(_with_identity(_clean_clone(source), target, {**labels, **_source_labels(source)}))
        return generated
    return []  # pragma: no cover - every branch above returns


def _spec_of(generate: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in generate.items() if key != "foreach"}


def generate_rule(pctx: PolicyContext, rule: Rule, lookup: ResourceLookup | None) -> RuleResponse:
    """Compute the downstream resources of a matched generate rule (context and preconditions already checked)."""
    generate = rule.generate or {}
    generated: list[dict[str, Any]] = []
    try:
        if generate.get("foreach"):
            for foreach in generate["foreach"]:
                generated.extend(_generate_foreach(pctx, rule, foreach, lookup))
        else:
            spec = substitute_all(_spec_of(generate), pctx.json_context, is_delete=pctx.is_delete)
            generated.extend(_generate_one(spec, pctx, rule, lookup))
    except SubstitutionError as exc:
        return rule_error(rule.name, GENERATION, "variable substitution failed", exc)
    except GenerateError as exc:
        return rule_error(rule.name, GENERATION, "failed to generate resource", exc)
    return rule_pass(rule.name, GENERATION, "", generated_resources=generated)


def _generate_foreach(pctx: PolicyContext, rule: Rule, foreach: dict[str, Any], lookup: ResourceLookup | None) -> list[dict[str, Any]]:
    ctx = pctx.json_context
    try:
        elements = evaluate_list(str(foreach.get("list", "")), pctx)
    except (JMESPathError, ContextError) as exc:
        raise GenerateError(f"failed to evaluate list {foreach.get('list')}: {exc}") from None
    generated: list[dict[str, Any]] = []
    ctx.checkpoint()
    try:
        for index, element in enumerate(elements):
            if element is None:
                continue
            ctx.restore()
            add_element(pctx, element, index, 0, False)
            try:
                pctx.context_loader.load(foreach.get("context") or [], ctx, rule.name, foreach_index=index)
                ok, _ = evaluate_conditions(foreach.get("preconditions"), ctx)
            except (ContextLoadError, ConditionEvaluationError, JMESPathError, ContextError) as exc:
                raise GenerateError(str(exc)) from None
            if not ok:
                continue
            spec = substitute_all({k: v for k, v in foreach.items() if k not in ("list", "context", "preconditions")}, ctx)
            generated.extend(_generate_one(spec, pctx, rule, lookup))
    finally:
        ctx.reset()
        pctx.element = None
    return generated
