"""CEL throughput: the Pod Security restricted profile as ONE ValidatingPolicy (one CEL validation per control)
next to the same controls as Kyverno pattern rules, on the generated Pods of bench_engine.py.

Usage: .venv/bin/python bench/bench_cel.py [--pods 10000]
Run pinned to one core for comparable figures: ``taskset -c 0 .venv/bin/python bench/bench_cel.py``.

Figures: evaluations per second (a pattern rule, or a CEL validation, evaluated against one Pod) and policy
evaluations per second (the whole set against one Pod).  A ValidatingPolicy stops at its first failing validation,
so its evaluation count is the number of validations actually run, measured in an untimed counting pass (when its
validations are evaluated as one program, stockade.celpolicy.chain, all of them run).  The
bench fails unless both sets agree, Pod by Pod, on which Pods comply.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from bench_engine import generate_pods  # noqa: E402

from stockade.cel import CelActivation, CelProgram  # noqa: E402
from stockade.celpolicy import AdmissionInput, CelPolicy, CelPolicyEvaluator  # noqa: E402
from stockade.celpolicy.chain import ValidationChain  # noqa: E402
from stockade.celpolicy.compiler import PolicyCompiler  # noqa: E402
from stockade.engine.engine import Engine, Request  # noqa: E402
from stockade.policy.loader import load_documents  # noqa: E402
from stockade.policy.resources import split_policies  # noqa: E402

PATTERN_POLICY_FILE = os.path.join(HERE, "policies", "pss-restricted.yaml")
CEL_POLICY_FILE = os.path.join(HERE, "policies", "pss-restricted-vpol.yaml")


class PatternSet:
    """The pattern-rule ClusterPolicy, evaluated with the engine exactly as bench_engine.py does."""

    def __init__(self, path: str = PATTERN_POLICY_FILE) -> None:
        self.policies = split_policies(load_documents([path])).kyverno
        self.engine = Engine()

    def statuses(self, pod: dict[str, Any]) -> list[str]:
        """One status per rule evaluated."""
        request = Request(resource=pod)
        statuses: list[str] = []
        for policy in self.policies:
            response = self.engine.validate(self.engine.policy_context(policy, request))
            statuses.extend(rule.status for rule in response.rules)
        return statuses

    def complies(self, pod: dict[str, Any]) -> bool:
        return all(status == "pass" for status in self.statuses(pod))


@dataclass(frozen=True)
class _CountingChain(ValidationChain):
    """A validation chain that counts its validations each time it gives a verdict (all of them run)."""

    counter: _CountingCompiler | None = None

    def first_failure(self, activation: CelActivation) -> int | None:
        verdict = super().first_failure(activation)
        if self.counter is not None:
            self.counter.validations_run += self.count
        return verdict


class _CountingCompiler(PolicyCompiler):
    """Counts how many validation expressions run (used only in the untimed counting pass): every validation of a
    chained verdict, and each one evaluated one by one otherwise (the evaluator compiles, from its cache, each
    expression it evaluates)."""

    def __init__(self) -> None:
        super().__init__()
        self.validations_run = 0
        self.building = False

    def compile(self, policy_key: str, field_path: str, expression: str) -> CelProgram:
        if not self.building and ".validations[" in field_path and field_path.endswith("].expression"):
            self.validations_run += 1
        return super().compile(policy_key, field_path, expression)

    def validation_chain(self, policy_key: str, variables: Sequence[Any] | None, validations: Sequence[Any] | None,
                         variables_prefix: str = "spec.variables") -> ValidationChain | None:
        self.building = True  # building the chain compiles every validation once: not an evaluation
        try:
            chain = super().validation_chain(policy_key, variables, validations, variables_prefix)
        finally:
            self.building = False
        return None if chain is None else _CountingChain(chain.program, chain.count, self)


class CelSet:
    """The ValidatingPolicy, compiled once, evaluated with the CEL policy evaluator the CLI uses."""

    def __init__(self, path: str = CEL_POLICY_FILE, compiler: PolicyCompiler | None = None) -> None:
        documents = split_policies(load_documents([path])).cel
        self.policies = [CelPolicy(document.data) for document in documents]
        self.evaluator = CelPolicyEvaluator(compiler=compiler)

    @property
    def validation_count(self) -> int:
        return sum(len(policy.spec.get("validations") or []) for policy in self.policies)

    def statuses(self, pod: dict[str, Any]) -> list[str]:
        """One status per policy."""
        request = AdmissionInput(object=pod)
        statuses: list[str] = []
        for policy in self.policies:
            response = self.evaluator.validate(policy, request)
            if response is not None:
                statuses.extend(rule.status for rule in response.rules)
        return statuses

    def complies(self, pod: dict[str, Any]) -> bool:
        statuses = self.statuses(pod)
        if "error" in statuses:
            raise AssertionError(f"CEL evaluation error on {pod['metadata']['name']}")
        return all(status == "pass" for status in statuses)


def disagreements(pods: list[dict[str, Any]], patterns: PatternSet | None = None, cel_set: CelSet | None = None) -> list[str]:
    """Names of Pods on which the two sets disagree about compliance."""
    patterns = patterns or PatternSet()
    cel_set = cel_set or CelSet()
    return [pod["metadata"]["name"] for pod in pods if patterns.complies(pod) != cel_set.complies(pod)]


def _time_pattern(pods: list[dict[str, Any]]) -> tuple[int, float, int]:
    patterns = PatternSet()
    evaluations = 0
    compliant = 0
    start = time.perf_counter()
    for pod in pods:
        statuses = patterns.statuses(pod)
        evaluations += len(statuses)
        compliant += all(status == "pass" for status in statuses)
    return evaluations, time.perf_counter() - start, compliant


def _time_cel(pods: list[dict[str, Any]]) -> tuple[float, int]:
    cel_set = CelSet()
    compliant = 0
    start = time.perf_counter()
    for pod in pods:
        compliant += all(status == "pass" for status in cel_set.statuses(pod))
    return time.perf_counter() - start, compliant


def _count_cel_validations(pods: list[dict[str, Any]]) -> int:
    counter = _CountingCompiler()
    cel_set = CelSet(compiler=counter)
    for pod in pods:
        cel_set.statuses(pod)
    return counter.validations_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=10_000)
    args = parser.parse_args()
    pods = generate_pods(args.pods)

    differing = disagreements(pods)
    assert not differing, f"pattern rules and ValidatingPolicy disagree on {len(differing)} pods, e.g. {differing[:5]}"

    pattern_evaluations, pattern_seconds, pattern_compliant = _time_pattern(pods)
    cel_seconds, cel_compliant = _time_cel(pods)
    cel_evaluations = _count_cel_validations(pods)
    assert pattern_compliant == cel_compliant

    validations = CelSet().validation_count
    print(f"{len(pods)} pods, {pattern_compliant} compliant; both sets agree on every pod")
    print(f"{'set':34s} {'evaluations':>11s} {'seconds':>8s} {'evaluations/s':>14s} {'policies/s (pods)':>18s}")
    print(f"{'pattern rules (14 rules)':34s} {pattern_evaluations:11d} {pattern_seconds:8.2f} "
          f"{pattern_evaluations / pattern_seconds:14,.0f} {len(pods) / pattern_seconds:18,.0f}")
    print(f"{f'ValidatingPolicy ({validations} validations)':34s} {cel_evaluations:11d} {cel_seconds:8.2f} "
          f"{cel_evaluations / cel_seconds:14,.0f} {len(pods) / cel_seconds:18,.0f}")


if __name__ == "__main__":
    main()
