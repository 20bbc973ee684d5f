"""Admission features against a real kube-apiserver: policy validation at `kubectl apply`, denial Events, and
RBAC roles in match blocks."""

from __future__ import annotations

import subprocess
import time
import uuid
from typing import Any

from admission_cluster import KUBECTL, NAMESPACE, Api, InProcessWebhook, pod

from stockade.testing.apiserver import ControlPlane

INVALID_POLICY = """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: stockade-admission-invalid
spec:
  rules:
  - name: bad-variable
    match:
      any:
      - resources:
          kinds: [Pod]
    validate:
      message: "name {{ request.object.metadata.name[ }}"
      pattern:
        metadata:
          name: "?*"
"""


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def kubectl(plane: ControlPlane, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(KUBECTL), "--kubeconfig", str(plane.kubeconfig), *args], input=stdin, capture_output=True, text=True, timeout=60)


def test_kubectl_apply_of_an_invalid_policy_is_rejected_with_our_message(cluster_policy_crd: None, webhook: InProcessWebhook, control_plane: ControlPlane, api: Api) -> None:
    result = kubectl(control_plane, "apply", "-f", "-", stdin=INVALID_POLICY)
    try:
        assert result.returncode != 0, result.stdout
        assert 'admission webhook "validate-policy.stockade.svc" denied the request' in result.stderr
        assert 'ClusterPolicy "stockade-admission-invalid" is invalid: rule "bad-variable": spec.rules[0].validate.message: invalid JMESPath' in result.stderr
        fixed = INVALID_POLICY.replace("name {{ request.object.metadata.name[ }}", "name {{ request.object.metadata.name }}")
        accepted = kubectl(control_plane, "apply", "-f", "-", stdin=fixed)
        assert accepted.returncode == 0, accepted.stderr
    finally:
        api.request("DELETE", "/apis/kyverno.io/v1/clusterpolicies/stockade-admission-invalid")


DEPRECATED_OPERATOR_POLICY = """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: stockade-admission-operator
spec:
  rules:
  - name: names
    match:
      any:
      - resources:
          kinds: [ConfigMap]
    validate:
      message: "reserved name"
      deny:
        conditions:
          any:
          - key: "{{ request.object.metadata.name }}"
            operator: OPERATOR
            value: [reserved]
"""


def test_kubectl_prints_kyvernos_warnings_and_refusals_for_condition_operators(
    cluster_policy_crd: None, webhook: InProcessWebhook, control_plane: ControlPlane, api: Api
) -> None:
    """Through the real API server: the webhook's warnings reach kubectl as ``Warning:`` lines (Kyverno's
    deprecated-operator warning), and an operator Kyverno does not list is refused in Kyverno's words."""
    try:
        accepted = kubectl(control_plane, "apply", "-f", "-", stdin=DEPRECATED_OPERATOR_POLICY.replace("OPERATOR", "NotIn"))
        assert accepted.returncode == 0, accepted.stderr
        assert "Warning: Operator NotIn has been deprecated and will be removed soon." in accepted.stderr
        refused = kubectl(control_plane, "apply", "-f", "-", stdin=DEPRECATED_OPERATOR_POLICY.replace("OPERATOR", "Invalid"))
        assert refused.returncode != 0, refused.stdout
        assert 'admission webhook "validate-policy.stockade.svc" denied the request' in refused.stderr
        assert "entered value of `operator` is invalid" in refused.stderr
    finally:
        api.request("DELETE", "/apis/kyverno.io/v1/clusterpolicies/stockade-admission-operator")


def _events_about(api: Api, namespace: str, name: str) -> list[dict[str, Any]]:
    status, body = api.request("GET", f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name%3D{name}")
    assert status == 200, body
    return body.get("items", [])


def test_a_denial_produces_a_policy_violation_event(webhook: InProcessWebhook, api: Api) -> None:
    name = unique("unlabelled")
    status, body = api.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod(name))
    assert status == 400 and "admission-test-require-team" in body["message"], body
    deadline = time.monotonic() + 30
    found: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not found:
        found = [e for e in _events_about(api, "default", "admission-test-require-team") if f"Pod {NAMESPACE}/{name}: [" in e.get("message", "") and "fail (blocked)" in e.get("message", "")]
        time.sleep(0.3)
    assert found, "no PolicyViolation event for the denial (Kyverno's wording: '<Kind> <ns>/<name>: [<rule>] fail (blocked); <message>')"
    (event,) = found
    assert event["reason"] == "PolicyViolation" and event["type"] == "Warning" and event["involvedObject"]["kind"] == "ClusterPolicy"
    assert "label 'team' is required" in event["message"]
    api.request("DELETE", f"/api/v1/namespaces/default/events/{event['metadata']['name']}")


def test_a_role_binding_grants_the_role_a_policy_matches(webhook: InProcessWebhook, api: Api) -> None:
    rules = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get"]}]
    for role, user in (("cm-editor", "carol"), ("cm-plain", "dave")):
        api.ensure(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/roles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": role}, "rules": rules})
        api.ensure(
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/rolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": f"{role}-{user}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
            },
        )
    path = f"/api/v1/namespaces/{NAMESPACE}/configmaps"

    def config_map(owner: str | None) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": unique("cm"), "labels": {"owner": owner} if owner else {}}}

    time.sleep(0.6)  # past the resolver's 0.5 s cache of bindings
    status, body = api.request("POST", path, config_map(None), user="carol")
    assert status == 400 and "admission-test-editors-need-owner" in body["message"] and "editors need an owner" in body["message"], body
    status, body = api.request("POST", path, config_map("carol"), user="carol")
    assert status == 201, body
    status, body = api.request("POST", path, config_map(None), user="dave")  # bound to another role: not matched
    assert status == 201, body
