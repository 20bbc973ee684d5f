"""Where `stockade serve` spends its time under open-loop load: py-spy samples of the server and its workers.

Usage: .venv/bin/python bench/profile_admission.py [--rate 500] [--seconds 15] [--policies bench/policies/pss-restricted.yaml]
       [--top 25] [--server-cores 0] [--client-cores 1] [--gil]
Needs py-spy (``pip install py-spy``; it reads the target's memory, so root or ptrace permission).  Starts the
server pinned to the server cores, records it and every child with ``py-spy record --subprocesses --format raw``
while this process drives it at a fixed rate from the client cores, then prints, per process role (server, worker),
the functions with the most samples on their own (self) and in their call stack (inclusive), as shares of that
role's samples.  Idle samples (py-spy's default excludes them) are not counted.

``--gil`` samples only the thread holding the GIL (py-spy ``--gil``).  Without it, threads parked in C waits (the
thread pool's queue, ``Event.wait``, a worker idle on its pipe) were seen counted as busy on this machine, and a
thread the kernel preempted inside a syscall (the pipe write that wakes a worker on the same core) is charged for
the time the other process ran.  With it, the shares are those of Python work; C code that releases the GIL (TLS
record encryption in ``ssl``) drops out, so compare with ``perf record -e cpu-clock -p PID`` for native time.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_admission import review_for  # noqa: E402
from bench_engine import generate_pods  # noqa: E402
from compare_kyverno import BENCH_NAMESPACE, open_loop, start_stockade  # noqa: E402


def summarize(raw: Path, top: int) -> None:
    """py-spy's raw output: one line per distinct stack, ``frame;frame;... count``, root first; the first frame
    names the process (``process 123:"python -m stockade serve"``)."""
    self_counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    inclusive: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    totals: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        role = "worker" if any(frame.startswith(("worker_main", "logging_worker_main")) for frame in frames) else "server"
        function_frames = [frame for frame in frames if frame.endswith(")")]
        totals[role] += count
        if function_frames:
            self_counts[role][function_frames[-1]] += count
        for frame in set(function_frames):
            inclusive[role][frame] += count
    for role in sorted(totals):
        total = totals[role]
        print(f"\n== {role}: {total} samples ==")
        print("self:")
        for frame, count in self_counts[role].most_common(top):
            print(f"  {100 * count / total:5.1f}%  {frame}")
        print("inclusive:")
        for frame, count in inclusive[role].most_common(top):
            print(f"  {100 * count / total:5.1f}%  {frame}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--policies", type=Path, default=HERE / "policies" / "pss-restricted.yaml")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--server-cores", default="0")
    parser.add_argument("--client-cores", default="1")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--raw", type=Path, help="only summarize this earlier py-spy raw file")
    parser.add_argument("--gil", action="store_true", help="sample only threads holding the GIL (see the module docstring)")
    args = parser.parse_args()
    if args.raw:
        summarize(args.raw, args.top)
        return
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.access(py_spy, os.X_OK):
        raise SystemExit("profile_admission: py-spy not found (pip install py-spy)")
    if shutil.which("taskset"):
        os.sched_setaffinity(0, {int(core) for core in args.client_cores.split(",")})
    pods = generate_pods(3000)
    for pod in pods:
        pod["metadata"]["namespace"] = BENCH_NAMESPACE
    bodies = [review_for(pod) for pod in pods]
    scratch = Path(tempfile.mkdtemp(prefix="stockade-profile-"))
    server = start_stockade([args.policies], scratch, args.server_cores, args.workers)
    raw = scratch / "profile.txt"
    try:
        asyncio.run(open_loop(server, bodies, 200, 3, 64))  # warm-up
        recorder = subprocess.Popen(
            [py_spy, "record", "--pid", str(server.process.pid), "--subprocesses", "--format", "raw", "--rate", "250",
             "--duration", str(int(args.seconds) + 1), "--output", str(raw), *(["--gil"] if args.gil else [])],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        latencies, errors, _, elapsed = asyncio.run(open_loop(server, bodies, args.rate, args.seconds, 64))
        _, recorder_errors = recorder.communicate(timeout=120)
        if recorder.returncode != 0 or not raw.exists():
            raise SystemExit(f"profile_admission: py-spy failed: {recorder_errors.decode(errors='replace')[-500:]}")
    finally:
        server.stop()
    print(f"{len(latencies)} reviews at {len(latencies) / elapsed:.0f}/s offered {args.rate:.0f}/s, {errors} errors; raw stacks: {raw}")
    summarize(raw, args.top)


if __name__ == "__main__":
    main()
