"""Unit-test hygiene for process-wide settings that `stockade serve` makes at start-up."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _restore_egress_policy() -> Iterator[None]:
    """`serve` sets Kyverno's HTTP blocklist for its whole process (stockade.controllers.egress); a test that runs
    serve in-process must not leave it to the tests after it, which call servers on 127.0.0.1."""
    from stockade.controllers import egress

    before = egress.active_policy()
    yield
    egress.configure(before)
