"""Kyverno's dynamic configuration: the ``kyverno`` ConfigMap (``data`` strings) as a typed, immutable object.

Parsing follows Kyverno's pkg/config: every load starts from the defaults, each key is parsed on its own, and a key
whose value cannot be parsed keeps its default and is reported in ``errors`` (Kyverno logs it and carries on) — one
bad key never discards the others.  It lives in the engine layer because resource filters reuse the engine's kind
selectors and wildcards, and the engine consumes the registry settings.  Pure: no I/O.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from stockade.engine.match import RequestInfo, ResourceKind, parse_kind_selector
from stockade.engine.wildcard import match as wildcard_match
from stockade.units.quantity import QuantityError, parse_quantity
from stockade.errors import StockadeError

DEFAULT_CONFIGMAP_NAMESPACE = "kyverno"
DEFAULT_CONFIGMAP_NAME = "kyverno"
DEFAULT_REGISTRY = "docker.io"
DEFAULT_UPDATE_REQUEST_THRESHOLD = 1000
DEFAULT_MAX_CONTEXT_SIZE = 2 * 1024 * 1024

# Go's strconv.ParseBool
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
# govalidator.IsDNSName, which Kyverno applies to the host part of defaultRegistry
_DNS_NAME = re.compile(r"^([a-zA-Z0-9_][a-zA-Z0-9_-]{0,62})(\.[a-zA-Z0-9_][a-zA-Z0-9_-]{0,62})*[._]?$")
_IPV4 = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
_FILTER_ENTRY = re.compile(r"\[([^\[\]]*)\]")
_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class KyvernoConfigError(StockadeError, ValueError):
    """One ConfigMap key Kyverno would reject; the key keeps its default."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


@dataclass(frozen=True)
class ResourceFilter:
    """One ``[Kind,Namespace,Name]`` entry of ``resourceFilters``; every part is a wildcard pattern."""

    group: str = ""
    version: str = ""
    kind: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    def matches(self, gvk: ResourceKind, namespace: str, name: str) -> bool:
        if not (
            wildcard_match(self.group, gvk.group)
            and wildcard_match(self.version, gvk.version)
            and wildcard_match(self.kind, gvk.kind)
            and wildcard_match(self.subresource, gvk.subresource)
        ):
            return False
        if wildcard_match(self.namespace, namespace) and wildcard_match(self.name, name):
            return True
        # a Namespace is filtered by the entry's namespace pattern applied to its name
        return gvk.group == "" and gvk.version == "v1" and gvk.kind == "Namespace" and wildcard_match(self.namespace, name)


@dataclass(frozen=True)
class Subjects:
    """Wildcard patterns for usernames, groups, Roles (``namespace:name``) and ClusterRoles."""

    usernames: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    cluster_roles: tuple[str, ...] = ()

    def matches(self, info: RequestInfo) -> bool:
        if any(wildcard_match(p, info.username) for p in self.usernames):
            return True
        pairs = ((self.groups, info.groups), (self.roles, info.roles), (self.cluster_roles, info.cluster_roles))
        return any(wildcard_match(p, value) for patterns, values in pairs for p in patterns for value in values)


@dataclass(frozen=True)
class WebhookSelectors:
    """``webhooks``: the label selectors put on every resource webhook (``None`` when not configured)."""

    namespace_selector: dict[str, Any] | None = None
    object_selector: dict[str, Any] | None = None


@dataclass(frozen=True)
class KyvernoConfig:
    """The parsed ConfigMap; ``KyvernoConfig()`` is Kyverno's configuration when the ConfigMap does not exist."""

    resource_filters: tuple[ResourceFilter, ...] = ()
    default_registry: str = DEFAULT_REGISTRY
    enable_default_registry_mutation: bool = True
    exclusions: Subjects = field(default_factory=Subjects)
    inclusions: Subjects = field(default_factory=Subjects)
    generate_success_events: bool = False
    success_event_actions: frozenset[str] = frozenset()
    webhook: WebhookSelectors = field(default_factory=WebhookSelectors)
    webhook_annotations: dict[str, str] | None = None
    webhook_labels: dict[str, str] | None = None
    match_conditions: tuple[dict[str, str], ...] | None = None
    update_request_threshold: int = DEFAULT_UPDATE_REQUEST_THRESHOLD
    max_context_size: int = DEFAULT_MAX_CONTEXT_SIZE
    errors: tuple[KyvernoConfigError, ...] = ()

    @property
    def needs_roles(self) -> bool:
        """Whether excluding a requester depends on their RBAC roles (costs an API lookup per user)."""
        return bool(self.exclusions.roles or self.exclusions.cluster_roles or self.inclusions.roles or self.inclusions.cluster_roles)

    def is_excluded(self, info: RequestInfo) -> bool:
        """Kyverno's ``IsExcluded``: an inclusion (``!pattern``) wins over any exclusion."""
        if self.inclusions.matches(info):
            return False
        return self.exclusions.matches(info)

    def is_filtered(self, gvk: ResourceKind, namespace: str, name: str) -> bool:
        """Kyverno's ``ToFilter``: whether ``resourceFilters`` names this resource (``gvk.subresource`` included)."""
        return any(f.matches(gvk, namespace, name) for f in self.resource_filters)

    def admission_skip_reason(self, gvk: ResourceKind, namespace: str, name: str, info: RequestInfo) -> str | None:
        """Why the admission webhook lets this request through without evaluating any policy, or ``None``.

        Kyverno answers such requests with an empty success before any policy runs."""
        if self.is_excluded(info):
            return "admission request filtered: requester excluded by configuration"
        if self.is_filtered(gvk, namespace, name):
            return "admission request filtered because it appears in configmap resource filters"
        return None

    def emits_success_event(self, action: str) -> bool:
        """Whether a success Event for ``action`` (e.g. ``Resource Passed``) is wanted."""
        if not self.generate_success_events:
            return False
        return not self.success_event_actions or action in self.success_event_actions


