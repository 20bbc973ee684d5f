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

from stockade.engine.engine import Engine
from stockade.policy.loader import Document, LoadError, expand_paths, load_documents
from stockade.policy.model import CEL_POLICY_GROUP, KyvernoPolicy, api_group, is_kyverno_policy
from stockade.policy.resources import split_policies
from stockade.webhook.admission import MUTATING_POLICY_KINDS, VALIDATING_POLICY_KINDS, AdmissionEvaluator, NamespaceLabels

log = logging.getLogger("stockade.webhook")

# (API group, kind, namespace, name): how a policy is named in ``snapshot.errors`` and by the cluster source.
PolicyIdentity = tuple[str, str, str, str]



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
        evaluator_options: dict[str, Any] | None = None,
        exception_namespaces: list[str] | None = None,
        controller_kinds: tuple[str, ...] = (),
        log_rejections: bool = True,
    ) -> None:
        """``evaluator_options`` go to every AdmissionEvaluator built (role resolver, default timeout), so no snapshot
        is ever served without them; ``exception_namespaces`` limits which PolicyExceptions count (None: all);
        ``controller_kinds`` are policy kinds that cluster controllers (generate, scheduled deletion) carry out, so they
        are in force although the admission evaluator does not serve them; ``log_rejections`` False leaves naming the
        policies left out to another store over the same documents (an evaluation worker's, whose server logs them)."""
        self.log_rejections = log_rejections
        self.paths = list(paths or [])
        self.evaluator_options = dict(evaluator_options or {})
        self.exception_namespaces = None if exception_namespaces is None else set(exception_namespaces)
        self.sources: list[PolicySource] = ([DirectorySource(self.paths)] if self.paths else []) + list(sources or [])
        self.image_verifier = image_verifier
        self.verification_cache = verification_cache
        self.namespace_labels = namespace_labels
        self.engine_factory = engine_factory
        self.controller_kinds = frozenset(controller_kinds)
        self.snapshot: PolicySnapshot | None = None
        self.last_error: str = ""
        self._failed_fingerprint: tuple[Any, ...] | None = None
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
            if self.log_rejections:
                log.error("policy %s (%s) is not served: %s", describe_identity(identity), document.origin, problem)
        if self.exception_namespaces is not None:
            # an exception outside the allowed namespaces would let its author exempt themselves from cluster policies
            accepted = [d for d in accepted if d.kind != "PolicyException" or self._exception_allowed(d)]
        policy_set = split_policies(accepted)
        engine = self.engine_factory(
            exceptions=policy_set.exceptions, image_verifier=self.image_verifier, verification_cache=self.verification_cache
        )
        cel_policies, cel_evaluator = _cel_validating(policy_set.cel, compiler)
        served = {id(p.raw) for p in cel_policies}
        unsupported_documents = [d for d in policy_set.cel + policy_set.admission if id(d.data) not in served and d.kind != "PolicyException" and d.kind not in self.controller_kinds]
        return PolicySnapshot(
            policies=policy_set.kyverno,
            evaluator=AdmissionEvaluator(
                engine, policy_set.kyverno, self.namespace_labels, cel_policies=cel_policies, cel_evaluator=cel_evaluator, **self.evaluator_options
            ),
            fingerprint=fingerprint,
            unsupported=tuple(f"{d.kind}/{d.data.get('metadata', {}).get('name', '')}" for d in unsupported_documents),
            cel_policies=cel_policies,
            documents=tuple(documents),
            errors=errors,
            unsupported_identities=frozenset(policy_identity(d.data) for d in unsupported_documents),
        )

    def _exception_allowed(self, document: Document) -> bool:
        namespace = str((document.data.get("metadata") or {}).get("namespace") or "")
        if self.exception_namespaces is not None and namespace not in self.exception_namespaces:
            log.warning("PolicyException %s/%s ignored: exceptions are only honoured in %s", namespace,
                        (document.data.get("metadata") or {}).get("name", ""), ", ".join(sorted(self.exception_namespaces)))
            return False
        return True

    def reload_if_changed(self) -> bool:
        """Poll the sources; True when a new snapshot was installed.

        A failed reload keeps the previous snapshot in service, logs the file and reason once per change of the
        sources, and stays visible through ``readiness_problem()`` until a reload succeeds.
        """
        fingerprint: tuple[Any, ...] | None = None
        try:
            fingerprint = self._fingerprint()
            if self.snapshot is not None and fingerprint == self.snapshot.fingerprint:
                self.last_error = ""  # the sources are back to what is being served
                return False
            if self.last_error and fingerprint == self._failed_fingerprint:
                return False  # same broken files as last time: already logged, still reported by readiness
            self.load()
            log.info("policies reloaded: %d policies", len(self.snapshot.policies) if self.snapshot else 0)
            return True
        except (LoadError, OSError, ValueError) as exc:
            self.last_error = str(exc)
            self._failed_fingerprint = fingerprint
            log.error("policy reload failed, keeping the previous policies: %s", exc)
            return False

    def readiness_problem(self) -> str:
        """Why this store should not count as ready ('' when it should): no snapshot yet, or the last reload failed."""
        if self.snapshot is None:
            return "policies not loaded"
        if self.last_error:
            return f"policy reload failed (previous policies still served): {self.last_error}"
        return ""


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
# Kyverno rejects invalid policies in its own admission webhook before they are stored; a policy read from files, or
# stored while our /policyvalidate webhook was not registered, has had no such check.  The same static checks run
# here (stockade.policy.validation), so such a policy is left out with its reason instead of failing (or silently
# misbehaving) at request time.


def document_problem(document: Document, compiler: Any = None) -> str | None:
    """Why this policy document cannot be served, or None (also for documents that are not policies); never raises."""
    from stockade.policy.validation import is_policy_document, validate_policy_document

    data = document.data
    if not is_policy_document(data):
        return None
    try:
        metadata = data.get("metadata")
        if not isinstance(metadata, dict) or not metadata.get("name"):
            return "metadata.name: a name is required"
        result = validate_policy_document(data)
        if not result.ok:
            return "; ".join(str(problem) for problem in result.errors)
        if is_kyverno_policy(data):
            KyvernoPolicy(data).rules  # autogen must be computable: the engine and webhook registration both need it
        elif api_group(document.api_version) == CEL_POLICY_GROUP and document.kind in VALIDATING_POLICY_KINDS + MUTATING_POLICY_KINDS:
            return _cel_policy_problem(data, compiler)
        return None
    except Exception as exc:  # a check tripping over an unexpected shape is itself a reason not to serve the policy
        return f"cannot be read: {type(exc).__name__}: {exc}"


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
