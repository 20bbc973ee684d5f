"""Values files (``kind: Values``) and user-info files (``kind: UserInfo``) of Kyverno CLI tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stockade.engine.match import RequestInfo
from stockade.policy.loader import LoadError, parse_yaml_documents, read_text


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


def values_from_mapping(data: dict[str, Any], source: str = "values") -> Values:
    data = _fold(data)
    values = Values()
    values.global_values = dict(data.get("globalValues") or {})
    for index, policy in enumerate(data.get("policies") or []):
        if not isinstance(policy, dict):
            raise LoadError(source, "expected a mapping", field=f"policies[{index}]")
        name = str(policy.get("name", ""))
        for position, rule in enumerate(policy.get("rules") or []):
            if not isinstance(rule, dict):
                raise LoadError(source, "expected a mapping", field=f"policies[{index}].rules[{position}]")
            rule_values = rule.get("values") or {}
            foreach_values = rule.get("foreachValues") or {}
            if not isinstance(rule_values, dict) or not isinstance(foreach_values, dict):
                raise LoadError(source, "values and foreachValues must be mappings", field=f"policies[{index}].rules[{position}]")
            values.rules.append(RuleValues(name, str(rule.get("name", "")), dict(rule_values), dict(foreach_values)))
        for resource in policy.get("resources") or []:
            values.resource_values[(name, str(resource.get("name", "")))] = dict(resource.get("values") or {})
    for selector in data.get("namespaceSelector") or []:
        values.namespace_labels[str(selector.get("name", ""))] = {str(k): str(v) for k, v in (selector.get("labels") or {}).items()}
    for namespace in data.get("namespaces") or []:
        metadata = namespace.get("metadata") or {}
        name = str(metadata.get("name", ""))
        values.namespaces[name] = namespace
        values.namespace_labels[name] = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
    values.subresources = list(data.get("subresources") or [])
    return values


def load_values(path: str) -> Values:
    documents = parse_yaml_documents(read_text(path), path)
    if not documents:
        return Values()
    if not isinstance(documents[0], dict):
        raise LoadError(path, "expected a mapping", 0)
    return values_from_mapping(documents[0], path)


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
    documents = parse_yaml_documents(read_text(path), path)
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