def parse_kyverno_config(data: dict[str, Any] | None) -> KyvernoConfig:
    """The configuration a ConfigMap's ``data`` produces; unparsable keys keep their defaults and are listed in
    ``errors``.  ``None`` (no ConfigMap) gives the defaults."""
    if not data:
        return KyvernoConfig()
    errors: list[KyvernoConfigError] = []
    values: dict[str, Any] = {}

    def text(key: str) -> str | None:
        value = data.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            errors.append(KyvernoConfigError(key, f"ConfigMap data values must be strings, got {type(value).__name__}"))
            return None
        return value

    def parse(key: str, target: str, parser: Any) -> None:
        value = text(key)
        if value is None:
            return
        try:
            values[target] = parser(value)
        except KyvernoConfigError as exc:
            errors.append(exc)

    filters_text = text("resourceFilters")
    if filters_text is not None:
        values["resource_filters"], filter_errors = parse_resource_filters(filters_text)
        errors.extend(filter_errors)
    parse("defaultRegistry", "default_registry", _parse_registry)
    parse("enableDefaultRegistryMutation", "enable_default_registry_mutation", lambda v: _parse_bool("enableDefaultRegistryMutation", v))
    exclusions: dict[str, tuple[str, ...]] = {}
    inclusions: dict[str, tuple[str, ...]] = {}
    for key, attribute in (("excludeUsernames", "usernames"), ("excludeGroups", "groups"), ("excludeRoles", "roles"), ("excludeClusterRoles", "cluster_roles")):
        value = text(key)
        if value is not None:
            exclusions[attribute], inclusions[attribute] = parse_exclusions(value)
    values["exclusions"] = Subjects(**exclusions)
    values["inclusions"] = Subjects(**inclusions)
    parse("generateSuccessEvents", "generate_success_events", lambda v: _parse_bool("generateSuccessEvents", v))
    parse("successEventActions", "success_event_actions", lambda v: frozenset(a.strip() for a in v.split(",") if a.strip()))
    parse("webhooks", "webhook", _parse_webhooks)
    parse("webhookAnnotations", "webhook_annotations", lambda v: _parse_string_map("webhookAnnotations", v))
    parse("webhookLabels", "webhook_labels", lambda v: _parse_string_map("webhookLabels", v))
    parse("matchConditions", "match_conditions", _parse_match_conditions)
    parse("updateRequestThreshold", "update_request_threshold", _parse_threshold)
    parse("maxContextSize", "max_context_size", _parse_max_context_size)
    return KyvernoConfig(**values, errors=tuple(errors))


def parse_resource_filters(text: str) -> tuple[tuple[ResourceFilter, ...], list[KyvernoConfigError]]:
    """``[Kind,Namespace,Name]`` entries anywhere in the text (Kyverno's chart joins them without separators).

    Kind takes the policy ``kinds`` forms (``Pod``, ``Pod/binding``, ``apps/v1/Deployment``); missing parts are
    empty, so ``[Node]`` filters only cluster-scoped objects with an empty name.  Parts are not trimmed, as in
    Kyverno: ``[Pod, default, *]`` names the namespace `` default``."""
    filters: list[ResourceFilter] = []
    errors: list[KyvernoConfigError] = []
    for entry in _FILTER_ENTRY.findall(text):
        parts = entry.split(",")
        if len(parts) > 3:
            errors.append(KyvernoConfigError("resourceFilters", f"entry [{entry}] has {len(parts)} parts; expected [Kind,Namespace,Name]"))
            continue
        kind, namespace, name = (parts + ["", ""])[:3]
        if not kind:
            filters.append(ResourceFilter())
            continue
        group, version, kind_name, subresource = parse_kind_selector(kind)
        filters.append(ResourceFilter(group, version, kind_name, subresource, namespace, name))
    return tuple(filters), errors


