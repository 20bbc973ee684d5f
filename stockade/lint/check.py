"""The one policy check every entry point runs: the CRD schema first, then Kyverno's admission-time validation.

``stockade apply``/``test``/``explain``/``lint``/``images``, ``serve`` (files and cluster) and the policy webhook all
call ``check_policy`` (or ``check_documents``), so a policy is judged the same way wherever it enters:

1. the kind and version must exist in a policy group Stockade knows (a misspelt ``kind: ClusterPolcy`` would
   otherwise be read as a plain resource and check nothing);
2. the document must fit the kind's structural schema (``stockade.policy.schema``): invalid values (enum typos,
   wrong types, missing required fields) are errors; unknown fields are warnings, since the API server prunes them,
   unless the caller is strict;
3. the admission-time checks Kyverno's policy webhook makes (``stockade.lint.policies``), on the document as the
   API server would store it (unknown fields pruned).

Each finding names the file, the document, the policy and the field path, so an author can go straight to it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from stockade.lint.policies import ValidationResult, is_policy_document, validate_policy_document
from stockade.policy.loader import Document
from stockade.policy.schema.validate import UnknownKind, check_document, prune_unknown, resolve_kind


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"


class Code(str, Enum):
    """What kind of problem a finding is; callers decide on codes, never on message text."""

    UNKNOWN_KIND = "unknown-kind"
    UNKNOWN_FIELD = "unknown-field"
    INVALID_VALUE = "invalid-value"
    INVALID_POLICY = "invalid-policy"
    POLICY_WARNING = "policy-warning"
    # beyond Kyverno: a CEL expression whose estimated cost is over the static limit.  Refused where the policy
    # would serve admission (the webhook, serve); a warning offline, where the runtime cost limit bounds it anyway
    ADMISSION_SAFETY = "admission-safety"
    # a check Kyverno makes only in its policy webhook (not in its CLI, which loads and compiles the policy and
    # evaluates it): an error where the policy is admitted (lint, serve), a warning for `test` and `apply`
    WEBHOOK_ONLY = "webhook-only"


@dataclass(frozen=True)
class Finding:
    severity: Severity
    code: Code
    message: str
    path: str = ""
    source: str = ""
    index: int = 0
    kind: str = ""
    name: str = ""
    suggestion: str = ""

    @property
    def location(self) -> str:
        return f"{self.source} (document {self.index + 1})" if self.source else f"document {self.index + 1}"

    @property
    def subject(self) -> str:
        return f"{self.kind} {self.name!r}" if self.name else self.kind or "document"

    def __str__(self) -> str:
        return f"{self.location}: {self.subject}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "severity": self.severity.value,
            "code": self.code.value,
            "file": self.source,
            "document": self.index + 1,
            "kind": self.kind,
            "name": self.name,
            "path": self.path,
            "message": self.message,
            **({"suggestion": self.suggestion} if self.suggestion else {}),
        }


@dataclass
class CheckReport:
    """Findings of a set of documents; ``strict`` turns unknown fields into errors (``test``, ``--strict``)."""

    findings: list[Finding] = field(default_factory=list)
    checked: int = 0

    def errors(self, strict: bool = False) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.ERROR or (strict and f.code is Code.UNKNOWN_FIELD)]

    def warnings(self, strict: bool = False) -> list[Finding]:
        refused = set(map(id, self.errors(strict)))
        return [f for f in self.findings if id(f) not in refused]

    def refused(self, strict: bool = False) -> set[tuple[str, int]]:
        """(source, document index) of every document the check refuses."""
        return {(f.source, f.index) for f in self.errors(strict)}

    def ok(self, strict: bool = False) -> bool:
        return not self.errors(strict)


# The CLI's own file kinds; old test files write them under kyverno.io/v1.  They are inputs of `test`, not policies.
CLI_FILE_KINDS = frozenset({"Test", "Values", "UserInfo", "Context"})


def is_checked_kind(document: dict[str, Any]) -> bool:
    """Whether the check has anything to say about this document: a kind of a policy group (even a misspelt one)."""
    if document.get("kind") in CLI_FILE_KINDS:
        return False
    try:
        if resolve_kind(str(document.get("apiVersion") or ""), str(document.get("kind") or "")) is not None:
            return True
    except UnknownKind:
        return True
    return is_policy_document(document)


def _identity(document: dict[str, Any]) -> tuple[str, str]:
    metadata = document.get("metadata")
    name = str(metadata.get("name") or metadata.get("generateName") or "") if isinstance(metadata, dict) else ""
    return str(document.get("kind") or ""), name


def schema_findings(document: dict[str, Any], source: str = "", index: int = 0) -> list[Finding]:
    """Steps 1 and 2 alone: kind/version and the structural schema.  Never raises."""
    kind, name = _identity(document)

    def finding(severity: Severity, code: Code, message: str, path: str = "", suggestion: str = "") -> Finding:
        return Finding(severity, code, message, path, source, index, kind, name, suggestion)

    try:
        problems = check_document(document)
    except UnknownKind as error:
        return [finding(Severity.ERROR, Code.UNKNOWN_KIND, str(error), "kind", error.suggestion)]
    return [
        finding(Severity.WARNING, Code.UNKNOWN_FIELD, str(problem), problem.path, problem.suggestion)
        if problem.unknown
        else finding(Severity.ERROR, Code.INVALID_VALUE, str(problem), problem.path, problem.suggestion)
        for problem in problems
    ]


@dataclass(frozen=True)
class Assessment:
    """Both steps' raw results for one document: the schema findings, and Kyverno's validation of the document as
    it will be stored (None when the schema refused it or it is no policy).  ``check_policy`` turns it into
    findings; the policy webhook answers from it in Kyverno's words."""

    schema: list[Finding]
    validation: ValidationResult | None

    @property
    def schema_errors(self) -> list[Finding]:
        return [f for f in self.schema if f.severity is Severity.ERROR]

    @property
    def unknown_fields(self) -> list[Finding]:
        return [f for f in self.schema if f.severity is not Severity.ERROR]


