"""Policies for the embedded mode: loaded from files and directories, reloaded when they change.

A reload builds a complete new evaluator and swaps it in one assignment, so a request is always evaluated against
one consistent snapshot; a broken edit keeps the previous snapshot and records the error for readiness.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stockade.engine.engine import Engine
from stockade.policy.loader import LoadError, expand_paths, load_documents
from stockade.policy.model import KyvernoPolicy
from stockade.policy.resources import split_policies
from stockade.policy.loader import Document
from stockade.webhook.admission import MUTATING_POLICY_KINDS, VALIDATING_POLICY_KINDS, AdmissionEvaluator, NamespaceLabels

log = logging.getLogger("stockade.webhook")


@dataclass(frozen=True)
class PolicySnapshot:
    policies: list[KyvernoPolicy]
    evaluator: AdmissionEvaluator
    fingerprint: tuple[tuple[str, int, int], ...]
    unsupported: tuple[str, ...] = ()
    cel_policies: list[Any] = field(default_factory=list)


class PolicyStore:
    """Holds the current PolicySnapshot for a set of paths."""

    def __init__(
        self,
        paths: list[str],
        namespace_labels: NamespaceLabels | None = None,
        engine_factory: Callable[..., Engine] = Engine,
        image_verifier: Any = None,
        verification_cache: Any = None,
    ) -> None:
        self.paths = list(paths)
        self.image_verifier = image_verifier
        self.verification_cache = verification_cache
        self.namespace_labels = namespace_labels
        self.engine_factory = engine_factory
        self.snapshot: PolicySnapshot | None = None
        self.last_error: str = ""
        self.listeners: list[Callable[[PolicySnapshot], None]] = []

    def policy_files(self) -> list[str]:
        """Files under the paths, minus the ``..<timestamp>`` copies a mounted ConfigMap keeps beside its symlinks
        (loading those too would register every policy twice)."""
        return [path for path in expand_paths(self.paths) if not any(part.startswith("..") and part != ".." for part in path.split(os.sep))]

    def _fingerprint(self) -> tuple[tuple[str, int, int], ...]:
        entries = []
        for path in self.policy_files():
            stat = os.stat(path)
            entries.append((path, stat.st_mtime_ns, stat.st_size))
        return tuple(sorted(entries))

    def load(self) -> PolicySnapshot:
        """Load now; raises LoadError/OSError on the first load so `serve` fails fast with the file named."""
        fingerprint = self._fingerprint()
        policy_set = split_policies(load_documents(self.policy_files()))
        engine = self.engine_factory(
            exceptions=policy_set.exceptions, image_verifier=self.image_verifier, verification_cache=self.verification_cache
        )
        cel_policies, cel_evaluator = _cel_validating(policy_set.cel)
        served = {id(p.raw) for p in cel_policies}
        unsupported = tuple(
            f"{d.kind}/{d.data.get('metadata', {}).get('name', '')}"
            for d in policy_set.cel + policy_set.admission
            if id(d.data) not in served and d.kind != "PolicyException"
        )
        snapshot = PolicySnapshot(
            policies=policy_set.kyverno,
            evaluator=AdmissionEvaluator(engine, policy_set.kyverno, self.namespace_labels, cel_policies=cel_policies, cel_evaluator=cel_evaluator),
            fingerprint=fingerprint,
            unsupported=unsupported,
            cel_policies=cel_policies,
        )
        self.snapshot = snapshot
        self.last_error = ""
        for listener in self.listeners:
            listener(snapshot)
        return snapshot

    def reload_if_changed(self) -> bool:
        """Poll the files; True when a new snapshot was installed."""
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


def _cel_validating(documents: list[Document]) -> tuple[list[Any], Any]:
    """(Namespaced)Validating/MutatingPolicy documents and an evaluator with the CEL PolicyExceptions loaded beside them.

    CEL providers that need the cluster (``resource.*``, ``http.*``, global context) are not wired yet, so policies
    using them evaluate to errors (and deny under failurePolicy Fail)."""
    wanted = [d for d in documents if d.kind in VALIDATING_POLICY_KINDS + MUTATING_POLICY_KINDS]
    if not wanted:
        return [], None
    from stockade.celpolicy import CelPolicy, CelPolicyEvaluator

    exceptions = [CelPolicy(d.data, d.origin) for d in documents if d.kind == "PolicyException"]
    return [CelPolicy(d.data, d.origin) for d in wanted], CelPolicyEvaluator(exceptions=exceptions)
