"""The keyed work queue: dedupe, re-queue after processing, backoff growth and cap, forget, add_after, token bucket,
no key lost under concurrent load, shutdown with and without draining."""

from __future__ import annotations

import threading
import time

import pytest

from stockade.kube.workqueue import DefaultRateLimiter, ItemExponentialBackoff, TokenBucket, WorkQueue

WAIT = 30.0  # generous bound for things that happen at once


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_key_added_while_queued_is_queued_once() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for _ in range(3):
        queue.add("a")
    queue.add("b")
    assert len(queue) == 2
    assert queue.get(timeout=WAIT) == "a"
    assert queue.get(timeout=WAIT) == "b"
    assert queue.get(timeout=0.01) is None


def test_a_key_added_while_processing_comes_back_after_done_not_before() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert queue.get(timeout=WAIT) == "a"
    queue.add("a")
    queue.add("a")
    assert len(queue) == 0  # not handed to a second worker while the first holds it
    assert queue.get(timeout=0.01) is None
    queue.done("a")
    assert len(queue) == 1
    assert queue.get(timeout=WAIT) == "a"
    queue.done("a")
    assert len(queue) == 0 and queue.processing() == 0


def test_per_key_backoff_doubles_up_to_the_cap_and_forget_resets_it() -> None:
    limiter: ItemExponentialBackoff[str] = ItemExponentialBackoff(base=0.01, cap=0.08)
    assert [limiter.when("a") for _ in range(6)] == [0.01, 0.02, 0.04, 0.08, 0.08, 0.08]
    assert limiter.when("b") == 0.01  # per key
    assert limiter.failures("a") == 6
    limiter.forget("a")
    assert limiter.failures("a") == 0
    assert limiter.when("a") == 0.01
    for _ in range(200):
        limiter.when("c")
    assert limiter.when("c") == 0.08  # no float overflow far past the cap


def test_token_bucket_lets_a_burst_through_then_spaces_requests() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10.0, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)  # each booking waits behind the previous one
    clock.now += 10.0
    assert bucket.reserve() == 0.0  # refilled, but never past the burst
    assert [bucket.reserve() for _ in range(2)] == [0.0, 0.0]
    assert bucket.reserve() > 0


def test_default_limiter_takes_the_longer_of_key_backoff_and_bucket() -> None:
    clock = FakeClock()
    limiter: DefaultRateLimiter[str] = DefaultRateLimiter(ItemExponentialBackoff(base=1.0, cap=4.0), TokenBucket(qps=1.0, burst=1, clock=clock))
    assert limiter.when("a") == 1.0  # bucket free, key backoff 1
    assert limiter.when("b") == 1.0  # bucket waits 1, key backoff 1
    assert limiter.when("c") == 2.0  # bucket booked two ahead
    assert limiter.when("a") == 3.0  # key backoff 2, bucket 3
    limiter.forget("a")
    assert limiter.failures("a") == 0


def test_add_rate_limited_delays_then_delivers_and_forget_resets() -> None:
    queue: WorkQueue[str] = WorkQueue(DefaultRateLimiter(ItemExponentialBackoff(base=0.05, cap=1.0)))
    queue.add_rate_limited("a")
    assert queue.num_requeues("a") == 1
    assert len(queue) == 0 and queue.waiting() == 1  # not yet due
    assert queue.get(timeout=WAIT) == "a"
    queue.done("a")
    queue.add_rate_limited("a")
    assert queue.num_requeues("a") == 2
    assert queue.get(timeout=WAIT) == "a"
    queue.done("a")
    queue.forget("a")
    assert queue.num_requeues("a") == 0


