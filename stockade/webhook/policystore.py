"""Policies for the embedded mode: documents come from *sources* (files and directories, the cluster's CRDs), and a
snapshot is rebuilt whenever a source reports a change.

A reload builds a complete new evaluator and swaps it in one assignment, so a request is always evaluated against
one consistent snapshot.  Documents are checked one by one: an invalid policy is left out of the snapshot with its
error remembered (``snapshot.errors``) while every other policy keeps being served; only an unreadable source (a
file with broken YAML) keeps the previous snapshot and records the error for readiness.

Sources hand over plain documents: nothing here imports the Kubernetes client.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

from stockade.engine.conditions import CONDITION_OPERATORS
from stockade.engine.engine import Engine
from stockade.policy.loader import Document, LoadError, expand_paths, load_documents
from stockade.policy.model import CEL_POLICY_GROUP, KyvernoPolicy, api_group, is_kyverno_policy, is_policy_exception
from stockade.policy.resources import split_policies
from stockade.webhook.admission import MUTATING_POLICY_KINDS, VALIDATING_POLICY_KINDS, AdmissionEvaluator, NamespaceLabels

log = logging.getLogger("stockade.webhook")

# (API group, kind, namespace, name): how a policy is named in ``snapshot.errors`` and by the cluster source.
PolicyIdentity = tuple[str, str, str, str]

RULE_TYPES = ("validate", "mutate", "generate", "verifyImages")
_KNOWN_OPERATORS = frozenset(operator.lower() for operator in CONDITION_OPERATORS)


def policy_identity(data: dict[str, Any]) -> PolicyIdentity:
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    return (
        api_group(str(data.get("apiVersion", ""))),
        str(data.get("kind", "")),
        str(metadata.get("namespace") or ""),
        str(metadata.get("name") or ""),
    )


def describe_identity(identity: PolicyIdentity) -> str:
    _, kind, namespace, name = identity
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


class PolicySource(Protocol):
    """Where policy documents come from.

    ``fingerprint()`` must be cheap (it is polled every reload interval) and change whenever ``documents()`` would
    return something different.  ``documents()`` may raise LoadError/OSError when the source cannot be read at all.
    """

    def fingerprint(self) -> Hashable: ...

    def documents(self) -> list[Document]: ...


class DirectorySource:
    """Policy files and directories; the fingerprint is every file's path, mtime and size."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = list(paths)

    def policy_files(self) -> list[str]:
        """Files under the paths, minus the ``..<timestamp>`` copies a mounted ConfigMap keeps beside its symlinks
        (loading those too would register every policy twice)."""
        return [path for path in expand_paths(self.paths) if not any(part.startswith("..") and part != ".." for part in path.split(os.sep))]

    def fingerprint(self) -> tuple[tuple[str, int, int], ...]:
        entries = []
        for path in self.policy_files():
            stat = os.stat(path)
            entries.append((path, stat.st_mtime_ns, stat.st_size))
        return tuple(sorted(entries))

    def documents(self) -> list[Document]:
        return load_documents(self.policy_files())


@dataclass(frozen=True)
class PolicySnapshot:
    policies: list[KyvernoPolicy]
    evaluator: AdmissionEvaluator
    fingerprint: tuple[Any, ...]
    unsupported: tuple[str, ...] = ()
    cel_policies: list[Any] = field(default_factory=list)
    # every document the sources returned (served, unsupported or rejected), and why the rejected ones were left out
    documents: tuple[Document, ...] = ()
    errors: dict[PolicyIdentity, str] = field(default_factory=dict)
    unsupported_identities: frozenset[PolicyIdentity] = frozenset()


