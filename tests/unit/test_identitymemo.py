"""IdentityMemo: one build per live object, bounded, and never fooled by CPython handing a freed object's id to a
new one."""

from __future__ import annotations

import threading
import time
import weakref

import pytest

from stockade.identitymemo import IdentityMemo


class Token:
    """A small weak-referenceable object in one allocation (slots, no dict), so CPython hands a freed token's
    address to the next token made."""

    __slots__ = ("label", "__weakref__")

    def __init__(self, label: str) -> None:
        self.label = label


def label_of(token: Token) -> str:
    return token.label


class CountingBuild:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, token: Token) -> str:
        self.calls.append(token.label)
        return f"built {token.label}"


def test_the_same_object_is_built_once() -> None:
    memo: IdentityMemo[Token, str] = IdentityMemo(8)
    build = CountingBuild()
    token = Token("a")
    assert memo.get(token, build) == "built a"
    assert memo.get(token, build) == "built a"
    assert build.calls == ["a"]


def test_an_equal_but_distinct_object_gets_its_own_build() -> None:
    memo: IdentityMemo[dict[str, int], int] = IdentityMemo(8)
    first, second = {"x": 1}, {"x": 1}
    assert memo.get(first, lambda _: 1) == 1
    assert memo.get(second, lambda _: 2) == 2
    assert memo.get(first, lambda _: 3) == 1


def test_a_cached_key_is_kept_alive() -> None:
    memo: IdentityMemo[Token, str] = IdentityMemo(8)
    token = Token("held")
    ref = weakref.ref(token)
    memo.get(token, label_of)
    del token
    assert ref() is not None


def test_objects_allocated_after_a_key_is_dropped_are_never_served_its_value() -> None:
    """A memo that kept only ``id(key)`` would answer "old" for a new token that landed on the freed address."""
    memo: IdentityMemo[Token, str] = IdentityMemo(10_000)
    memo.get(Token("old"), label_of)
    for index in range(1_000):
        token = Token(f"new-{index}")
        assert memo.get(token, label_of) == token.label


def test_the_oldest_entry_is_evicted_when_full() -> None:
    memo: IdentityMemo[Token, str] = IdentityMemo(2)
    build = CountingBuild()
    first, second, third = Token("1"), Token("2"), Token("3")
    for token in (first, second, third):
        memo.get(token, build)
    assert len(memo) == 2
    memo.get(second, build)
    memo.get(third, build)
    assert build.calls == ["1", "2", "3"]
    memo.get(first, build)
    assert build.calls == ["1", "2", "3", "1"]


def test_an_evicted_key_is_released_and_its_reused_id_gets_a_fresh_build() -> None:
    memo: IdentityMemo[Token, str] = IdentityMemo(1)
    token = Token("gone")
    ref = weakref.ref(token)
    freed_id = id(token)
    memo.get(token, label_of)
    memo.get(Token("evicts it"), label_of)
    del token
    assert ref() is None
    reused = None
    keep: list[Token] = []  # held so each attempt gets a new address until the freed one comes back
    for _ in range(10_000):
        candidate = Token("successor")
        if id(candidate) == freed_id:
            reused = candidate
            break
        keep.append(candidate)
    assert reused is not None, "CPython did not reuse the freed address; the test cannot exercise id reuse"
    assert memo.get(reused, label_of) == reused.label


def test_concurrent_misses_all_get_the_one_stored_value() -> None:
    memo: IdentityMemo[Token, object] = IdentityMemo(8)
    token = Token("shared")
    start = threading.Barrier(8)
    results: list[object] = []

    def build(_: Token) -> object:
        time.sleep(0.05)  # long enough that every thread misses before the first one stores
        return object()  # a distinct value per build: callers must still agree on one

    def worker() -> None:
        start.wait()
        results.append(memo.get(token, build))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8
    assert all(result is results[0] for result in results)


def test_a_memo_needs_room() -> None:
    with pytest.raises(ValueError):
        IdentityMemo(0)
