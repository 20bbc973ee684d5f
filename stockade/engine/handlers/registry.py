"""Rule handlers looked up by rule type, as Kyverno's ``pkg/engine`` does, instead of if-chains in the driver.

The registry is what lets a higher layer contribute a handler without the engine importing it: ``validate.cel``
rules need the CEL policy machinery (``stockade.celpolicy``, a layer above the engine), so that package registers
its handler here when it is imported.
"""

from __future__ import annotations

from stockade.errors import StockadeError
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stockade.engine.contextloader import ContextProviders
from stockade.engine.handlers.generate import ResourceLookup, generate_rule
from stockade.engine.handlers.mutate import mutate_resource_rule
from stockade.engine.handlers.mutate_existing import mutate_existing_rule
from stockade.engine.handlers.podsecurity import validate_pod_security_rule
from stockade.engine.handlers.validate import validate_resource_rule
from stockade.engine.handlers.validate_manifests import validate_manifests_rule
from stockade.engine.handlers.verify_images import VerificationRecord, validate_verified_images
from stockade.engine.policycontext import PolicyContext
from stockade.engine.response import RuleResponse
from stockade.policy.model import Rule

# Rule types with a handler each; a validate rule's type is the kind of check it carries.
MUTATE = "mutate"
MUTATE_EXISTING = "mutate.targets"
GENERATE = "generate"
VALIDATE_PATTERN = "validate"
VALIDATE_POD_SECURITY = "validate.podSecurity"
VALIDATE_MANIFESTS = "validate.manifests"
VALIDATE_CEL = "validate.cel"
VALIDATE_VERIFIED_IMAGES = "verifyImages.validate"


@dataclass(frozen=True)
class HandlerServices:
    """What handlers may use besides the policy context: the engine's providers of cluster data and, in the
    validate phase, the image verifications this process made during the mutate phase."""

    providers: ContextProviders = field(default_factory=ContextProviders)
    resource_lookup: ResourceLookup | None = None
    verification_record: VerificationRecord | None = None


HandlerResult = tuple[dict[str, Any], "RuleResponse | list[RuleResponse] | None"]
RuleHandler = Callable[[PolicyContext, Rule, dict[str, Any], HandlerServices], HandlerResult]


class UnknownRuleType(StockadeError, LookupError):
    """No handler is registered for a rule type (e.g. ``validate.cel`` when ``stockade.celpolicy`` is not loaded)."""

    def __init__(self, rule_type: str) -> None:
        super().__init__(f"no handler registered for {rule_type} rules")
        self.rule_type = rule_type


class HandlerRegistry:
    """Rule type -> handler."""

    def __init__(self, handlers: Mapping[str, RuleHandler] | None = None) -> None:
        self._handlers: dict[str, RuleHandler] = dict(handlers or {})

    def register(self, rule_type: str, handler: RuleHandler) -> None:
        self._handlers[rule_type] = handler

    def handler_or_none(self, rule_type: str) -> RuleHandler | None:
        return self._handlers.get(rule_type)

    def handler(self, rule_type: str) -> RuleHandler:
        found = self._handlers.get(rule_type)
        if found is None:
            raise UnknownRuleType(rule_type)
        return found

    def copy(self) -> HandlerRegistry:
        return HandlerRegistry(self._handlers)


def mutate_type(rule: Rule) -> str:
    return MUTATE_EXISTING if rule.has_mutate_existing() else MUTATE


def validate_type(rule: Rule) -> str:
    """Which validate handler a rule needs; a verifyImages rule without ``validate`` checks the recorded results."""
    if rule.has_verify_images() and not rule.has_validate():
        return VALIDATE_VERIFIED_IMAGES
    validate = rule.validate or {}
    if validate.get("podSecurity") is not None:
        return VALIDATE_POD_SECURITY
    if validate.get("manifests") is not None:
        return VALIDATE_MANIFESTS
    if validate.get("cel") is not None:
        return VALIDATE_CEL
    return VALIDATE_PATTERN


def _mutate(pctx: PolicyContext, rule: Rule, resource: dict[str, Any], services: HandlerServices) -> HandlerResult:
    return mutate_resource_rule(pctx, rule, resource)


def _mutate_existing(pctx: PolicyContext, rule: Rule, resource: dict[str, Any], services: HandlerServices) -> HandlerResult:
    return resource, mutate_existing_rule(pctx, rule, services.resource_lookup)


def _generate(pctx: PolicyContext, rule: Rule, resource: dict[str, Any], services: HandlerServices) -> HandlerResult:
    return resource, generate_rule(pctx, rule, services.resource_lookup)


def _validate_pattern(pctx: PolicyContext, rule: Rule, resource: dict[str, Any], services: HandlerServices) -> HandlerResult:
    return resource, validate_resource_rule(pctx, rule)


def _validate_pod_security(pctx: PolicyContext, rule: Rule, resource: dict[str, Any], services: HandlerServices) -> HandlerResult:
    return resource, validate_pod_security_rule(pctx, rule)


def _validate_manifests(pctx: PolicyContext, rule: Rule, resource: dict[str, Any], services: HandlerServices) -> HandlerResult:
    return resource, validate_manifests_rule(pctx, rule)


def _validate_verified_images(pctx: PolicyContext, rule: Rule, resource: dict[str, Any], services: HandlerServices) -> HandlerResult:
    # Trust only what this process verified, never an annotation found on the object.
    record = services.verification_record if services.verification_record is not None else VerificationRecord()
    return resource, validate_verified_images(pctx, rule, record)


# The handlers every engine has; ``stockade.celpolicy`` adds VALIDATE_CEL when imported.
DEFAULT_HANDLERS = HandlerRegistry(
    {
        MUTATE: _mutate,
        MUTATE_EXISTING: _mutate_existing,
        GENERATE: _generate,
        VALIDATE_PATTERN: _validate_pattern,
        VALIDATE_POD_SECURITY: _validate_pod_security,
        VALIDATE_MANIFESTS: _validate_manifests,
        VALIDATE_VERIFIED_IMAGES: _validate_verified_images,
    }
)