class PolicyStore:
    """Holds the current PolicySnapshot built from ``paths`` (a DirectorySource) and/or further ``sources``."""

    def __init__(
        self,
        paths: list[str] | None = None,
        namespace_labels: NamespaceLabels | None = None,
        engine_factory: Callable[..., Engine] = Engine,
        image_verifier: Any = None,
        verification_cache: Any = None,
        sources: list[PolicySource] | None = None,
    ) -> None:
        self.paths = list(paths or [])
        self.sources: list[PolicySource] = ([DirectorySource(self.paths)] if self.paths else []) + list(sources or [])
        self.image_verifier = image_verifier
        self.verification_cache = verification_cache
        self.namespace_labels = namespace_labels
        self.engine_factory = engine_factory
        self.snapshot: PolicySnapshot | None = None
        self.last_error: str = ""
        self.listeners: list[Callable[[PolicySnapshot], None]] = []

    def policy_files(self) -> list[str]:
        return [path for source in self.sources if isinstance(source, DirectorySource) for path in source.policy_files()]

    def _fingerprint(self) -> tuple[Any, ...]:
        return tuple(source.fingerprint() for source in self.sources)

    def load(self) -> PolicySnapshot:
        """Load now; raises LoadError/OSError when a source cannot be read, so `serve` fails fast with the file named.
        Invalid individual policies do not raise: they are logged and listed in ``snapshot.errors``."""
        fingerprint = self._fingerprint()
        documents: list[Document] = []
        for source in self.sources:
            documents.extend(source.documents())
        snapshot = self._build(documents, fingerprint)
        self.snapshot = snapshot
        self.last_error = ""
        for listener in self.listeners:
            try:
                listener(snapshot)
            except Exception:  # one failing listener (e.g. a status write) must not hide the snapshot from others
                log.exception("policy snapshot listener failed")
        return snapshot

    def _build(self, documents: list[Document], fingerprint: tuple[Any, ...]) -> PolicySnapshot:
        from stockade.celpolicy.compiler import PolicyCompiler

        compiler = PolicyCompiler()
        errors: dict[PolicyIdentity, str] = {}
        accepted: list[Document] = []
        for document in documents:
            problem = document_problem(document, compiler)
            if problem is None:
                accepted.append(document)
                continue
            identity = policy_identity(document.data)
            errors[identity] = problem
            log.error("policy %s (%s) is not served: %s", describe_identity(identity), document.origin, problem)
        policy_set = split_policies(accepted)
        engine = self.engine_factory(
            exceptions=policy_set.exceptions, image_verifier=self.image_verifier, verification_cache=self.verification_cache
        )
        cel_policies, cel_evaluator = _cel_validating(policy_set.cel, compiler)
        served = {id(p.raw) for p in cel_policies}
        unsupported_documents = [d for d in policy_set.cel + policy_set.admission if id(d.data) not in served and d.kind != "PolicyException"]
        return PolicySnapshot(
            policies=policy_set.kyverno,
            evaluator=AdmissionEvaluator(engine, policy_set.kyverno, self.namespace_labels, cel_policies=cel_policies, cel_evaluator=cel_evaluator),
            fingerprint=fingerprint,
            unsupported=tuple(f"{d.kind}/{d.data.get('metadata', {}).get('name', '')}" for d in unsupported_documents),
            cel_policies=cel_policies,
            documents=tuple(documents),
            errors=errors,
            unsupported_identities=frozenset(policy_identity(d.data) for d in unsupported_documents),
        )

    def reload_if_changed(self) -> bool:
        """Poll the sources; True when a new snapshot was installed."""
        try:
            if self.snapshot is not None and self._fingerprint() == self.snapshot.fingerprint:
                return False
            self.load()
            log.info("policies reloaded: %d policies", len(self.snapshot.policies) if self.snapshot else 0)
            return True
        except (LoadError, OSError, ValueError) as exc:
            self.last_error = str(exc)
            log.error("policy reload failed, keeping the previous policies: %s", exc)
            return False


def _cel_validating(documents: list[Document], compiler: Any = None) -> tuple[list[Any], Any]:
    """(Namespaced)Validating/MutatingPolicy documents and an evaluator with the CEL PolicyExceptions loaded beside them.

    CEL providers that need the cluster (``resource.*``, ``http.*``, global context) are not wired yet, so policies
    using them evaluate to errors (and deny under failurePolicy Fail)."""
    wanted = [d for d in documents if d.kind in VALIDATING_POLICY_KINDS + MUTATING_POLICY_KINDS]
    if not wanted:
        return [], None
    from stockade.celpolicy import CelPolicy, CelPolicyEvaluator

    exceptions = [CelPolicy(d.data, d.origin) for d in documents if d.kind == "PolicyException"]
    return [CelPolicy(d.data, d.origin) for d in wanted], CelPolicyEvaluator(exceptions=exceptions, compiler=compiler)


