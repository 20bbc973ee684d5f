"""Run Kyverno's chainsaw e2e suite against the local control plane (e2ecluster.py) the way Kyverno's CI does.

Kyverno's CI runs ``chainsaw test --config .chainsaw.yaml`` inside one suite folder at a time; so do we, one
*unit* per directory holding a ``.chainsaw.yaml`` (top-level folders without one run with chainsaw's defaults).
Tests listed in the exclusion file are skipped through chainsaw's own ``--exclude-test-regex`` (a folder entry
skips everything under it, and a unit with nothing left is not started).  Results are read from chainsaw's JSON
report and written per unit to ``summary.json`` with the first failing operation of each failed test.

    python -m stockade.testing.e2erun [UNIT_OR_FOLDER ...] [--parallel N] [--results DIR] [--no-cluster]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from stockade.testing.apiserver import REPO_ROOT, find_binary
from stockade.testing.e2ecluster import DEFAULT_STATE_DIR, ClusterError, E2ECluster
from stockade.testing.e2eclean import Baseline, CleanupError, ClusterCleaner, webhook_document_count
from stockade.errors import StockadeError

DEFAULT_SUITE = Path(os.environ.get("STOCKADE_E2E_SHARED", str(REPO_ROOT.parent / "shared" / "e2e"))) / "kyverno-chainsaw"
DEFAULT_EXCLUSIONS = REPO_ROOT / "tests" / "e2e" / "excluded.yaml"
DEFAULT_RESULTS = REPO_ROOT / ".cache" / "e2e" / "results"

# Folders Kyverno's CI runs against Kyverno installed with extra Helm values (../shared/e2e/kyverno-config/<folder>/),
# and the `stockade serve` flags that give the same install. The server is restarted with them for those folders only.
INSTALL_PROFILES: dict[str, tuple[str, ...]] = {
    # features.forceFailurePolicyIgnore.enabled: true
    "force-failure-policy-ignore": ("--force-failure-policy-ignore",),
    # features.policyExceptions.enabled: false (Kyverno's scripts/config/exceptions-disabled)
    "policy-exceptions-disabled": ("--no-policy-exceptions",),
    # features.mutatingAdmissionPolicyReports.enabled: true (Kyverno's scripts/config/mutating-admission-policy-reports),
    # used by Kyverno's CI for the v1alpha1, v1beta1 and v1 folders alike
    "mutating-admission-policy-reports-alpha": ("--mutating-admission-policy-reports",),
    "mutating-admission-policy-reports": ("--mutating-admission-policy-reports",),
    "mutating-admission-policy-reports-v1": ("--mutating-admission-policy-reports",),
    # openreports.enabled: true, with the openreports.io CRDs installed (deploy/crds has them)
    "openreports": ("--openreports",),
    # features.reporting.allowedResults: {fail: true} (Kyverno's scripts/config/exclude-result)
    "reports-exclude-result": ("--allowed-results", "fail"),
    # explicit-install-settings: --set admissionController.tlsKeyAlgorithm=Ed25519
    "tls-certificates/ed25519-self-signed": ("--tls-key-algorithm", "Ed25519"),
}


# Folders of Kyverno's whole suite that ../shared does not carry: their profiles serve runs with --suite pointing at
# a full copy of Kyverno's test/conformance/chainsaw
FOLDERS_BEYOND_SHARED = frozenset({"tls-certificates", "reports-exclude-result"})


def install_profile(unit_path: str) -> tuple[str, ...]:
    """The serve flags of the install profile covering ``unit_path`` (the longest profile path that is the unit or
    one of its parent folders; none for the standard install)."""
    parts = unit_path.strip("/").split("/")
    for depth in range(len(parts), 0, -1):
        flags = INSTALL_PROFILES.get("/".join(parts[:depth]))
        if flags is not None:
            return flags
    return ()


class ExclusionError(StockadeError, ValueError):
    """The exclusion file is malformed; the message names the file and entry."""


@dataclass
class Unit:
    """One chainsaw invocation: a directory (relative to the suite root) and its configuration, if any."""

    path: str
    config: Path | None
    tests: list[str] = field(default_factory=list)  # test directories relative to the suite root
    shard: tuple[int, int] | None = None  # (index, count) when the folder runs in shards, as in Kyverno's CI
    # a shard's chainsaw still discovers the whole folder: the other shards' tests, skipped by regex
    elsewhere: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """How results and logs name the unit: its path, plus the shard when it is one."""
        return self.path if self.shard is None else f"{self.path}#shard-{self.shard[0] + 1}-of-{self.shard[1]}"


@dataclass
class UnitResult:
    path: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    excluded: int = 0
    seconds: float = 0.0
    exit_code: int = 0
    failures: list[dict[str, str]] = field(default_factory=list)
    not_run: int = 0  # left when the run's time budget ended
    stopped: bool = False  # chainsaw was stopped at the deadline
    left_behind: list[str] = field(default_factory=list)  # what the unit left in the cluster, removed after it


def load_exclusions(path: Path) -> dict[str, str]:
    """``{test or folder path relative to the suite root: reason}``; every entry needs a non-empty reason."""
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ExclusionError(f"{path}: cannot read exclusions: {exc}") from exc
    entries = data.get("excluded", {}) if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        raise ExclusionError(f"{path}: expected a mapping under 'excluded' (test path -> reason)")
    for test, reason in entries.items():
        if not isinstance(reason, str) or not reason.strip():
            raise ExclusionError(f"{path}: excluded.{test}: the reason must be a non-empty string")
    return {str(test).strip("/"): reason for test, reason in entries.items()}


def discover_units(suite: Path) -> list[Unit]:
    """Directories with a .chainsaw.yaml, plus top-level folders that have tests but no configuration at all."""
    tests = sorted(str(p.parent.relative_to(suite)) for p in suite.rglob("chainsaw-test.yaml"))
    configured = sorted(str(p.parent.relative_to(suite)) for p in suite.rglob(".chainsaw.yaml"))
    units = [Unit(path, suite / path / ".chainsaw.yaml") for path in configured]
    for top in sorted({t.split("/")[0] for t in tests}):
        if not any(u.path == top or u.path.startswith(top + "/") for u in units):
            units.append(Unit(top, None))
    for test in tests:
        owners = [u for u in units if test == u.path or test.startswith(u.path + "/")]
        if owners:
            max(owners, key=lambda u: len(u.path)).tests.append(test)
    return [u for u in units if u.tests]


# Folders Kyverno's CI runs in shards, each shard on a fresh cluster (.github/workflows/tests-conformance.yaml of
# v1.19.1, chainsaw --shard-index/--shard-count): tests of one shard never meet what another shard's tests leave
KYVERNO_CI_SHARDS: dict[str, int] = {
    "deleting-policies": 6,
    "exceptions": 3,
    "generate": 12,
    "generating-policies": 6,
    "image-validating-policies": 3,
    "mutate": 3,
    "mutating-policies": 3,
    "namespaced-generating-policies": 3,
    "namespaced-validating-policies": 3,
    "reports": 3,
    "validate": 8,
    "validating-policies": 5,
    "verify-images": 2,
}


def shard_units(units: list[Unit], shards: dict[str, int] = KYVERNO_CI_SHARDS) -> list[Unit]:
    """Split the units Kyverno's CI shards as chainsaw does: contiguous slices of the tests in discovery order (a
    walk sorted by name at each level), the last slice taking the remainder.  The runner isolates every unit, so
    each shard starts on a clean cluster as in Kyverno's CI."""
    out: list[Unit] = []
    for unit in units:
        count = shards.get(unit.path, 0)
        if count <= 1 or len(unit.tests) < 2:
            out.append(unit)
            continue
        ordered = sorted(unit.tests, key=lambda test: test.split("/"))
        width = len(ordered) / count
        for index in range(count):
            end = len(ordered) if index == count - 1 else int(width * (index + 1))
            chunk = ordered[int(width * index) : end]
            if chunk:
                out.append(Unit(unit.path, unit.config, chunk, (index, count), [t for t in ordered if t not in chunk]))
    return out


