"""What the engine reports: one RuleResponse per evaluated rule, grouped per policy and resource."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stockade.policy.model import KyvernoPolicy

PASS = "pass"
FAIL = "fail"
WARN = "warn"
ERROR = "error"
SKIP = "skip"
STATUSES = (PASS, FAIL, WARN, ERROR, SKIP)


@dataclass
class ImageCheck:
    """One image a verifyImages rule checked: answered from the verification cache or by the registry (then with
    the wall-clock start and duration of the registry round trips), and the digest it resolved to."""

    image: str
    digest: str
    source: str  # "cache" or "registry"
    status: str = PASS
    started_ns: int = 0
    duration_ns: int = 0
    http_calls: list[list[Any]] = field(default_factory=list)  # [method, url, status, started_ns, duration_ns]


@dataclass
class RuleResponse:
    """The outcome of one rule on one resource."""

    name: str
    rule_type: str
    status: str
    message: str = ""
    generated_resources: list[dict[str, Any]] = field(default_factory=list)
    patched_target: dict[str, Any] | None = None
    target_subresource: str = ""  # the patched target is written through this subresource (a ``Node/status`` target)
    exceptions: list[str] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    pod_security_checks: Any = None
    failure_action: str = "Audit"
    # for traces and ``explain`` (filled by the rule driver / verifyImages; never part of reports):
    started_ns: int = field(default=0, compare=False)  # wall clock (time.time_ns) when the rule started
    duration_ns: int = field(default=0, compare=False)
    image_checks: list[ImageCheck] = field(default_factory=list, compare=False)
    # Set on the ERROR a rule's preconditions raise: a foreach skips such an element instead of failing the rule.
    precondition_error: bool = False

    @property
    def is_failure(self) -> bool:
        return self.status in (FAIL, ERROR)


def rule_pass(name: str, rule_type: str, message: str = "", **extra: Any) -> RuleResponse:
    return RuleResponse(name, rule_type, PASS, message, **extra)


def rule_fail(name: str, rule_type: str, message: str, **extra: Any) -> RuleResponse:
    return RuleResponse(name, rule_type, FAIL, message, **extra)


def rule_skip(name: str, rule_type: str, message: str, **extra: Any) -> RuleResponse:
    return RuleResponse(name, rule_type, SKIP, message, **extra)


def rule_error(name: str, rule_type: str, message: str, error: Exception | str | None = None, **extra: Any) -> RuleResponse:
    text = f"{message}: {error}" if error not in (None, "") else message
    return RuleResponse(name, rule_type, ERROR, text, **extra)


@dataclass
class EngineResponse:
    """All rule responses of one policy for one resource, plus the resource before and after the policy ran."""

    policy: KyvernoPolicy | Any
    resource: dict[str, Any]
    patched_resource: dict[str, Any]
    rules: list[RuleResponse] = field(default_factory=list)
    namespace_labels: dict[str, str] = field(default_factory=dict)
    unmatched: list[tuple[str, list[str]]] = field(default_factory=list)  # (rule, why match/exclude did not select it)

    @property
    def policy_name(self) -> str:
        return str(getattr(self.policy, "name", ""))

    def is_empty(self) -> bool:
        return not self.rules

    def has_failures(self) -> bool:
        return any(rule.status in (FAIL, ERROR) for rule in self.rules)

    def failed_rules(self) -> list[RuleResponse]:
        return [rule for rule in self.rules if rule.status in (FAIL, ERROR)]


def report_result(response: EngineResponse, rule: RuleResponse, audit_warn: bool = False) -> str:
    """The PolicyReport result of a rule: a failure is a warning for unscored policies, or Audit ones with audit-warn."""
    if rule.status != FAIL:
        return rule.status
    annotations = getattr(response.policy, "annotations", {}) or {}
    if str(annotations.get("policies.kyverno.io/scored", "")) == "false":
        return WARN
    if audit_warn and rule.failure_action == "Audit":
        return WARN
    return FAIL
