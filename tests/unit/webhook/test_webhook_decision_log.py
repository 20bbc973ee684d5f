"""Decision log: one bounded JSON line per admission decision, written off the event loop, rotated by size."""

from __future__ import annotations

import json
from pathlib import Path

from webhook_helpers import pod, review, start_server

from stockade.engine.response import EngineResponse, RuleResponse
from stockade.webhook.admission import AdmissionDecision, parse_review
from stockade.webhook.certs import CertificateManager
from stockade.webhook.decisionlog import MAX_FIELD_CHARS, MAX_RESULTS, DecisionLog, decision_record


def test_each_decision_is_one_line_with_user_resource_and_results(policy_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    running = start_server(policy_dir, CertificateManager(hosts=["127.0.0.1"], directory=tmp_path / "c"))
    running.server.state.decision_log = DecisionLog(str(path))
    client = running.client()
    client.post_review("/validate/fail", review(pod(name="denied")))
    client.post_review("/validate/fail", review(pod(name="fine", labels={"team": "a"})))
    client.close()
    running.stop()  # closes the log after writing what is queued
    denied, allowed = [json.loads(line) for line in path.read_text().splitlines()]
    assert denied["name"] == "denied" and denied["allowed"] is False and denied["user"] == "alice" and denied["operation"] == "CREATE"
    assert {(r["policy"], r["rule"], r["result"]) for r in denied["results"]} >= {("require-team-label", "check-team", "fail")}
    assert "blocked due to the following policies" in denied["message"] and "check-team" in denied["message"]
    assert allowed["name"] == "fine" and allowed["allowed"] is True and "trace_id" not in allowed


def test_fields_and_lists_are_bounded() -> None:
    response = EngineResponse(None, {}, {}, rules=[RuleResponse(f"r{i}", "Validation", "fail", "x" * 100_000) for i in range(MAX_RESULTS + 5)])
    request = parse_review(review(pod(name="n" * 10_000)))
    record = decision_record(request, AdmissionDecision(False, "m" * 100_000, responses=[response]), "ab" * 16)
    assert len(record["message"]) == MAX_FIELD_CHARS and len(record["name"]) == 253
    assert len(record["results"]) == MAX_RESULTS and record["results_omitted"] == 5
    assert all(len(r["message"]) == MAX_FIELD_CHARS for r in record["results"]) and record["trace_id"] == "ab" * 16


def test_file_is_rotated_at_its_size_limit(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(str(path), max_bytes=2000)
    request = parse_review(review(pod()))
    for _ in range(40):
        log.record(request, AdmissionDecision(True))
    log.close()
    rotated = Path(str(path) + ".1")
    assert rotated.exists() and rotated.stat().st_size >= 2000
    lines = path.read_text().splitlines() + rotated.read_text().splitlines()
    assert 0 < len(lines) <= 40 and all(json.loads(line)["allowed"] is True for line in lines)
