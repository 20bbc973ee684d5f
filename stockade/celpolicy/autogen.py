"""Pod-controller variants of CEL policies that match Pods (Kyverno's ``autogen.podControllers``)."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

# controller resource -> (group, version, kind, replacement set)
CONTROLLERS: dict[str, tuple[str, str, str, str]] = {
    "daemonsets": ("apps", "v1", "DaemonSet", "defaults"),
    "deployments": ("apps", "v1", "Deployment", "defaults"),
    "replicasets": ("apps", "v1", "ReplicaSet", "defaults"),
    "statefulsets": ("apps", "v1", "StatefulSet", "defaults"),
    "jobs": ("batch", "v1", "Job", "defaults"),
    "cronjobs": ("batch", "v1", "CronJob", "cronjobs"),
}
_REPLACEMENTS: dict[str, tuple[tuple[str, str], ...]] = {
    "defaults": (("spec", "spec.template.spec"), ("metadata", "spec.template.metadata")),
    "cronjobs": (("spec", "spec.jobTemplate.spec.template.spec"), ("metadata", "spec.jobTemplate.spec.template.metadata")),
}


def can_autogen(constraints: dict[str, Any] | None) -> bool:
    """Only a single rule on core/v1 pods without object selectors, exclusions or names qualifies."""
    if not constraints:
        return False
    selector = constraints.get("objectSelector") or {}
    if selector.get("matchLabels") or selector.get("matchExpressions"):
        return False
    if constraints.get("excludeResourceRules"):
        return False
    rules = constraints.get("resourceRules") or []
    if len(rules) != 1:
        return False
    rule = rules[0]
    return (
        not rule.get("resourceNames")
        and rule.get("apiGroups") == [""]
        and rule.get("apiVersions") == ["v1"]
        and rule.get("resources") == ["pods"]
    )


def _rewrite(text: str, source: str, target: str) -> str:
    # object.metadata.namespace keeps meaning the controller's namespace, so it is not rewritten.
    for root in ("object.", "oldObject."):
        pattern = re.compile(re.escape(root + source) + r"(?!\.namespace(?![A-Za-z0-9_]))")
        text = pattern.sub(root + target, text)
    return text


_MPOL_SPEC = re.compile(r"\b(object|oldObject|Object)\.spec")
_MPOL_LABELS = re.compile(r"\b(object|oldObject|Object)\.metadata\.labels")
_MPOL_ANNOTATIONS = re.compile(r"\b(object|oldObject|Object)\.metadata\.annotations")
_MPOL_WRAPPERS: dict[str, tuple[str, str]] = {
    "cronjobs": (
        "Object{spec: Object.spec{jobTemplate: Object.spec.jobTemplate{spec: Object.spec.jobTemplate.spec{template: Object.spec.jobTemplate.spec.template{",
        "}}}}}",
    ),
    "defaults": ("Object{spec: Object.spec{template: Object.spec.template{", "}}}"),
}


def mutation_expression_for_controllers(expression: str, replacement_set: str) -> str:
    """A MutatingPolicy expression written for Pods, rewritten for a pod controller as Kyverno's autogen does:
    ``object.spec``/``Object.spec`` and the Pod's labels/annotations move under the template, and a root
    ``Object{...}`` (an ApplyConfiguration) is wrapped in the controller's template structure."""
    spec_path, metadata_path = (target for _, target in _REPLACEMENTS[replacement_set])
    expression = _MPOL_SPEC.sub(lambda m: f"{m.group(1)}.{spec_path}", expression)
    expression = _MPOL_LABELS.sub(lambda m: f"{m.group(1)}.{metadata_path}.labels", expression)
    expression = _MPOL_ANNOTATIONS.sub(lambda m: f"{m.group(1)}.{metadata_path}.annotations", expression)
    stripped = expression.strip()
    if not stripped.startswith("Object"):
        return expression
    rest = stripped[len("Object") :].lstrip(" \t\r\n")
    if not rest.startswith("{"):
        return expression
    content = rest[1:]
    depth = 1
    for index, char in enumerate(content):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                if index == 0:
                    return expression
                opening, closing = _MPOL_WRAPPERS[replacement_set]
                return opening + content[:index] + closing + content[index + 1 :]
    return expression


