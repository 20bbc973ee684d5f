"""``stockade test``: run kyverno-test.yaml files and print Kyverno's verdict table."""

from __future__ import annotations

import json
import sys
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from stockade.cli.common import print_error
from stockade.cli.output import colour_enabled, paint, render_table
from stockade.kyvernotest.runner import TestRun, TestRunner
from stockade.kyvernotest.schema import TestFileError, discover, load_test_files
from stockade.policy.loader import LoadError


def _rows(run: TestRun, detailed: bool, fail_only: bool) -> tuple[list[str], list[list[str]], list[str | None]]:
    headers = ["ID", "POLICY", "RULE", "RESOURCE", "RESULT", "REASON"] + (["MESSAGE"] if detailed else [])
    rows: list[list[str]] = []
    colours: list[str | None] = []
    for index, row in enumerate(run.rows, start=1):
        if fail_only and row.ok:
            continue
        cells = [str(index), row.policy, row.rule, row.resource, row.result, row.reason]
        if detailed:
            cells.append(row.message)
        rows.append(cells)
        colours.append("green" if row.ok else "red")
    return headers, rows, colours


def _junit(runs: list[TestRun]) -> str:
    all_rows = [(run, row) for run in runs for row in run.rows]
    failures = sum(1 for _, row in all_rows if not row.ok) + sum(1 for run in runs if run.error)
    out = ['<?xml version="1.0" encoding="UTF-8"?>', f'<testsuites tests="{len(all_rows)}" failures="{failures}">']
    suites: dict[str, list[Any]] = {}
    for _, row in all_rows:
        suites.setdefault(row.policy, []).append(row)
    for policy, rows in suites.items():
        failed = sum(1 for r in rows if not r.ok)
        out.append(f" <testsuite name={quoteattr(policy)} tests=\"{len(rows)}\" failures=\"{failed}\">")
        for row in rows:
            out.append(f"  <testcase classname={quoteattr(row.rule)} name={quoteattr(row.resource)}>")
            if not row.ok:
                out.append(f"   <failure message={quoteattr(row.reason)}>{escape(row.message)}</failure>")
            out.append("  </testcase>")
        out.append(" </testsuite>")
    for run in runs:
        if run.error:
            out.append(f" <testsuite name={quoteattr(run.case.name)} tests=\"1\" failures=\"1\">")
            out.append(f"  <testcase classname=\"load\" name={quoteattr(run.case.path)}><failure message={quoteattr(run.error)}/></testcase>")
            out.append(" </testsuite>")
    out.append("</testsuites>")
    return "\n".join(out)


def run_tests(
    paths: list[str], file_name: str, fail_only: bool, detailed: bool, output_format: str, require_tests: bool, remove_color: bool, registry: bool = False
) -> int:
    out = sys.stdout
    colour = colour_enabled(out, remove_color)
    files = discover(paths, file_name)
    if not files:
        if output_format == "table":
            print("No test yamls available", file=out)
        else:  # stdout carries the (empty) payload alone
            print("No test yamls available", file=sys.stderr)
            print("[]" if output_format == "json" else _junit([]), file=out)
        return 1 if require_tests else 0
    runs: list[TestRun] = []
    load_errors = 0
    cases = []
    for path in files:
        try:
            cases.extend(load_test_files(path))  # each document of a multi-document file is its own test
        except (TestFileError, LoadError) as exc:
            print_error(f"cannot load test {path}: {exc}")
            load_errors += 1
    for case in cases:
        if output_format == "table":
            print(f"Loading test {case.name} ( {case.path} ) ...", file=out)
        try:
            runner = TestRunner(case)
            if registry:
                from stockade.cli.registry_access import make_image_verifier

                runner.image_verifier, runner.verification_cache = make_image_verifier()
            run = runner.execute()
        except Exception as exc:  # keep going: one broken test must not hide the others' results
            run = TestRun(case, error=f"internal error while running the test: {exc.__class__.__name__}: {exc}")
        runs.append(run)
        if output_format != "table":
            continue
        for warning in run.warnings:
            print(paint(f"  warning: {warning}", "yellow", colour), file=out)
        if run.error:
            print(paint(f"  Error: {run.error}", "red", colour), file=out)
            continue
        headers, rows, colours = _rows(run, detailed, fail_only)
        if rows:
            print(file=out)
            print(render_table(headers, rows, colour=colour, colours=colours), file=out)
            print(file=out)
    passed = sum(1 for run in runs for row in run.rows if row.ok)
    failed = sum(run.failed for run in runs) + load_errors
    if output_format == "json":
        payload = [
            {"test": run.case.name, "path": run.case.path, "error": run.error or None, "warnings": run.warnings,
             "results": [{"policy": r.policy, "rule": r.rule, "resource": r.resource, "result": r.result, "reason": r.reason, "message": r.message} for r in run.rows if not fail_only or not r.ok]}
            for run in runs
        ]
        print(json.dumps(payload, indent=2), file=out)
    elif output_format == "junit":
        print(_junit(runs), file=out)
    else:
        if fail_only:
            print(f"\nTest Summary: {failed} out of {passed + failed} tests failed", file=out)
        else:
            print(f"\nTest Summary: {passed} tests passed and {failed} tests failed", file=out)
    if any(run.refused for run in runs):
        return 2  # a policy was refused by the check: the tests did not run, which is not a test failure
    return 1 if failed else 0
