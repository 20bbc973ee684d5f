"""The error boundary: client exceptions, Status bodies and transport failures become typed
KubeErrors; retry_on_conflict retries only Conflict."""

from __future__ import annotations

import json
from typing import Any

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from stockade.kube import errors
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
    from_api_exception,
    from_status,
    retry_on_conflict,
    translated,
)


def api_exception(status: int, reason: str = "", message: str = "", headers: dict[str, str] | None = None, **details: Any) -> ApiException:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message or reason, "reason": reason, "code": status}
    if details:
        body["details"] = details
    exc = ApiException(status=status, reason="HTTP reason")
    exc.body = json.dumps(body)
    exc.headers = headers
    return exc


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
def test_api_exceptions_map_by_reason_then_code(status: int, reason: str, expected: type[KubeError]) -> None:
    error = from_api_exception(api_exception(status, reason, "what happened"))
    assert type(error) is expected
    assert error.status == status
    assert error.message == "what happened"


def test_already_exists_is_not_a_conflict_and_invalid_is_unprocessable_entity() -> None:
    assert not issubclass(AlreadyExists, Conflict)
    assert UnprocessableEntity is Invalid


def test_code_decides_when_the_body_is_not_a_status() -> None:
    exc = ApiException(status=404, reason="Not Found")
    exc.body = "404 page not found"
    error = from_api_exception(exc, method="GET", path="/api/v1/nothing")
    assert isinstance(error, NotFound)
    assert str(error) == "GET /api/v1/nothing: 404 page not found"
    assert isinstance(from_api_exception(ApiException(status=502, reason="Bad Gateway")), ServerError)
    assert isinstance(from_api_exception(ApiException(status=0, reason="SSLError")), Unreachable)


def test_retry_after_comes_from_the_header_or_the_details() -> None:
    assert from_api_exception(api_exception(429, "TooManyRequests", headers={"Retry-After": "3"})).retry_after == 3.0
    assert from_api_exception(api_exception(429, "TooManyRequests", retryAfterSeconds=7)).retry_after == 7.0
    assert from_api_exception(api_exception(429, "TooManyRequests")).retry_after is None


def test_invalid_keeps_the_causes() -> None:
    error = from_api_exception(api_exception(422, "Invalid", causes=[{"field": "spec.x", "message": "bad"}]))
    assert isinstance(error, Invalid)
    assert error.details["causes"] == [{"field": "spec.x", "message": "bad"}]


def test_our_raw_rest_api_error_and_transport_failures_map_too() -> None:
    assert isinstance(from_api_exception(urllib3.exceptions.MaxRetryError(None, "/x")), Unreachable)  # type: ignore[arg-type]
    assert isinstance(from_api_exception(ConnectionRefusedError()), Unreachable)
    error = NotFound("x")
    assert from_api_exception(error) is error
    with pytest.raises(TypeError):
        from_api_exception(ValueError("a bug, not an API failure"))


def test_watch_error_events_carry_a_status() -> None:
    error = from_status({"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version: 1 (4)"})
    assert isinstance(error, Gone) and "too old" in str(error)


def test_translated_rewrites_api_failures_and_leaves_bugs_alone() -> None:
    with pytest.raises(NotFound) as caught:
        with translated():
            raise api_exception(404, "NotFound")
    assert isinstance(caught.value.__cause__, ApiException)
    with pytest.raises(KeyError):
        with translated():
            raise KeyError("bug")


def test_retry_on_conflict_retries_conflicts_with_growing_pauses() -> None:
    pauses: list[float] = []
    calls: list[int] = []

    def update() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise api_exception(409, "Conflict", "the object has been modified")
        return "written"

    assert retry_on_conflict(update, attempts=5, backoff=Backoff(initial=0.01, factor=2, cap=1, jitter=0), sleep=pauses.append) == "written"
    assert len(calls) == 3 and pauses == [0.01, 0.02]


def test_retry_on_conflict_gives_up_with_the_last_conflict() -> None:
    pauses: list[float] = []

    def update() -> None:
        raise api_exception(409, "Conflict")

    with pytest.raises(Conflict):
        retry_on_conflict(update, attempts=3, sleep=pauses.append)
    assert len(pauses) == 2


@pytest.mark.parametrize("failure", [api_exception(409, "AlreadyExists"), api_exception(404, "NotFound"), api_exception(500, "InternalError")])
def test_retry_on_conflict_does_not_retry_other_failures(failure: ApiException) -> None:
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
