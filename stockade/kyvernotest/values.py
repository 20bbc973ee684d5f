"""Values files (``kind: Values``) and user-info files (``kind: UserInfo``) of Kyverno CLI tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stockade.engine.match import RequestInfo
from stockade.policy.loader import LoadError, parse_yaml_documents, read_text, source_name


@dataclass(frozen=True)
class RuleValues:
    """One ``policies[].rules[]`` entry of a values file."""

    policy: str
    rule: str
    values: dict[str, Any]
    foreach_values: dict[str, list[Any]]

    def names(self) -> tuple[str, str, str]:
        """The rule names this entry answers for: the rule and the rules autogen derives from it."""
        return (self.rule, "autogen-" + self.rule, "autogen-cronjob-" + self.rule)


@dataclass
class Values:
    """User-supplied variable values: global, per policy/resource, per rule (incl. foreach), namespace labels."""

    global_values: dict[str, Any] = field(default_factory=dict)
    resource_values: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    rules: list[RuleValues] = field(default_factory=list)
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    namespaces: dict[str, dict[str, Any]] = field(default_factory=dict)
    subresources: list[dict[str, Any]] = field(default_factory=list)

    def for_resource(self, policy: str, resource: str) -> dict[str, Any]:
        values = dict(self.global_values)
        values.update(self.resource_values.get((policy, resource), {}))
        values.setdefault("request.operation", "CREATE")
        return values

    def has_policies(self) -> bool:
        return bool(self.rules or self.resource_values)

    def rule_entry(self, policy: str, rule: str) -> RuleValues | None:
        """The entry for a rule as Kyverno's CLI finds it: the first, in file order, naming the rule or the rule it was
        autogen'd from, so values for ``check`` reach ``autogen-check`` unless an earlier entry names it."""
        for entry in self.rules:
            if entry.policy == policy and rule in entry.names():
                return entry
        return None

    def values_for_rule(self, policy: str, rule: str) -> dict[str, Any] | None:
        entry = self.rule_entry(policy, rule)
        return entry.values if entry is not None else None

    def foreach_values_for_rule(self, policy: str, rule: str) -> dict[str, list[Any]] | None:
        entry = self.rule_entry(policy, rule)
        return entry.foreach_values if entry is not None else None


def _fold(data: dict[str, Any]) -> dict[str, Any]:
    return {str(k)[:1].lower() + str(k)[1:]: v for k, v in data.items()}


_OBJECT_META_FIELDS = (
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers", "managedFields",
)
_VALUES_FIELDS = ("apiVersion", "kind", "metadata", "globalValues", "policies", "namespaceSelector", "namespaces", "subresources")


def _check_fields(mapping: Any, known: tuple[str, ...], source: str, where: str) -> None:
    """Kyverno's CLI decodes values strictly: a misspelt key (``polices``, ``valuez``) stops the test rather than
    leaving the values out and the test evaluating something else."""
    if mapping is None:
        return
    if not isinstance(mapping, dict):
        raise LoadError(source, "expected a mapping", field=where or None)
    folded = {name.lower() for name in known}
    for key in mapping:
        if str(key).lower() not in folded:
            raise LoadError(source, f"unknown field {str(key)!r}", field=f"{where}.{key}" if where else str(key))


def values_from_mapping(data: dict[str, Any], source: str = "values", *, inline: bool = False) -> Values:
    """Values as Kyverno's CLI reads them: every known field, matched regardless of the case of its first letter;
    anything else is an error naming the field."""
    prefix = "values." if inline else ""
    _check_fields(data, _VALUES_FIELDS[3:] if inline else _VALUES_FIELDS, source, "values" if inline else "")
    data = _fold(data)
    _check_fields(data.get("metadata"), _OBJECT_META_FIELDS, source, prefix + "metadata")
    values = Values()
    values.global_values = dict(data.get("globalValues") or {})
    for index, raw_policy in enumerate(data.get("policies") or []):
        where = f"{prefix}policies[{index}]"
        _check_fields(raw_policy, ("name", "resources", "rules"), source, where)
        policy = _fold(raw_policy or {})
        name = str(policy.get("name", ""))
        for position, raw_rule in enumerate(policy.get("rules") or []):
            _check_fields(raw_rule, ("name", "values", "foreachValues"), source, f"{where}.rules[{position}]")
            rule = _fold(raw_rule or {})
            rule_values = rule.get("values") or {}
            foreach_values = rule.get("foreachValues") or {}
            if not isinstance(rule_values, dict) or not isinstance(foreach_values, dict):
                raise LoadError(source, "values and foreachValues must be mappings", field=f"{where}.rules[{position}]")
            values.rules.append(RuleValues(name, str(rule.get("name", "")), dict(rule_values), dict(foreach_values)))
        for position, raw_resource in enumerate(policy.get("resources") or []):
            _check_fields(raw_resource, ("name", "values"), source, f"{where}.resources[{position}]")
            resource = _fold(raw_resource or {})
            values.resource_values[(name, str(resource.get("name", "")))] = dict(resource.get("values") or {})
    for index, raw_selector in enumerate(data.get("namespaceSelector") or []):
        _check_fields(raw_selector, ("name", "labels"), source, f"{prefix}namespaceSelector[{index}]")
        selector = _fold(raw_selector or {})
        values.namespace_labels[str(selector.get("name", ""))] = {str(k): str(v) for k, v in (selector.get("labels") or {}).items()}
    for namespace in data.get("namespaces") or []:
        metadata = namespace.get("metadata") or {}
        name = str(metadata.get("name", ""))
        values.namespaces[name] = namespace
        values.namespace_labels[name] = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
    values.subresources = list(data.get("subresources") or [])
    return values


def load_values(path: str) -> Values:
    source = source_name(path)  # "-" is standard input
    documents = parse_yaml_documents(read_text(path), source)
    if not documents:
        return Values()
    if not isinstance(documents[0], dict):
        raise LoadError(source, "expected a mapping", 0)
    return values_from_mapping(documents[0], source)


def parse_set_values(pairs: list[str]) -> dict[str, Any]:
    """``--set a=b,c=d`` style values."""
    values: dict[str, Any] = {}
    for pair in pairs:
        for item in pair.split(","):
            if not item.strip():
                continue
            if "=" not in item:
                raise ValueError(f"invalid --set value {item!r}: expected key=value")
            key, value = item.split("=", 1)
            values[key.strip()] = value.strip()
    return values


def load_user_info(path: str) -> RequestInfo:
    documents = parse_yaml_documents(read_text(path), source_name(path))
    data = _fold(documents[0]) if documents and isinstance(documents[0], dict) else {}
    user = data.get("userInfo") or {}
    return RequestInfo(
        username=str(user.get("username", "")),
        uid=str(user.get("uid", "")),
        groups=tuple(str(g) for g in user.get("groups") or []),
        extra=dict(user.get("extra") or {}),
        roles=tuple(str(r) for r in data.get("roles") or []),
        cluster_roles=tuple(str(r) for r in data.get("clusterRoles") or []),
    )
