"""Policies for the embedded mode: documents come from *sources* (files and directories, the cluster's CRDs), and a
snapshot is rebuilt whenever a source reports a change.

A reload builds a complete new evaluator and swaps it in one assignment, so a request is always evaluated against
one consistent snapshot.  Documents are checked one by one: an invalid policy is left out of the snapshot with its
error remembered (``snapshot.errors``) while every other policy keeps being served; only an unreadable source (a
file with broken YAML) keeps the previous snapshot and records the error for readiness.

Rebuilds are event-driven where a source can tell: a `ChangeNotifyingSource` (the cluster watch, Kyverno's
ConfigMap) calls ``request_rebuild()``, and the store's rebuild thread (``start()``) rebuilds at once, off the event
loop, one rebuild at a time, a burst of changes coalesced into one more rebuild.  ``reload_if_changed()`` polled by
the server stays the safety net for file sources.  A rebuild reuses what it built for every unchanged document (its
checks, its policy view, its compiled CEL programs), keyed by the document's content, so a one-policy change costs
milliseconds however many policies are loaded.

Sources hand over plain documents: nothing here imports the Kubernetes client.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import os
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from stockade.engine.engine import Engine
from stockade.identitymemo import IdentityMemo
from stockade.policy.loader import Document, LoadError, expand_paths, load_documents
from stockade.policy.model import CEL_POLICY_GROUP, KYVERNO_GROUP, KyvernoPolicy, api_group, is_kyverno_policy
from stockade.policy.resources import split_policies
from stockade.webhook.admission import (
    IMAGE_VALIDATING_POLICY_KINDS,
    MUTATING_POLICY_KINDS,
    VALIDATING_POLICY_KINDS,
    AdmissionEvaluator,
    NamespaceLabels,
)

log = logging.getLogger("stockade.webhook")

# (API group, kind, namespace, name): how a policy is named in ``snapshot.errors`` and by the cluster source.
PolicyIdentity = tuple[str, str, str, str]



def policy_identity(data: dict[str, Any]) -> PolicyIdentity:
    metadata = data.get("metadata")
    if not isinstance(metadata, dict):
        metadata = {}
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


@runtime_checkable
class ChangeNotifyingSource(Protocol):
    """A source that knows when it changed (a watch): it calls every subscribed callback right after its fingerprint
    moved, from its own thread; callbacks must return at once."""

    def subscribe(self, callback: Callable[[], None]) -> None: ...


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
    generation: int = 0  # counts the store's snapshots; evaluation workers report which one they hold
    document_keys: tuple[bytes, ...] = ()  # content_key() of each of ``documents``


def accepted_documents(snapshot: Any, wanted: Callable[[dict[str, Any]], bool]) -> list[Document]:
    """The documents of ``snapshot`` that ``wanted`` picks and the store did not reject (none before the first
    snapshot): what the controllers act on for the policy kinds the webhook does not serve itself."""
    if snapshot is None:
        return []
    errors = getattr(snapshot, "errors", {}) or {}
    return [d for d in getattr(snapshot, "documents", ()) or () if wanted(d.data) and policy_identity(d.data) not in errors]


@dataclass
class _Prepared:
    """What a rebuild keeps of one document, by content: why it is not served (or None), and its policy view."""

    problem: str | None
    view: Any = None


_VOLATILE_METADATA = ("resourceVersion", "managedFields")


def content_key(document: Document) -> bytes:
    """Identifies what a document means: its origin and content without status and the bookkeeping metadata a status
    write changes, so a policy whose status was just written is not prepared again."""
    data = document.data
    meaning = {key: value for key, value in data.items() if key != "status"}
    metadata = data.get("metadata")
    if isinstance(metadata, dict):
        meaning["metadata"] = {key: value for key, value in metadata.items() if key not in _VOLATILE_METADATA}
    try:
        text = _canonical_bytes(meaning)
    except (TypeError, ValueError, RecursionError):  # nested too deeply to serialize: a key that never matches
        return b"unkeyed:%d" % next(_UNKEYED)
    digest = hashlib.blake2b(text, digest_size=20)
    digest.update(document.origin.encode("utf-8", "replace"))
    return digest.digest()


_UNKEYED = itertools.count()


def _canonical_bytes(value: Any) -> bytes:
    try:
        import orjson
    except ImportError:  # pragma: no cover - orjson is part of the server extra
        import json

        return json.dumps(value, sort_keys=True, default=repr).encode()
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=repr)


def _cel_program_owner(policy_key: str) -> str:
    """The policy a compiled program belongs to: autogen variants are keyed ``<policy key>#autogen<n>``."""
    return policy_key.split("#", 1)[0]


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
        force_failure_policy_ignore: bool = False,
        cel_providers: dict[str, Any] | None = None,
        cel_authorize: Callable[[dict[str, Any], dict[str, Any]], tuple[str, str]] | None = None,
        prechecked: bool = False,
        allow_namespaced_http: bool = False,
    ) -> None:
        """``evaluator_options`` go to every AdmissionEvaluator built (role resolver, default timeout), so no snapshot
        is ever served without them; ``exception_namespaces`` limits which PolicyExceptions count (None: all);
        ``controller_kinds`` are policy kinds that cluster controllers (generate, scheduled deletion) carry out, so they
        are in force although the admission evaluator does not serve them; ``log_rejections`` False leaves naming the
        policies left out to another store over the same documents (an evaluation worker's, whose server logs them);
        ``force_failure_policy_ignore`` is Kyverno's forceFailurePolicyIgnore install option (see ``forced_ignore``);
        ``cel_providers`` (``resource``, ``http``, ``globalContext``) and ``cel_authorize`` answer the cluster-backed
        libraries of CEL policies; ``prechecked``: the caller already ran the policy check for admission
        (``check_policy(admission=True)``) on every document and refused on its errors, so it is not run again;
        ``allow_namespaced_http``: namespaced CEL policies may use ``http.*`` (Kyverno's
        --allowHTTPInNamespacedPolicies)."""
        self.prechecked = prechecked
        self.allow_namespaced_http = allow_namespaced_http
        self.log_rejections = log_rejections
        self.force_failure_policy_ignore = force_failure_policy_ignore
        self.cel_authorize = cel_authorize
        self.paths = list(paths or [])
        self.evaluator_options = dict(evaluator_options or {})
        self.exception_namespaces = None if exception_namespaces is None else set(exception_namespaces)
        self.sources: list[PolicySource] = ([DirectorySource(self.paths)] if self.paths else []) + list(sources or [])
        self.image_verifier = image_verifier
        self.verification_cache = verification_cache
        self.namespace_labels = namespace_labels
        self.engine_factory = engine_factory
        self.controller_kinds = frozenset(controller_kinds)
        self.cel_providers = dict(cel_providers or {})  # CEL libraries answered by the cluster (resource, http, ...)
        self.snapshot: PolicySnapshot | None = None
        self.last_error: str = ""
        self._failed_fingerprint: tuple[Any, ...] | None = None
        # called with each new snapshot just before it is installed, on the rebuilding thread: what must hold the
        # snapshot before any review is decided against it (the evaluation workers' publication)
        self.before_install: list[Callable[[PolicySnapshot], None]] = []
        # called once it is installed (status write-back, webhook registration, metrics)
        self.listeners: list[Callable[[PolicySnapshot], None]] = []
        self.generation = 0
        self.prepared_documents = 0  # documents checked and built anew (not reused from an earlier rebuild)
        self.rebuilds_requested = 0
        self._prepared: dict[bytes, _Prepared] = {}
        self._document_keys: dict[int, tuple[Document, bytes]] = {}
        self._compiler: Any = None  # one PolicyCompiler across rebuilds (programs of unchanged policies are kept)
        self._build_lock = threading.RLock()  # never two rebuilds at once (rebuild thread, poll, start-up load)
        self._rebuild_wanted = threading.Event()
        self._stopping = threading.Event()
        self._rebuilder: threading.Thread | None = None
        for source in self.sources:
            if isinstance(source, ChangeNotifyingSource):
                source.subscribe(self.request_rebuild)

    def policy_files(self) -> list[str]:
        return [path for source in self.sources if isinstance(source, DirectorySource) for path in source.policy_files()]

    def _fingerprint(self) -> tuple[Any, ...]:
        return tuple(source.fingerprint() for source in self.sources)

    def load(self) -> PolicySnapshot:
        """Load now; raises LoadError/OSError when a source cannot be read, so `serve` fails fast with the file named.
        Invalid individual policies do not raise: they are logged and listed in ``snapshot.errors``."""
        with self._build_lock:
            fingerprint = self._fingerprint()
            documents: list[Document] = []
            for source in self.sources:
                documents.extend(source.documents())
            if self.force_failure_policy_ignore:
                documents = [_FORCED_IGNORE.get(document, forced_ignore) for document in documents]
            snapshot = self._build(documents, fingerprint, self.generation + 1)
            for hook in self.before_install:
                hook(snapshot)  # a failure here must not install a snapshot the workers do not have
            self.generation = snapshot.generation
            self.snapshot = snapshot
            self.last_error = ""
            log.debug("policy snapshot %d installed: %d documents", snapshot.generation, len(documents))
            for listener in self.listeners:
                try:
                    listener(snapshot)
                except Exception:  # one failing listener (e.g. a status write) must not hide the snapshot from others
                    log.exception("policy snapshot listener failed")
            return snapshot

    def _prepare(self, documents: list[Document]) -> tuple[list[_Prepared], Any, list[bytes]]:
        """Each document's _Prepared, reused from the previous rebuild when its content is unchanged, and the CEL
        compiler, purged of the programs of policies that changed or went away."""
        from stockade.celpolicy.compiler import PolicyCompiler

        previous = self._prepared
        current: dict[bytes, _Prepared] = {}
        keys = [self._content_key(document) for document in documents]
        self._document_keys = {id(document): (document, key) for document, key in zip(documents, keys)}
        unchanged_cel = {
            _cel_key(document) for document, key in zip(documents, keys) if key in previous and api_group(document.api_version) == CEL_POLICY_GROUP
        }
        if self._compiler is None:
            self._compiler = PolicyCompiler()
        self._compiler.retain(lambda policy_key: _cel_program_owner(policy_key) in unchanged_cel)
        prepared: list[_Prepared] = []
        for document, key in zip(documents, keys):
            entry = current.get(key) or previous.get(key)
            if entry is None:
                entry = _Prepared(document_problem(document, self._compiler, prechecked=self.prechecked, allow_namespaced_http=self.allow_namespaced_http))
                self.prepared_documents += 1
            current[key] = entry
            prepared.append(entry)
        self._prepared = current
        return prepared, self._compiler, keys

    def _content_key(self, document: Document) -> bytes:
        """content_key(), not computed again for the very Document object the previous rebuild saw (sources that
        keep unchanged documents, like the evaluation workers' and the cluster watch, hand the same objects again)."""
        known = self._document_keys.get(id(document))
        if known is not None and known[0] is document:
            return known[1]
        return content_key(document)

    def _build(self, documents: list[Document], fingerprint: tuple[Any, ...], generation: int = 0) -> PolicySnapshot:
        prepared, compiler, keys = self._prepare(documents)
        errors: dict[PolicyIdentity, str] = {}
        accepted: list[Document] = []
        entries: dict[int, _Prepared] = {}
        for document, entry in zip(documents, prepared):
            if entry.problem is None:
                accepted.append(document)
                entries[id(document)] = entry
                continue
            identity = policy_identity(document.data)
            errors[identity] = entry.problem
            if self.log_rejections:
                log.error("policy %s (%s) is not served: %s", describe_identity(identity), document.origin, entry.problem)
        if self.exception_namespaces is not None:
            # an exception outside the allowed namespaces would let its author exempt themselves from cluster policies
            accepted = [d for d in accepted if d.kind != "PolicyException" or self._exception_allowed(d)]

        def prebuilt(document: Document) -> Any:
            return entries[id(document)].view

        policy_set = split_policies(accepted, prebuilt)
        built_now = {id(document.data): entries[id(document)] for document in accepted if entries[id(document)].view is None}
        for view in [*policy_set.kyverno, *policy_set.exceptions]:
            built = built_now.get(id(view.raw))
            if built is not None:
                built.view = view  # reused by the next rebuild while the document stays the same
        engine = self.engine_factory(
            exceptions=policy_set.exceptions, image_verifier=self.image_verifier, verification_cache=self.verification_cache
        )
        cel_policies, cel_evaluator = _cel_validating(
            policy_set.cel, compiler, lambda document: _cel_view(entries[id(document)], document), self.cel_providers, self.cel_authorize
        )
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
            generation=generation,
            document_keys=tuple(keys),
        )

    def _exception_allowed(self, document: Document) -> bool:
        namespace = str((document.data.get("metadata") or {}).get("namespace") or "")
        if self.exception_namespaces is not None and not self.exception_namespaces:
            log.warning("PolicyException %s/%s ignored: policy exceptions are disabled", namespace,
                        (document.data.get("metadata") or {}).get("name", ""))
            return False
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
        with self._build_lock:
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

    # -- event-driven rebuilds ------------------------------------------------------------------------------------
    def request_rebuild(self) -> None:
        """A source changed: the rebuild thread rebuilds now; requests arriving meanwhile make one more rebuild.
        Cheap and callable from any thread (a watch thread calls it for every change it sees)."""
        self.rebuilds_requested += 1
        self._rebuild_wanted.set()

    def start(self) -> None:
        """Start the rebuild thread (after the first ``load()``); a request made before it is served at once."""
        if self._rebuilder is not None:
            return
        self._stopping.clear()
        self._rebuilder = threading.Thread(target=self._run_rebuilds, name="policy-rebuild", daemon=True)
        self._rebuilder.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._rebuild_wanted.set()
        if self._rebuilder is not None:
            self._rebuilder.join(timeout)
            self._rebuilder = None

    def _run_rebuilds(self) -> None:
        while True:
            self._rebuild_wanted.wait()
            if self._stopping.is_set():
                return
            self._rebuild_wanted.clear()  # cleared before the rebuild reads the sources: later changes are not lost
            try:
                self.reload_if_changed()
            except Exception:  # a bug in one rebuild must not stop every later one
                log.exception("policy rebuild failed")

    def readiness_problem(self) -> str:
        """Why this store should not count as ready ('' when it should): no snapshot yet, or the last reload failed."""
        if self.snapshot is None:
            return "policies not loaded"
        if self.last_error:
            return f"policy reload failed (previous policies still served): {self.last_error}"
        return ""


