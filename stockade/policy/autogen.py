"""Autogen: Pod rules rewritten for Pod controllers, the way Kyverno derives ``autogen-*`` rules.

Users test and report against these rule names, so names, match kinds and the textual rewrite of
``request.object.spec``-style references follow Kyverno exactly.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

AUTOGEN_ANNOTATION = "pod-policies.kyverno.io/autogen-controllers"
POD_CONTROLLERS = ("DaemonSet", "Deployment", "Job", "StatefulSet", "ReplicaSet", "ReplicationController", "CronJob")
_NON_CRONJOB_CONTROLLERS = ("DaemonSet", "Deployment", "Job", "StatefulSet", "ReplicaSet", "ReplicationController")
_CONTROLLER_KINDS_AND_POD = frozenset(POD_CONTROLLERS) | {"Pod"}
_GVK_BY_KIND = {
    "DaemonSet": "apps/v1/DaemonSet",
    "Deployment": "apps/v1/Deployment",
    "Job": "batch/v1/Job",
    "StatefulSet": "apps/v1/StatefulSet",
    "ReplicaSet": "apps/v1/ReplicaSet",
    "ReplicationController": "v1/ReplicationController",
    "CronJob": "batch/v1/CronJob",
}
_POD_REPLACEMENTS = (
    ("request.object.spec", "request.object.spec.template.spec"),
    ("request.oldObject.spec", "request.oldObject.spec.template.spec"),
    ("request.object.metadata", "request.object.spec.template.metadata"),
    ("request.oldObject.metadata", "request.oldObject.spec.template.metadata"),
)
_POD_CEL_REPLACEMENTS = (
    ("object.spec", "object.spec.template.spec"),
    ("oldObject.spec", "oldObject.spec.template.spec"),
    ("object.metadata", "object.spec.template.metadata"),
    ("oldObject.metadata", "oldObject.spec.template.metadata"),
)
_CRONJOB_REPLACEMENTS = (
    ("request.object.spec", "request.object.spec.jobTemplate.spec.template.spec"),
    ("request.oldObject.spec", "request.oldObject.spec.jobTemplate.spec.template.spec"),
    ("request.object.metadata", "request.object.spec.jobTemplate.spec.template.metadata"),
    ("request.oldObject.metadata", "request.oldObject.spec.jobTemplate.spec.template.metadata"),
)
_CRONJOB_CEL_REPLACEMENTS = (
    ("object.spec", "object.spec.jobTemplate.spec.template.spec"),
    ("oldObject.spec", "oldObject.spec.jobTemplate.spec.template.spec"),
    ("object.metadata", "object.spec.jobTemplate.spec.template.metadata"),
    ("oldObject.metadata", "oldObject.spec.jobTemplate.spec.template.metadata"),
)


def _kind_of_selector(selector: str) -> str:
    """The Kind part of a kinds entry (``apps/v1/Deployment`` → ``Deployment``, ``Pod/exec`` → ``Pod``)."""
    parts = selector.split("/")
    if len(parts) == 1:
        kind = selector.replace(".", "/", 1)
    elif len(parts) == 2:
        if parts == ["*", "*"]:
            kind = "*/*"
        elif _is_version(parts[0]):
            kind = parts[1].replace(".", "/", 1)
        else:
            kind = selector
    elif len(parts) == 3:
        kind = parts[1] + "/" + parts[2] if _is_version(parts[0]) else parts[2].replace(".", "/", 1)
    elif len(parts) == 4:
        kind = parts[2] + "/" + parts[3]
    else:
        kind = ""
    return kind.split("/", 1)[0] if "/" in kind and kind != "*/*" else kind


_VERSION_RE = re.compile(r"v\d+((alpha|beta)\d+)?|\*")


def _is_version(text: str) -> bool:
    return _VERSION_RE.fullmatch(text) is not None


def contains_kind(kinds: list[str], kind: str) -> bool:
    return any(_kind_of_selector(entry) == kind for entry in kinds or [])


def _descriptions(block: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every ResourceDescription of a match/exclude block (flat, any, all)."""
    if not block:
        return []
    out: list[dict[str, Any]] = []
    if block.get("resources"):
        out.append(block["resources"])
    for key in ("any", "all"):
        for entry in block.get(key) or []:
            out.append((entry or {}).get("resources") or {})
    return out