def test_add_after_keeps_the_earlier_due_time_and_add_now_wins() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", 3600.0)
    queue.add_after("a", 7200.0)  # later: ignored
    assert queue.waiting() == 1
    assert queue.get(timeout=0.05) is None
    queue.add_after("a", 0.05)  # earlier: replaces
    assert queue.get(timeout=WAIT) == "a"
    queue.done("a")
    assert queue.waiting() == 0
    queue.add_after("b", 3600.0)
    queue.add("b")  # due now supersedes the delay
    assert queue.get(timeout=WAIT) == "b"
    queue.done("b")
    assert queue.waiting() == 0 and len(queue) == 0


def test_add_after_wakes_a_waiting_worker() -> None:
    queue: WorkQueue[str] = WorkQueue()
    got: list[str | None] = []
    worker = threading.Thread(target=lambda: got.append(queue.get(timeout=WAIT)))
    worker.start()
    time.sleep(0.05)  # let the worker block with nothing waiting
    queue.add_after("late", 0.05)
    worker.join(WAIT)
    assert got == ["late"]


def test_no_key_is_lost_under_concurrent_adds_and_workers() -> None:
    queue: WorkQueue[int] = WorkQueue()
    keys = 200
    rounds = 20
    processed: dict[int, int] = {}  # key -> highest round seen when it was processed
    latest: dict[int, int] = {}
    lock = threading.Lock()
    in_flight: set[int] = set()
    overlap: list[int] = []

    def producer(offset: int) -> None:
        for round_ in range(rounds):
            for key in range(offset, keys, 4):
                with lock:
                    latest[key] = round_
                queue.add(key)

    def worker() -> None:
        while (key := queue.get()) is not None:
            with lock:
                if key in in_flight:
                    overlap.append(key)
                in_flight.add(key)
                processed[key] = latest[key]
            with lock:
                in_flight.discard(key)
            queue.done(key)

    workers = [threading.Thread(target=worker) for _ in range(4)]
    producers = [threading.Thread(target=producer, args=(offset,)) for offset in range(4)]
    for thread in workers + producers:
        thread.start()
    for thread in producers:
        thread.join(WAIT)
    left = queue.shutdown(drain=True, timeout=WAIT)
    for thread in workers:
        thread.join(WAIT)
    assert left == []
    assert overlap == []  # one worker per key at a time
    # every key was processed after its last add: the final state of every key was seen
    assert processed == {key: rounds - 1 for key in range(keys)}
    assert not any(thread.is_alive() for thread in workers + producers)


def test_shutdown_without_drain_releases_workers_and_reports_what_was_left() -> None:
    queue: WorkQueue[str] = WorkQueue()
    got: list[str | None] = []
    worker = threading.Thread(target=lambda: got.append(queue.get()))
    worker.start()
    time.sleep(0.05)
    queue.add_after("later", 3600.0)
    left = queue.shutdown()
    worker.join(WAIT)
    assert not worker.is_alive()
    assert got == [None]
    assert left == ["later"]
    assert queue.add("new") is False and queue.add_after("new", 1.0) is False
    assert queue.get(timeout=0.01) is None


def test_draining_shutdown_finishes_queued_and_in_flight_keys() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for key in ("a", "b", "c"):
        queue.add(key)
    queue.add_after("z", 3600.0)
    release = threading.Event()
    seen: list[str] = []

    def worker() -> None:
        while (key := queue.get()) is not None:
            if key == "a" and "a" not in seen:
                release.wait(WAIT)
                queue.add("a")  # re-added while processing during the drain: processed again
            seen.append(key)
            queue.done(key)

    thread = threading.Thread(target=worker)
    thread.start()
    result: list[list[str]] = []
    stopper = threading.Thread(target=lambda: result.append(queue.shutdown(drain=True, timeout=WAIT)))
    stopper.start()
    time.sleep(0.05)
    assert stopper.is_alive()  # still draining: "a" is held
    release.set()
    stopper.join(WAIT)
    thread.join(WAIT)
    assert not thread.is_alive() and not stopper.is_alive()
    assert sorted(seen) == ["a", "a", "b", "c"]
    assert result == [["z"]]  # the delayed key is reported, not silently dropped
