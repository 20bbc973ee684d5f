"""Long fuzz run of the admission core: N generated AdmissionReviews (default 100,000) through the review parser and
an AdmissionEvaluator, every tenth against a freshly generated ClusterPolicy; prints outcome counts and every crash
(input + traceback).  Exit code 1 when anything crashed.

    python bench/fuzz_admission.py [--examples N] [--seed S]

The same strategies and checks as tests/unit/webhook/test_webhook_fuzz.py (stockade.testing.fuzzing); unlike the
property tests it keeps going after a crash, so one run reports them all.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "unit" / "webhook"))

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from stockade.policy.loader import Document, documents_from_text  # noqa: E402
from stockade.testing.fuzzing import admission_reviews, check_review_answer, cluster_policies  # noqa: E402
from stockade.webhook.admission import AdmissionEvaluator, InvalidAdmissionReview, parse_review, review_response  # noqa: E402
from stockade.webhook.policystore import PolicyStore  # noqa: E402
from webhook_helpers import POLICIES  # noqa: E402  (the unit tests' policy set)


class StaticSource:
    def __init__(self, documents: list[Document]) -> None:
        self._documents = documents

    def fingerprint(self) -> int:
        return id(self._documents)

    def documents(self) -> list[Document]:
        return self._documents


def evaluator_for(documents: list[Document]) -> AdmissionEvaluator:
    return PolicyStore(sources=[StaticSource(documents)]).load().evaluator


def fixed_evaluator() -> AdmissionEvaluator:
    return evaluator_for(documents_from_text(POLICIES, "policies.yaml"))


def main() -> int:
    import logging

    logging.disable(logging.ERROR)  # generated policies are mostly invalid: their rejection is logged, by design
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()
    counts: collections.Counter[str] = collections.Counter()
    crashes: list[str] = []
    slowest = [0.0, ""]
    base = fixed_evaluator()

    @seed(arguments.seed)
    @settings(max_examples=arguments.examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(admission_reviews(), st.one_of(st.none(), st.none(), st.none(), st.none(), st.none(), st.none(), st.none(), st.none(), st.none(), cluster_policies()),
           st.sampled_from(["validate", "mutate"]), st.sampled_from([None, "Fail", "Ignore"]))
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
        except Exception:  # noqa: BLE001 - a crash is what we are looking for: record it and go on
            counts["crashes"] += 1
            if len(crashes) < 50:
                text = json.dumps({"body": body, "policy": policy, "phase": phase, "failure": failure}, default=repr)[:4000]
                crashes.append(f"input: {text}\n{traceback.format_exc()}")
        finally:
            elapsed = time.perf_counter() - started
            if elapsed > slowest[0]:
                slowest[:] = [elapsed, json.dumps(body, default=repr)[:300]]
            if counts["inputs"] % 5000 == 0:
                print(f"... {counts['inputs']} inputs, {counts['crashes']} crashes", file=sys.stderr, flush=True)

    started = time.monotonic()
    run()
    elapsed = time.monotonic() - started
    for name, value in sorted(counts.items()):
        print(f"{name:>20}: {value}")
    print(f"{'seconds':>20}: {elapsed:.1f} ({counts['inputs'] / elapsed:.0f} inputs/s)")
    print(f"{'slowest input':>20}: {slowest[0] * 1000:.1f} ms {slowest[1]}")
    for crash in crashes:
        print("-" * 100)
        print(crash)
    return 1 if counts["crashes"] else 0


if __name__ == "__main__":
    sys.exit(main())
