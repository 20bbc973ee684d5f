"""Policy changes from a watch take effect at once: a change rebuilds the snapshot without waiting for the poll, a
burst of changes costs one rebuild, unchanged policies are not prepared or compiled again, and the evaluation
workers hold the new policies before any review is decided with them."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
from typing import Any

import pytest
from webhook_helpers import pod, review

from stockade.controllers.kyvernoconfigwatch import LiveKyvernoConfig
from stockade.controllers.policywatch import WATCHED_KINDS, ClusterPolicySource
from stockade.policy.loader import Document
from stockade.webhook.admission import parse_review
from stockade.webhook.isolation import EvaluationPool, IsolatedEvaluations, StalePolicies
from stockade.webhook.policystore import PolicySnapshot, PolicyStore

CLUSTER_POLICY_KIND = next(k for k in WATCHED_KINDS if k.kind == "ClusterPolicy")
VALIDATING_KIND = next(k for k in WATCHED_KINDS if k.kind == "ValidatingPolicy")
WAIT_SECONDS = 20.0  # generous guard: each wait below is met in milliseconds, this only turns a hang into a failure


def cluster_policy(name: str, label: str = "team") -> dict[str, Any]:
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1", "generation": 1},
        "spec": {
            "validationFailureAction": "Enforce",
            "rules": [
                {
                    "name": "check",
                    "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                    "validate": {"message": f"label {label} is required", "pattern": {"metadata": {"labels": {label: "?*"}}}},
                }
            ],
        },
    }


def validating_policy(name: str, forbidden: str = "forbidden") -> dict[str, Any]:
    return {
        "apiVersion": "policies.kyverno.io/v1",
        "kind": "ValidatingPolicy",
        "metadata": {"name": name, "generation": 1},
        "spec": {
            "validationActions": ["Deny"],
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
            "validations": [{"expression": f"!has(object.metadata.labels) || !('{forbidden}' in object.metadata.labels)", "message": "forbidden"}],
        },
    }


def pod_request(labels: dict[str, str] | None = None) -> Any:
    return parse_review(review(pod("web", labels=labels)))


class SnapshotWaiter:
    """A store listener that lets a test wait for a snapshot satisfying a condition."""

    def __init__(self, store: PolicyStore) -> None:
        self.store = store
        self.changed = threading.Condition()
        store.listeners.append(self._installed)

    def _installed(self, _snapshot: PolicySnapshot) -> None:
        with self.changed:
            self.changed.notify_all()

    def wait_for(self, condition: Any) -> PolicySnapshot:
        with self.changed:
            assert self.changed.wait_for(lambda: self.store.snapshot is not None and condition(self.store.snapshot), WAIT_SECONDS)
        assert self.store.snapshot is not None
        return self.store.snapshot


@pytest.fixture()
def watched_store() -> Any:
    source = ClusterPolicySource(api_client=None)
    source.apply_event(CLUSTER_POLICY_KIND, "v1", "ADDED", cluster_policy("require-team"))
    store = PolicyStore(sources=[source])
    store.load()
    store.start()
    yield source, store
    store.stop()


def test_a_watch_event_rebuilds_at_once_without_the_poll(watched_store: Any) -> None:
    source, store = watched_store
    waiter = SnapshotWaiter(store)
    assert store.snapshot.evaluator.validate(pod_request(), None).allowed is False
    source.apply_event(CLUSTER_POLICY_KIND, "v1", "DELETED", cluster_policy("require-team"))  # nobody polls in this test
    snapshot = waiter.wait_for(lambda s: not s.policies)
    assert snapshot.evaluator.validate(pod_request(), None).allowed is True
    source.apply_event(CLUSTER_POLICY_KIND, "v1", "ADDED", cluster_policy("require-owner", label="owner"))
    snapshot = waiter.wait_for(lambda s: [p.name for p in s.policies] == ["require-owner"])
    decision = snapshot.evaluator.validate(pod_request({"team": "a"}), None)
    assert decision.allowed is False and "label owner is required" in decision.message


def test_status_only_events_do_not_rebuild(watched_store: Any) -> None:
    source, store = watched_store
    served = store.snapshot
    with_status = {**cluster_policy("require-team"), "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    with_status["metadata"]["resourceVersion"] = "2"
    assert source.apply_event(CLUSTER_POLICY_KIND, "v1", "MODIFIED", with_status) is False
    assert store.rebuilds_requested == 0 and store.snapshot is served


def test_a_kyverno_configmap_change_rebuilds_at_once() -> None:
    live = LiveKyvernoConfig()
    store = PolicyStore(sources=[live])
    store.load()
    waiter = SnapshotWaiter(store)
    store.start()
    try:
        first = store.snapshot.generation
        assert live.load({"defaultRegistry": "registry.example.com"}) is True
        assert waiter.wait_for(lambda s: s.generation > first).fingerprint == (live.generation,)
    finally:
        store.stop()


class GatedSource:
    """A source whose documents() can be held, to stand for a rebuild in progress; records overlapping reads."""

    def __init__(self) -> None:
        self.generation = 0
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.reads = 0
        self.active = 0
        self.most_active = 0
        self._lock = threading.Lock()

    def fingerprint(self) -> int:
        return self.generation

    def documents(self) -> list[Document]:
        with self._lock:
            self.reads += 1
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        self.entered.set()
        assert self.gate.wait(WAIT_SECONDS)
        with self._lock:
            self.active -= 1
        return [Document(cluster_policy("require-team"), "gated", 0)]

    def subscribe(self, callback: Any) -> None:
        self.notify = callback


def test_a_burst_of_events_during_a_rebuild_makes_one_more_rebuild_and_never_two_at_once() -> None:
    source = GatedSource()
    store = PolicyStore(sources=[source])
    store.load()
    installed: list[int] = []
    store.listeners.append(lambda snapshot: installed.append(snapshot.generation))
    store.start()
    try:
        source.gate.clear()
        source.entered.clear()
        source.generation += 1
        source.notify()
        assert source.entered.wait(WAIT_SECONDS)  # the rebuild thread is inside a rebuild now
        poll = threading.Thread(target=store.reload_if_changed)  # the periodic poll arrives meanwhile
        poll.start()
        for _ in range(50):
            source.generation += 1
            source.notify()
        source.gate.set()
        poll.join(WAIT_SECONDS)
        deadline = time.monotonic() + WAIT_SECONDS
        while store.snapshot.fingerprint != (source.generation,) and time.monotonic() < deadline:
            time.sleep(0.01)
        store.stop()
        assert store.snapshot.fingerprint == (source.generation,)
        assert source.most_active == 1
        # the one in progress, then one for the whole burst (the poll may take that one's place, never add to it)
        assert len(installed) == 2 and source.reads == 3
    finally:
        source.gate.set()
        store.stop()


class ListSource:
    def __init__(self, documents: list[Document]) -> None:
        self.current = documents
        self.generation = 0

    def fingerprint(self) -> int:
        return self.generation

    def documents(self) -> list[Document]:
        return [Document(copy.deepcopy(d.data), d.origin, 0) for d in self.current]  # fresh objects, as files give

    def replace(self, documents: list[Document]) -> None:
        self.current = documents
        self.generation += 1


def test_unchanged_policies_are_not_prepared_or_compiled_again() -> None:
    documents = [Document(cluster_policy(f"kyverno-{i}"), f"memory {i}", 0) for i in range(5)]
    documents += [Document(validating_policy(f"cel-{i}"), f"memory cel {i}", 0) for i in range(3)]
    source = ListSource(documents)
    store = PolicyStore(sources=[source])
    first = store.load()
    assert store.prepared_documents == 8
    assert first.evaluator.validate(pod_request({"team": "a", "forbidden": "x"}), None).allowed is False
    compiler = first.evaluator.cel_evaluator.compiler
    programs = dict(compiler._programs)
    assert programs, "the CEL validations were compiled"

    changed = list(documents)
    changed[0] = Document(cluster_policy("kyverno-0", label="owner"), "memory 0", 0)
    changed[5] = Document(validating_policy("cel-0", forbidden="banned"), "memory cel 0", 0)
    del changed[7]  # cel-2 deleted
    status_written = copy.deepcopy(changed[1].data)
    status_written["metadata"]["resourceVersion"] = "2"
    status_written["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    changed[1] = Document(status_written, "memory 1", 0)
    source.replace(changed)
    second = store.load()

    assert store.prepared_documents == 8 + 2, "only the two edited policies were checked and built again"
    old_views = {p.name: p for p in first.policies + first.cel_policies}
    new_views = {p.name: p for p in second.policies + second.cel_policies}
    assert [name for name in new_views if new_views[name] is old_views.get(name)] == ["kyverno-1", "kyverno-2", "kyverno-3", "kyverno-4", "cel-1"]
    assert second.evaluator.cel_evaluator.compiler is compiler
    kept = {key: program for key, program in compiler._programs.items() if key in programs}
    assert {key[0] for key in kept} == {"ValidatingPolicy//cel-1"}, "programs of the edited and deleted policies were dropped"
    assert all(program is programs[key] for key, program in kept.items()), "the unchanged policy's programs were not compiled again"
    decision = second.evaluator.validate(pod_request({"team": "a", "owner": "b", "banned": "x"}), None)
    assert decision.allowed is False and "forbidden" in decision.message
    assert second.evaluator.validate(pod_request({"team": "a", "owner": "b", "forbidden": "x"}), None).allowed is False  # cel-1


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 60))  # a hang fails instead of blocking the suite


def test_workers_answer_with_the_generation_the_parent_decided_with() -> None:
    source = ClusterPolicySource(api_client=None)
    source.apply_event(CLUSTER_POLICY_KIND, "v1", "ADDED", cluster_policy("require-team"))
    source.apply_event(CLUSTER_POLICY_KIND, "v1", "ADDED", cluster_policy("require-owner", label="owner"))
    store = PolicyStore(sources=[source])
    snapshot = store.load()
    body = json.dumps(review(pod("web", labels={"team": "a"}))).encode()
    parsed = parse_review(json.loads(body))

    async def scenario() -> None:
        pool = EvaluationPool(2)
        await pool.start(list(snapshot.documents), {}, snapshot.generation, snapshot.document_keys)
        store.before_install.append(lambda changed: pool.publish(list(changed.documents), {}, changed.generation, changed.document_keys))
        evaluations = IsolatedEvaluations(pool)
        try:
            decision, answer = await evaluations.decide(store.snapshot, parsed, body, "validate", None, time.monotonic())
            assert decision.allowed is False and answer is not None
            # deleted in the cluster, rebuilt off the event loop; the very next review must be admitted, by any worker
            source.apply_event(CLUSTER_POLICY_KIND, "v1", "DELETED", cluster_policy("require-owner", label="owner"))
            assert await asyncio.to_thread(store.reload_if_changed) is True
            current = store.snapshot
            answers = await asyncio.gather(
                *(pool.evaluate(body, "validate", None, time.monotonic(), time.monotonic() + WAIT_SECONDS, current.generation) for _ in range(4))
            )
            assert {a.generation for a in answers} == {current.generation}
            assert all(json.loads(a.answer)["response"]["allowed"] is True for a in answers)
            decision, _ = await evaluations.decide(current, parsed, body, "validate", None, time.monotonic())
            assert decision.allowed is True
            with pytest.raises(StalePolicies):
                await pool.evaluate(body, "validate", None, time.monotonic(), time.monotonic() + WAIT_SECONDS, current.generation + 1)
        finally:
            await pool.close(0)

    run(scenario())


def test_a_new_worker_gets_every_document_and_later_changes_only_the_new_ones() -> None:
    from stockade.webhook.isolation import PolicyUpdate

    pool = EvaluationPool(1)
    first = [Document(cluster_policy(f"p{i}"), f"memory {i}", 0) for i in range(3)]
    pool._set_documents(first, {}, 1)
    full = pool._full_update_frame()
    update = pool._set_documents([*first[:2], Document(cluster_policy("p9"), "memory 9", 0)], {}, 2)
    assert isinstance(update, PolicyUpdate) and update.generation == 2
    assert [d.data["metadata"]["name"] for d in update.documents.values()] == ["p9"]
    held = dict(zip(pool._keys[:2], first[:2]))
    assert [d.data["metadata"]["name"] for d in update.apply(held)] == ["p0", "p1", "p9"]
    assert update.apply(held)[0] is first[0]
    assert full != pool._full_update_frame()
