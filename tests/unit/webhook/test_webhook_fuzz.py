"""Property tests of the admission path on generated input (stockade.testing.fuzzing): the review parser, the
evaluator, the policy loader/validator and the HTTPS server never fail with anything but the project's typed errors,
always answer with a well-formed AdmissionReview, and finish each input within a generous guard.

Profile ``ci`` (default: 1,000 examples, derandomized); STOCKADE_FUZZ_PROFILE=fuzz for a long run (or bench/fuzz_admission.py).
"""

from __future__ import annotations

import json
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from webhook_helpers import POLICIES, RunningServer, start_server

from stockade.policy.loader import Document, LoadError, documents_from_text
from stockade.lint.policies import validate_policy_document
from stockade.testing.fuzzing import admission_reviews, check_review_answer, cluster_policies, load_profile
from stockade.webhook.admission import AdmissionEvaluator, InvalidAdmissionReview, parse_review, review_response
from stockade.webhook.certs import CertificateManager
from stockade.webhook.policystore import PolicyStore, document_problem

load_profile()
GUARD_SECONDS = 20  # every input here takes milliseconds; the guard only turns a hang into a failure


class TooSlow(Exception):
    pass


@contextmanager
def guard(seconds: float = GUARD_SECONDS) -> Iterator[None]:
    def expire(*_: object) -> None:
        raise TooSlow(f"no answer within {seconds}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class StaticSource:
    """Fixed documents as a policy source."""

    def __init__(self, documents: list[Document]) -> None:
        self._documents = documents

    def fingerprint(self) -> int:
        return id(self._documents)

    def documents(self) -> list[Document]:
        return self._documents


def evaluator_for(documents: list[Document]) -> AdmissionEvaluator:
    snapshot = PolicyStore(sources=[StaticSource(documents)]).load()
    return snapshot.evaluator


FIXED_EVALUATOR = evaluator_for(documents_from_text(POLICIES, "policies.yaml"))


def answer(evaluator: AdmissionEvaluator, body: Any, phase: str, failure: str | None) -> None:
    """What the server does with a body, minus HTTP: parse (a typed refusal is fine), evaluate, answer."""
    try:
        request = parse_review(body)
    except InvalidAdmissionReview:
        return
    with guard():
        decision = (evaluator.mutate if phase == "mutate" else evaluator.validate)(request, failure)
        check_review_answer(review_response(request, decision), request.uid)


PHASES = st.sampled_from(["validate", "mutate"])
FAILURES = st.sampled_from([None, "Fail", "Ignore"])


@given(admission_reviews())
def test_parse_review_refuses_only_with_invalid_admission_review(body: Any) -> None:
    try:
        request = parse_review(body)
    except InvalidAdmissionReview:
        return
    assert isinstance(request.uid, str) and request.uid
    assert isinstance(request.object, dict) and isinstance(request.old_object, dict)


@given(admission_reviews(), PHASES, FAILURES)
def test_evaluating_any_review_gives_a_well_formed_answer(body: Any, phase: str, failure: str | None) -> None:
    answer(FIXED_EVALUATOR, body, phase, failure)


@given(cluster_policies())
def test_policy_checks_never_raise(policy: dict[str, Any]) -> None:
    with guard():
        result = validate_policy_document(policy)
        assert isinstance(result.ok, bool)
        problem = document_problem(Document(policy, "fuzz.yaml", 0))
        assert problem is None or isinstance(problem, str)


@given(st.one_of(cluster_policies().map(yaml.safe_dump), st.text(max_size=200)))
def test_loading_policy_text_fails_only_with_load_error(text: str) -> None:
    with guard():
        try:
            documents = documents_from_text(text, "fuzz.yaml")
        except LoadError as exc:
            assert "fuzz.yaml" in str(exc)
            return
        assert all(isinstance(d.data, dict) for d in documents)


@given(cluster_policies(), admission_reviews(), PHASES, FAILURES)
def test_generated_policies_give_well_formed_answers(policy: dict[str, Any], body: Any, phase: str, failure: str | None) -> None:
    with guard():
        evaluator = evaluator_for([Document(policy, "fuzz.yaml", 0)])
    answer(evaluator, body, phase, failure)


@pytest.fixture(scope="module")
def fuzz_server() -> Iterator[RunningServer]:
    with tempfile.TemporaryDirectory() as workdir:
        policy_dir = Path(workdir) / "policies"
        policy_dir.mkdir()
        (policy_dir / "policies.yaml").write_text(POLICIES)
        certs = CertificateManager(hosts=["localhost", "127.0.0.1"], directory=Path(workdir) / "certs")
        running = start_server(policy_dir, certs)
        yield running
        running.stop()


def test_the_server_answers_any_body_with_a_review_or_a_4xx(fuzz_server: RunningServer) -> None:
    """Over HTTPS: a valid AdmissionReview answer, or a 4xx for a malformed body; never a 5xx or a dropped connection."""
    client = fuzz_server.client()

    @settings(max_examples=max(20, settings().max_examples // 5))
    @given(admission_reviews(), st.sampled_from(["/validate", "/mutate", "/validate/fail", "/mutate/ignore", "/policyvalidate"]))
    def post(body: Any, path: str) -> None:
        with guard():
            status, data = client.request("POST", path, json.dumps(body).encode())
        assert status == 200 or 400 <= status < 500, (status, data[:300])
        if status == 200:
            check_review_answer(json.loads(data), parse_review(body).uid)

    try:
        post()
    finally:
        client.close()
