"""``validate`` rules: pattern, anyPattern, deny and foreach, with Kyverno's messages."""

from __future__ import annotations

from typing import Any

from stockade.engine.context import ContextError
from stockade.engine.contextloader import ContextLoadError
from stockade.engine.handlers.existing import skip_if_pre_existing
from stockade.engine.pattern import validate_pattern
from stockade.engine.policycontext import PolicyContext
from stockade.engine.preconditions import ConditionEvaluationError, evaluate_conditions
from stockade.engine.response import ERROR, FAIL, PASS, SKIP, RuleResponse, rule_error, rule_fail, rule_pass, rule_skip
from stockade.engine.variables import SubstitutionError, has_variables, substitute_all
from stockade.gofmt import go_type_name
from stockade.identitymemo import IdentityMemo
from stockade.jmespath import JMESPathError, UnknownKeyError
from stockade.policy.model import RULE_TYPE_VALIDATION, Rule

VALIDATION = RULE_TYPE_VALIDATION


def evaluate_list(expression: str, pctx: PolicyContext) -> list[Any]:
    """A foreach ``list`` as a list: non-list results become a one-element list, as in Kyverno."""
    value = pctx.json_context.query(expression)
    if isinstance(value, list):
        return value
    return [value]


def add_element(pctx: PolicyContext, element: Any, index: int, nesting: int, element_scope: bool | None) -> None:
    pctx.json_context.set_many({"element": element, "elementIndex": index, f"element{nesting}": element, f"elementIndex{nesting}": index})
    scoped = isinstance(element, dict)
    if element_scope is not None:
        if element_scope and not isinstance(element, dict):
            raise ValueError(
                "cannot use elementScope=true foreach rules for elements that are not maps, "
                f"expected type=map got type={go_type_name(element, numbers_are_floats=True)}"
            )
        scoped = element_scope
    pctx.element = element if scoped else None


