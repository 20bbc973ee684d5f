"""Long fuzz run of the admission core: N generated AdmissionReviews (default 100,000) through the review parser and
an AdmissionEvaluator, every tenth against a freshly generated ClusterPolicy; prints outcome counts, the rate, and
every distinct crash (exception and where it was raised, with its first input and traceback).  Exit code 1 when
anything crashed.

    python bench/fuzz_admission.py [--examples N] [--seed S] [--processes P] [--chunk C]

The work is split into chunks of C inputs, each a Hypothesis run of its own with its own seed, spread over P worker
processes (default: one per core): one Hypothesis run of 100,000 examples slows down as its record of every choice
made so far grows, and one process uses one core.  The same strategies and checks as
tests/unit/webhook/test_webhook_fuzz.py (stockade.testing.fuzzing); unlike the property tests it keeps going after a
crash, so one run reports them all.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "unit" / "webhook"))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from stockade.policy.loader import Document, documents_from_text  # noqa: E402
from stockade.testing.fuzzing import admission_reviews, check_review_answer, cluster_policies  # noqa: E402
from stockade.webhook.admission import AdmissionEvaluator, InvalidAdmissionReview, parse_review, review_response  # noqa: E402
from stockade.webhook.policystore import PolicyStore  # noqa: E402
from webhook_helpers import POLICIES  # noqa: E402  (the unit tests' policy set)

MAX_EXAMPLES_PER_CRASH = 3


class StaticSource:
    def __init__(self, documents: list[Document]) -> None:
        self._documents = documents

    def fingerprint(self) -> int:
        return id(self._documents)

    def documents(self) -> list[Document]:
        return self._documents


def evaluator_for(documents: list[Document]) -> AdmissionEvaluator:
    return PolicyStore(sources=[StaticSource(documents)]).load().evaluator


@dataclass
class ChunkResult:
    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    crashes: dict[str, list[str]] = field(default_factory=dict)  # signature -> first inputs with their tracebacks
    slowest: tuple[float, str] = (0.0, "")

    def merge(self, other: ChunkResult) -> None:
        self.counts.update(other.counts)
        for signature, examples in other.crashes.items():
            self.crashes.setdefault(signature, []).extend(examples)
            del self.crashes[signature][MAX_EXAMPLES_PER_CRASH:]
        self.slowest = max(self.slowest, other.slowest)


def crash_signature(error: BaseException) -> str:
    """The exception type and the innermost frame of the project that raised it: one line per distinct bug."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if "/stockade/" in frame.filename]
    where = f"{frames[-1].filename.rsplit('/stockade/', 1)[-1]}:{frames[-1].lineno} {frames[-1].name}" if frames else "?"
    return f"{type(error).__name__} at stockade/{where}"


_BASE: AdmissionEvaluator | None = None
_POLICIES = cluster_policies()


@st.composite
def sometimes_a_policy(draw: st.DrawFn) -> dict[str, Any] | None:
    """A generated ClusterPolicy for about one input in ten (drawn only then: policies are the costlier part)."""
    return draw(_POLICIES) if draw(st.integers(min_value=0, max_value=9)) == 9 else None


SOMETIMES_A_POLICY = sometimes_a_policy()


def run_chunk(chunk_seed: int, examples: int) -> ChunkResult:
    """One Hypothesis run of ``examples`` inputs (in a worker process; the fixed evaluator is built once per process)."""
    import logging

    global _BASE
    logging.disable(logging.ERROR)  # generated policies are mostly invalid: their rejection is logged, by design
    if _BASE is None:
        _BASE = evaluator_for(documents_from_text(POLICIES, "policies.yaml"))
    base = _BASE
    result = ChunkResult()
    counts = result.counts

    @seed(chunk_seed)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(admission_reviews(), SOMETIMES_A_POLICY, st.sampled_from(["validate", "mutate"]), st.sampled_from([None, "Fail", "Ignore"]))
    def run(body: Any, policy: dict[str, Any] | None, phase: str, failure: str | None) -> None:
        counts["inputs"] += 1
        started = time.perf_counter()
        try:
            evaluator = base if policy is None else evaluator_for([Document(policy, "fuzz.yaml", 0)])
            counts["generated policies" if policy is not None else "fixed policies"] += 1
            try:
                request = parse_review(body)
            except InvalidAdmissionReview:
                counts["refused as invalid"] += 1
                return
            decision = (evaluator.mutate if phase == "mutate" else evaluator.validate)(request, failure)
            check_review_answer(review_response(request, decision), request.uid)
            counts["allowed" if decision.allowed else "denied"] += 1
        except Exception as error:  # noqa: BLE001 - a crash is what we are looking for: record it and go on
            counts["crashes"] += 1
            examples_seen = result.crashes.setdefault(crash_signature(error), [])
            if len(examples_seen) < MAX_EXAMPLES_PER_CRASH:
                text = json.dumps({"body": body, "policy": policy, "phase": phase, "failure": failure}, default=repr)[:4000]
                examples_seen.append(f"input: {text}\n{traceback.format_exc()}")
        finally:
            elapsed = time.perf_counter() - started
            if elapsed > result.slowest[0]:
                result.slowest = (elapsed, json.dumps(body, default=repr)[:300])

    run()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--examples", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--chunk", type=int, default=2_000, help="inputs per Hypothesis run")
    arguments = parser.parse_args()
    sizes = [arguments.chunk] * (arguments.examples // arguments.chunk)
    if arguments.examples % arguments.chunk:
        sizes.append(arguments.examples % arguments.chunk)
    total = ChunkResult()
    started = time.monotonic()
    with ProcessPoolExecutor(max_workers=max(1, arguments.processes)) as pool:
        futures = [pool.submit(run_chunk, arguments.seed * 1_000_003 + index, size) for index, size in enumerate(sizes)]
        for future in as_completed(futures):
            total.merge(future.result())
            elapsed = time.monotonic() - started
            print(f"... {total.counts['inputs']} inputs, {total.counts['crashes']} crashes, {total.counts['inputs'] / elapsed:.0f} inputs/s",
                  file=sys.stderr, flush=True)
    elapsed = time.monotonic() - started
    for name, value in sorted(total.counts.items()):
        print(f"{name:>20}: {value}")
    print(f"{'processes':>20}: {arguments.processes}")
    print(f"{'seconds':>20}: {elapsed:.1f} ({total.counts['inputs'] / elapsed:.0f} inputs/s)")
    print(f"{'slowest input':>20}: {total.slowest[0] * 1000:.1f} ms {total.slowest[1]}")
    print(f"{'distinct crashes':>20}: {len(total.crashes)}")
    for signature, examples in sorted(total.crashes.items()):
        print("-" * 100)
        print(signature)
        for example in examples:
            print(example)
    return 1 if total.counts["crashes"] else 0


if __name__ == "__main__":
    sys.exit(main())