# -- per-document checks ------------------------------------------------------------------------------------------
# Kyverno rejects invalid policies in its own admission webhook before they are stored; a policy read from files or
# from CRDs that preserve unknown fields has had no such check, so the obvious mistakes are caught here and the policy
# is left out instead of failing (or silently misbehaving) at request time.


def document_problem(document: Document, compiler: Any = None) -> str | None:
    """Why this document cannot be served, or None; never raises."""
    data = document.data
    try:
        if is_kyverno_policy(data):
            check = _kyverno_policy_problem
        elif is_policy_exception(data):
            check = _exception_problem
        elif api_group(document.api_version) == CEL_POLICY_GROUP and document.kind in VALIDATING_POLICY_KINDS + MUTATING_POLICY_KINDS:
            return _name_problem(data) or _cel_policy_problem(data, compiler)
        else:
            return None  # other kinds are not checked here (split_policies sets them aside or another part serves them)
        return _name_problem(data) or check(data)
    except Exception as exc:  # a check tripping over an unexpected shape is itself a reason not to serve the policy
        return f"cannot be read: {type(exc).__name__}: {exc}"


def _name_problem(data: dict[str, Any]) -> str | None:
    metadata = data.get("metadata")
    if not isinstance(metadata, dict) or not metadata.get("name"):
        return "metadata.name is required"
    return None


def _kyverno_policy_problem(data: dict[str, Any]) -> str | None:
    spec = data.get("spec")
    if not isinstance(spec, dict):
        return "spec must be a mapping"
    rules = spec.get("rules")
    if rules is None:
        rules = []
    if not isinstance(rules, list):
        return "spec.rules must be a list"
    seen: set[str] = set()
    for index, rule in enumerate(rules):
        where = f"spec.rules[{index}]"
        if not isinstance(rule, dict):
            return f"{where} must be a mapping"
        name = rule.get("name")
        if not isinstance(name, str) or not name:
            return f"{where}.name is required"
        if name in seen:
            return f"{where}: duplicate rule name {name!r}"
        seen.add(name)
        present = [key for key in RULE_TYPES if rule.get(key)]
        if len(present) != 1:
            found = ", ".join(present) if present else "none"
            return f"{where} ({name}): a rule needs exactly one of validate, mutate, generate or verifyImages (found {found})"
        problem = _match_problem(rule.get("match"), f"{where}.match", required=True) or _match_problem(rule.get("exclude"), f"{where}.exclude", required=False)
        if problem:
            return problem
        problem = _context_problem(rule.get("context"), f"{where}.context")
        if problem:
            return problem
        problem = _conditions_problem(rule.get("preconditions"), f"{where}.preconditions")
        if problem:
            return problem
        validate = rule.get("validate")
        if isinstance(validate, dict) and isinstance(validate.get("deny"), dict):
            problem = _conditions_problem(validate["deny"].get("conditions"), f"{where}.validate.deny.conditions")
            if problem:
                return problem
    KyvernoPolicy(data).rules  # autogen must be computable: the engine and webhook registration both need it
    return None


def _match_problem(block: Any, where: str, required: bool) -> str | None:
    if block is None or block == {}:
        return f"{where}: match resources not specified" if required else None
    if not isinstance(block, dict):
        return f"{where} must be a mapping"
    has_any, has_all = bool(block.get("any")), bool(block.get("all"))
    if has_any and has_all:
        return f"{where}: any and all cannot be used together"
    if (has_any or has_all) and (block.get("resources") or block.get("subjects") or block.get("roles") or block.get("clusterRoles")):
        return f"{where}: any/all cannot be combined with resources, subjects or roles"
    for key in ("any", "all"):
        filters = block.get(key)
        if filters is not None and not isinstance(filters, list):
            return f"{where}.{key} must be a list"
    return None


