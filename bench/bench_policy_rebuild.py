"""Cost of a policy snapshot rebuild when one policy out of many changes.

Usage: .venv/bin/python bench/bench_policy_rebuild.py [--policies 200] [--rounds 20]
Builds a PolicyStore over an in-memory source holding N policies (three in four the Pod Security "restricted"
ClusterPolicy under distinct names, one in four its ValidatingPolicy twin), then changes, adds and deletes one policy
per round and reports the median rebuild time, plus the first review evaluated after a rebuild (CEL programs of
unchanged policies must not be compiled again).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from stockade.policy.loader import Document, load_documents  # noqa: E402
from stockade.webhook.admission import parse_review  # noqa: E402
from stockade.webhook.policystore import PolicyStore  # noqa: E402


class MemorySource:
    def __init__(self, documents: list[Document]) -> None:
        self.current = list(documents)
        self.generation = 0

    def fingerprint(self) -> int:
        return self.generation

    def documents(self) -> list[Document]:
        return list(self.current)

    def replace(self, documents: list[Document]) -> None:
        self.current = list(documents)
        self.generation += 1


def policy_set(count: int) -> list[Document]:
    templates = [load_documents([str(HERE / "policies" / name)])[0].data for name in ("pss-restricted.yaml", "pss-restricted-vpol.yaml")]
    documents = []
    for index in range(count):
        data = copy.deepcopy(templates[1 if index % 4 == 3 else 0])
        if data["kind"] == "ValidatingPolicy":
            data["spec"]["validations"] = data["spec"]["validations"][:-1]  # the last one exceeds the CEL cost budget
        data["metadata"]["name"] = f"policy-{index:04d}"
        documents.append(Document(data, f"memory policy-{index:04d}", 0))
    return documents


def pod_review() -> dict[str, Any]:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default",
            "name": "web",
            "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": pod,
        },
    }


def timed(function: Any) -> float:
    started = time.perf_counter()
    function()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()

    documents = policy_set(args.policies)
    source = MemorySource(documents)
    store = PolicyStore(sources=[source])
    first = timed(store.load)
    request = parse_review(pod_review())
    first_review = timed(lambda: store.snapshot.evaluator.validate(request, None, time.monotonic()))
    rebuilds: list[float] = []
    reviews: list[float] = []
    for round_number in range(args.rounds):
        changed = list(source.current)
        edited = copy.deepcopy(changed[round_number].data)
        edited["metadata"]["labels"] = {"round": str(round_number)}
        changed[round_number] = Document(edited, changed[round_number].origin, 0)
        if round_number % 2:
            changed.pop()  # a deletion
        else:
            extra = copy.deepcopy(documents[-1].data)
            extra["metadata"]["name"] = f"added-{round_number}"
            changed.append(Document(extra, "memory added", 0))
        source.replace(changed)
        rebuilds.append(timed(store.reload_if_changed))
        reviews.append(timed(lambda: store.snapshot.evaluator.validate(request, None, time.monotonic())))
    print(f"{args.policies} policies: first load {first:.0f} ms, first review {first_review:.0f} ms")
    print(f"one policy changed + one added/deleted: rebuild median {statistics.median(rebuilds):.1f} ms (max {max(rebuilds):.1f}), "
          f"first review after it median {statistics.median(reviews):.1f} ms")


if __name__ == "__main__":
    main()