def _script_contents(node: Any) -> list[str]:
    """Every ``script.content`` of a chainsaw document (try/catch/finally/cleanup operations, at any depth)."""
    found: list[str] = []
    if isinstance(node, dict):
        script = node.get("script")
        if isinstance(script, dict) and isinstance(script.get("content"), str):
            found.append(script["content"])
        for value in node.values():
            found.extend(_script_contents(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(_script_contents(item))
    return found


def unexecutable_scripts(suite: Path) -> list[str]:
    """Files (relative to the suite root) that a test's script step runs as a program (``content: ./name.sh``, the
    path being the first word of the script) but that carry no executable bit.  In Kyverno's git checkout these
    files are mode 100755; a copy made without file modes (a tarball or module zip) loses that, and the step then
    fails with ``Permission denied`` before any of its commands run."""
    missing: set[str] = set()
    for test_file in suite.rglob("chainsaw-test.yaml"):
        try:
            documents = list(yaml.safe_load_all(test_file.read_text()))
        except (OSError, yaml.YAMLError):
            continue  # chainsaw reports a broken test itself
        for content in _script_contents(documents):
            words = content.split()
            if not words or not words[0].startswith("./"):
                continue
            program = (test_file.parent / words[0]).resolve()
            if program.is_file() and program.is_relative_to(suite) and not os.access(program, os.X_OK):
                missing.add(str(program.relative_to(suite)))
    return sorted(missing)


def stage_suite(suite: Path, scripts: list[str], staged: Path) -> Path:
    """A copy of ``suite`` at ``staged`` (replacing an earlier one) in which ``scripts`` are executable, as in the
    suite's git checkout; the original is left untouched."""
    if staged.exists():
        shutil.rmtree(staged)
    shutil.copytree(suite, staged, symlinks=True)
    for script in scripts:
        target = staged / script
        target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return staged


def is_excluded(test: str, exclusions: dict[str, str]) -> str | None:
    for entry, reason in exclusions.items():
        if test == entry or test.startswith(entry + "/"):
            return reason
    return None


def exclude_regex(unit: Unit, excluded_tests: list[str]) -> str:
    """Go test -skip pattern for chainsaw: names are ``chainsaw/<path relative to the unit>[<test name>]`` and
    each '/'-separated element of the pattern matches one element of the name."""
    patterns = []
    for test in excluded_tests:
        relative = test[len(unit.path) + 1 :] if test != unit.path else "."
        elements = relative.split("/")
        parts = ["^chainsaw$", *(f"^{re.escape(e)}$" for e in elements[:-1]), f"^{re.escape(elements[-1])}\\["]
        patterns.append("/".join(parts))
    return "|".join(patterns)


def run_unit(
    unit: Unit,
    requested: list[str],
    suite: Path,
    exclusions: dict[str, str],
    results: Path,
    parallel: int,
    env: dict[str, str],
    chainsaw: str,
    extra: list[str],
    deadline: float | None = None,
) -> UnitResult:
    """Run the ``requested`` tests of ``unit`` minus the excluded ones; the rest of the unit is skipped by regex.
    At ``deadline`` (a time.monotonic() value) chainsaw is stopped: finished tests count, the others are not run."""
    result = UnitResult(unit.label)
    excluded = [t for t in requested if is_excluded(t, exclusions)]
    result.excluded = len(excluded)
    skipped = excluded + [t for t in unit.tests if t not in requested]
    if len(skipped) == len(unit.tests):
        return result
    skipped += unit.elsewhere
    report_name = unit.label.replace("/", "__")
    command = [
        chainsaw, "test", "--test-dir", ".", "--fail-fast=false", f"--parallel={parallel}", "--no-color",
        "--report-format=JSON", f"--report-path={results}", f"--report-name={report_name}", *extra,
    ]
    if unit.config is not None:
        command[2:2] = ["--config", ".chainsaw.yaml"]
    if skipped:
        command.append(f"--exclude-test-regex={exclude_regex(unit, skipped)}")
    started = time.monotonic()
    with (results / f"{report_name}.log").open("wb") as log:
        process = subprocess.Popen(command, cwd=suite / unit.path, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            result.exit_code = process.wait(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            result.stopped = True
            process.terminate()  # chainsaw cleans up its namespaces on SIGTERM
            try:
                result.exit_code = process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                result.exit_code = process.wait()
    result.seconds = time.monotonic() - started
    outcomes, errors = parse_go_test_log((results / f"{report_name}.log").read_text(errors="replace"))
    try:
        report = json.loads((results / f"{report_name}.json").read_text())
    except (OSError, ValueError):
        report = {}
    operations = {f"{t.get('basePath', '')}[{t.get('name', '')}]": t for t in report.get("tests") or []}
    runnable = len(requested) - len(excluded)
    if result.stopped and not outcomes:
        # chainsaw has no signal handling: a stopped run prints no Go test summary, but its progress log says which
        # tests ended (their namespace cleanup ran) and which hit an error on the way
        outcomes = finished_tests((results / f"{report_name}.log").read_text(errors="replace"))
    if not outcomes and not result.stopped:
        result.failures.append({"test": unit.path, "error": f"chainsaw ran no test (exit {result.exit_code}); see {report_name}.log"})
        result.failed = runnable
        return result
    for name, status in outcomes.items():
        if status == "PASS":
            result.passed += 1
        elif status == "SKIP":
            result.skipped += 1
        else:
            result.failed += 1
            result.failures.append(_first_failure(name, operations.get(name, {}), errors.get(name, ""), suite / unit.path, suite))
    if result.stopped:
        result.not_run = max(0, runnable - result.passed - result.failed - result.skipped)
    return result


_SINK_LINE = re.compile(r"sink\.go:\d+:[^|]*\|[^|]*\|\s*(?P<test>[^|]+?)\s*\|\s*(?P<step>[^|]+?)\s*\|\s*(?P<operation>[^|]+?)\s*\|\s*(?P<status>[^|]+?)\s*\|")


def finished_tests(log: str) -> dict[str, str]:
    """Outcomes of the tests a stopped chainsaw run finished, from its progress lines: a test ended when its own
    namespace cleanup (``@chainsaw | CLEANUP | END``) was logged, and failed when any of its operations logged ERROR.
    Keys are bare test names (the progress log does not carry paths)."""
    ended: set[str] = set()
    failed: set[str] = set()
    for line in log.splitlines():
        match = _SINK_LINE.search(line)
        if match is None:
            continue
        test, step, operation, status = match.group("test", "step", "operation", "status")
        if status == "ERROR":
            failed.add(test)
        elif step == "@chainsaw" and operation == "CLEANUP" and status == "END":
            ended.add(test)
    return {test: ("FAIL" if test in failed else "PASS") for test in sorted(ended)}


_RESULT_LINE = re.compile(r"^    --- (PASS|FAIL|SKIP): chainsaw/(\S.*?) \(\d")
_HEADER_LINE = re.compile(r"^=== (?:RUN|CONT|NAME|PAUSE)\s+chainsaw/(\S.*)$")


def parse_go_test_log(log: str) -> tuple[dict[str, str], dict[str, str]]:
    """Per test (``<path relative to the unit>[<name>]``): its Go test outcome, and the first ``=== ERROR`` block
    printed while it was the current test.  The outcome lines are the truth: chainsaw's JSON report calls a test
    "passed" when it failed outside its steps (e.g. its namespace was denied)."""
    outcomes: dict[str, str] = {}
    errors: dict[str, str] = {}
    current = ""
    collecting: list[str] | None = None
    for line in log.splitlines():
        if match := _RESULT_LINE.match(line):
            outcomes[match.group(2)] = match.group(1)
            continue
        if match := _HEADER_LINE.match(line):
            current = match.group(1)
            collecting = None
            continue
        stripped = line.strip()
        if stripped == "=== ERROR":
            collecting = [] if current and current not in errors else None
            continue
        if collecting is not None:
            if stripped.startswith(("sink.go:", "=== ", "--- ")):
                errors[current] = "\n".join(collecting).strip()
                collecting = None
            else:
                collecting.append(stripped)
    return outcomes, errors


def _first_failure(name: str, test: dict[str, Any], logged_error: str, unit_dir: Path, suite: Path) -> dict[str, str]:
    """The test's path relative to the suite (chainsaw reports it relative to the unit) and its first failed
    operation, else the first error chainsaw logged for it (namespace setup, cleanup)."""
    base = test.get("basePath") or name.rsplit("[", 1)[0]
    try:
        base = str((unit_dir / base).resolve().relative_to(suite.resolve()))
    except ValueError:
        pass
    for step in test.get("steps") or []:
        for operation in step.get("operations") or []:
            if operation.get("status") == "failed":
                error = (operation.get("failure") or {}).get("error", "")
                return {"test": base, "step": step.get("name", ""), "operation": operation.get("type", ""), "error": error[:2000]}
    return {"test": base, "step": "(outside steps)", "operation": "setup/cleanup", "error": logged_error[:2000] or "failed outside its steps"}


def failure_causes(results: list[UnitResult], top: int = 15) -> list[dict[str, Any]]:
    """Failed operations grouped by a normalised first line of their error (names, numbers and quoted text blanked),
    most frequent first: a rough map of what to fix next."""
    groups: dict[str, list[str]] = {}
    for result in results:
        for failure in result.failures:
            line = (failure.get("error") or "").strip().splitlines()[0] if failure.get("error") else "(no error text)"
            line = re.sub(r"\"[^\"]*\"|'[^']*'|`[^`]*`", "<q>", line)
            line = re.sub(r"\b[\w.-]*\d[\w.-]*\b", "<n>", line)
            key = f"{failure.get('operation', '')}: {line[:200]}"
            groups.setdefault(key, []).append(failure["test"])
    ranked = sorted(groups.items(), key=lambda item: -len(item[1]))[:top]
    return [{"cause": cause, "count": len(tests), "examples": tests[:5]} for cause, tests in ranked]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="e2erun", description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", help="units or folders relative to the suite root (default: all)")
    parser.add_argument("--suite", type=Path, default=DEFAULT_SUITE)
    parser.add_argument("--exclusions", type=Path, default=DEFAULT_EXCLUSIONS)
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    parser.add_argument("--parallel", type=int, default=4, help="tests at once per unit (chainsaw --parallel)")
    parser.add_argument("--no-cluster", action="store_true", help="use the running cluster (e2e-cluster.sh up) instead of starting one")
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    parser.add_argument("--chainsaw-arg", action="append", default=[], help="extra chainsaw argument (repeatable), e.g. --assert-timeout=30s")
    parser.add_argument("--budget", type=float, default=None, help="seconds for the whole run; units not reached are reported as not run, never dropped silently")
    parser.add_argument("--rotate", default="", help="start the unit order at an offset derived from this key (e.g. a commit id), so budgeted runs cover every unit over successive runs")
    parser.add_argument("--min-pass-rate", type=float, default=None, help="exit 0 when passed/(passed+failed) reaches this fraction (a ratchet below the measured rate); default: exit 1 on any failure")
    args = parser.parse_args(argv)
    suite = args.suite.resolve()
    if not suite.is_dir():
        print(f"e2e-run: suite not found: {suite} (set STOCKADE_E2E_SHARED)", file=sys.stderr)
        return 2
    try:
        exclusions = load_exclusions(args.exclusions)
    except ExclusionError as exc:
        print(f"e2e-run: {exc}", file=sys.stderr)
        return 2
    source = suite
    scripts = unexecutable_scripts(suite)
    if scripts:
        staged = stage_suite(suite, scripts, args.results.resolve() / "staged-suite")
        print(f"e2e-run: {len(scripts)} script(s) the tests run as programs lack the executable bit Kyverno's git checkout gives them ({', '.join(scripts[:3])}{', ...' if len(scripts) > 3 else ''}); running a copy with it set: {staged}", flush=True)
        suite = staged
    units = shard_units(discover_units(suite))
    wanted = [f.strip("/") for f in args.folders]

    def requested(test: str) -> bool:
        return not wanted or any(test == w or test.startswith(w + "/") for w in wanted)

    plan = [(unit, [t for t in unit.tests if requested(t)]) for unit in units]
    plan = [(unit, tests) for unit, tests in plan if tests]
    if args.rotate and plan:
        offset = int(hashlib.sha256(args.rotate.encode()).hexdigest(), 16) % len(plan)
        plan = plan[offset:] + plan[:offset]
    if not plan:
        print(f"e2e-run: no chainsaw tests under {', '.join(args.folders)}", file=sys.stderr)
        return 2
    chainsaw = find_binary("chainsaw", "STOCKADE_CHAINSAW")
    suite_kubectl = REPO_ROOT / ".cache" / "bin" / "e2e"  # the suite's kubectl (.ci/build-kubectl-e2e.sh)
    results = args.results.resolve()
    results.mkdir(parents=True, exist_ok=True)
    cluster = E2ECluster(state_dir=args.state_dir.resolve())
    timings: dict[str, float] = {}
    if not args.no_cluster:
        try:
            cluster.up()
        except (ClusterError, RuntimeError) as exc:
            print(f"e2e-run: {exc}", file=sys.stderr)
            return 1
        timings.update(cluster.timings)
        print(f"e2e-run: cluster up in {cluster.timings['total_s']:.1f}s", flush=True)
    # .cache/bin/e2e: the kubectl of Kyverno CI's minor (.ci/build-kubectl-e2e.sh), ahead of the peers in .cache/bin;
    # hack/e2e/bin: stand-ins for kubectl plugins Kyverno's CI installs (kubectl-evict) and for the `kyverno` CLI its cli
    # tests run (Stockade's CLI, under this interpreter)
    tools = os.pathsep.join((str(suite_kubectl), str(REPO_ROOT / ".cache" / "bin"), str(REPO_ROOT / "hack" / "e2e" / "bin")))
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}",
        "STOCKADE_PYTHON": sys.executable,
    }
    outcome: list[UnitResult] = []
    isolated: tuple[ClusterCleaner, Baseline] | None = None  # taken before the first unit that runs
    started = time.monotonic()
    deadline = None if args.budget is None else started + args.budget
    profile: tuple[str, ...] = ()
    try:
        for unit, tests in plan:
            if deadline is not None and time.monotonic() + estimated_seconds(len(tests), args.parallel) >= deadline:
                result = UnitResult(unit.label, excluded=sum(1 for t in tests if is_excluded(t, exclusions)))
                result.not_run = len(tests) - result.excluded
            else:
                # needed once a unit runs (not for a plan the budget leaves wholly unrun)
                if not (suite_kubectl / "kubectl").is_file():
                    print(f"e2e-run: {suite_kubectl}/kubectl is missing: run .ci/build-kubectl-e2e.sh", file=sys.stderr)
                    return 1
                try:
                    cluster.reset_between_folders()
                except ClusterError as exc:
                    print(f"e2e-run: resetting the cluster before {unit.label} failed: {exc}", file=sys.stderr)
                    return 1
                if install_profile(unit.path) != profile:
                    profile = install_profile(unit.path)
                    print(f"e2e-run: restarting stockade serve for {unit.path} with [{' '.join(profile)}]", flush=True)
                    cluster.restart_stockade(profile)
                if isolated is None:
                    try:
                        isolated = isolation(cluster)
                    except CleanupError as exc:
                        print(f"e2e-run: reading the installed cluster failed: {exc}", file=sys.stderr)
                        return 1
                    print(f"e2e-run: isolating units: {len(isolated[1].keys)} objects in {len(isolated[1].namespaces)} namespaces after install", flush=True)
                result = run_unit(unit, tests, suite, exclusions, results, args.parallel, env, chainsaw, args.chainsaw_arg, deadline)
                try:
                    cleanup = isolated[0].clean(isolated[1])
                except CleanupError as exc:
                    print(f"e2e-run: cleaning up after {unit.label} failed: {exc}", file=sys.stderr)
                    return 1
                result.left_behind = cleanup.removed
                print(f"e2e-run: after {unit.label}: {cleanup.describe()} ({cleanup.seconds:.1f}s)", flush=True)
            outcome.append(result)
            print(f"e2e-run: {unit.label}: {describe(result)}", flush=True)
    finally:
        if args.no_cluster and profile:
            cluster.restart_stockade(())  # leave the caller's cluster with the standard install
        if not args.no_cluster:
            cluster.down()
    timings["suite_s"] = time.monotonic() - started
    totals = {key: sum(getattr(r, key) for r in outcome) for key in ("passed", "failed", "skipped", "excluded", "not_run")}
    summary = {"suite": str(source), "totals": totals, "timings": timings, "causes": failure_causes(outcome), "units": [r.__dict__ for r in outcome]}
    (results / "summary.json").write_text(json.dumps(summary, indent=2))
    decided = totals["passed"] + totals["failed"]
    rate = totals["passed"] / decided if decided else 0.0
    print(f"e2e-run: totals: pass {totals['passed']}, fail {totals['failed']}, skip {totals['skipped']}, excluded {totals['excluded']}, not run (time budget) {totals['not_run']}; pass rate {rate:.1%} in {timings['suite_s']:.0f}s; {results / 'summary.json'}")
    if totals["not_run"]:
        print(f"e2e-run: NOT RUN for lack of time: {', '.join(f'{r.path} ({r.not_run})' for r in outcome if r.not_run)}", flush=True)
    if decided == 0:
        print("e2e-run: no test ran: failing", file=sys.stderr)
        return 1
    if args.min_pass_rate is not None:
        if decided < MIN_DECIDED_FOR_FLOOR:
            print(f"e2e-run: pass-rate floor not applied: only {decided} tests decided (a rate needs at least {MIN_DECIDED_FOR_FLOOR})", flush=True)
            return 0
        if rate < args.min_pass_rate:
            print(f"e2e-run: pass rate {rate:.1%} is below the floor {args.min_pass_rate:.1%}", file=sys.stderr)
            return 1
        return 0
    return 0 if totals["failed"] == 0 else 1


def isolation(cluster: E2ECluster) -> tuple[ClusterCleaner, Baseline]:
    """The cleaner that puts the cluster back after each unit, and the state it puts it back to (taken now, right
    after the install): Kyverno's CI runs each folder on a fresh cluster."""
    from stockade.kube.connection import load_api_client

    cleaner = ClusterCleaner(load_api_client(str(cluster.kubeconfig)), webhook_document_count(cluster.state_dir / "stockade.port"))
    return cleaner, cleaner.baseline()


MIN_DECIDED_FOR_FLOOR = 30  # below this a pass rate says more about which folders ran than about Stockade
SECONDS_PER_TEST_ROUND = 40.0  # a typical Kyverno e2e test on this control plane: create policy, wait Ready, assert


def estimated_seconds(tests: int, parallel: int) -> float:
    """How long a unit is expected to take; a unit that would not end before the deadline is not started, because
    chainsaw reports its tests only when the whole unit ends and a stopped run turns every test into a failure."""
    rounds = -(-tests // max(1, parallel))
    return rounds * SECONDS_PER_TEST_ROUND


def describe(result: UnitResult) -> str:
    """One unit's counts, worded so no CI log reader mistakes it for a test runner's closing line."""
    text = f"pass {result.passed}, fail {result.failed}, skip {result.skipped}, excluded {result.excluded}"
    if result.not_run:
        text += f", not run (time budget) {result.not_run}"
    return f"{text} ({result.seconds:.0f}s)"


if __name__ == "__main__":
    sys.exit(main())