def _context_problem(entries: Any, where: str) -> str | None:
    if entries is None:
        return None
    if not isinstance(entries, list):
        return f"{where} must be a list"
    from stockade.jmespath import JMESPathError, compile_expression

    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not entry.get("name"):
            return f"{where}[{index}]: a name is required for context entries"
        for kind in ("variable", "apiCall", "globalReference", "imageRegistry"):
            body = entry.get(kind)
            expression = body.get("jmesPath") if isinstance(body, dict) else None
            if isinstance(expression, str) and expression and "{{" not in expression:
                try:
                    compile_expression(expression)
                except JMESPathError as exc:
                    return f"{where}[{index}].{kind}.jmesPath: invalid JMESPath {expression!r}: {exc}"
    return None


def _conditions_problem(conditions: Any, where: str) -> str | None:
    """Unknown operators; Kyverno's own validation rejects them with the list of valid ones."""
    if conditions is None:
        return None
    if isinstance(conditions, dict):
        groups = [(f"{where}.{key}", conditions.get(key)) for key in ("any", "all")]
    else:
        groups = [(where, conditions)]
    for path, items in groups:
        if items is None:
            continue
        if not isinstance(items, list):
            return f"{path} must be a list"
        for index, condition in enumerate(items):
            if not isinstance(condition, dict):
                return f"{path}[{index}] must be a mapping"
            operator = condition.get("operator")
            if not isinstance(operator, str) or operator.lower() not in _KNOWN_OPERATORS:
                return f"{path}[{index}].operator: invalid operator {operator!r}"
    return None


def _exception_problem(data: dict[str, Any]) -> str | None:
    spec = data.get("spec")
    if not isinstance(spec, dict):
        return "spec must be a mapping"
    exceptions = spec.get("exceptions")
    if not isinstance(exceptions, list) or not exceptions:
        return "spec.exceptions must list at least one policy"
    for index, entry in enumerate(exceptions):
        if not isinstance(entry, dict) or not entry.get("policyName"):
            return f"spec.exceptions[{index}].policyName is required"
    return _match_problem(spec.get("match"), "spec.match", required=True)


_CEL_EXPRESSION_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("matchConditions", ("expression",)),
    ("variables", ("expression",)),
    ("validations", ("expression", "messageExpression")),
    ("auditAnnotations", ("valueExpression",)),
    ("mutations", ("applyConfiguration.expression", "jsonPatch.expression")),
)


def _cel_policy_problem(data: dict[str, Any], compiler: Any) -> str | None:
    """Compile every expression the webhook would evaluate, with the evaluator's own compiler (and cache)."""
    from stockade.celpolicy.compiler import PolicyCompiler
    from stockade.celpolicy.errors import PolicyCompileError

    spec = data.get("spec")
    if not isinstance(spec, dict):
        return "spec must be a mapping"
    mode = (spec.get("evaluation") or {}).get("mode") if isinstance(spec.get("evaluation"), dict) else None
    if mode not in (None, "", "Kubernetes"):
        return None  # HTTP/Envoy payload policies use other variables and never reach the admission webhook
    compiler = compiler or PolicyCompiler()
    identity = policy_identity(data)
    key = f"{identity[1]}/{identity[2]}/{identity[3]}"
    for list_name, paths in _CEL_EXPRESSION_FIELDS:
        items = spec.get(list_name)
        if items is None:
            continue
        if not isinstance(items, list):
            return f"spec.{list_name} must be a list"
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                return f"spec.{list_name}[{index}] must be a mapping"
            for path in paths:
                value: Any = item
                for part in path.split("."):
                    value = value.get(part) if isinstance(value, dict) else None
                if value is None:
                    continue
                field_path = f"spec.{list_name}[{index}].{path}"
                if not isinstance(value, str):
                    return f"{field_path} must be a string"
                try:
                    compiler.compile(key, field_path, value)
                except PolicyCompileError as exc:
                    return f"{field_path}: {exc.error.message} (expression {value!r})"
    return None


__all__ = [
    "DirectorySource",
    "PolicyIdentity",
    "PolicySnapshot",
    "PolicySource",
    "PolicyStore",
    "describe_identity",
    "document_problem",
    "policy_identity",
]