def block_kinds(block: dict[str, Any] | None) -> list[str]:
    kinds: list[str] = []
    for description in _descriptions(block):
        kinds.extend(description.get("kinds") or [])
    return kinds


def _supports_autogen(description: dict[str, Any], needed: list[bool]) -> bool:
    kinds = description.get("kinds") or []
    if (
        description.get("name")
        or description.get("names")
        or description.get("selector") is not None
        or description.get("annotations") is not None
        or (len(kinds) > 1 and contains_kind(kinds, "Pod"))
    ):
        return False
    if any(kind in _CONTROLLER_KINDS_AND_POD for kind in kinds):
        needed[0] = True
    return True


def can_autogen(spec: dict[str, Any]) -> bool:
    needed = [False]
    for rule in spec.get("rules") or []:
        if rule.get("generate"):
            return False
        mutate = rule.get("mutate") or {}
        if mutate.get("patchesJson6902") or any((f or {}).get("patchesJson6902") for f in mutate.get("foreach") or []):
            return False
        descriptions = _descriptions(rule.get("match")) + _descriptions(rule.get("exclude"))
        if not all(_supports_autogen(description, needed) for description in descriptions):
            return False
    return needed[0]


def _convert_kinds(kinds: list[str]) -> list[str]:
    return [_GVK_BY_KIND.get(kind, kind) for kind in kinds]


def _autogen_name(prefix: str, name: str) -> str:
    return (prefix + "-" + name)[:63]


def _replace_kinds_in_filters(filters: list[dict[str, Any]], kinds: list[str], only_with_pod: bool) -> list[dict[str, Any]]:
    out = copy.deepcopy(filters)
    for entry in out:
        resources = entry.setdefault("resources", {}) if entry is not None else {}
        if not only_with_pod or contains_kind(resources.get("kinds") or [], "Pod"):
            resources["kinds"] = _convert_kinds(kinds)
    return out


def _generate_rule(name: str, rule: dict[str, Any] | None, template_key: str, kinds: list[str], only_with_pod: bool) -> dict[str, Any] | None:
    if rule is None:
        return None
    rule = copy.deepcopy(rule)
    rule["name"] = name
    match = rule.setdefault("match", {})
    if match.get("any"):
        match["any"] = _replace_kinds_in_filters(match["any"], kinds, only_with_pod)
    elif match.get("all"):
        match["all"] = _replace_kinds_in_filters(match["all"], kinds, only_with_pod)
    else:
        match.setdefault("resources", {})["kinds"] = _convert_kinds(kinds)
    exclude = rule.get("exclude")
    if exclude:
        if exclude.get("any"):
            exclude["any"] = _replace_kinds_in_filters(exclude["any"], kinds, only_with_pod)
        elif exclude.get("all"):
            exclude["all"] = _replace_kinds_in_filters(exclude["all"], kinds, only_with_pod)
        elif (exclude.get("resources") or {}).get("kinds"):
            exclude["resources"]["kinds"] = _convert_kinds(kinds)

    def wrap(value: Any) -> dict[str, Any]:
        return {"spec": {template_key: value}}

    mutate = rule.get("mutate")
    if mutate:
        if mutate.get("patchStrategicMerge") is not None:
            rule["mutate"] = {"patchStrategicMerge": wrap(mutate["patchStrategicMerge"])}
            return rule
        if mutate.get("foreach"):
            new_foreach = []
            for item in mutate["foreach"]:
                converted = {key: item[key] for key in ("list", "context", "preconditions") if key in item}
                converted["patchStrategicMerge"] = wrap(item.get("patchStrategicMerge"))
                new_foreach.append(converted)
            rule["mutate"] = {"foreach": new_foreach}
            return rule
    validate = rule.get("validate")
    if validate:
        kept = {key: validate[key] for key in ("message", "failureAction", "failureActionOverrides", "allowExistingViolations") if key in validate}
        if validate.get("pattern") is not None:
            rule["validate"] = {**kept, "pattern": wrap(validate["pattern"])}
            return rule
        if validate.get("deny") is not None:
            rule["validate"] = {**kept, "deny": validate["deny"]}
            return rule
        if validate.get("podSecurity") is not None:
            rule["validate"] = {**kept, "podSecurity": validate["podSecurity"]}
            return rule
        if validate.get("anyPattern") is not None:
            rule["validate"] = {**kept, "anyPattern": [wrap(p) for p in validate["anyPattern"]]}
            return rule
        if validate.get("foreach"):
            rule["validate"] = {**kept, "foreach": validate["foreach"]}
            return rule
        if validate.get("cel") is not None:
            return rule
    if rule.get("verifyImages"):
        return rule
    return None