def parse_exclusions(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Comma-separated patterns → (excluded, included); ``!pattern`` includes, i.e. overrides the exclusions."""
    excluded: list[str] = []
    included: list[str] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("!"):
            item = item[1:].strip()
            if item:
                included.append(item)
        else:
            excluded.append(item)
    return tuple(excluded), tuple(included)


def _parse_bool(key: str, value: str) -> bool:
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise KyvernoConfigError(key, f"{value!r} is not a boolean")


def _parse_registry(value: str) -> str:
    host = value.split("/")[0]
    if not _is_dns_name(host):
        raise KyvernoConfigError("defaultRegistry", f"{host!r} is not a valid DNS hostname")
    return value


def _is_dns_name(host: str) -> bool:
    if not host or len(host.replace(".", "")) > 255 or _IPV4.match(host):
        return False
    return _DNS_NAME.match(host) is not None


def _json(key: str, value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as exc:
        raise KyvernoConfigError(key, f"invalid JSON: {exc}") from exc


def _parse_string_map(key: str, value: str) -> dict[str, str] | None:
    parsed = _json(key, value)
    if parsed is None:
        return None
    if not isinstance(parsed, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in parsed.items()):
        raise KyvernoConfigError(key, "expected a JSON object of string values")
    return dict(parsed)


def _parse_webhooks(value: str) -> WebhookSelectors:
    parsed = _json("webhooks", value)
    if parsed is None:
        return WebhookSelectors()
    if not isinstance(parsed, dict):
        raise KyvernoConfigError("webhooks", f"expected a JSON object with namespaceSelector/objectSelector, got {type(parsed).__name__}")
    return WebhookSelectors(
        namespace_selector=_label_selector("webhooks.namespaceSelector", parsed.get("namespaceSelector")),
        object_selector=_label_selector("webhooks.objectSelector", parsed.get("objectSelector")),
    )


def _label_selector(key: str, value: Any) -> dict[str, Any] | None:
    """A metav1.LabelSelector, checked for shape so the apiserver never receives a malformed webhook."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise KyvernoConfigError(key, "a label selector must be an object")
    unknown = set(value) - {"matchLabels", "matchExpressions"}
    if unknown:
        raise KyvernoConfigError(key, f"unknown field(s) {', '.join(sorted(unknown))}")
    labels = value.get("matchLabels")
    if labels is not None and not (isinstance(labels, dict) and all(isinstance(v, str) for v in labels.values())):
        raise KyvernoConfigError(key, "matchLabels must map label keys to strings")
    expressions = value.get("matchExpressions")
    if expressions is not None:
        if not isinstance(expressions, list):
            raise KyvernoConfigError(key, "matchExpressions must be a list")
        for index, expression in enumerate(expressions):
            where = f"{key}.matchExpressions[{index}]"
            if not isinstance(expression, dict) or not isinstance(expression.get("key"), str):
                raise KyvernoConfigError(where, "each expression needs a string key")
            if expression.get("operator") not in _SELECTOR_OPERATORS:
                raise KyvernoConfigError(where, f"operator must be one of {', '.join(_SELECTOR_OPERATORS)}")
            values = expression.get("values")
            if values is not None and not (isinstance(values, list) and all(isinstance(v, str) for v in values)):
                raise KyvernoConfigError(where, "values must be a list of strings")
    return dict(value)


def _parse_match_conditions(value: str) -> tuple[dict[str, str], ...] | None:
    parsed = _json("matchConditions", value)
    if parsed is None:
        return None
    if not isinstance(parsed, list):
        raise KyvernoConfigError("matchConditions", "expected a JSON list of {name, expression} objects")
    conditions: list[dict[str, str]] = []
    for index, condition in enumerate(parsed):
        if not isinstance(condition, dict) or not isinstance(condition.get("name"), str) or not isinstance(condition.get("expression"), str):
            raise KyvernoConfigError(f"matchConditions[{index}]", "each condition needs a string name and expression")
        conditions.append({"name": condition["name"], "expression": condition["expression"]})
    return tuple(conditions)


def _parse_threshold(value: str) -> int:
    if not _INTEGER.match(value):
        raise KyvernoConfigError("updateRequestThreshold", f"{value!r} is not an integer")
    return int(value)


def _parse_max_context_size(value: str) -> int:
    try:
        quantity = parse_quantity(value)
    except QuantityError as exc:
        raise KyvernoConfigError("maxContextSize", f"{value!r} is not a quantity (e.g. 2Mi, 100Mi or plain bytes)") from exc
    return math.ceil(quantity.value)