class Validator:
    """Evaluates one validate block (the rule's, or a foreach level's)."""

    def __init__(
        self,
        pctx: PolicyContext,
        rule: Rule,
        block: dict[str, Any],
        *,
        nesting: int = 0,
        context_entries: list[dict[str, Any]] | None = None,
        conditions: Any = None,
        foreach_index: int | None = None,
    ) -> None:
        self.pctx = pctx
        self.rule = rule
        self.block = block
        self.nesting = nesting
        self.context_entries = context_entries or []
        self.conditions = conditions
        self.foreach_index = foreach_index

    @property
    def message_template(self) -> str:
        return str((self.rule.validate or {}).get("message") or "")

    def validate(self) -> RuleResponse | None:
        pctx = self.pctx
        name = self.rule.name
        if self.nesting > 0:
            if self.context_entries or pctx.context_loader.has_values:
                try:
                    pctx.context_loader.load(
                        self.context_entries, pctx.json_context, name, foreach_index=self.foreach_index, is_delete=pctx.is_delete
                    )
                except (ContextLoadError, JMESPathError, ContextError, SubstitutionError) as exc:
                    return rule_error(name, VALIDATION, "failed to load context", exc)
            if self.conditions is not None:
                try:
                    ok, message = evaluate_conditions(self.conditions, pctx.json_context, is_delete=pctx.is_delete)
                except ConditionEvaluationError as exc:
                    return rule_error(name, VALIDATION, "failed to evaluate preconditions", exc, precondition_error=True)
                if not ok:
                    return rule_skip(name, VALIDATION, "; ".join(m for m in ("preconditions not met", message) if m))
        if self.block.get("deny") is not None:
            return self._validate_deny()
        if self.block.get("pattern") is not None or self.block.get("anyPattern") is not None:
            return self._validate_patterns()
        if self.block.get("foreach"):
            return self._validate_foreach()
        return None

    # -- deny -----------------------------------------------------------------------------------------------------
    def _validate_deny(self) -> RuleResponse:
        deny = self.block.get("deny") or {}
        conditions = deny.get("conditions") if isinstance(deny, dict) else None
        try:
            denied, message = evaluate_conditions(conditions, self.pctx.json_context, is_delete=self.pctx.is_delete) if conditions is not None else (True, "")
        except ConditionEvaluationError as exc:
            return rule_error(self.rule.name, VALIDATION, "failed to check deny conditions", exc)
        if not denied:
            return rule_pass(self.rule.name, VALIDATION, f"validation rule '{self.rule.name}' passed.")
        return rule_fail(self.rule.name, VALIDATION, self._deny_message(message))

    def _deny_message(self, condition_message: str) -> str:
        template = self.message_template
        if not template and not condition_message:
            return f"validation error: rule {self.rule.name} failed"
        text = "; ".join(m for m in (template, condition_message) if m)
        try:
            value = substitute_all(text, self.pctx.json_context, is_delete=self.pctx.is_delete)
        except SubstitutionError:
            return condition_message
        if isinstance(value, str):
            return value
        return "the produced message didn't resolve to a string, check your policy definition."

    # -- pattern / anyPattern ---------------------------------------------------------------------------------------
    def _substituted(self, key: str) -> Any:
        return substitute_all(self.block[key], self.pctx.json_context, is_delete=self.pctx.is_delete)

    def _target(self) -> dict[str, Any] | None:
        if self.pctx.element is not None:
            return self.pctx.element
        if self.pctx.is_delete:
            return None
        return self.pctx.new_resource

    def _validate_patterns(self) -> RuleResponse | None:
        key = "pattern" if self.block.get("pattern") is not None else "anyPattern"
        try:
            pattern = self._substituted(key)
        except SubstitutionError as exc:
            return rule_error(self.rule.name, VALIDATION, "variable substitution failed", exc)
        # nothing was substituted: the pattern is the policy's own object, so its compiled tree can be kept
        return self.check_patterns(key, pattern, pattern is self.block[key])

    def check_patterns(self, key: str, pattern: Any, policy_owned: bool) -> RuleResponse | None:
        """The block's ``pattern`` or ``anyPattern`` (``key``), its variables already substituted, against the
        target; None when there is no target (a DELETE outside foreach)."""
        name = self.rule.name
        resource = self._target()
        if resource is None:
            return None
        if key == "pattern":
            failure = validate_pattern(resource, pattern, policy_owned=policy_owned)
            if failure is None:
                return rule_pass(name, VALIDATION, f"validation rule '{name}' passed.")
            if failure.skip:
                return rule_skip(name, VALIDATION, failure.message)
            if not failure.path:
                return RuleResponse(name, VALIDATION, ERROR, self._error_message(failure.message, ""))
            return rule_fail(name, VALIDATION, self._error_message(failure.message, failure.path))
        if not isinstance(pattern, list):
            return rule_error(name, VALIDATION, "failed to deserialize anyPattern, expected type array")
        failed: list[str] = []
        skipped: list[str] = []
        for index, candidate in enumerate(pattern):
            failure = validate_pattern(resource, candidate, policy_owned=policy_owned)
            if failure is None:
                return rule_pass(name, VALIDATION, f"validation rule '{name}' anyPattern[{index}] passed.")
            if failure.skip:
                skipped.append(f"rule {name}[{index}] skipped: {failure.message}")
            elif not failure.path:
                failed.append(f"rule {name}[{index}] failed: {failure.message}")
            else:
                failed.append(f"rule {name}[{index}] failed at path {failure.path}")
        if skipped and not failed:
            return rule_skip(name, VALIDATION, " ".join(skipped))
        if failed:
            return rule_fail(name, VALIDATION, self._any_pattern_message(failed))
        return rule_pass(name, VALIDATION, self.message_template)

    def _resolved_message(self) -> str | None:
        try:
            value = substitute_all(self.message_template, self.pctx.json_context, is_delete=self.pctx.is_delete)
        except SubstitutionError:
            return None
        return value if isinstance(value, str) else str(value)

    def _error_message(self, error: str, path: str) -> str:
        name = self.rule.name
        if not self.message_template:
            if path:
                return f"validation error: rule {name} failed at path {path}"
            return f"validation error: rule {name} execution error: {error}"
        message = self._resolved_message()
        if message is None:
            return f"validation error: variables substitution error in rule {name} execution error: {error}"
        if not message.endswith("."):
            message += "."
        if path:
            return f"validation error: {message} rule {name} failed at path {path}"
        return f"validation error: {message} rule {name} execution error: {error}"

    def _any_pattern_message(self, errors: list[str]) -> str:
        joined = " ".join(errors)
        if not self.message_template:
            return f"validation error: {joined}"
        message = self._resolved_message()
        if message is None:
            return f"validation error: variables substitution error in rule {self.rule.name} execution error: {joined}"
        if message.endswith("."):
            return f"validation error: {message} {joined}"
        return f"validation error: {message}. {joined}"

    # -- foreach ----------------------------------------------------------------------------------------------------
    def _validate_foreach(self) -> RuleResponse | None:
        apply_count = 0
        list_error: Exception | None = None
        for foreach in self.block.get("foreach") or []:
            try:
                elements = evaluate_list(str(foreach.get("list", "")), self.pctx)
            except (JMESPathError, ContextError) as exc:
                if isinstance(exc, UnknownKeyError):
                    continue
                list_error = exc
                continue
            response, count = self._validate_elements(foreach, elements)
            if response.status != PASS:
                return response
            apply_count += count
        if apply_count == 0:
            if list_error is not None:
                return rule_error(self.rule.name, VALIDATION, "failed to evaluate list", list_error)
            return None
        return rule_pass(self.rule.name, VALIDATION, "rule passed")

    def _validate_elements(self, foreach: dict[str, Any], elements: list[Any]) -> tuple[RuleResponse, int]:
        pctx = self.pctx
        ctx = pctx.json_context
        saved_element = pctx.element
        ctx.checkpoint()
        apply_count = 0
        element_scope = foreach.get("elementScope")
        # one validator for every element: only the element's index differs
        nested = Validator(
            pctx,
            self.rule,
            _foreach_block(foreach),
            nesting=self.nesting + 1,
            context_entries=foreach.get("context"),
            conditions=foreach.get("preconditions"),
        )
        try:
            for index, element in enumerate(elements):
                if element is None:
                    continue
                ctx.restore()
                try:
                    add_element(pctx, element, index, self.nesting, element_scope)
                except ValueError as exc:
                    return rule_error(self.rule.name, VALIDATION, "failed to process foreach", exc), apply_count
                nested.foreach_index = index
                response = nested.validate()
                pctx.element = saved_element
                if response is None or response.status == SKIP:
                    continue
                if response.status != PASS:
                    if response.precondition_error:
                        continue
                    return RuleResponse(self.rule.name, VALIDATION, response.status, f"validation failure: {response.message}"), apply_count
                apply_count += 1
        finally:
            ctx.reset()
            pctx.element = saved_element
        return rule_pass(self.rule.name, VALIDATION, ""), apply_count