def _rule_for_controllers(rule: dict[str, Any], controllers: str) -> dict[str, Any] | None:
    name = str(rule.get("name", ""))
    if name.startswith("autogen-") or not controllers:
        return None
    match_kinds = block_kinds(rule.get("match"))
    exclude_kinds = block_kinds(rule.get("exclude"))
    if not contains_kind(match_kinds, "Pod") or (exclude_kinds and not contains_kind(exclude_kinds, "Pod")):
        return None
    if controllers == "all":
        controllers = ",".join(_NON_CRONJOB_CONTROLLERS)
    elif controllers != "none":
        valid = [c for c in sorted(controllers.split(",")) if c in _NON_CRONJOB_CONTROLLERS]
        if valid:
            controllers = ",".join(valid)
    return _generate_rule(_autogen_name("autogen", name), rule, "template", sorted(controllers.split(",")), True)


def _cronjob_rule(rule: dict[str, Any], controllers: str) -> dict[str, Any] | None:
    if "CronJob" not in controllers and "all" not in controllers:
        return None
    base = _rule_for_controllers(rule, controllers)
    return _generate_rule(_autogen_name("autogen-cronjob", str(rule.get("name", ""))), base, "jobTemplate", ["CronJob"], False)


def _rewrite_references(rule: dict[str, Any], replacements: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    text = json.dumps(rule)
    for old, new in replacements:
        text = text.replace(old, new)
    rewritten: dict[str, Any] = json.loads(text)
    return rewritten


def _strip_cronjob(controllers: str) -> str:
    return ",".join(c for c in sorted(controllers.split(",")) if c != "CronJob")


def compute_rules(policy: dict[str, Any]) -> list[dict[str, Any]]:
    """Declared rules followed by the autogen rules Kyverno would add for this policy."""
    spec = policy.get("spec") or {}
    rules: list[dict[str, Any]] = [r for r in spec.get("rules") or [] if isinstance(r, dict)]
    if not can_autogen(spec):
        return rules
    annotations = (policy.get("metadata") or {}).get("annotations") or {}
    requested = annotations.get(AUTOGEN_ANNOTATION)
    controllers = ",".join(POD_CONTROLLERS) if requested is None else str(requested)
    if controllers == "none":
        return rules
    generated: list[dict[str, Any]] = []
    for rule in rules:
        is_cel = bool((rule.get("validate") or {}).get("cel"))
        pod_rule = _rule_for_controllers(rule, _strip_cronjob(controllers))
        if pod_rule is not None:
            generated.append(_rewrite_references(pod_rule, _POD_CEL_REPLACEMENTS if is_cel else _POD_REPLACEMENTS))
        cron_rule = _cronjob_rule(rule, controllers)
        if cron_rule is not None:
            generated.append(_rewrite_references(cron_rule, _CRONJOB_CEL_REPLACEMENTS if is_cel else _CRONJOB_REPLACEMENTS))
    if not generated:
        return rules
    return [r for r in rules if not str(r.get("name", "")).startswith("autogen-")] + generated