# Policy kinds whose failurePolicy chooses their webhook and what a failed evaluation does (GeneratingPolicy is always
# Ignore; exceptions and cleanup policies have none).
_FAILURE_POLICY_KINDS = frozenset({"ClusterPolicy", "Policy", *VALIDATING_POLICY_KINDS, *MUTATING_POLICY_KINDS, *IMAGE_VALIDATING_POLICY_KINDS})
# the forced copy of each live document, so an unchanged policy hands the same object to every rebuild (its content
# key and prepared checks are then reused, as for any unchanged document)
_FORCED_IGNORE: IdentityMemo[Document, Document] = IdentityMemo(100_000)


def forced_ignore(document: Document) -> Document:
    """``document`` with failurePolicy Ignore, as Kyverno's forceFailurePolicyIgnore makes every policy report it:
    its webhooks are registered with failurePolicy Ignore and its evaluation errors admit. The source's own document
    is left as it is (its status and reports still name the policy as written), and the copy keeps the source's
    Document subclass and fields (the cluster source's carry what status write-back needs)."""
    spec = document.data.get("spec")
    if api_group(document.api_version) not in (KYVERNO_GROUP, CEL_POLICY_GROUP) or document.kind not in _FAILURE_POLICY_KINDS or not isinstance(spec, dict):
        return document
    configuration = spec.get("webhookConfiguration")
    if isinstance(configuration, dict) and "failurePolicy" in configuration:
        # the policy states its failure policy where Kyverno wants it: forced there only, since the deprecated
        # spec.failurePolicy beside it would make the policy invalid (and never Ready)
        forced_spec = {**spec, "webhookConfiguration": {**configuration, "failurePolicy": "Ignore"}}
    else:
        forced_spec = {**spec, "failurePolicy": "Ignore"}
    return dataclasses.replace(document, data={**document.data, "spec": forced_spec})  # keeps a source's subclass


