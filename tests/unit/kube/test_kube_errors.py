"""The error boundary: non-2xx answers, Status bodies and transport failures become typed KubeErrors;
retry_on_conflict retries only Conflict."""

from __future__ import annotations

import json
from typing import Any

import pytest
import urllib3

from stockade.kube import errors
from stockade.kube.config import KubeConfigError
from stockade.kube.errors import (
    AlreadyExists,
    Backoff,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
    UnprocessableEntity,
    Unreachable,
    as_kube_error,
    from_response,
    from_status,
    retry_on_conflict,
    translated,
)


def answer(status: int, reason: str = "", message: str = "", headers: dict[str, str] | None = None, **details: Any) -> KubeError:
    """The error for an API server's non-2xx answer carrying a Status body."""
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message or reason, "reason": reason, "code": status}
    if details:
        body["details"] = details
    return from_response(status, json.dumps(body).encode(), headers, reason="HTTP reason")


@pytest.mark.parametrize(
    ("status", "reason", "expected"),
    [
        (400, "BadRequest", BadRequest),
        (401, "Unauthorized", Unauthorized),
        (403, "Forbidden", Forbidden),
        (404, "NotFound", NotFound),
        (409, "Conflict", Conflict),
        (409, "AlreadyExists", AlreadyExists),
        (410, "Gone", Gone),
        (410, "Expired", Gone),
        (422, "Invalid", Invalid),
        (429, "TooManyRequests", TooManyRequests),
        (500, "InternalError", ServerError),
        (503, "ServiceUnavailable", ServerError),
        (504, "Timeout", ServerError),
        (418, "", KubeError),
    ],
)
def test_answers_map_by_reason_then_code(status: int, reason: str, expected: type[KubeError]) -> None:
    error = answer(status, reason, "what happened")
    assert type(error) is expected
    assert error.status == status
    assert error.message == "what happened"


def test_already_exists_is_not_a_conflict_and_invalid_is_unprocessable_entity() -> None:
    assert not issubclass(AlreadyExists, Conflict)
    assert UnprocessableEntity is Invalid


def test_code_decides_when_the_body_is_not_a_status() -> None:
    error = from_response(404, b"404 page not found", None, reason="Not Found", method="GET", path="/api/v1/nothing")
    assert isinstance(error, NotFound)
    assert str(error) == "GET /api/v1/nothing: 404 page not found"
    assert isinstance(from_response(502, b"", None, reason="Bad Gateway"), ServerError)


def test_retry_after_comes_from_the_header_or_the_details() -> None:
    assert answer(429, "TooManyRequests", headers={"Retry-After": "3"}).retry_after == 3.0
    assert answer(429, "TooManyRequests", retryAfterSeconds=7).retry_after == 7.0
    assert answer(429, "TooManyRequests").retry_after is None


def test_invalid_keeps_the_causes() -> None:
    error = answer(422, "Invalid", causes=[{"field": "spec.x", "message": "bad"}])
    assert isinstance(error, Invalid)
    assert error.details["causes"] == [{"field": "spec.x", "message": "bad"}]


def test_transport_and_credential_failures_are_unreachable_and_bugs_are_not_api_failures() -> None:
    assert isinstance(as_kube_error(urllib3.exceptions.MaxRetryError(None, "/x")), Unreachable)  # type: ignore[arg-type]
    assert isinstance(as_kube_error(urllib3.exceptions.SSLError("bad certificate")), Unreachable)
    assert isinstance(as_kube_error(ConnectionRefusedError()), Unreachable)
    assert isinstance(as_kube_error(KubeConfigError("exec plugin exited with 1", file="/k", field="users[u].user.exec")), Unreachable)
    error = NotFound("x")
    assert as_kube_error(error) is error
    assert as_kube_error(ValueError("a bug, not an API failure")) is None


def test_watch_error_events_carry_a_status() -> None:
    error = from_status({"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version: 1 (4)"})
    assert isinstance(error, Gone) and "too old" in str(error)


def test_translated_rewrites_api_failures_and_leaves_bugs_alone() -> None:
    with pytest.raises(Unreachable) as caught:
        with translated():
            raise urllib3.exceptions.NewConnectionError(None, "connection refused")  # type: ignore[arg-type]
    assert isinstance(caught.value.__cause__, urllib3.exceptions.NewConnectionError)
    with pytest.raises(NotFound):
        with translated():
            raise answer(404, "NotFound")
    with pytest.raises(KeyError):
        with translated():
            raise KeyError("bug")


def test_retry_on_conflict_retries_conflicts_with_growing_pauses() -> None:
    pauses: list[float] = []
    calls: list[int] = []

    def update() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise answer(409, "Conflict", "the object has been modified")
        return "written"

    assert retry_on_conflict(update, attempts=5, backoff=Backoff(initial=0.01, factor=2, cap=1, jitter=0), sleep=pauses.append) == "written"
    assert len(calls) == 3 and pauses == [0.01, 0.02]


def test_retry_on_conflict_gives_up_with_the_last_conflict() -> None:
    pauses: list[float] = []

    def update() -> None:
        raise answer(409, "Conflict")

    with pytest.raises(Conflict):
        retry_on_conflict(update, attempts=3, sleep=pauses.append)
    assert len(pauses) == 2


@pytest.mark.parametrize("failure", [answer(409, "AlreadyExists"), answer(404, "NotFound"), answer(500, "InternalError")])
def test_retry_on_conflict_does_not_retry_other_failures(failure: KubeError) -> None:
    calls: list[int] = []

    def update() -> None:
        calls.append(1)
        raise failure

    with pytest.raises(KubeError) as caught:
        retry_on_conflict(update, attempts=5, sleep=lambda _: None)
    assert not isinstance(caught.value, Conflict)
    assert calls == [1]


def test_retry_on_conflict_lets_bugs_through() -> None:
    with pytest.raises(ZeroDivisionError):
        retry_on_conflict(lambda: 1 // 0, sleep=lambda _: None)


def test_backoff_is_capped() -> None:
    backoff = Backoff(initial=1, factor=10, cap=5, jitter=0)
    assert [backoff.delay(n) for n in range(3)] == [1, 5, 5]
    assert errors.error_class(599) is ServerError
