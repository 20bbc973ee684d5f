"""The server <-> worker crossing alone: reviews handed to the evaluation pool the way `stockade serve` hands them, with no HTTP.

Usage: .venv/bin/python bench/bench_crossing.py [--reviews 6000] [--concurrency 8] [--rounds 3]
       [--policies bench/policies/pss-restricted.yaml]
Pins itself (and so its one worker) to one core when it can, like `bench/bench_admission.py` pins the server.  Each
round sends the same Pod CREATE reviews through ``IsolatedEvaluations.decide`` with ``--concurrency`` in flight and
prints the CPU time per review of this process (the server's side: framing, hand-off, reading the answer back,
rebuilding the engine responses) and of the worker (decoding, evaluating, encoding the answer), for two policy
sets: the given one, and one trivial rule, where evaluation costs almost nothing and the crossing is nearly all
that is left.  The figures are medians over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_admission import counter_snapshot, review_for  # noqa: E402
from bench_engine import generate_pods  # noqa: E402

TRIVIAL_POLICY = """\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: trivial
spec:
  validationFailureAction: Enforce
  rules:
    - name: has-spec
      match:
        any:
          - resources:
              kinds: [Pod]
      validate:
        message: a Pod needs a spec
        pattern:
          spec: {}
"""


async def run(policy_path: str, bodies: list[bytes], concurrency: int, rounds: int) -> list[tuple[float, ...]]:
    """(server ms, worker ms, wall ms, server system ms, worker system ms, context switches) per review for each round."""
    from stockade.webhook.admission import parse_review
    from stockade.webhook.isolation import EvaluationPool, IsolatedEvaluations, read_review_body
    from stockade.webhook.policystore import PolicyStore

    store = PolicyStore([policy_path])
    snapshot = store.load()
    pool = EvaluationPool(1)
    await pool.start(list(snapshot.documents), {}, snapshot.generation, snapshot.document_keys)
    evaluations = IsolatedEvaluations(pool)
    results = []
    try:
        for round_number in range(rounds + 1):  # the first round warms up
            pending = iter(bodies)
            denied = 0

            async def client() -> None:
                nonlocal denied
                for body in pending:
                    review = parse_review(await read_review_body(body))
                    decision, _ = await evaluations.decide(snapshot, review, body, "validate", "Fail", time.monotonic())
                    denied += not decision.allowed

            before = counter_snapshot(os.getpid())
            started = time.perf_counter()
            await asyncio.gather(*(client() for _ in range(concurrency)))
            elapsed = time.perf_counter() - started
            after = counter_snapshot(os.getpid())
            if round_number:
                server, worker = (sum(a[:2]) - sum(b[:2]) for b, a in zip(before, after))
                server_system, worker_system = (a[1] - b[1] for b, a in zip(before, after))
                switches = sum(a[2] - b[2] for b, a in zip(before, after))
                results.append(tuple(value / len(bodies) * 1000 for value in (server, worker, elapsed, server_system, worker_system)) + (switches / len(bodies),))
        print(f"  ({denied} of {len(bodies)} denied per round)")
    finally:
        await pool.close(0)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--reviews", type=int, default=6000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--policies", default=str(HERE / "policies" / "pss-restricted.yaml"))
    parser.add_argument("--core", type=int, default=0, help="pin this process and its worker to this core (-1: no pinning)")
    args = parser.parse_args()
    if args.core >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    bodies = [review_for(pod) for pod in generate_pods(args.reviews)]
    with tempfile.TemporaryDirectory(prefix="stockade-crossing-") as scratch:
        trivial = Path(scratch) / "trivial.yaml"
        trivial.write_text(TRIVIAL_POLICY)
        for label, path in ((Path(args.policies).name, args.policies), ("one trivial rule", str(trivial))):
            print(f"{label}: {args.reviews} reviews x {args.rounds} rounds, {args.concurrency} in flight")
            rounds = asyncio.run(run(path, bodies, args.concurrency, args.rounds))
            server, worker, wall, server_system, worker_system, switches = (statistics.median(values) for values in zip(*rounds))
            print(f"  cpu per review: server {server:.3f} ms, worker {worker:.3f} ms, total {server + worker:.3f} ms; wall {wall:.3f} ms ({1000 / wall:.0f} reviews/s)")
            print(f"  of which system: server {server_system:.3f} ms, worker {worker_system:.3f} ms; context switches per review (both sides) {switches:.2f}")


if __name__ == "__main__":
    main()
