"""The image verifier `stockade serve` gives each worker is built on its first use (see DeferredVerifier)."""

from __future__ import annotations

import threading
from typing import Any

from stockade.cli.registry_access import DeferredVerifier, make_image_verifier


class _Verifier:
    def verify(self, image: str) -> str:
        return f"verified {image}"


def test_the_verifier_is_built_on_first_use_and_once() -> None:
    built: list[_Verifier] = []

    def build() -> Any:
        built.append(_Verifier())
        return built[-1]

    deferred = DeferredVerifier(build)
    assert not deferred.built and built == []
    barrier = threading.Barrier(8)
    answers: list[str] = []

    def use() -> None:
        barrier.wait()
        answers.append(deferred.verify("nginx"))

    threads = [threading.Thread(target=use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == ["verified nginx"] * 8
    assert len(built) == 1 and deferred.built


def test_make_image_verifier_hands_calls_to_a_cosign_verifier() -> None:
    from stockade.images.verify import CosignVerifier

    verifier, cache = make_image_verifier()
    assert isinstance(verifier, DeferredVerifier) and not verifier.built
    assert cache is not None
    # an attribute only the cosign verifier has: reaching it builds the real one
    method = next(name for name in vars(CosignVerifier) if callable(getattr(CosignVerifier, name)) and not name.startswith("_"))
    assert callable(getattr(verifier, method))
    assert verifier.built
