"""Whether a rule's ``match``/``exclude`` blocks select a resource (kinds, names, namespaces, selectors, users)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from stockade.engine.wildcard import match as wildcard_match
from stockade.identitymemo import IdentityMemo

_VERSION_RE = re.compile(r"^(v\d+((alpha|beta)\d+)?|\*)$")


@dataclass(frozen=True)
class RequestInfo:
    """Who is asking: the admission request's user plus the RBAC roles Kyverno computes for them."""

    username: str = ""
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    roles: tuple[str, ...] = ()
    cluster_roles: tuple[str, ...] = ()

    def is_empty(self) -> bool:
        return not (self.username or self.uid or self.groups or self.extra or self.roles or self.cluster_roles)

    def user_info_dict(self) -> dict[str, Any]:
        info: dict[str, Any] = {}
        if self.username:
            info["username"] = self.username
        if self.uid:
            info["uid"] = self.uid
        if self.groups:
            info["groups"] = list(self.groups)
        if self.extra:
            info["extra"] = self.extra
        return info


@dataclass(frozen=True)
class ResourceKind:
    """Group/version/kind plus subresource of the object under admission."""

    group: str
    version: str
    kind: str
    subresource: str = ""

    @classmethod
    def of(cls, resource: dict[str, Any], subresource: str = "") -> ResourceKind:
        api_version = str(resource.get("apiVersion", ""))
        group, _, version = api_version.rpartition("/")
        return cls(group, version, str(resource.get("kind", "")), subresource)


@lru_cache(maxsize=4096)
def parse_kind_selector(selector: str) -> tuple[str, str, str, str]:
    """``kinds`` entry → (group, version, kind, subresource), with Kyverno's shorthand forms."""
    parts = selector.split("/")
    parts = parts[:-1] + parts[-1].split(".")
    if len(parts) == 1:
        return "*", "*", parts[0], ""
    if len(parts) == 2:
        if parts[0] == "*" and parts[1] == "*":
            return "*", "*", "*", "*"
        if parts[0] == "*" and parts[1].lower() == parts[1]:
            return "*", "*", parts[0], parts[1]
        if _VERSION_RE.match(parts[0]):
            return "*", parts[0], parts[1], ""
        return "*", "*", parts[0], parts[1]
    if len(parts) == 3:
        if _VERSION_RE.match(parts[0]):
            return "*", parts[0], parts[1], parts[2]
        return parts[0], parts[1], parts[2], ""
    if len(parts) == 4:
        return parts[0], parts[1], parts[2], parts[3]
    return "", "", "", ""


def check_kind(kinds: list[str], gvk: ResourceKind) -> bool:
    for entry in kinds:
        group, version, kind, sub = parse_kind_selector(entry)
        if wildcard_match(group, gvk.group) and wildcard_match(version, gvk.version) and wildcard_match(kind, gvk.kind):
            if wildcard_match(sub, gvk.subresource):
                return True
            if gvk.group == "" and gvk.version == "v1" and gvk.kind == "Pod" and gvk.subresource == "ephemeralcontainers":
                return True
    return False


def _labels(resource: dict[str, Any]) -> dict[str, str]:
    return ((resource.get("metadata") or {}).get("labels")) or {}


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, Any]) -> bool:
    """A Kubernetes label selector, with Kyverno's wildcards in ``matchLabels`` keys and values."""
    if selector is None:
        return False
    labels = {str(k): str(v) for k, v in (labels or {}).items()}
    match_labels = selector.get("matchLabels") or {}
    for key, value in match_labels.items():
        key, value = str(key), str(value)
        if "*" in key or "?" in key or "*" in value or "?" in value:
            if not any(wildcard_match(key, k) and wildcard_match(value, v) for k, v in labels.items()):
                return False
        elif labels.get(key) != value:
            return False
    for requirement in selector.get("matchExpressions") or []:
        key = str(requirement.get("key", ""))
        operator = str(requirement.get("operator", ""))
        values = [str(v) for v in requirement.get("values") or []]
        if operator == "In":
            if key not in labels or labels[key] not in values:
                return False
        elif operator == "NotIn":
            if key in labels and labels[key] in values:
                return False
        elif operator == "Exists":
            if key not in labels:
                return False
        elif operator == "DoesNotExist":
            if key in labels:
                return False
        else:
            raise ValueError(f"{operator!r} is not a valid label selector operator")
    return True


def _check_subjects(subjects: list[dict[str, Any]], info: RequestInfo) -> bool:
    for subject in subjects:
        kind = subject.get("kind")
        name = str(subject.get("name", ""))
        if kind == "ServiceAccount":
            username = f"system:serviceaccount:{subject.get('namespace', '')}:{name}"
            if wildcard_match(username, info.username):
                return True
        elif kind == "Group":
            if any(wildcard_match(name, group) for group in info.groups):
                return True
        elif kind == "User":
            if wildcard_match(name, info.username):
                return True
    return False