def _cel_key(document: Document) -> str:
    """The key CelPolicy gives this document (and its compiled programs)."""
    _, kind, namespace, name = policy_identity(document.data)
    return f"{kind}/{namespace}/{name}"


def _cel_view(entry: _Prepared, document: Document) -> Any:
    from stockade.celpolicy import CelPolicy

    if not isinstance(entry.view, CelPolicy):
        entry.view = CelPolicy(document.data, document.origin)
    return entry.view


def _cel_validating(
    documents: list[Document],
    compiler: Any = None,
    view: Callable[[Document], Any] | None = None,
    providers: dict[str, Any] | None = None,
    authorize: Callable[[dict[str, Any], dict[str, Any]], tuple[str, str]] | None = None,
) -> tuple[list[Any], Any]:
    """(Namespaced)Validating/MutatingPolicy documents and an evaluator with the CEL PolicyExceptions loaded beside them;
    ``view`` returns the CelPolicy of a document (reused across rebuilds by the store).  Without ``providers`` (no
    cluster) policies calling ``resource.*``, ``http.*`` or the global context evaluate to errors."""
    wanted = [d for d in documents if d.kind in VALIDATING_POLICY_KINDS + MUTATING_POLICY_KINDS + IMAGE_VALIDATING_POLICY_KINDS]
    if not wanted:
        return [], None
    from stockade.celpolicy import CelPolicy, CelPolicyEvaluator

    make = view or (lambda d: CelPolicy(d.data, d.origin))
    exceptions = [make(d) for d in documents if d.kind == "PolicyException"]
    return [make(d) for d in wanted], CelPolicyEvaluator(exceptions=exceptions, compiler=compiler, providers=providers, authorize=authorize)


