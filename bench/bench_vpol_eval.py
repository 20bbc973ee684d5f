"""In-process evaluation of one CEL ValidatingPolicy webhook: what a worker does per review, without servers.

Usage: .venv/bin/python bench/bench_vpol_eval.py [--reviews 2000] [--rounds 3] [--profile] [--top 15]
       [--policies bench/policies/vpol-restricted.yaml] [--path /vpol/vpol-restricted]
Pins itself to one core when it can (``--core -1``: no pinning).  The reviews are the Pod CREATE reviews
``bench_admission.py`` posts (same generated Pods, same AdmissionReview bodies).  Each round hands every body to the
worker's own entry point (decode the body, evaluate the policies the webhook path selects, encode the answer),
scoped to ``--path`` exactly as ``stockade serve`` scopes that webhook, and prints microseconds per review; the
figures reported are the medians of the rounds, of wall time and of this process's CPU time (less
sensitive to other load on a shared machine).  ``--profile`` then runs one more round under cProfile and prints the
top functions by own time and by cumulative time.  The bench fails when a review ends in an error rather than a
verdict, and prints how many were denied (the same count every round).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_admission import review_for  # noqa: E402
from bench_engine import generate_pods  # noqa: E402


def scoped_evaluator(policies: str, path: str) -> Any:
    """The evaluator a worker uses for reviews posted to ``path``."""
    from stockade.webhook.admission import parse_route
    from stockade.webhook.policystore import PolicyStore

    route = parse_route(path)
    if route is None:
        raise SystemExit(f"{path} is not a webhook path stockade serves")
    snapshot = PolicyStore([policies]).load()
    return snapshot.evaluator.scoped(route.scope), route


def run_round(evaluator: Any, phase: str, failure: str | None, bodies: list[bytes]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of this process, denied) for one pass over ``bodies`` through the worker's
    evaluation entry point."""
    from stockade.webhook.isolation import _evaluate_in_worker

    denied = 0
    started, cpu_started = time.perf_counter(), time.process_time()
    for body in bodies:
        answer, allowed, _, _, error = _evaluate_in_worker(evaluator, body, phase, failure, time.monotonic())
        if error or answer is None:
            raise SystemExit(f"review ended in an error: {error}")
        denied += not allowed
    return time.perf_counter() - started, time.process_time() - cpu_started, denied


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--reviews", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--policies", default=str(HERE / "policies" / "vpol-restricted.yaml"))
    parser.add_argument("--path", default="/vpol/vpol-restricted")
    parser.add_argument("--profile", action="store_true", help="one more round under cProfile")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--core", type=int, default=0, help="pin this process to this core (-1: no pinning)")
    args = parser.parse_args()
    if args.core >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})
    bodies = [review_for(pod) for pod in generate_pods(args.reviews)]
    evaluator, route = scoped_evaluator(args.policies, args.path)
    run_round(evaluator, route.phase, route.failure, bodies[:200])  # compile and warm caches
    timings: list[float] = []
    cpu_timings: list[float] = []
    denials: set[int] = set()
    for _ in range(args.rounds):
        seconds, cpu_seconds, denied = run_round(evaluator, route.phase, route.failure, bodies)
        timings.append(seconds / len(bodies) * 1e6)
        cpu_timings.append(cpu_seconds / len(bodies) * 1e6)
        denials.add(denied)
    if len(denials) != 1:
        raise SystemExit(f"verdicts differ between rounds: {sorted(denials)} denied")
    print(f"{Path(args.policies).name} at {args.path}: {len(bodies)} reviews x {args.rounds} rounds, {denials.pop()} denied per round")
    print(f"  us per review (wall): median {statistics.median(timings):.1f}  (rounds: {', '.join(f'{t:.1f}' for t in timings)})")
    print(f"  us per review (CPU):  median {statistics.median(cpu_timings):.1f}  (rounds: {', '.join(f'{t:.1f}' for t in cpu_timings)})")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        run_round(evaluator, route.phase, route.failure, bodies)
        profiler.disable()
        stats = pstats.Stats(profiler, stream=sys.stdout)
        stats.sort_stats("tottime").print_stats(args.top)
        stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