_USER_FIELDS = ("roles", "clusterRoles", "subjects")


def _description_mismatches(
    description: dict[str, Any],
    user: dict[str, Any],
    resource: dict[str, Any],
    gvk: ResourceKind,
    info: RequestInfo,
    namespace_labels: dict[str, str],
    operation: str,
) -> list[str]:
    operations = description.get("operations") or []
    if operations and operation not in operations:
        return ["operation does not match"]
    errors: list[str] = []
    kinds = description.get("kinds") or []
    if kinds and not check_kind(kinds, gvk):
        errors.append(f"kind does not match {kinds}")
    metadata = resource.get("metadata") or {}
    name = str(metadata.get("name") or metadata.get("generateName") or "")
    if description.get("name") and not wildcard_match(str(description["name"]), name):
        errors.append("name does not match")
    names = description.get("names") or []
    if names and not any(wildcard_match(str(n), name) for n in names):
        errors.append("none of the names match")
    namespaces = description.get("namespaces") or []
    if namespaces:
        namespace = name if resource.get("kind") == "Namespace" else str(metadata.get("namespace") or "")
        if not any(wildcard_match(str(ns), namespace) for ns in namespaces):
            errors.append("namespace does not match")
    annotations = description.get("annotations") or {}
    if annotations:
        actual = metadata.get("annotations") or {}
        for key, value in annotations.items():
            if not any(wildcard_match(str(key), str(k)) and wildcard_match(str(value), str(v)) for k, v in actual.items()):
                errors.append("annotations does not match")
                break
    if description.get("selector") is not None:
        try:
            if not selector_matches(description["selector"], _labels(resource)):
                errors.append("selector does not match")
        except ValueError as exc:
            errors.append(f"failed to parse selector: {exc}")
    if description.get("namespaceSelector") is not None:
        if resource.get("kind") == "Namespace":
            errors.append("namespace selector is not applicable for namespace resource")
        elif resource.get("kind"):
            try:
                if not selector_matches(description["namespaceSelector"], namespace_labels):
                    errors.append("namespace selector does not match labels")
            except ValueError as exc:
                errors.append(f"failed to parse namespace selector: {exc}")
    roles = user.get("roles") or []
    if roles and not set(roles) & set(info.roles):
        errors.append("user info does not match roles for the given conditionBlock")
    cluster_roles = user.get("clusterRoles") or []
    if cluster_roles and not set(cluster_roles) & set(info.cluster_roles):
        errors.append("user info does not match clustersRoles for the given conditionBlock")
    subjects = user.get("subjects") or []
    if subjects and not _check_subjects(subjects, info):
        errors.append("user info does not match subject for the given conditionBlock")
    return errors


