"""The policy check as the CLI commands report it: warnings and errors on stderr, one line per finding."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from stockade.lint.check import CheckReport, check_documents
from stockade.policy.loader import Document


def report_findings(report: CheckReport, strict: bool, stream: TextIO | None = None) -> bool:
    """Print the report's findings; True when nothing refuses the documents (``strict``: unknown fields do)."""
    out = stream or sys.stderr
    for warning in report.warnings(strict):
        print(f"Warning: {warning}", file=out)
    errors = report.errors(strict)
    for error in errors:
        print(f"Error: {error}", file=out)
    return not errors


def policies_pass_check(
    documents: Sequence[Document], strict: bool, stream: TextIO | None = None, admission: bool = False, offline: bool = False
) -> bool:
    """Check the policy documents among ``documents`` and report; False when any is refused (``admission`` and
    ``offline`` as in ``check_policy``)."""
    return report_findings(check_documents(documents, admission, offline), strict, stream)
