from __future__ import annotations

from typing import Any, Callable

import pytest

from stockade.cel import CelActivation, CelEnvironment


@pytest.fixture(scope="session")
def cel_env() -> CelEnvironment:
    return CelEnvironment(["object", "oldObject", "request", "variables", "authorizer"])


@pytest.fixture()
def ev(cel_env: CelEnvironment) -> Callable[..., Any]:
    def evaluate(expression: str, **values: Any) -> Any:
        values.setdefault("object", {})
        return cel_env.compile(expression).evaluate(CelActivation(values))

    return evaluate