def _filters(block: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """Normalise a match/exclude block into ("any"|"all"|"flat", filters)."""
    if block.get("any"):
        return "any", [f or {} for f in block["any"]]
    if block.get("all"):
        return "all", [f or {} for f in block["all"]]
    flat = {"resources": block.get("resources") or {}}
    for key in _USER_FIELDS:
        if block.get(key):
            flat[key] = block[key]
    return "flat", [flat]


def _filter_is_empty(resource_filter: dict[str, Any]) -> bool:
    resources = resource_filter.get("resources") or {}
    has_resources = any(value not in (None, "", [], {}) for value in resources.values())
    has_user = any(resource_filter.get(key) for key in _USER_FIELDS)
    return not has_resources and not has_user


def _match_filter(resource_filter: dict[str, Any], ctx_args: tuple[Any, ...], info: RequestInfo) -> list[str]:
    # Without request user info (offline runs) user criteria cannot be judged, so Kyverno ignores them in match.
    user = {} if info.is_empty() else {key: resource_filter.get(key) for key in _USER_FIELDS if resource_filter.get(key)}
    description = resource_filter.get("resources") or {}
    if _filter_is_empty({"resources": description, **user}):
        return ["match cannot be empty"]
    resource, gvk, namespace_labels, operation = ctx_args
    return _description_mismatches(description, user, resource, gvk, info, namespace_labels, operation)


def match_reasons(
    rule: dict[str, Any],
    resource: dict[str, Any],
    gvk: ResourceKind,
    *,
    info: RequestInfo | None = None,
    namespace_labels: dict[str, str] | None = None,
    operation: str = "CREATE",
    policy_namespace: str = "",
) -> list[str]:
    """Why the rule does not apply to the resource; empty when it does."""
    info = info or RequestInfo()
    if not resource:
        return ["resource is empty"]
    metadata = resource.get("metadata") or {}
    if policy_namespace and policy_namespace != str(metadata.get("namespace") or ""):
        return ["policy and resource namespaces mismatch"]
    gate = _KIND_GATES.get(rule, _KindGate)
    if gate.rejects(gvk):
        return ["no resource matched"]
    if gate.kinds_only:
        return []  # the kinds matched and nothing else is selected on
    args = (resource, gvk, namespace_labels or {}, operation)
    reasons: list[str] = []
    mode, filters = _filters(rule.get("match") or {})
    if mode == "any":
        if not any(not _match_filter(f, args, info) for f in filters):
            reasons.append("no resource matched")
    else:
        for resource_filter in filters:
            reasons.extend(_match_filter(resource_filter, args, info))
    exclude = rule.get("exclude") or {}
    if not reasons and exclude:
        mode, filters = _filters(exclude)
        if mode == "all":
            if all(_is_excluded_by(f, args, info) for f in filters):
                reasons.append("resource excluded since the combination of all criteria exclude it")
        else:
            for resource_filter in filters:
                if _is_excluded_by(resource_filter, args, info):
                    reasons.append("resource excluded since one of the criteria excluded it")
    return reasons


_MAX_KIND_VERDICTS = 64  # kinds one rule keeps verdicts for (a cluster has a few hundred; Pod reviews dominate)


class _KindGate:
    """What a rule's match block says about kinds alone, worked out once per rule object (``_KIND_GATES``):

    ``kinds``: the kinds lists of the match filters when every filter names kinds, so a kind mismatch alone rejects,
    else None; ``kinds_only``: kinds are all the rule selects on, so passing the gate means the rule matches;
    ``verdicts``: whether a kind is rejected, per kind met so far (this check runs for every rule on every request,
    and rules are immutable once loaded)."""

    __slots__ = ("kinds", "kinds_only", "any_mode", "verdicts")

    def __init__(self, rule: dict[str, Any]) -> None:
        match = rule.get("match") or {}
        mode, filters = _filters(match)
        kinds = tuple(tuple((f.get("resources") or {}).get("kinds") or ()) for f in filters)
        self.kinds = kinds if kinds and all(kinds) else None
        self.kinds_only = self.kinds is not None and not rule.get("exclude") and all(_selects_on_kinds_only(f) for f in filters)
        self.any_mode = bool(match.get("any"))
        self.verdicts: dict[ResourceKind, bool] = {}

    def rejects(self, gvk: ResourceKind) -> bool:
        verdict = self.verdicts.get(gvk)
        if verdict is None:
            verdict = self._rejects(gvk)
            if len(self.verdicts) < _MAX_KIND_VERDICTS:
                self.verdicts[gvk] = verdict
        return verdict

    def _rejects(self, gvk: ResourceKind) -> bool:
        if self.kinds is None:
            return False
        results = (check_kind(list(kinds), gvk) for kinds in self.kinds)
        return not any(results) if self.any_mode else not all(results)


_KIND_GATES: IdentityMemo[dict[str, Any], _KindGate] = IdentityMemo(50_000)


def selects_on_kinds_only(rule: dict[str, Any]) -> bool:
    """Whether a rule's match block selects on kinds and nothing else (no exclude either): for a kind it does not
    reject, ``match_reasons`` is then empty for any non-empty resource outside a namespaced policy."""
    return _KIND_GATES.get(rule, _KindGate).kinds_only


def _selects_on_kinds_only(resource_filter: dict[str, Any]) -> bool:
    """A filter whose only criterion is ``resources.kinds`` (every other field absent or empty)."""
    if any(resource_filter.get(key) for key in _USER_FIELDS):
        return False
    resources = resource_filter.get("resources") or {}
    return all(key == "kinds" or value in (None, "", [], {}) for key, value in resources.items() if key not in ("selector", "namespaceSelector")) and (
        resources.get("selector") is None and resources.get("namespaceSelector") is None
    )


def rejected_by_kind(rule: dict[str, Any], gvk: ResourceKind) -> bool:
    """Whether the kinds named in the rule's match block alone rule ``gvk`` out."""
    return _KIND_GATES.get(rule, _KindGate).rejects(gvk)


def _is_excluded_by(resource_filter: dict[str, Any], args: tuple[Any, ...], info: RequestInfo) -> bool:
    user = {key: resource_filter.get(key) for key in _USER_FIELDS if resource_filter.get(key)}
    description = resource_filter.get("resources") or {}
    if _filter_is_empty({"resources": description, **user}):
        return False
    resource, gvk, namespace_labels, operation = args
    return not _description_mismatches(description, user, resource, gvk, info, namespace_labels, operation)


def rule_matches(rule: dict[str, Any], resource: dict[str, Any], gvk: ResourceKind, **kwargs: Any) -> bool:
    return not match_reasons(rule, resource, gvk, **kwargs)
