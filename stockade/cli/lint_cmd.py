"""``stockade lint``: the policy check alone, for pre-commit hooks, CI jobs and editors.

Exit status: 0 when every policy passes (warnings allowed unless ``--strict``), 1 when the check refuses a policy,
2 when the input cannot be read or holds no policy at all (a lint job that checked nothing must not pass).
"""

from __future__ import annotations

import json
import sys

from stockade.cli.policycheck import report_findings
from stockade.lint.check import check_documents
from stockade.policy.loader import LoadError, load_documents


def run_lint(paths: list[str], strict: bool, output_format: str) -> int:
    try:
        documents = load_documents(paths)
    except LoadError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 2
    report = check_documents(documents)
    if report.checked == 0:
        print(f"Error: no policy found in {', '.join(paths)}", file=sys.stderr)
        return 2
    if output_format == "json":
        refused = report.errors(strict)
        payload = {
            "checked": report.checked,
            "ok": not refused,
            "findings": [
                {**finding.as_dict(), "severity": "error" if finding in refused else finding.severity.value} for finding in report.findings
            ],
        }
        print(json.dumps(payload, indent=2))
        return 0 if not refused else 1
    ok = report_findings(report, strict)
    refused_documents = len(report.refused(strict))
    print(f"{report.checked} polic{'y' if report.checked == 1 else 'ies'} checked, {refused_documents} refused, {len(report.warnings(strict))} warning(s)", file=sys.stderr)
    return 0 if ok else 1