def _mutating_variant(spec: dict[str, Any], replacement_set: str) -> dict[str, Any]:
    """Kyverno converts only a MutatingPolicy's matchConditions and ApplyConfiguration expressions."""
    variant = copy.deepcopy(spec)
    variant.pop("matchConstraints", None)
    for condition in variant.get("matchConditions") or []:
        if isinstance(condition, dict) and condition.get("expression"):
            condition["expression"] = mutation_expression_for_controllers(str(condition["expression"]), replacement_set)
    for mutation in variant.get("mutations") or []:
        apply = mutation.get("applyConfiguration") if isinstance(mutation, dict) else None
        if isinstance(apply, dict) and apply.get("expression"):
            apply["expression"] = mutation_expression_for_controllers(str(apply["expression"]), replacement_set)
    return variant


def controllers_of(spec: dict[str, Any]) -> list[str]:
    configured = ((spec.get("autogen") or {}).get("podControllers") or {}).get("controllers")
    if configured is None:
        return sorted(CONTROLLERS)
    return [c for c in configured if c in CONTROLLERS]


def autogen_specs(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Specs for the controllers the policy asks for, grouped by replacement set like Kyverno."""
    if not can_autogen(spec.get("matchConstraints")):
        return []
    groups: dict[str, list[str]] = {}
    for controller in controllers_of(spec):
        groups.setdefault(CONTROLLERS[controller][3], []).append(controller)
    variants = []
    operations = spec["matchConstraints"]["resourceRules"][0].get("operations") or []
    if not operations:
        return []
    for replacement_set in sorted(groups):
        by_group_version: dict[tuple[str, str], list[str]] = {}
        for controller in groups[replacement_set]:
            group, version, _, _ = CONTROLLERS[controller]
            by_group_version.setdefault((group, version), []).append(controller)
        variant = copy.deepcopy(spec)
        constraints: dict[str, Any] = {
            "resourceRules": [
                {"apiGroups": [g], "apiVersions": [v], "resources": sorted(resources), "operations": list(operations)}
                for (g, v), resources in sorted(by_group_version.items())
            ]
        }
        if spec["matchConstraints"].get("namespaceSelector") is not None:
            constraints["namespaceSelector"] = copy.deepcopy(spec["matchConstraints"]["namespaceSelector"])
        if "mutations" in spec:
            variant = _mutating_variant(spec, replacement_set)
        else:
            variant.pop("matchConstraints", None)
            text = json.dumps(variant)
            for source, target in _REPLACEMENTS[replacement_set]:
                text = _rewrite(text, source, target)
            variant = json.loads(text)
        variant["matchConstraints"] = constraints
        variants.append(variant)
    return variants


def autogen_configs(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``status.autogen.configs`` as Kyverno reports a ValidatingPolicy's pod-controller variants: per replacement set
    (``defaults``, ``cronjobs``) the controllers it covers as ``targets`` and the rewritten ``spec``."""
    configs: dict[str, dict[str, Any]] = {}
    for variant in autogen_specs(spec):
        rules = (variant.get("matchConstraints") or {}).get("resourceRules") or []
        # in the order of the variant's resource rules (apps before batch), as Kyverno lists them
        resources = [resource for rule in rules for resource in rule.get("resources") or [] if resource in CONTROLLERS]
        if not resources:
            continue
        name = CONTROLLERS[resources[0]][3]
        targets = []
        for resource in resources:
            group, version, kind, _ = CONTROLLERS[resource]
            targets.append({"group": group, "version": version, "resource": resource, "kind": kind})
        configs[name] = {"targets": targets, "spec": variant}
    return configs
