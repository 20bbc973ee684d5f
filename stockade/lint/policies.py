"""Static checks of policy documents: what an admission-time policy validator rejects before a policy is stored.

Pure (no I/O, no server imports) so the webhook's ``/policyvalidate`` endpoint and a CLI can share it.  Every
problem names the field path (``spec.rules[0].validate.pattern``) and, for rule fields, the rule, because the
author reads the message in the ``kubectl apply`` output and has to find the spot to fix.

The checks target the mistakes that otherwise surface only at evaluation time, per request: malformed ``{{ }}``
variables and JMESPath, CEL that does not compile, unknown condition operators, rules with no or several rule
types, malformed anchors, and out-of-range webhook settings.  Anything the CRD schema already rejects is left to
the apiserver.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from stockade import yamlsafe
from stockade.cel import DEFAULT_LIBRARIES, IMAGE_VALIDATING_LIBRARIES, CelEnvironment
from stockade.cel.cost import STATIC_ESTIMATED_COST_LIMIT, CelCostParseError, Form, estimate_cost, format_budget_error
from stockade.cel.rewrite import uses_identifier
from stockade.celpolicy.compiler import POLICY_VARIABLES, PolicyCompiler
from stockade.celpolicy.errors import PolicyCompileError
from stockade.engine.conditions import CONDITION_OPERATORS
from stockade.engine.pattern.anchors import parse_anchor
from stockade.engine.podsecurity import validate_excludes
from stockade.engine.variables import VARIABLE_RE
from stockade.jmespath import JMESPathError, compile_expression, function_names
from stockade.lint import generate as generate_checks
from stockade.lint import kyverno_rules, kyverno_warnings
from stockade.lint.allowed_variables import policy_variable_problems
from stockade.policy.model import ADMISSION_GROUP, CEL_POLICY_GROUP, CEL_POLICY_KINDS, KYVERNO_GROUP, api_group


MAX_RULE_NAME_LENGTH = 63
MIN_TIMEOUT_SECONDS = 1
MAX_TIMEOUT_SECONDS = 30
FAILURE_POLICIES = ("Fail", "Ignore")
FAILURE_ACTIONS = ("Enforce", "Audit", "enforce", "audit")
RULE_TYPES = ("validate", "mutate", "generate", "verifyImages")
VALIDATE_TYPES = ("pattern", "anyPattern", "deny", "foreach", "podSecurity", "cel", "manifests", "assert")
MUTATE_TYPES = ("patchStrategicMerge", "patchesJson6902", "foreach")
JSON_PATCH_OPERATIONS = ("add", "remove", "replace", "move", "copy", "test")
CONTEXT_SOURCES = ("configMap", "apiCall", "imageRegistry", "variable", "globalReference")
# Names the engine fills itself: a context entry with one of these names would shadow it.
# Names Kyverno's policy validation reserves for context entries (the name itself or a dotted path under it); others
# such as ``image`` or ``target`` are free to use.
RESERVED_CONTEXT_NAMES = ("images", "request", "serviceAccountName", "serviceAccountNamespace", "element", "elementIndex")
CEL_EXPRESSION_KEYS = ("expression", "messageExpression", "valueExpression")
VALIDATION_ACTIONS = ("Deny", "Warn", "Audit")
# Kyverno's refusal of an operator it does not list (its list printed the Go way, sorted here for a stable text)
INVALID_OPERATOR = f"entered value of `operator` is invalid. valid values: {kyverno_warnings.go_quoted(sorted(CONDITION_OPERATORS))}; found"
ANCHOR_PREFIXES = ("(", "X(", "+(", "<(", "=(", "^(")
IMAGE_POLICY_VARIABLES = ("images", "attestors", "attestations")
# Variables a background scan cannot fill (no requester): Kyverno rejects them in background policies.  The
# leading [^.] keeps ``request.object.spec.serviceAccountName`` allowed; \b ends the name (ASCII, as in Go).
BACKGROUND_FORBIDDEN_VARIABLES = (
    re.compile(r"[^\.](serviceAccountName)\b", re.ASCII),
    re.compile(r"[^\.](serviceAccountNamespace)\b", re.ASCII),
    re.compile(r"[^\.](request\.userInfo)\b", re.ASCII),
    re.compile(r"[^\.](request\.roles)\b", re.ASCII),
    re.compile(r"[^\.](request\.clusterRoles)\b", re.ASCII),
)
BACKGROUND_VARIABLES_PREFIX = (
    "only select variables are allowed in background mode. Set spec.background=false to disable background mode for this policy rule: "
)
USER_FILTER_FIELDS = ("roles", "clusterRoles", "subjects")
SUBJECT_KINDS = ("User", "Group", "ServiceAccount")  # rbac/v1 Subject kinds, the only ones a request can carry
KIND_REQUIRED = "at least one element must be specified in a kind block, the kind attribute is mandatory when working with the resources element"
WILDCARD_METADATA_ONLY = "policy can only deal with the metadata field of the resource if the rule does not match any kind"
# deny keys a `*` rule may use besides request.object.metadata.*: request data other than the object's spec
WILDCARD_ALLOWED_VARIABLES = re.compile(r"\{\{\s*(request\.|serviceAccountName|serviceAccountNamespace)[^{}]*\}\}")
# Kubernetes' own CEL policy kinds; only their expressions are checked (the apiserver validates the rest).
ADMISSION_POLICY_KINDS_CHECKED = ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy")


@dataclass(frozen=True)
class PolicyProblem:
    """One reason a policy is invalid; ``path`` is the field as written in the document."""

    path: str
    message: str
    rule: str = ""
    # set for problems that guard the admission path rather than mirror Kyverno (see ADMISSION_SAFETY)
    safety: bool = False
    # set for checks Kyverno makes only in its policy webhook, not in its CLI (see WEBHOOK_ONLY)
    webhook_only: bool = False

    def __str__(self) -> str:
        where = f'rule "{self.rule}": ' if self.rule else ""
        return f"{where}{self.path}: {self.message}"


@dataclass
class ValidationResult:
    """Errors reject the policy; warnings are shown to the author but let it through."""

    kind: str
    name: str
    errors: list[PolicyProblem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # Kyverno answers some CEL policy problems with the bare field error (no header), which it also sends as a warning
    bare: bool = False

    @property
    def ok(self) -> bool:
        return not self.errors

    def message(self) -> str:
        """One line per problem under a header naming the policy, as ``kubectl apply`` prints it."""
        header = f'{self.kind} "{self.name}" is invalid'
        if not self.errors:
            return ""
        if self.bare:
            return "; ".join(str(problem) for problem in self.errors)
        if len(self.errors) == 1:
            return f"{header}: {self.errors[0]}"
        return header + ":\n" + "\n".join(f"- {problem}" for problem in self.errors)


# Kyverno refuses cluster-wide data sources in namespaced Validating/Mutating/Generating/Deleting policies: a
# namespace's policy author must not read other namespaces' data through them.
_NAMESPACE_RESTRICTED_KINDS = frozenset(
    prefix + base for prefix in ("", "Namespaced") for base in ("ValidatingPolicy", "MutatingPolicy", "GeneratingPolicy", "DeletingPolicy")
)
_NAMESPACE_RESTRICTED_LIBRARIES = ("globalContext", "http")
CLEANUP_POLICY_KINDS = ("CleanupPolicy", "ClusterCleanupPolicy")
# Kyverno's cleanup controller loads no ConfigMap or image data, and a scheduled run has no requesting user.
_CLEANUP_FORBIDDEN_CONTEXT = {"configMap": "ConfigMap", "imageRegistry": "ImageRegistry"}
_USER_INFO_FIELDS = ("subjects", "roles", "clusterRoles")


def is_policy_document(document: dict[str, Any]) -> bool:
    """Whether ``validate_policy_document`` knows this kind (kyverno.io and policies.kyverno.io policy kinds)."""
    group = api_group(str(document.get("apiVersion", "")))
    kind = str(document.get("kind", ""))
    if group == KYVERNO_GROUP:
        return kind in ("ClusterPolicy", "Policy", "PolicyException", "GlobalContextEntry", *CLEANUP_POLICY_KINDS)
    if group == ADMISSION_GROUP:
        return kind in ADMISSION_POLICY_KINDS_CHECKED
    return group == CEL_POLICY_GROUP and (kind in CEL_POLICY_KINDS or kind == "PolicyException")


def validate_policy_document(document: dict[str, Any], old: dict[str, Any] | None = None, allow_namespaced_http: bool = False) -> ValidationResult:
    """Check one policy document; unknown kinds pass (the webhook is only registered for policy kinds).  ``old`` is
    the version an update replaces: Kyverno refuses changes to the immutable parts of generate rules.
    ``allow_namespaced_http``: Kyverno's --allowHTTPInNamespacedPolicies, namespaced CEL policies may use ``http.*``."""
    metadata = document.get("metadata")
    if not isinstance(metadata, dict):
        metadata = {}
    kind = str(document.get("kind", ""))
    result = ValidationResult(kind, str(metadata.get("name") or metadata.get("generateName") or ""))
    spec = document.get("spec")
    if not is_policy_document(document):
        return result
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        result.errors.append(PolicyProblem("spec", f"must be a mapping, found {type(spec).__name__}"))
        return result
    group = api_group(str(document.get("apiVersion", "")))
    checker = _Checker(result)
    if group == KYVERNO_GROUP and kind in ("ClusterPolicy", "Policy"):
        checker.kyverno_policy(kind, metadata, spec)
        if not checker.requester_variables_refused:  # Kyverno's ValidateVariables stops at the first of its two checks
            for path, message in policy_variable_problems(spec):
                checker.error(path, message)
        for path, message in generate_checks.static_problems(document):
            checker.error(path, message)
        findings, warnings = kyverno_rules.policy_problems(document)
        checker.findings(findings)
        result.warnings.extend(kyverno_warnings.policy_warnings(document))
        result.warnings.extend(warnings)
        if old and result.ok:
            warning, error = generate_checks.update_problem(document, old)
            if warning:
                result.warnings.append(warning)
            if error:
                checker.error("spec.rules", error)
    elif group == KYVERNO_GROUP and kind in CLEANUP_POLICY_KINDS:
        checker.cleanup_policy(spec)
        checker.findings(kyverno_rules.cleanup_problems(document))
    elif group == KYVERNO_GROUP and kind == "GlobalContextEntry":
        checker.findings(kyverno_rules.global_context_problems(document))
    elif group == KYVERNO_GROUP:
        checker.kyverno_exception(spec)
        checker.findings(kyverno_rules.exception_problems(document))
    elif group == ADMISSION_GROUP:
        checker.policy_variable_sizes(spec.get("variables"), ())
        checker.cel_expressions(spec, "spec")
    else:
        checker.cel_policy(kind, spec)
        if kind == "PolicyException":
            checker.findings(kyverno_rules.cel_exception_problems(document))
        elif not result.bare:
            checker.findings(kyverno_rules.cel_policy_problems(kind, document))
        if kind in _NAMESPACE_RESTRICTED_KINDS and (kind.startswith("Namespaced") or metadata.get("namespace")):
            checker.namespaced_cel_libraries(spec, allow_http=allow_namespaced_http)
    return result


