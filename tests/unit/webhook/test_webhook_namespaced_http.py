"""Kyverno's --allowHTTPInNamespacedPolicies and --httpBlocklist as `stockade serve` takes them: the policy webhook
and the served snapshot refuse a namespaced CEL policy calling http.* unless the server allows it, and the blocklist
option replaces Kyverno's default list."""

from __future__ import annotations

from typing import Any

import click
import pytest

from stockade.cli.serve_cmd import http_blocklist, serve
from stockade.controllers.egress import KYVERNO_DEFAULT_BLOCKLIST
from stockade.policy.loader import Document
from stockade.webhook.admission import parse_review
from stockade.webhook.policystore import document_problem
from stockade.webhook.server import policy_validation_decision

POLICY: dict[str, Any] = {
    "apiVersion": "policies.kyverno.io/v1beta1",
    "kind": "NamespacedValidatingPolicy",
    "metadata": {"name": "nvpol-cel-http-probe", "namespace": "test-cel-http"},
    "spec": {
        "validationActions": ["Deny"],
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]},
        "variables": [{"name": "probe", "expression": 'http.get("http://json-server.test-cel-http.svc.cluster.local:8080/")'}],
        "validations": [{"expression": "false", "messageExpression": "'cel-http-test: statusCode=' + string(variables.probe.statusCode)"}],
    },
}


def _review() -> Any:
    request = {
        "uid": "u1", "operation": "CREATE", "namespace": "test-cel-http", "name": "nvpol-cel-http-probe",
        "kind": {"group": "policies.kyverno.io", "version": "v1beta1", "kind": "NamespacedValidatingPolicy"},
        "resource": {"group": "policies.kyverno.io", "version": "v1beta1", "resource": "namespacedvalidatingpolicies"},
        "object": POLICY, "userInfo": {"username": "admin"},
    }
    return parse_review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})


def test_the_policy_webhook_refuses_http_in_a_namespaced_policy_unless_allowed() -> None:
    denied = policy_validation_decision(_review())
    assert not denied.allowed
    assert "http.* is not allowed in namespaced policies" in denied.message
    assert policy_validation_decision(_review(), allow_namespaced_http=True).allowed


def test_the_served_snapshot_takes_the_policy_only_when_allowed() -> None:
    document = Document(POLICY, "cluster", 0)
    assert "http.* is not allowed in namespaced policies" in str(document_problem(document))
    assert document_problem(document, allow_namespaced_http=True) is None


def _params(*args: str) -> dict[str, Any]:
    return dict(serve.make_context("serve", ["--from-cluster", *args]).params)


def test_serve_takes_both_options_and_the_blocklist_replaces_kyvernos_default() -> None:
    assert not _params()["allow_http_in_namespaced_policies"]
    assert _params("--allow-http-in-namespaced-policies")["allow_http_in_namespaced_policies"]
    assert http_blocklist(_params()) == KYVERNO_DEFAULT_BLOCKLIST
    chosen = _params("--http-blocklist", "json-server.test-cel-http.svc.cluster.local", "--http-blocklist=10.0.0.0/8,192.168.0.0/16")
    assert http_blocklist(chosen) == ("json-server.test-cel-http.svc.cluster.local", "10.0.0.0/8", "192.168.0.0/16")
    assert http_blocklist(_params("--http-blocklist=")) == ()


def test_an_invalid_range_stops_serve_before_it_starts() -> None:
    with pytest.raises(click.BadParameter, match="invalid CIDR '10.0.0.0/99'"):
        serve.main(["--from-cluster", "--http-blocklist=10.0.0.0/99"], standalone_mode=False)
