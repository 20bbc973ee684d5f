"""``validate.podSecurity`` rules: Pod Security Standards checks on a Pod or a controller's pod template."""

from __future__ import annotations

from typing import Any

from stockade.engine.images import pod_spec_paths
from stockade.engine.policycontext import PolicyContext
from stockade.engine.response import RuleResponse, rule_error, rule_fail, rule_pass
from stockade.policy.model import RULE_TYPE_VALIDATION, Rule


def _pod_parts(resource: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    location = pod_spec_paths(str(resource.get("kind", "")))
    if location is None:
        return None
    path, _ = location
    if path == ("spec",):
        return resource.get("metadata") or {}, resource.get("spec") or {}
    template: Any = resource
    for key in path[:-1]:
        template = (template or {}).get(key) if isinstance(template, dict) else None
    if not isinstance(template, dict):
        return {}, {}
    return template.get("metadata") or {}, template.get("spec") or {}


def validate_pod_security_rule(pctx: PolicyContext, rule: Rule, extra_excludes: list[dict[str, Any]] | None = None) -> RuleResponse | None:
    from stockade.engine.podsecurity import evaluate_pod_security

    settings = (rule.validate or {}).get("podSecurity") or {}
    resource = pctx.new_resource
    if not resource:
        return None
    parts = _pod_parts(resource)
    if parts is None:
        return rule_error(rule.name, RULE_TYPE_VALIDATION, f"failed to extract pod spec from {resource.get('kind')}")
    metadata, spec = parts
    level = str(settings.get("level") or "baseline")
    version = str(settings.get("version") or "latest")
    excludes = list(settings.get("exclude") or []) + list(extra_excludes or [])
    try:
        result = evaluate_pod_security(metadata, spec, level, version, excludes)
    except ValueError as exc:
        return rule_error(rule.name, RULE_TYPE_VALIDATION, "failed to evaluate pod security", exc)
    if result.allowed:
        return rule_pass(rule.name, RULE_TYPE_VALIDATION, f"Validation rule '{rule.name}' passed.", pod_security_checks=result)
    return rule_fail(rule.name, RULE_TYPE_VALIDATION, result.message(rule.name, level, version) if _takes_args(result) else result.message(), pod_security_checks=result)


def _takes_args(result: Any) -> bool:
    import inspect

    try:
        return len(inspect.signature(result.message).parameters) >= 3
    except (TypeError, ValueError):
        return False