# -- per-document checks ------------------------------------------------------------------------------------------
# Kyverno rejects invalid policies in its own admission webhook before they are stored; a policy read from files, or
# stored while our /policyvalidate webhook was not registered, has had no such check.  The same static checks run
# here (stockade.lint.policies), so such a policy is left out with its reason instead of failing (or silently
# misbehaving) at request time.


def document_problem(document: Document, compiler: Any = None, prechecked: bool = False, allow_namespaced_http: bool = False) -> str | None:
    """Why this policy document cannot be served, or None (also for documents that are not policies); never raises.
    ``prechecked``: the policy check already passed (see PolicyStore), only what serving needs beyond it is checked."""
    from stockade.lint.check import Severity, check_policy, is_checked_kind
    from stockade.lint.policies import is_policy_document

    data = document.data
    if not is_checked_kind(data):
        return None
    try:
        metadata = data.get("metadata")
        if not isinstance(metadata, dict) or not metadata.get("name"):
            return "metadata.name: a name is required"
        refused = [] if prechecked else [f.message for f in check_policy(data, document.source, document.index, admission=True, allow_namespaced_http=allow_namespaced_http) if f.severity is Severity.ERROR]
        if refused:
            return "; ".join(refused)
        if not is_policy_document(data):
            return None
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
    keeps_programs = compiler is not None
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
    if keeps_programs and identity[1] in _CHAINED_KINDS:
        # the validations as one program (stockade.celpolicy.chain), built now rather than on the first review
        compiler.validation_chain(key, spec.get("variables"), spec.get("validations"))
    return None


# Kinds served here whose validations the evaluator chains.
_CHAINED_KINDS = frozenset({"ValidatingPolicy", "NamespacedValidatingPolicy"})


__all__ = [
    "ChangeNotifyingSource",
    "DirectorySource",
    "PolicyIdentity",
    "PolicySnapshot",
    "PolicySource",
    "PolicyStore",
    "describe_identity",
    "document_problem",
    "content_key",
    "policy_identity",
]