# --------------------------------------------------------------------------------------------------------------
# helpers


def _walk_expressions(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(path, text) for every CEL expression string (``expression``, ``messageExpression``, ...) below ``value``."""
    if isinstance(value, dict):
        for key, item in value.items():
            child = f"{path}.{key}"
            if key in CEL_EXPRESSION_KEYS and isinstance(item, str):
                yield child, item
            else:
                yield from _walk_expressions(item, child)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk_expressions(item, f"{path}[{index}]")


def _walk_strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(path, text) for every string value and key in a document, paths in Kubernetes field notation."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            child = f"{path}.{key}" if path else str(key)
            if isinstance(key, str):
                yield child, key
            yield from _walk_strings(item, child)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk_strings(item, f"{path}[{index}]")


def variables_in(text: str) -> list[str]:
    """The JMESPath expressions of the ``{{ }}`` variables in a string (escaped ``\\{{`` ignored)."""
    if "{{" not in text:
        return []

    return [match.group(2)[2:-2].strip() for match in VARIABLE_RE.finditer(text)]


def jmespath_problem(expression: str) -> str:
    """Why a JMESPath expression (Kyverno dialect) cannot be used, or "" when it parses and its functions exist."""
    reason = jmespath_error(expression)
    return f"invalid JMESPath {expression!r}: {reason}" if reason else ""


def jmespath_error(expression: str) -> str:
    """The parser's reason alone (``jmespath_problem`` without the expression), or ""."""
    try:
        compile_expression(expression)
    except JMESPathError as error:
        return str(error)
    except Exception as error:  # the parser must never take admission down; report instead
        return str(error)
    unknown = sorted(set(_function_names(expression)) - set(function_names()))
    if unknown:
        return f"unknown function: {', '.join(unknown)}()"
    return ""


def _function_names(expression: str) -> list[str]:
    """Function names called in an expression, from the reference parser's AST (grammar is the same)."""
    try:
        from jmespath.parser import Parser

        tree = Parser().parse(expression).parsed
    except Exception:  # the dialect accepts something the reference parser does not: skip the function check
        return []
    names: list[str] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") == "function_expression":
                names.append(str(node.get("value")))
            stack.extend(node.get("children") or [])
            if isinstance(node.get("value"), dict):
                stack.append(node["value"])
    return names


_compilers: dict[tuple[tuple[str, ...], tuple[str, ...]], Any] = {}


def cel_problem(expression: str, field_path: str, extra_variables: tuple[str, ...] = (), libraries: tuple[str, ...] = ()) -> str:
    """Why a CEL expression does not compile in the policy environment (``libraries``: instead of the default
    ones), or ""."""

    compiler = _compilers.get((extra_variables, libraries))
    if compiler is None:

        if extra_variables or libraries:
            compiler = PolicyCompiler(CelEnvironment(POLICY_VARIABLES + extra_variables, libraries or DEFAULT_LIBRARIES))
        else:
            compiler = PolicyCompiler()
        _compilers[(extra_variables, libraries)] = compiler
    try:
        compiler.compile("validation", field_path, expression)
    except PolicyCompileError as error:
        message = error.error.message
        if error.error.line is not None and error.error.column is not None:
            message += f" at line {error.error.line}, column {error.error.column}"
        return f"CEL expression {expression!r} does not compile: {message}"
    except Exception as error:
        return f"CEL expression {expression!r} does not compile: {error}"
    return ""


def cel_cost_problem(
    expression: str, extra_variables: tuple[str, ...] = (), variable_sizes: dict[str, Form] | None = None
) -> tuple[str, Form]:
    """(why the expression's worst-case cost is over the static limit or "", its worst-case result size).

    Like Kubernetes' estimated-cost check: a policy whose expression could build values far beyond any request
    (and take the server down with it) is rejected when it is stored, not when a request arrives.
    """

    try:
        cost, size = estimate_cost(expression, POLICY_VARIABLES + extra_variables, variable_sizes)
    except (CelCostParseError, RecursionError):
        return "", Form.variable("variables")  # the compiler has the last word on syntax; an unparsed expression is not costed
    if cost > STATIC_ESTIMATED_COST_LIMIT:
        return format_budget_error(cost, STATIC_ESTIMATED_COST_LIMIT), size
    return "", size


def _int_in_range(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and MIN_TIMEOUT_SECONDS <= value <= MAX_TIMEOUT_SECONDS


# The CEL kinds whose Kyverno validation requires spec.matchConstraints with resource rules (pkg/cel/policies/*/validate.go)
_MATCH_CONSTRAINTS_REQUIRED = frozenset(
    {
        "ValidatingPolicy", "NamespacedValidatingPolicy", "GeneratingPolicy", "NamespacedGeneratingPolicy",
        "MutatingPolicy", "NamespacedMutatingPolicy", "DeletingPolicy", "NamespacedDeletingPolicy",
    }
)


class _Checker:
    """Collects problems into one ValidationResult; one method per document area."""

    def __init__(self, result: ValidationResult) -> None:
        self.result = result
        self.background = True  # Kyverno: spec.background defaults to true
        self.requester_variables_refused = False
        # Worst-case result sizes of the policy's variables (``variables.name``), for the cost estimates.
        self.variable_sizes: dict[str, Form] = {}

    def error(self, path: str, message: str, rule: str = "", safety: bool = False, webhook_only: bool = False) -> None:
        self.result.errors.append(PolicyProblem(path, message, rule, safety, webhook_only))

    def findings(self, findings: list[kyverno_rules.Finding]) -> None:
        for finding in findings:
            self.error(finding.path, finding.message, finding.rule, webhook_only=finding.webhook_only)

    # ---- shared ------------------------------------------------------------------------------------------------
    def webhook_settings(self, spec: dict[str, Any], legacy: bool) -> None:
        configuration = spec.get("webhookConfiguration")
        if configuration is not None and not isinstance(configuration, dict):
            self.error("spec.webhookConfiguration", "must be a mapping")
            configuration = {}
        configuration = configuration or {}
        if legacy and spec.get("webhookTimeoutSeconds") is not None:
            if not _int_in_range(spec["webhookTimeoutSeconds"]):
                self.error("spec.webhookTimeoutSeconds", f"the timeout value must be between {MIN_TIMEOUT_SECONDS} and {MAX_TIMEOUT_SECONDS} seconds, got {spec['webhookTimeoutSeconds']!r}")
            if configuration.get("timeoutSeconds") is not None:
                self.error("spec.webhookTimeoutSeconds", "remove the deprecated field and use spec.webhookConfiguration.timeoutSeconds instead")
        if configuration.get("timeoutSeconds") is not None and not _int_in_range(configuration["timeoutSeconds"]):
            self.error("spec.webhookConfiguration.timeoutSeconds", f"the timeout value must be between {MIN_TIMEOUT_SECONDS} and {MAX_TIMEOUT_SECONDS} seconds, got {configuration['timeoutSeconds']!r}")
        for path, value in (("spec.failurePolicy", spec.get("failurePolicy")), ("spec.webhookConfiguration.failurePolicy", configuration.get("failurePolicy"))):
            if value is not None and value not in FAILURE_POLICIES:
                self.error(path, f"unsupported value {value!r}: must be Fail or Ignore")
        if legacy and spec.get("failurePolicy") is not None and configuration.get("failurePolicy") is not None:
            self.error("spec.failurePolicy", "remove the deprecated field and use spec.webhookConfiguration.failurePolicy instead")
        for index, condition in enumerate(configuration.get("matchConditions") or []):
            self.cel_expressions(condition, f"spec.webhookConfiguration.matchConditions[{index}]")

    def cel_expressions(
        self, node: Any, path: str, rule: str = "", extra_variables: tuple[str, ...] = (), libraries: tuple[str, ...] = ()
    ) -> None:
        """Compile every ``expression``/``messageExpression``/``valueExpression`` string below ``node``."""
        if isinstance(node, dict):
            for key, value in node.items():
                child = f"{path}.{key}"
                if key in CEL_EXPRESSION_KEYS and isinstance(value, str):
                    problem = cel_problem(value, child, extra_variables, libraries)
                    if problem:
                        self.error(child, problem, rule)
                        continue
                    problem, _ = cel_cost_problem(value, extra_variables, self.variable_sizes)
                    if problem:
                        self.error(child, problem, rule, safety=True)
                else:
                    self.cel_expressions(value, child, rule, extra_variables, libraries)
        elif isinstance(node, list):
            for index, item in enumerate(node):
                self.cel_expressions(item, f"{path}[{index}]", rule, extra_variables, libraries)

    def variables(self, node: Any, path: str, rule: str = "") -> None:
        for where, text in _walk_strings(node, path):
            for expression in variables_in(text):
                problem = jmespath_problem(expression) if expression else "empty variable {{ }}"
                if problem:
                    self.error(where, problem, rule)

    def jmespath_field(self, value: Any, path: str, rule: str, context: bool = False) -> None:
        """``context``: a context entry's jmesPath, which Kyverno refuses as "failed to parse JMESPath"."""
        if isinstance(value, str) and value and not variables_in(value):
            if context:
                reason = jmespath_error(value)
                if reason:
                    self.error(path, f"failed to parse JMESPath {value}: {reason}", rule)
                return
            problem = jmespath_problem(value)
            if problem:
                self.error(path, problem, rule)

    def conditions(self, block: Any, path: str, rule: str, exact: bool = True) -> None:
        """``[{key, operator, value}]`` or ``{any: [...], all: [...]}``.  ``exact``: the operator is spelt as Kyverno
        lists it (its policy check compares case-sensitively where it checks operators at all); elsewhere only an
        operator the engine cannot evaluate in any spelling is refused."""
        if block is None:
            return
        if isinstance(block, list):
            entries = [(f"{path}[{i}]", c) for i, c in enumerate(block)]
        elif isinstance(block, dict):
            unknown = sorted(set(block) - {"any", "all"})
            if unknown:
                self.error(path, f"unknown field(s) {', '.join(unknown)}: conditions are a list or have only 'any' and 'all'", rule)
            entries = []
            for key in ("any", "all"):
                items = block.get(key) or []
                if not isinstance(items, list):
                    self.error(f"{path}.{key}", "must be a list of conditions", rule)
                    continue
                entries += [(f"{path}.{key}[{i}]", c) for i, c in enumerate(items)]
        else:
            self.error(path, "must be a list of conditions or have 'any'/'all' lists", rule)
            return

        known = set(CONDITION_OPERATORS) if exact else {op.lower() for op in CONDITION_OPERATORS}
        for where, condition in entries:
            if not isinstance(condition, dict):
                self.error(where, "a condition must be a mapping with key, operator and value", rule)
                continue
            if "key" not in condition or "operator" not in condition:
                self.error(where, "entered value of `key`, `value` or `operator` is missing or misspelled", rule)
                continue
            operator = condition.get("operator")
            if not isinstance(operator, str) or (operator if exact else operator.lower()) not in known:
                self.error(f"{where}.operator", f"{INVALID_OPERATOR} {operator!r}", rule)

    # ---- kyverno.io ClusterPolicy / Policy ------------------------------------------------------------------------
    def kyverno_policy(self, kind: str, metadata: dict[str, Any], spec: dict[str, Any]) -> None:
        if kind == "ClusterPolicy" and metadata.get("namespace"):
            self.error("metadata.namespace", kyverno_warnings.CLUSTER_POLICY_NAMESPACE)
        action = spec.get("validationFailureAction")
        if action is not None and action not in FAILURE_ACTIONS:
            self.error("spec.validationFailureAction", f"unsupported value {action!r}: must be Enforce or Audit")
        if kind == "Policy" and spec.get("validationFailureActionOverrides"):
            self.error("spec.validationFailureActionOverrides", "Use of validationFailureActionOverrides is supported only with ClusterPolicy")
        self.webhook_settings(spec, legacy=True)
        if spec.get("admission") is False and spec.get("background") is False:
            self.error("spec", "disabling both admission and background processing is not allowed")
        elif spec.get("admission") is False and any(
            isinstance(r, dict) and (r.get("mutate") or r.get("generate") or r.get("verifyImages")) for r in spec.get("rules") or []
        ):
            self.error("spec", "disabling admission processing is only allowed with validation policies")
        self.background = spec.get("background") is not False
        rules = spec.get("rules")
        if rules is None:
            rules = []
        if not isinstance(rules, list):
            self.error("spec.rules", "must be a list of rules")
            return
        if self.background:
            self.background_user_variables(metadata, spec, rules)
        seen: set[str] = set()
        for index, rule in enumerate(rules):
            path = f"spec.rules[{index}]"
            if not isinstance(rule, dict):
                self.error(path, "a rule must be a mapping")
                continue
            name = str(rule.get("name") or "")
            if not name:
                self.error(f"{path}.name", "a rule needs a name")
            elif len(name) > MAX_RULE_NAME_LENGTH:
                self.error(f"{path}.name", f"rule name must be at most {MAX_RULE_NAME_LENGTH} characters", name)
            elif name in seen:
                self.error(f"{path}.name", f"Duplicate rule name: '{name}'", name)
            seen.add(name)
            self.rule(rule, path, name)
            mutate = rule.get("mutate")
            if isinstance(mutate, dict) and (spec.get("mutateExistingOnPolicyUpdate") is True or mutate.get("mutateExistingOnPolicyUpdate") is True):
                if not mutate.get("targets"):
                    # Kyverno's validateMutateTargets: applying to existing resources needs resources to apply to
                    self.error(
                        "spec.mutateExistingOnPolicyUpdate", f"rules[{index}].mutate.targets has to be specified when mutateExistingOnPolicyUpdate is set", name
                    )

    def background_user_variables(self, metadata: dict[str, Any], spec: dict[str, Any], rules: list[Any]) -> None:
        """Kyverno's check for background policies: a background scan has no requester, so match/exclude by
        roles, clusterRoles or subjects, and requester variables anywhere in the policy, are rejected (the first one
        found, with Kyverno's message).  Policies with mutate-existing rules are spared the variable part."""
        problem = _user_filter_problem(rules)
        if problem is None and not any(isinstance(r, dict) and isinstance(r.get("mutate"), dict) and r["mutate"].get("targets") is not None for r in rules):
            problem = _user_variable_problem(metadata, spec)
        if problem is not None:
            path, message = problem
            self.error(path, BACKGROUND_VARIABLES_PREFIX + message)
            self.requester_variables_refused = True

    def rule(self, rule: dict[str, Any], path: str, name: str) -> None:
        present = [t for t in RULE_TYPES if rule.get(t)]
        if not present:
            self.error(path, f"No operation defined in the rule '{name}'.(supported operations: mutate,validate,generate,verifyImages)", name)
        elif len(present) > 1:
            self.error(path, f"Multiple operations defined in the rule '{name}', only one operation (mutate,validate,generate,verifyImages) is allowed per rule; found {', '.join(present)}", name)
        if rule.get("celPreconditions") is not None and not (isinstance(rule.get("validate"), dict) and rule["validate"].get("cel")):
            self.error(f"{path}.celPreconditions", "celPrecondition can only be used with validate.cel", name)
        if rule.get("imageExtractors") and not rule.get("verifyImages"):
            self.error(f"{path}.imageExtractors", f"Invalid rule spec for rule '{name}', imageExtractors can only be defined for verifyImages rule", name)
        self.match_block(rule.get("match"), f"{path}.match", name, required=True, rule=rule)
        kindless = kindless_match_problem(rule)
        if kindless:
            self.error(f"{path}.match", kindless, name)
        if rule.get("exclude") is not None:
            self.match_block(rule.get("exclude"), f"{path}.exclude", name, required=False, rule=rule)
        for section in ("match", "exclude"):
            for where, text in _walk_strings(rule.get(section), f"{path}.{section}"):
                if variables_in(text):
                    self.error(where, f"rule \"{name}\" should not have variables in {section} section", name)
        self.context(rule.get("context"), f"{path}.context", name, uses_cel=bool((rule.get("validate") or {}).get("cel")))
        self.conditions(rule.get("preconditions"), f"{path}.preconditions", name)
        if isinstance(rule.get("validate"), dict):
            self.validate(rule["validate"], f"{path}.validate", name)
        if isinstance(rule.get("mutate"), dict):
            self.mutate(rule["mutate"], f"{path}.mutate", name)
        if isinstance(rule.get("generate"), dict):
            self.generate(rule["generate"], f"{path}.generate", name)
        if rule.get("verifyImages"):
            self.verify_images(rule["verifyImages"], f"{path}.verifyImages", name)
        checked = {k: v for k, v in rule.items() if k not in ("match", "exclude")}
        self.variables(checked, path, name)

    def match_block(self, block: Any, path: str, name: str, *, required: bool, rule: dict[str, Any]) -> None:
        if block is None or block == {}:
            if required:
                self.error(path, "match resources not specified", name)
            return
        if not isinstance(block, dict):
            self.error(path, "must be a mapping", name)
            return
        has_any, has_all = bool(block.get("any")), bool(block.get("all"))
        if has_any and has_all:
            self.error(path, "Can't specify any and all together", name)
        if (has_any or has_all) and block.get("resources"):
            section = "exclude" if path.endswith("exclude") else "match"
            self.error(path, f"can't specify any/all together with {section} resources", name)
        if has_any or has_all:
            for key in ("any", "all"):
                entries = block.get(key) or []
                if not isinstance(entries, list):
                    self.error(f"{path}.{key}", "must be a list", name)
                    continue
                for index, entry in enumerate(entries):
                    self.resource_filter(entry, f"{path}.{key}[{index}]", name, required, rule)
        else:
            self.resource_filter(block, path, name, required, rule)

    def resource_filter(self, entry: Any, path: str, name: str, is_match: bool, rule: dict[str, Any]) -> None:
        if not isinstance(entry, dict):
            self.error(path, "must be a mapping with resources and/or subjects, roles, clusterRoles", name)
            return
        resources = entry.get("resources")
        if resources is not None and not isinstance(resources, dict):
            self.error(f"{path}.resources", "must be a mapping", name)
            return
        resources = resources or {}
        if not any(entry.get(k) for k in ("resources", "subjects", "roles", "clusterRoles")):
            self.error(path, "match resources not specified" if is_match else "exclude resources not specified", name)
            return
        subjects = entry.get("subjects")
        for index, subject in enumerate(subjects if isinstance(subjects, list) else []):
            kind = subject.get("kind") if isinstance(subject, dict) else None
            if kind not in SUBJECT_KINDS:
                self.error(f"{path}.subjects[{index}].kind", f"kind must be 'User', 'Group', or 'ServiceAccount', got {kind!r}", name)
        kinds = resources.get("kinds")
        if kinds is not None and not isinstance(kinds, list):
            self.error(f"{path}.resources.kinds", "must be a list of kinds", name)
        if isinstance(kinds, list) and "*" in kinds:
            problem = self.wildcard_problem(kinds, rule)
            if problem:
                self.error(f"{path}.resources.kinds", problem, name)
        for index, kind in enumerate(kinds or []):
            if not isinstance(kind, str) or not kind.strip():
                self.error(f"{path}.resources.kinds[{index}]", "a kind must be a non-empty string", name)
            elif kind.count("/") > 2:
                self.error(f"{path}.resources.kinds[{index}]", f"invalid kind {kind!r}: expected Kind, group/version/Kind or Kind/subresource", name)
        operations = resources.get("operations") or []
        for index, operation in enumerate(operations if isinstance(operations, list) else [operations]):
            if operation not in ("CREATE", "UPDATE", "DELETE", "CONNECT"):
                self.error(f"{path}.resources.operations[{index}]", f"unsupported operation {operation!r}: must be CREATE, UPDATE, DELETE or CONNECT", name)

    def wildcard_problem(self, kinds: list[Any], rule: dict[str, Any]) -> str | None:
        """Kyverno's limits on a rule matching kind `*`: admission only, alone, and touching only metadata."""
        if self.background:
            return "wildcard policy not allowed in background mode. Set spec.background=false to disable background mode for this policy rule "
        if len(kinds) > 1:
            return "wildcard policy can not deal with more than one kind"
        validate = rule.get("validate") if isinstance(rule.get("validate"), dict) else None
        if rule.get("generate") or rule.get("verifyImages") or (validate is not None and validate.get("foreach") is not None):
            return "wildcard policy does not support rule type"
        if validate is not None:
            if (validate.get("pattern") is not None or validate.get("anyPattern") is not None) and not _only_metadata(rule):
                return WILDCARD_METADATA_ONLY
            conditions = (validate.get("deny") or {}).get("conditions") if isinstance(validate.get("deny"), dict) else None
            for condition in conditions if isinstance(conditions, list) else []:  # the legacy list form only, as Kyverno
                key = str((condition or {}).get("key", "")) if isinstance(condition, dict) else ""
                if "request.object.metadata." not in key and (not WILDCARD_ALLOWED_VARIABLES.search(key) or "request.object.spec" in key):
                    return WILDCARD_METADATA_ONLY
        if isinstance(rule.get("mutate"), dict) and not _only_metadata(rule):
            return WILDCARD_METADATA_ONLY
        return None

    def context(self, entries: Any, path: str, name: str, uses_cel: bool) -> None:
        if entries is None:
            return
        if not isinstance(entries, list):
            self.error(path, "must be a list of context entries", name)
            return
        if entries and uses_cel:
            self.error(path, "context variables are not supported for CEL expressions in validate rules", name)
        for index, entry in enumerate(entries):
            where = f"{path}[{index}]"
            if not isinstance(entry, dict):
                self.error(where, "a context entry must be a mapping", name)
                continue
            entry_name = entry.get("name")
            if not entry_name:
                self.error(f"{where}.name", "a name is required for context entries", name)
            else:
                reserved = next((r for r in RESERVED_CONTEXT_NAMES if entry_name == r or str(entry_name).startswith(r + ".")), None)
                if reserved is not None:
                    self.error(f"{where}.name", f"entry name {entry_name} is invalid as it conflicts with a pre-defined variable {reserved}", name)
            sources = [s for s in CONTEXT_SOURCES if entry.get(s) is not None]
            if len(sources) != 1:
                self.error(where, "exactly one of configMap or apiCall or imageRegistry or variable is required for context entries", name)
                continue
            source = sources[0]
            body = entry[source] if isinstance(entry[source], dict) else {}
            if source == "variable":
                if "value" not in body and not body.get("jmesPath"):
                    self.error(f"{where}.variable", "a variable must define a value or a jmesPath expression", name)
                if "default" in body and not body.get("jmesPath"):
                    self.error(f"{where}.variable.default", "a variable must define a default value only when a jmesPath expression is defined", name)
            elif source == "configMap":
                for required in ("name", "namespace"):
                    if not body.get(required):
                        self.error(f"{where}.configMap.{required}", f"a {required} is required for configMap context entry", name)
            elif source == "imageRegistry":
                if not body.get("reference"):
                    self.error(f"{where}.imageRegistry.reference", "a ref is required for imageRegistry context entry", name)
            elif source == "globalReference":
                if not body.get("name"):
                    self.error(f"{where}.globalReference.name", "a name is required for globalReference context entry", name)
            elif source == "apiCall":
                if body.get("service") and body.get("urlPath"):
                    self.error(f"{where}.apiCall", "a URLPath cannot be used for service API calls", name)
            self.jmespath_field(body.get("jmesPath"), f"{where}.{source}.jmesPath", name, context=True)

    def validate(self, validate: dict[str, Any], path: str, name: str) -> None:
        action = validate.get("failureAction")
        if action is not None and action not in FAILURE_ACTIONS:
            self.error(f"{path}.failureAction", f"unsupported value {action!r}: must be Enforce or Audit", name)
        present = [t for t in VALIDATE_TYPES if validate.get(t) is not None]
        if not present:
            self.error(path, "one of pattern, anyPattern, deny, foreach, cel must be specified", name)
        elif len(present) > 1:
            self.error(path, f"only one of pattern, anyPattern, deny, foreach, cel can be specified; found {', '.join(present)}", name)
        if validate.get("pattern") is not None:
            self.pattern(validate["pattern"], f"{path}.pattern", name, "validate")
        if validate.get("anyPattern") is not None:
            if not isinstance(validate["anyPattern"], list):
                self.error(f"{path}.anyPattern", "must be a list of patterns", name)
            else:
                for index, pattern in enumerate(validate["anyPattern"]):
                    self.pattern(pattern, f"{path}.anyPattern[{index}]", name, "validate")
        deny = validate.get("deny")
        if isinstance(deny, dict):
            self.conditions(deny.get("conditions"), f"{path}.deny.conditions", name)
        self.foreach_list(validate.get("foreach"), f"{path}.foreach", name, "validate")
        pod_security = validate.get("podSecurity")
        if isinstance(pod_security, dict) and isinstance(pod_security.get("exclude"), list):
            # Kyverno names these fields from the rule, without `validate` (Rule.ValidatePSaControlNames)
            rule_path = path.removesuffix(".validate")
            for where, problem in validate_excludes(str(pod_security.get("level") or ""), pod_security["exclude"], f"{rule_path}.podSecurity.exclude"):
                self.error(where, problem, name)
        if isinstance(validate.get("cel"), dict):
            self.variable_sizes = {}
            self.policy_variable_sizes(validate["cel"].get("variables"), ())
            self.cel_expressions(validate["cel"], f"{path}.cel", name)

    def foreach_list(self, entries: Any, path: str, name: str, phase: str) -> None:
        """A foreach is a list of entries; anything else is named as the problem, never iterated."""
        if entries is None:
            return
        if not isinstance(entries, list):
            self.error(path, "must be a list of foreach entries", name)
            return
        for index, each in enumerate(entries):
            self.foreach(each, f"{path}[{index}]", name, phase)

    def foreach(self, each: Any, path: str, name: str, phase: str) -> None:
        if not isinstance(each, dict):
            self.error(path, "a foreach entry must be a mapping", name)
            return
        if not each.get("list"):
            self.error(f"{path}.list", "foreach.list is required", name)
        else:
            self.jmespath_field(each.get("list"), f"{path}.list", name)
        self.context(each.get("context"), f"{path}.context", name, uses_cel=False)
        self.conditions(each.get("preconditions"), f"{path}.preconditions", name)
        if phase == "validate":
            if each.get("pattern") is not None:
                self.pattern(each["pattern"], f"{path}.pattern", name, "validate")
            if isinstance(each.get("deny"), dict):
                self.conditions(each["deny"].get("conditions"), f"{path}.deny.conditions", name)
            self.foreach_list(each.get("foreach"), f"{path}.foreach", name, phase)
        else:
            if each.get("patchStrategicMerge") is not None:
                self.pattern(each["patchStrategicMerge"], f"{path}.patchStrategicMerge", name, "mutate")
            if each.get("patchesJson6902") is not None:
                self.json_patch(each["patchesJson6902"], f"{path}.patchesJson6902", name, allow_path_variables=True)
            self.foreach_list(each.get("foreach"), f"{path}.foreach", name, phase)

    def pattern(self, pattern: Any, path: str, name: str, phase: str) -> None:
        """Anchors must be balanced, and only the anchors the phase understands may appear."""
        if isinstance(pattern, list):
            for index, item in enumerate(pattern):
                self.pattern(item, f"{path}[{index}]", name, phase)
            return
        if not isinstance(pattern, dict):
            return

        for key, value in pattern.items():
            child = f"{path}.{key}"
            text = str(key).strip()
            if text.startswith(ANCHOR_PREFIXES) or (text.endswith(")") and "(" in text):
                anchor = parse_anchor(text)
                if anchor is None or not text.endswith(")"):
                    self.error(child, f"malformed anchor {text!r}: an anchored key looks like (key), X(key), +(key), <(key), =(key) or ^(key)", name)
                elif phase == "validate" and anchor.modifier == "+":
                    self.error(child, f"the add-if-not-present anchor {text!r} is only allowed in mutate patterns", name)
                elif phase == "mutate" and anchor.modifier in ("X", "^", "="):
                    self.error(child, f"the anchor {text!r} is only allowed in validate patterns", name)
                elif anchor.modifier == "^" and not isinstance(value, list):
                    self.error(child, f"the existence anchor {text!r} must hold a list", name)
            self.pattern(value, child, name, phase)

    def json_patch(self, patch: Any, path: str, name: str, allow_path_variables: bool = False) -> None:
        if isinstance(patch, str):
            try:
                operations = yamlsafe.load(patch, yaml.SafeLoader)
            except yaml.YAMLError as error:
                if not variables_in(patch):  # unquoted {{ }} is legal YAML only after substitution
                    self.error(path, f"not a YAML/JSON list of operations: {error}", name)
                return
        else:
            operations = patch
        if not isinstance(operations, list):
            self.error(path, "must be a list of JSON patch operations", name)
            return
        for index, operation in enumerate(operations):
            where = f"{path}[{index}]"
            if not isinstance(operation, dict):
                self.error(where, "a JSON patch operation must be a mapping", name)
                continue
            if operation.get("op") not in JSON_PATCH_OPERATIONS:
                self.error(f"{where}.op", f"unexpected kind: {operation.get('op')} (supported operations: {', '.join(JSON_PATCH_OPERATIONS)})", name)
            target = operation.get("path")
            if not isinstance(target, str) or not target.startswith("/"):
                self.error(f"{where}.path", f"path must begin with a forward slash, got {target!r}", name)
            elif variables_in(target) and not allow_path_variables:
                self.error(f"{where}.path", f"rule \"{name}\" should not have variables in patchesJSON6902 path section", name)

    def mutate(self, mutate: dict[str, Any], path: str, name: str) -> None:
        present = [t for t in MUTATE_TYPES if mutate.get(t) is not None]
        if not present and not mutate.get("targets"):
            self.error(path, f"a mutate rule needs one of {', '.join(MUTATE_TYPES)}", name)
        elif len(present) > 1:
            allowed = "`foreach`, `patchStrategicMerge`, or `patchesJson6902`" if "foreach" in present else "`patchStrategicMerge` or `patchesJson6902`"
            self.error(path, f"only one of {allowed} is allowed; found {', '.join(present)}", name)
        if mutate.get("patchStrategicMerge") is not None:
            self.pattern(mutate["patchStrategicMerge"], f"{path}.patchStrategicMerge", name, "mutate")
        if mutate.get("patchesJson6902") is not None:
            self.json_patch(mutate["patchesJson6902"], f"{path}.patchesJson6902", name)
        self.foreach_list(mutate.get("foreach"), f"{path}.foreach", name, "mutate")
        targets = mutate.get("targets")
        if targets is not None and not isinstance(targets, list):
            self.error(f"{path}.targets", "must be a list of targets", name)
            targets = None
        for index, target in enumerate(targets or []):
            if isinstance(target, dict):
                self.conditions(target.get("preconditions"), f"{path}.targets[{index}].preconditions", name, exact=False)
                self.context(target.get("context"), f"{path}.targets[{index}].context", name, uses_cel=False)

    def generate(self, generate: dict[str, Any], path: str, name: str) -> None:
        # several of data/clone/cloneList/foreach: stockade.lint.generate.static_problems
        if generate.get("foreach") is None and generate.get("cloneList") is None:
            for required in ("kind", "name"):
                if not generate.get(required):
                    self.error(f"{path}.{required}", f"a generate rule needs the {required} of the resource to generate", name)

    def verify_images(self, entries: Any, path: str, name: str) -> None:
        if not isinstance(entries, list):
            self.error(path, "must be a list", name)
            return
        for index, entry in enumerate(entries):
            where = f"{path}[{index}]"
            if not isinstance(entry, dict):
                self.error(where, "must be a mapping", name)
                continue
            references = entry.get("imageReferences") or ([entry["image"]] if entry.get("image") else [])
            if not references:
                self.error(f"{where}.imageReferences", "at least one image reference is required", name)
            for ref_index, reference in enumerate(references if isinstance(references, list) else [references]):
                if isinstance(reference, str) and variables_in(reference):
                    self.error(f"{where}.imageReferences[{ref_index}]", f"rule \"{name}\" should not have variables in image reference section", name)
            action = entry.get("failureAction")
            if action is not None and action not in FAILURE_ACTIONS:
                self.error(f"{where}.failureAction", f"unsupported value {action!r}: must be Enforce or Audit", name)
            deny = (entry.get("validate") or {}).get("deny") if isinstance(entry.get("validate"), dict) else None
            if isinstance(deny, dict):
                self.conditions(deny.get("conditions"), f"{where}.validate.deny.conditions", name)
            for att_index, attestation in enumerate(entry.get("attestations") or []):
                for cond_index, condition in enumerate((attestation or {}).get("conditions") or []):
                    self.conditions(condition, f"{where}.attestations[{att_index}].conditions[{cond_index}]", name)

    # ---- kyverno.io PolicyException ----------------------------------------------------------------------------
    def kyverno_exception(self, spec: dict[str, Any]) -> None:
        exceptions = spec.get("exceptions")
        if not isinstance(exceptions, list) or not exceptions:
            self.error("spec.exceptions", "at least one exception (policyName and ruleNames) is required")
        else:
            for index, entry in enumerate(exceptions):
                where = f"spec.exceptions[{index}]"
                if not isinstance(entry, dict) or not entry.get("policyName"):
                    self.error(f"{where}.policyName", "the policy name is required")
                    continue
                rule_names = entry.get("ruleNames")
                if not isinstance(rule_names, list) or not rule_names:
                    self.error(f"{where}.ruleNames", "at least one rule name is required")
        match = spec.get("match")
        if not match:
            self.error("spec.match", "match resources not specified")
        else:
            self.match_block(match, "spec.match", "", required=True, rule={"validate": {"pattern": {"metadata": {}}}})
        self.conditions(spec.get("conditions"), "spec.conditions", "", exact=False)
        pod_security = spec.get("podSecurity")
        if pod_security is not None:
            if not isinstance(pod_security, list):
                self.error("spec.podSecurity", "must be a list of controls")
            else:
                for where, problem in validate_excludes("", pod_security, "spec.podSecurity"):
                    self.error(where, problem)
        self.variables({k: v for k, v in spec.items() if k != "match"}, "spec")

    def namespaced_cel_libraries(self, spec: dict[str, Any], allow_http: bool = False) -> None:
        """Kyverno's rule for namespaced CEL policies: no ``globalContext.*`` in any expression, nor ``http.*`` unless
        the server allows it (Kyverno's --allowHTTPInNamespacedPolicies, ``allow_http``)."""

        for library in _NAMESPACE_RESTRICTED_LIBRARIES:
            if library == "http" and allow_http:
                continue
            hint = "; set --allow-http-in-namespaced-policies to enable" if library == "http" else ""
            for where, text in _walk_expressions(spec, "spec"):
                if uses_identifier(text, library):
                    self.error(where, f"{library}.* is not allowed in namespaced policies{hint}", webhook_only=True)
                    break

    def cleanup_policy(self, spec: dict[str, Any]) -> None:
        """Kyverno's CleanupPolicySpec.Validate: no ConfigMap/ImageRegistry context entries, no user info in
        match/exclude (a scheduled deletion has no admission request to take it from), a schedule."""
        for index, entry in enumerate(spec.get("context") or []):
            if not isinstance(entry, dict):
                continue
            for key, label in _CLEANUP_FORBIDDEN_CONTEXT.items():
                if entry.get(key) is not None:
                    self.error(f"spec.context[{index}].{key}", f"{label} is not allowed in CleanUp Policy")
        if not spec.get("schedule"):
            self.error("spec.schedule", "a cron schedule is required")
        for block_name in ("match", "exclude"):
            block = spec.get(block_name)
            if not isinstance(block, dict):
                continue
            filters = [("", block)] + [
                (f".{group}[{index}]", entry)
                for group in ("any", "all")
                for index, entry in enumerate(block.get(group) or [])
                if isinstance(entry, dict)
            ]
            for where, entry in filters:
                for field_name in _USER_INFO_FIELDS:
                    if entry.get(field_name):
                        self.error(f"spec.{block_name}{where}.{field_name}", "Usage of user info is forbidden")
        if not spec.get("match"):
            self.error("spec.match", "match resources not specified")

    # ---- policies.kyverno.io ------------------------------------------------------------------------------------
    def cel_policy(self, kind: str, spec: dict[str, Any]) -> None:
        if kind == "PolicyException":
            if not spec.get("policyRefs"):
                self.error("spec.policyRefs", "at least one policy reference is required")
            self.cel_expressions(spec, "spec")
            return
        evaluation = spec.get("evaluation")
        kubernetes_mode = not isinstance(evaluation, dict) or str(evaluation.get("mode") or "Kubernetes") == "Kubernetes"
        if kind in _MATCH_CONSTRAINTS_REQUIRED and kubernetes_mode and not _has_resource_rules(spec.get("matchConstraints")):
            # Kyverno's Validating/Generating/Mutating/DeletingPolicy check: the field error alone, as denial message
            # and warning
            problem = "Required value: a matchConstraints with at least one resource rule is required"
            self.error("spec.matchConstraints", problem, webhook_only=True)
            self.result.warnings.append(f"spec.matchConstraints: {problem}")
            self.result.bare = True
            return
        self.webhook_settings(spec, legacy=False)
        if kind.endswith("MutatingPolicy"):
            self.mutating_evaluation_modes(spec)
        actions = spec.get("validationActions")
        if actions is not None:
            if not isinstance(actions, list):
                self.error("spec.validationActions", "must be a list of Deny, Warn or Audit")
            else:
                unknown = [a for a in actions if a not in VALIDATION_ACTIONS]
                if unknown:
                    self.error("spec.validationActions", f"unsupported value(s) {', '.join(map(repr, unknown))}: must be Deny, Warn or Audit")
                if "Deny" in actions and "Warn" in actions:
                    self.error("spec.validationActions", "Deny and Warn may not be used together")
                if len(set(map(str, actions))) != len(actions):
                    self.error("spec.validationActions", "must not contain duplicates")
        names: set[str] = set()
        for index, variable in enumerate(spec.get("variables") or []):
            variable_name = (variable or {}).get("name") if isinstance(variable, dict) else None
            if not variable_name:
                self.error(f"spec.variables[{index}].name", "a variable needs a name")
            elif variable_name in names:
                self.error(f"spec.variables[{index}].name", f"duplicate variable name {variable_name!r}")
            names.add(str(variable_name))
        mode = str((spec.get("evaluation") or {}).get("mode") or "Kubernetes") if isinstance(spec.get("evaluation"), dict) else "Kubernetes"
        if mode != "Kubernetes":
            # Envoy/HTTP authorization policies compile against libraries (envoy, http, jwt) of their own mode
            self.result.warnings.append(f"CEL expressions of evaluation mode {mode} are not checked")
            return

        image_policy = "ImageValidatingPolicy" in kind
        extra = IMAGE_POLICY_VARIABLES if image_policy else ()
        self.policy_variable_sizes(spec.get("variables"), extra)
        libraries: tuple[str, ...] = IMAGE_VALIDATING_LIBRARIES if image_policy else ()
        if kind in ("GeneratingPolicy", "NamespacedGeneratingPolicy"):
            # generator.apply as Kyverno declares it for the policy's scope
            variant = "providers-namespaced" if kind.startswith("Namespaced") else "providers-cluster"
            libraries = tuple(variant if name == "providers" else name for name in DEFAULT_LIBRARIES)
        self.cel_expressions(spec, "spec", extra_variables=extra, libraries=libraries)

    def mutating_evaluation_modes(self, spec: dict[str, Any]) -> None:
        """A MutatingPolicy must run somewhere: admission (on unless disabled) or mutateExisting (off unless
        enabled); Kyverno rejects one that turns both off."""
        evaluation = spec.get("evaluation")
        if not isinstance(evaluation, dict):
            return
        admission = evaluation.get("admission")
        existing = evaluation.get("mutateExisting")
        admission_off = isinstance(admission, dict) and admission.get("enabled") is False
        existing_on = isinstance(existing, dict) and existing.get("enabled") is True
        if admission_off and not existing_on:
            self.error("spec.evaluation", "disabling both admission and mutateExisting evaluation modes is not allowed")

    def policy_variable_sizes(self, variables: Any, extra: tuple[str, ...]) -> None:
        """Bound each ``spec.variables`` entry by its expression's result size, in order (later ones use earlier)."""
        for variable in variables if isinstance(variables, list) else []:
            if isinstance(variable, dict) and isinstance(variable.get("name"), str) and isinstance(variable.get("expression"), str):
                _, size = cel_cost_problem(variable["expression"], extra, self.variable_sizes)
                self.variable_sizes[variable["name"]] = size


def _has_resource_rules(constraints: Any) -> bool:
    return isinstance(constraints, dict) and isinstance(constraints.get("resourceRules"), list) and bool(constraints["resourceRules"])


def _user_filter_problem(rules: list[Any]) -> tuple[str, str] | None:
    """The first match/exclude block filtering by requester (roles, clusterRoles, subjects), Kyverno's path and text."""
    for index, rule in enumerate(rules):
        if not isinstance(rule, dict):
            continue
        for section in ("match", "exclude"):
            block = rule.get(section)
            if not isinstance(block, dict):
                continue
            # Kyverno's order: match itself, then any, then all; exclude itself, then all, then any
            order = ("", "any", "all") if section == "match" else ("", "all", "any")
            for key in order:
                listed = block.get(key) if key else None
                entries: list[tuple[int | None, Any]] = list(enumerate(listed)) if isinstance(listed, list) else []
                if not key:
                    entries = [(None, block)]
                for position, entry in entries:
                    field_name = next((f for f in USER_FILTER_FIELDS if isinstance(entry, dict) and entry.get(f)), None)
                    if field_name is None:
                        continue
                    where = f"{key}[{position}]/" if key else ""
                    return (
                        f"spec.rules[{index}].{section}" + (f".{key}[{position}]" if key else "") + f".{field_name}",
                        f"invalid variable used at path: spec/rules[{index}]/{section}/{where}{field_name}",
                    )
    return None


def _user_variable_problem(metadata: dict[str, Any], spec: dict[str, Any]) -> tuple[str, str] | None:
    """The first requester variable (``{{request.userInfo}}``, ``serviceAccountName``, ...) anywhere in the policy;
    like Kyverno the whole document is scanned, bar the kubectl last-applied annotation."""

    annotations = dict(metadata.get("annotations") or {}) if isinstance(metadata.get("annotations"), dict) else {}
    annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    text = json.dumps({"metadata": {**metadata, "annotations": annotations}, "spec": spec}, separators=(",", ":"), default=str)
    for match in VARIABLE_RE.finditer(text):
        variable = match.group(2)  # as it appears in the JSON text, which is what Kyverno's message shows
        if any(pattern.search(variable) for pattern in BACKGROUND_FORBIDDEN_VARIABLES):
            return "spec", f"variable {variable} is not allowed"
    return None


def _only_metadata(rule: dict[str, Any]) -> bool:
    """Kyverno's test for a rule that may match every kind: its overlay, JSON patch paths, pattern and anyPattern
    touch nothing but metadata (a rule with none of them passes)."""
    validate: dict[str, Any] = rule["validate"] if isinstance(rule.get("validate"), dict) else {}
    mutate: dict[str, Any] = rule["mutate"] if isinstance(rule.get("mutate"), dict) else {}
    patterns = [mutate.get("patchStrategicMerge"), validate.get("pattern")]
    any_pattern = validate.get("anyPattern")
    if any_pattern is not None and not isinstance(any_pattern, list):
        return False  # Kyverno cannot read it as a list of patterns
    patterns += any_pattern or []
    if any(isinstance(p, dict) and not set(p) <= {"metadata"} for p in patterns):
        return False
    patch = mutate.get("patchesJson6902")
    if isinstance(patch, str) and patch:
        try:
            operations = yamlsafe.load(patch, yaml.SafeLoader)
        except yaml.YAMLError:
            operations = None
        for operation in operations if isinstance(operations, list) else []:
            if isinstance(operation, dict) and not str(operation.get("path") or "").startswith("/metadata"):
                return False
    return True


def kindless_match_problem(rule: dict[str, Any]) -> str:
    """Kyverno refuses a rule whose match (its any entries, else its all entries, else itself) has an entry without
    kinds; the reason depends on whether the rule only deals with metadata."""
    match = rule.get("match") if isinstance(rule.get("match"), dict) else {}
    assert isinstance(match, dict)
    entries = match.get("any") or match.get("all")
    filters = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else [match]
    for entry in filters:
        resources = entry.get("resources") if isinstance(entry.get("resources"), dict) else {}
        if not resources or resources.get("kinds"):
            continue  # an entry without resources is refused as "match resources not specified"
        if not _only_metadata(rule):
            return WILDCARD_METADATA_ONLY
        return KIND_REQUIRED
    return ""
