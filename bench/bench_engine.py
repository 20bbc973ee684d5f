"""Engine throughput: the Pod Security restricted profile against generated Pods, and CLI start-up time.

Usage: .venv/bin/python bench/bench_engine.py [--pods 10000] [--startup-runs 20]
       [--reviews 2000 --rounds 3 [--sets pss,mix17] [--profile 20]]
Prints rule evaluations per second (pattern rules and the built-in podSecurity rule) and the median wall time of
``stockade --version``. Run pinned to one core for comparable figures: ``taskset -c 0 .venv/bin/python bench/...``.

``--reviews N`` measures instead what an evaluation worker of ``stockade serve`` does per admission review, in this
process: the Pod CREATE AdmissionReview bodies ``bench_admission.py`` posts to ``/validate/fail``, decoded, evaluated
by the webhook's evaluator over a policy store loaded from the set's files, answered and summarized for the parent.
It prints CPU microseconds per review (median of ``--rounds`` passes over the same bodies) per policy set and, with
``--profile K``, the K most expensive functions (cProfile, cumulative and own time) of one more pass.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from stockade.engine.engine import Engine, Request  # noqa: E402
from stockade.policy.loader import load_documents  # noqa: E402
from stockade.policy.resources import split_policies  # noqa: E402


def generate_pods(count: int, seed: int = 7) -> list[dict[str, Any]]:
    """A deterministic mix: two thirds compliant with restricted, one third violating one or more controls."""
    rng = random.Random(seed)
    pods = []
    for index in range(count):
        secure = {
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
            "capabilities": {"drop": ["ALL"]},
        }
        containers: list[dict[str, Any]] = [
            {"name": f"c{i}", "image": f"registry.example.com/team/app{i}:1.{index % 50}.0", "securityContext": dict(secure), "ports": [{"containerPort": 8080 + i}]}
            for i in range(rng.randint(1, 3))
        ]
        spec: dict[str, Any] = {"containers": containers, "volumes": [{"name": "data", "emptyDir": {}}]}
        if index % 3 == 2:
            violation = rng.choice(["privileged", "hostNetwork", "hostPath", "root", "caps"])
            if violation == "privileged":
                containers[0]["securityContext"]["privileged"] = True
            elif violation == "hostNetwork":
                spec["hostNetwork"] = True
            elif violation == "hostPath":
                spec["volumes"].append({"name": "host", "hostPath": {"path": "/var/run"}})
            elif violation == "root":
                containers[0]["securityContext"] = {"runAsUser": 0}
            else:
                containers[0]["securityContext"]["capabilities"] = {"add": ["SYS_ADMIN"]}
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pod-{index}", "namespace": "bench", "labels": {"app": "bench"}}, "spec": spec})
    return pods


def review_for(pod: dict[str, Any]) -> bytes:
    metadata = pod.get("metadata") or {}
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": metadata.get("namespace", "default"),
                "name": metadata.get("name", ""),
                "operation": "CREATE",
                "userInfo": {"username": "bench", "groups": ["system:authenticated"]},
                "object": pod,
                "dryRun": False,
            },
        }
    ).encode()



def run_validation(policy_file: str, pods: list[dict[str, Any]]) -> tuple[int, float, dict[str, int]]:
    policies = split_policies(load_documents([os.path.join(HERE, "policies", policy_file)])).kyverno
    engine = Engine()
    evaluations = 0
    outcomes: dict[str, int] = {}
    start = time.perf_counter()
    for pod in pods:
        request = Request(resource=pod)
        for policy in policies:
            response = engine.validate(engine.policy_context(policy, request))
            for rule in response.rules:
                evaluations += 1
                outcomes[rule.status] = outcomes.get(rule.status, 0) + 1
    return evaluations, time.perf_counter() - start, outcomes


REVIEW_SETS = {"pss": "pss-restricted.yaml", "mix17": "mix17"}


def review_evaluation(policy_path: str) -> Callable[[bytes], Any]:
    """One review as an evaluation worker handles it for ``/validate/fail``: decode, evaluate, answer, summarize."""
    from stockade.webhook.isolation import _evaluate_in_worker
    from stockade.webhook.policystore import PolicyStore

    snapshot = PolicyStore([policy_path], log_rejections=False).load()
    if snapshot.errors:
        raise SystemExit(f"{policy_path}: {snapshot.errors}")
    evaluator = snapshot.evaluator

    def evaluate(body: bytes) -> Any:
        outcome = _evaluate_in_worker(evaluator, body, "validate", "Fail", time.monotonic())
        if outcome[4]:
            raise SystemExit(f"evaluation failed: {outcome[4]}")
        return outcome

    return evaluate


def run_reviews(policy_path: str, bodies: list[bytes], rounds: int, profile_top: int) -> tuple[list[float], int]:
    """CPU microseconds per review of each round (after one warm-up pass), and how many reviews were denied.  CPU
    time of this process, not wall time: other processes sharing the core do not inflate it."""
    evaluate = review_evaluation(policy_path)
    denied = sum(1 for body in bodies if not evaluate(body)[1])
    samples = []
    for _ in range(rounds):
        start = time.process_time()
        for body in bodies:
            evaluate(body)
        samples.append((time.process_time() - start) / len(bodies) * 1e6)
    if profile_top:
        profiler = cProfile.Profile()
        profiler.enable()
        for body in bodies:
            evaluate(body)
        profiler.disable()
        stats = pstats.Stats(profiler)
        for order in ("cumulative", "tottime"):
            print(f"-- profile of one pass, top {profile_top} by {order}")
            stats.sort_stats(order).print_stats(profile_top)
    return samples, denied


def startup_time(runs: int) -> float:
    executable = os.path.join(os.path.dirname(sys.executable), "stockade")
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([executable, "--version"], check=True, capture_output=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--startup-runs", type=int, default=20)
    parser.add_argument("--reviews", type=int, default=0, help="admission reviews per round (0: the rule-evaluation figures instead)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sets", default=",".join(REVIEW_SETS), help=f"policy sets for --reviews, of {sorted(REVIEW_SETS)}")
    parser.add_argument("--profile", type=int, default=0, metavar="K", help="with --reviews: print cProfile's top K functions")
    args = parser.parse_args()
    if args.reviews:
        bodies = [review_for(pod) for pod in generate_pods(args.reviews)]
        for name in args.sets.split(","):
            samples, denied = run_reviews(os.path.join(HERE, "policies", REVIEW_SETS[name]), bodies, args.rounds, args.profile)
            rounds_text = ", ".join(f"{sample:.1f}" for sample in samples)
            print(f"{name:6s}: {statistics.median(samples):.1f} us per review (median of {args.rounds} rounds: {rounds_text}) over {len(bodies)} reviews, {denied} denied")
        return
    pods = generate_pods(args.pods)
    for label, policy_file in (("pattern rules", "pss-restricted.yaml"), ("podSecurity rule", "pss-podsecurity.yaml")):
        evaluations, seconds, outcomes = run_validation(policy_file, pods)
        print(f"{label:17s}: {evaluations} rule evaluations on {len(pods)} pods in {seconds:.2f}s = {evaluations / seconds:,.0f} evaluations/s {outcomes}")
    print(f"start-up        : stockade --version median {startup_time(args.startup_runs) * 1000:.0f} ms over {args.startup_runs} runs")


if __name__ == "__main__":
    main()
