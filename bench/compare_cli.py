"""`stockade test` beside Kyverno 1.19.1's `kubectl-kyverno test` over the whole shared conformance corpus.

Usage: .venv/bin/python bench/compare_cli.py [--cases ../shared/conformance/cases] [--runs 3] [--cores 0]
Runs each CLI once per round over the same directory (``CLI test CASES``), rounds interleaved so both see the same
machine load, each pinned to the same cores (taskset) when given.  Reports the median wall time and CPU seconds
(user + system of the CLI and its children) per CLI, the ratio Kyverno / Stockade, and each CLI's exit code and
summary line (both exit 1 when any expectation in the corpus is not met, so the exit code is reported, not judged).
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
    if passed + failed == 0:
        raise CompareError(f"{argv[0]} reported no test results (exit {result.returncode}): {output[-500:]}")
    return Run(wall, cpu, result.returncode, passed, failed)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cases", type=Path, default=REPO_ROOT.parent / "shared" / "conformance" / "cases")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cores", default="0", help="taskset core list for both CLIs ('' = not pinned)")
    args = parser.parse_args()
    if not args.cases.is_dir():
        raise SystemExit(f"compare_cli: cases directory not found: {args.cases}")
    try:
        commands = {
            "stockade": [sys.executable, "-m", "stockade", "test", str(args.cases)],
            "kyverno": [find_kubectl_kyverno(), "test", str(args.cases)],
        }
        runs: dict[str, list[Run]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, argv in commands.items():
                runs[name].append(run_once(argv, args.cores))
    except CompareError as error:
        raise SystemExit(f"compare_cli: {error}") from None
    print(f"corpus: {args.cases} ({args.runs} interleaved runs, cores {args.cores or 'any'}; medians)")
    print(f"{'cli':<10} {'wall s':>8} {'cpu s':>8}  tests passed/failed  exit")
    medians: dict[str, tuple[float, float]] = {}
    for name, results in runs.items():
        wall = statistics.median(run.wall_s for run in results)
        cpu = statistics.median(run.cpu_s for run in results)
        medians[name] = (wall, cpu)
        last = results[-1]
        print(f"{name:<10} {wall:>8.2f} {cpu:>8.2f}  {last.passed:>6}/{last.failed:<6}        {last.exit_code}")
    wall_ratio = medians["kyverno"][0] / medians["stockade"][0]
    cpu_ratio = medians["kyverno"][1] / medians["stockade"][1]
    print(f"ratio kyverno/stockade: wall {wall_ratio:.1f}x, cpu {cpu_ratio:.1f}x (goal >= 10x)")


if __name__ == "__main__":
    main()
