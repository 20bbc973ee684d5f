"""``validate.podSecurity`` rules: Pod Security Standards checks on a Pod or a controller's pod template."""

from __future__ import annotations

import dataclasses
from typing import Any

from stockade.engine.handlers.existing import skip_if_pre_existing
from stockade.engine.images import pod_spec_paths
from stockade.engine.policycontext import PolicyContext
from stockade.engine.response import RuleResponse, rule_error, rule_fail, rule_pass, rule_skip
from stockade.images.reference import InvalidReferenceError, image_info
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
    metadata = template.get("metadata") or {}
    if resource.get("kind") == "CronJob":
        # Kyverno pairs a CronJob's pod spec with the job template's metadata, not the pod template's
        job_template = (resource.get("spec") or {}).get("jobTemplate")
        metadata = (job_template.get("metadata") if isinstance(job_template, dict) else None) or {}
    return metadata, template.get("spec") or {}


def reported_image(image: str) -> str:
    """How Kyverno names a failing container's image in reports: the full reference (``docker.io/x:latest``)."""
    try:
        return str(image_info(image)["reference"])
    except InvalidReferenceError:
        return image


def validate_pod_security_rule(
    pctx: PolicyContext, rule: Rule, exception_excludes: list[dict[str, Any]] | None = None, exception_keys: list[str] | None = None
) -> RuleResponse | None:
    """Evaluate the rule's level/version; PolicyException controls apply afterwards and turn a cleared failure into skip.
    On UPDATE an Enforce failure the old object shares is skipped (``allowExistingViolations``)."""
    response = _pod_security_response(pctx, rule, exception_excludes, exception_keys)
    return skip_if_pre_existing(pctx, rule, response, lambda old: _pod_security_response(old, rule, exception_excludes, exception_keys))


def _pod_security_response(
    pctx: PolicyContext, rule: Rule, exception_excludes: list[dict[str, Any]] | None, exception_keys: list[str] | None
) -> RuleResponse | None:
    from stockade.engine.podsecurity import PodDecodeError, apply_pod_security_exclusions, check_pod_decodes, evaluate_pod_security

    settings = (rule.validate or {}).get("podSecurity") or {}
    resource = pctx.new_resource
    if not resource:
        return None
    try:
        check_pod_decodes(resource)
    except PodDecodeError as exc:
        return rule_error(rule.name, RULE_TYPE_VALIDATION, "Error while getting new resource", exc)
    parts = _pod_parts(resource)
    if parts is None:
        return rule_error(rule.name, RULE_TYPE_VALIDATION, f"failed to extract pod spec from {resource.get('kind')}")
    metadata, spec = parts
    level = str(settings.get("level") or "")
    version = str(settings.get("version") or "")
    try:
        result = evaluate_pod_security(
            metadata, spec, level, version or "latest", list(settings.get("exclude") or []),
            resource_kind=str(resource.get("kind", "Pod")), normalize_image=reported_image,
        )
    except ValueError as exc:
        return rule_error(rule.name, RULE_TYPE_VALIDATION, "failed to evaluate pod security", exc)
    if result.allowed:
        return rule_pass(rule.name, RULE_TYPE_VALIDATION, result.message(rule.name), pod_security_checks=result)
    if exception_excludes:
        remaining = apply_pod_security_exclusions(result, metadata, spec, exception_excludes)
        if remaining.allowed:
            keys = ", ".join(exception_keys or [])
            return rule_skip(rule.name, RULE_TYPE_VALIDATION, "rule is skipped due to policy exceptions " + keys, exceptions=list(exception_keys or []))
        # the report names, per remaining control, every image that failed it before the exceptions applied
        images = {failure.check_id: failure.images for failure in result.failures}
        result = dataclasses.replace(remaining, failures=tuple(dataclasses.replace(f, images=images.get(f.check_id, f.images)) for f in remaining.failures))
    failed = rule_fail(rule.name, RULE_TYPE_VALIDATION, result.message(rule.name), pod_security_checks=result)
    failed.properties = {**failed.properties, **result.report_properties()}  # what Kyverno's reports say of it
    return failed
