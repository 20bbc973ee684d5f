"""Engine throughput: the Pod Security restricted profile against generated Pods, and CLI start-up time.

Usage: .venv/bin/python bench/bench_engine.py [--pods 10000] [--startup-runs 20]
Prints rule evaluations per second (pattern rules and the built-in podSecurity rule) and the median wall time of
``stockade --version``. Run pinned to one core for comparable figures: ``taskset -c 0 .venv/bin/python bench/...``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Any

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
        containers = [
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
    args = parser.parse_args()
    pods = generate_pods(args.pods)
    for label, policy_file in (("pattern rules", "pss-restricted.yaml"), ("podSecurity rule", "pss-podsecurity.yaml")):
        evaluations, seconds, outcomes = run_validation(policy_file, pods)
        print(f"{label:17s}: {evaluations} rule evaluations on {len(pods)} pods in {seconds:.2f}s = {evaluations / seconds:,.0f} evaluations/s {outcomes}")
    print(f"start-up        : stockade --version median {startup_time(args.startup_runs) * 1000:.0f} ms over {args.startup_runs} runs")


if __name__ == "__main__":
    main()
