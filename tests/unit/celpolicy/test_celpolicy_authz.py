"""ValidatingPolicies in HTTP / Envoy authorization mode, alone and through kyverno-test.yaml payloads."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from stockade.celpolicy.authz import AuthzEvaluator, AuthzPayloadError, envoy_request, evaluation_mode, http_request
from stockade.celpolicy.model import CelPolicy
from stockade.kyvernotest.runner import TestRunner as CaseRunner
from stockade.kyvernotest.schema import load_test_files


def policy(mode: str, validations: list[str], **spec: Any) -> CelPolicy:
    body = {"evaluation": {"mode": mode}, "validations": [{"expression": e} for e in validations], **spec}
    return CelPolicy({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy", "metadata": {"name": "p"}, "spec": body})


def verdict(p: CelPolicy, request: dict[str, Any]) -> tuple[str, str]:
    rule = AuthzEvaluator().authorize(p, request).rules[0]
    return rule.status, rule.message


ENVOY_GET = envoy_request({"attributes": {"request": {"http": {"method": "GET", "path": "/admin", "headers": {"x-user": "bob"}}}}})


def test_first_non_null_validation_decides() -> None:
    p = policy("Envoy", ['object.attributes.request.http.path == "/public" ? envoy.Allowed().Response() : null', "envoy.Denied(403).Response()"])
    assert verdict(p, ENVOY_GET) == ("fail", "request denied with status code 403")
    public = envoy_request({"attributes": {"request": {"http": {"path": "/public"}}}})
    assert verdict(p, public) == ("pass", "request allowed")


def test_no_decision_or_unmatched_request_is_skipped() -> None:
    assert verdict(policy("Envoy", ["null"]), ENVOY_GET)[0] == "skip"
    unmatched = policy("Envoy", ["envoy.Denied(403).Response()"], matchConditions=[{"name": "m", "expression": 'object.attributes.request.http.method == "POST"'}])
    assert verdict(unmatched, ENVOY_GET) == ("skip", "request does not match")


def test_wrong_output_type_and_errors_depend_on_failure_policy() -> None:
    assert verdict(policy("Envoy", ["true"]), ENVOY_GET)[0] == "error"
    assert verdict(policy("Envoy", ["object.nope.missing"]), ENVOY_GET)[0] == "error"
    assert verdict(policy("Envoy", ["object.nope.missing"], failurePolicy="Ignore"), ENVOY_GET)[0] == "skip"


def test_variables_and_headers_in_http_mode() -> None:
    p = policy(
        "HTTP",
        ['variables.user == "alice" ? http.Allowed().Response() : http.Denied("user " + variables.user).Response()'],
        variables=[{"name": "user", "expression": 'size(object.attributes.Header("x-user")) > 0 ? object.attributes.Header("x-user")[0] : ""'}],
    )
    alice = http_request({"attributes": {"method": "GET", "header": {"X-User": ["alice"]}}})
    bob = http_request({"Attributes": {"Header": {"X-User": ["bob"]}}})
    assert verdict(p, alice) == ("pass", "request allowed")
    assert verdict(p, bob) == ("fail", "request denied, reason: user bob")


def test_envoy_payload_accepts_json_names_fills_defaults_and_rejects_unknown_fields() -> None:
    request = envoy_request({"attributes": {"contextExtensions": {"k": "v"}, "request": {"http": {"rawBody": "aGk=", "size": "12"}}}})
    http = request["attributes"]["request"]["http"]
    assert request["attributes"]["context_extensions"] == {"k": "v"}
    assert http["raw_body"] == b"hi" and http["size"] == 12 and http["path"] == "" and http["headers"] == {}
    assert request["attributes"]["source"]["principal"] == ""
    with pytest.raises(AuthzPayloadError) as info:
        envoy_request({"attributes": {"request": {"http": {"verb": "GET"}}}})
    assert info.value.field == "attributes.request.http.verb"


def test_http_payload_defaults_and_type_errors() -> None:
    request = http_request({"attributes": {"path": "/x"}})
    assert request["attributes"]["method"] == "" and request["attributes"]["header"] == {} and request["attributes"]["body"] == b""
    with pytest.raises(AuthzPayloadError):
        http_request({"attributes": {"header": {"a": "not-a-list"}}})


def test_evaluation_mode_defaults_to_kubernetes() -> None:
    assert evaluation_mode({"spec": {}}) == "Kubernetes"
    assert evaluation_mode({"spec": {"evaluation": {"mode": "HTTP"}}}) == "HTTP"


ENVOY_POLICY = """\
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: only-get}
spec:
  evaluation: {mode: Envoy}
  validations:
  - expression: 'object.attributes.request.http.method == "GET" ? envoy.Allowed().Response() : envoy.Denied(405).Response()'
"""


def _write_case(tmp_path: Any, test: str) -> list[Any]:
    (tmp_path / "policy.yaml").write_text(ENVOY_POLICY)
    (tmp_path / "get.json").write_text(json.dumps({"attributes": {"request": {"http": {"method": "GET"}}}}))
    (tmp_path / "post.json").write_text(json.dumps({"attributes": {"request": {"http": {"method": "POST"}}}}))
    (tmp_path / "kyverno-test.yaml").write_text(test)
    return load_test_files(os.path.join(str(tmp_path), "kyverno-test.yaml"))


def test_envoy_payloads_in_a_test_file(tmp_path: Any) -> None:
    header = "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [policy.yaml]\n"
    (passing,) = _write_case(tmp_path, header + "envoyPayloads: [get.json]\nresults:\n- {kind: '', policy: only-get, result: pass}\n")
    run = CaseRunner(passing).execute()
    assert not run.error and [row.ok for row in run.rows] == [True]
    assert run.rows[0].resource.endswith("get.json")
    (flipped,) = _write_case(tmp_path, header + "envoyPayloads: [get.json, post.json]\nresults:\n- {kind: '', policy: only-get, result: pass}\n")
    run = CaseRunner(flipped).execute()
    assert sorted(row.ok for row in run.rows) == [False, True]
    assert run.failed == 1


def test_results_that_nothing_was_evaluated_for_fail(tmp_path: Any) -> None:
    header = "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [policy.yaml]\n"
    (case,) = _write_case(tmp_path, header + "results:\n- {kind: '', policy: only-get, result: pass}\n")
    run = CaseRunner(case).execute()
    assert run.failed == 1 and run.rows[0].reason == "Not found"


def test_malformed_payload_is_a_load_error_naming_file_and_field(tmp_path: Any) -> None:
    header = "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [policy.yaml]\n"
    (case,) = _write_case(tmp_path, header + "envoyPayloads: [bad.json]\nresults:\n- {kind: '', policy: only-get, result: pass}\n")
    (tmp_path / "bad.json").write_text(json.dumps({"attributes": {"bogus": 1}}))
    run = CaseRunner(case).execute()
    assert "bad.json" in run.error and "attributes.bogus" in run.error
    (tmp_path / "bad.json").write_text("{not json")
    run = CaseRunner(case).execute()
    assert "bad.json" in run.error and "not JSON" in run.error