_FOREACH_BLOCKS: IdentityMemo[dict[str, Any], dict[str, Any]] = IdentityMemo(50_000)


def _foreach_block(foreach: dict[str, Any]) -> dict[str, Any]:
    """The validate block one foreach level runs per element; built once per foreach entry (held by identity)."""
    return _FOREACH_BLOCKS.get(foreach, _build_foreach_block)


def _build_foreach_block(foreach: dict[str, Any]) -> dict[str, Any]:
    block: dict[str, Any] = {}
    for key in ("pattern", "anyPattern", "deny"):
        if foreach.get(key) is not None:
            block[key] = foreach[key]
    if foreach.get("foreach"):
        block["foreach"] = foreach["foreach"]
    return block


def validate_resource_rule(pctx: PolicyContext, rule: Rule) -> RuleResponse | None:
    """The standard validate handler (pattern/anyPattern/deny/foreach); on UPDATE an Enforce failure the old
    object shares is skipped (``allowExistingViolations``)."""
    validate = rule.validate or {}
    response = Validator(pctx, rule, validate).validate()
    return skip_if_pre_existing(pctx, rule, response, lambda old: Validator(old, rule, validate).validate())


def static_pattern_key(rule: Rule) -> str | None:
    """``"pattern"`` or ``"anyPattern"`` when the rule is a pattern check of the resource alone, else None: a
    validate block whose only check is that pattern (no deny, podSecurity, manifests or cel, which take precedence
    or another handler), no variables in it, and no context entries, preconditions or reportProperties on the rule.
    Such a rule needs nothing of the JSON context, so the rule driver runs it through
    ``validate_static_pattern_rule``, worked out once per rule instead of on every review."""
    raw = rule.raw
    validate = raw.get("validate")
    if not validate or not isinstance(validate, dict):
        return None
    if raw.get("context") or raw.get("preconditions") is not None or raw.get("reportProperties"):
        return None
    if any(validate.get(check) is not None for check in ("deny", "podSecurity", "manifests", "cel")):
        return None
    key = "pattern" if validate.get("pattern") is not None else "anyPattern" if validate.get("anyPattern") is not None else None
    if key is None or has_variables(validate[key]):
        return None
    return key


def validate_static_pattern_rule(pctx: PolicyContext, rule: Rule, key: str) -> RuleResponse | None:
    """``validate_resource_rule`` for a rule ``static_pattern_key`` picked (``key`` is its answer): the same result,
    without the generic steps that cannot change anything for it (substitution, handler dispatch)."""
    validate = rule.raw["validate"]
    response = Validator(pctx, rule, validate).check_patterns(key, validate[key], True)
    if response is None or response.status != FAIL:
        return response
    return skip_if_pre_existing(pctx, rule, response, lambda old: Validator(old, rule, validate).validate())
