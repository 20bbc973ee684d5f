"""`stockade test` beside Kyverno 1.19.1's `kubectl-kyverno test` over the whole shared conformance corpus.

Usage: .venv/bin/python bench/compare_cli.py [--cases ../shared/conformance/cases] [--runs 3] [--cores 0]
Per round: ``stockade test CASES`` once over the whole corpus, then ``CLI test CASE`` for every case directory with
each CLI (Kyverno's stops a whole-corpus run at the first case it cannot evaluate, so it can only cover the corpus
case by case); rounds interleaved so both see the same machine load, every run pinned to the same cores (taskset).
Reports median wall time and CPU seconds (user + system of the CLI and its children), tests passed/failed from the
summary lines, and the ratios Kyverno / Stockade (exit codes are reported, not judged: a corpus holds failing cases).
Binaries: ``$STOCKADE_KUBECTL_KYVERNO`` or ``.cache/bin/kubectl-kyverno`` (bench/build-kyverno.sh).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
SUMMARY = re.compile(r"(\d+) tests? passed and (\d+) tests? failed")


class CompareError(RuntimeError):
    """A CLI is missing or did not run; the message names it."""


@dataclass
class Run:
    wall_s: float
    cpu_s: float
    exit_code: int
    passed: int
    failed: int


def find_kubectl_kyverno() -> str:
    for candidate in (os.environ.get("STOCKADE_KUBECTL_KYVERNO", ""), str(REPO_ROOT / ".cache" / "bin" / "kubectl-kyverno")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise CompareError("kubectl-kyverno not found: run bench/build-kyverno.sh or set STOCKADE_KUBECTL_KYVERNO")


def run_once(argv: list[str], cores: str) -> Run:
    """One CLI run; CPU from the rusage of waited-for children (this process starts nothing else meanwhile)."""
    if cores and shutil.which("taskset"):
        argv = ["taskset", "-c", cores, *argv]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"}, cwd=REPO_ROOT, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    output = ANSI.sub("", result.stdout + result.stderr)
    passed = sum(int(match.group(1)) for match in SUMMARY.finditer(output))
    failed = sum(int(match.group(2)) for match in SUMMARY.finditer(output))
    return Run(wall, cpu, result.returncode, passed, failed)


def run_cases(prefix: list[str], cases: list[Path], cores: str) -> Run:
    """One invocation per case directory, summed: Kyverno's CLI stops the whole run at the first case it cannot
    evaluate, so per-case runs are the only way it covers the corpus."""
    total = Run(0.0, 0.0, 0, 0, 0)
    for case in cases:
        run = run_once([*prefix, str(case)], cores)
        total = Run(total.wall_s + run.wall_s, total.cpu_s + run.cpu_s, max(total.exit_code, run.exit_code), total.passed + run.passed, total.failed + run.failed)
    return total


def default_cases() -> Path:
    """``shared/conformance/cases`` beside the checkout or beside one of its parents (worktrees live deeper)."""
    for parent in REPO_ROOT.parents:
        candidate = parent / "shared" / "conformance" / "cases"
        if candidate.is_dir():
            return candidate
    return REPO_ROOT.parent / "shared" / "conformance" / "cases"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cases", type=Path, default=default_cases())
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cores", default="0", help="taskset core list for both CLIs ('' = not pinned)")
    args = parser.parse_args()
    if not args.cases.is_dir():
        raise SystemExit(f"compare_cli: cases directory not found: {args.cases}")
    cases = sorted({test_file.parent for test_file in args.cases.rglob("kyverno-test.yaml")})
    if not cases:
        raise SystemExit(f"compare_cli: no kyverno-test.yaml under {args.cases}")
    try:
        stockade = [sys.executable, "-m", "stockade", "test"]
        kyverno = [find_kubectl_kyverno(), "test"]
        runs: dict[str, list[Run]] = {"stockade, one invocation": [], "stockade, per case": [], "kyverno, per case": []}
        for _ in range(args.runs):
            runs["stockade, one invocation"].append(run_once([*stockade, str(args.cases)], args.cores))
            runs["stockade, per case"].append(run_cases(stockade, cases, args.cores))
            runs["kyverno, per case"].append(run_cases(kyverno, cases, args.cores))
    except CompareError as error:
        raise SystemExit(f"compare_cli: {error}") from None
    print(f"corpus: {args.cases}, {len(cases)} case directories ({args.runs} interleaved runs, cores {args.cores or 'any'}; medians)")
    print(f"{'cli':<26} {'wall s':>8} {'cpu s':>8}  tests passed/failed  worst exit")
    medians: dict[str, tuple[float, float]] = {}
    for name, results in runs.items():
        wall = statistics.median(run.wall_s for run in results)
        cpu = statistics.median(run.cpu_s for run in results)
        medians[name] = (wall, cpu)
        last = results[-1]
        print(f"{name:<26} {wall:>8.2f} {cpu:>8.2f}  {last.passed:>6}/{last.failed:<6}        {last.exit_code}")
    kyverno_wall, kyverno_cpu = medians["kyverno, per case"]
    for name in ("stockade, one invocation", "stockade, per case"):
        wall, cpu = medians[name]
        print(f"ratio kyverno per case / {name}: wall {kyverno_wall / wall:.1f}x, cpu {kyverno_cpu / cpu:.1f}x (goal >= 10x)")


if __name__ == "__main__":
    main()