def assess_policy(
    document: dict[str, Any], source: str = "", index: int = 0, old: dict[str, Any] | None = None, allow_namespaced_http: bool = False
) -> Assessment:
    """Run the check on one document.  Raises only where Kyverno's validation itself fails (a checker bug).
    ``allow_namespaced_http``: the server's --allow-http-in-namespaced-policies."""
    findings = schema_findings(document, source, index)
    if any(f.severity is Severity.ERROR for f in findings) or not is_policy_document(document):
        # the admission checks assume the schema's shapes; a document that breaks them is already refused
        return Assessment(findings, None)
    return Assessment(findings, validate_policy_document(prune_unknown(document), prune_unknown(old) if old else None, allow_namespaced_http))


def check_policy(
    document: dict[str, Any],
    source: str = "",
    index: int = 0,
    old: dict[str, Any] | None = None,
    admission: bool = False,
    offline: bool = False,
    allow_namespaced_http: bool = False,
) -> list[Finding]:
    """Every finding for one document; [] for documents of no policy group.  Never raises.

    ``admission``: the policy is about to serve admission reviews, so admission-safety problems are errors.
    ``offline``: the check Kyverno's CLI makes (`test`, `apply`): problems its policy webhook alone refuses are
    warnings."""
    kind, name = _identity(document)
    if kind in CLI_FILE_KINDS:
        return []
    try:
        assessment = assess_policy(document, source, index, old, allow_namespaced_http)
    except Exception as error:  # a checker bug must surface as a finding, never as a traceback
        message = f"the policy could not be checked: {type(error).__name__}: {error}"
        return [*schema_findings(document, source, index), Finding(Severity.ERROR, Code.INVALID_POLICY, message, "", source, index, kind, name)]
    findings = list(assessment.schema)
    result = assessment.validation
    if result is None:
        return findings
    for lint_problem in result.errors:
        if lint_problem.webhook_only and offline:
            if str(lint_problem) in result.warnings:  # Kyverno's webhook sends it as a warning too: say it once
                continue
            findings.append(Finding(Severity.WARNING, Code.WEBHOOK_ONLY, str(lint_problem), lint_problem.path, source, index, kind, name))
        elif lint_problem.safety:
            severity = Severity.ERROR if admission else Severity.WARNING
            findings.append(Finding(severity, Code.ADMISSION_SAFETY, str(lint_problem), lint_problem.path, source, index, kind, name))
        else:
            findings.append(Finding(Severity.ERROR, Code.INVALID_POLICY, str(lint_problem), lint_problem.path, source, index, kind, name))
    for warning in result.warnings:
        findings.append(Finding(Severity.WARNING, Code.POLICY_WARNING, warning, "", source, index, kind, name))
    return findings


def check_documents(documents: Iterable[Document], admission: bool = False, offline: bool = False) -> CheckReport:
    """Check every policy document among ``documents`` (other documents are not counted); ``admission`` and
    ``offline`` as in ``check_policy``."""
    report = CheckReport()
    for document in documents:
        if not is_checked_kind(document.data):
            continue
        report.checked += 1
        report.findings.extend(check_policy(document.data, document.source, document.index, admission=admission, offline=offline))
    return report
