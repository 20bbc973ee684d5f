"""`stockade serve --from-cluster` against a real kube-apiserver: policies are picked up from their CRDs, enforced,
reported in their status, and dropped again when deleted."""

from __future__ import annotations

import json
import uuid
from typing import Any

from policies_cluster import Api, Serve, eventually


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def namespace(api: Api, cleanup: list[tuple[str, ...]]) -> str:
    name = unique("polsrc")
    api.create_namespace(name)
    cleanup.append(("namespace", name))
    return name


def cluster_policy(name: str, namespace: str, message: str, label: str = "team") -> str:
    """Enforced, and limited to one namespace so nothing else on the shared apiserver is affected."""
    return f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: {name}
spec:
  validationFailureAction: Enforce
  rules:
  - name: check-{label}
    match:
      any:
      - resources:
          kinds: [Pod]
          namespaces: [{namespace}]
    validate:
      message: "{message}"
      pattern:
        metadata:
          labels:
            {label}: "?*"
"""


def get(api: Api, path: str) -> dict[str, Any]:
    status, body = api.request("GET", path)
    assert status == 200, body
    return body


def ready_condition(obj: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)


def denied(api: Api, namespace: str, labels: dict[str, str] | None = None) -> str | None:
    """The denial message for a new Pod, or None when it was admitted."""
    status, body = api.create_pod(namespace, unique("pod"), labels)
    if status == 201:
        return None
    assert status == 400, body
    return str(body["message"])


def test_cluster_policy_is_enforced_and_reports_ready(api: Api, serve: Serve, cleanup: list[tuple[str, ...]]) -> None:
    ns = namespace(api, cleanup)
    name = unique("require-team")
    cleanup.append(("clusterpolicy", name))
    api.apply(cluster_policy(name, ns, "label team is required here"))
    path = f"/apis/kyverno.io/v1/clusterpolicies/{name}"

    stored = eventually(lambda: (lambda o: o if (ready_condition(o) or {}).get("status") == "True" else None)(get(api, path)), "Ready=True", details=serve.log)
    condition = ready_condition(stored)
    assert condition is not None and condition["reason"] == "Succeeded"
    assert stored["status"]["rulecount"] == {"validate": 1, "generate": 0, "mutate": 0, "verifyimages": 0}
    assert [rule["name"] for rule in stored["status"]["autogen"]["rules"]] == ["autogen-check-team", "autogen-cronjob-check-team"]

    message = eventually(lambda: denied(api, ns), "violating Pod denied", details=serve.log)
    assert f"{name}:" in message and "label team is required here" in message
    assert denied(api, ns, {"team": "a"}) is None

    # status is written only when it changes: another policy's arrival (a reload and a status pass over every
    # policy, finished once that one is Ready) leaves this one's resourceVersion alone
    first = get(api, path)["metadata"]["resourceVersion"]
    other = unique("other")
    cleanup.append(("clusterpolicy", other))
    api.apply(cluster_policy(other, ns, "other", label="other"))
    other_path = f"/apis/kyverno.io/v1/clusterpolicies/{other}"
    eventually(lambda: (ready_condition(get(api, other_path)) or {}).get("status") == "True", "second policy Ready", details=serve.log)
    assert get(api, path)["metadata"]["resourceVersion"] == first
    assert api.kubectl("delete", "clusterpolicy", other).returncode == 0

    result = api.kubectl("delete", "clusterpolicy", name)
    assert result.returncode == 0, result.stderr
    eventually(lambda: denied(api, ns) is None, "Pod admitted once the policy is deleted", details=serve.log)


def test_invalid_policy_is_not_ready_and_does_not_stop_the_others(api: Api, serve: Serve, invalid_policy: str, cleanup: list[tuple[str, ...]]) -> None:
    ns = namespace(api, cleanup)
    good = unique("good")
    cleanup.append(("clusterpolicy", good))
    api.apply(cluster_policy(good, ns, "the good policy still works"))

    def not_ready() -> dict[str, Any] | None:
        condition = ready_condition(get(api, f"/apis/kyverno.io/v1/clusterpolicies/{invalid_policy}"))
        return condition if condition and condition["status"] == "False" else None

    condition = eventually(not_ready, "Ready=False on the invalid policy", details=serve.log)
    assert condition["reason"] == "Failed"
    assert "Multiple operations defined in the rule 'check-owner'" in condition["message"]  # Kyverno's phrase
    message = eventually(lambda: denied(api, ns), "the valid policy enforced", details=serve.log)
    assert "the good policy still works" in message
    assert denied(api, ns, {"team": "a"}) is None

    printed = api.kubectl("get", "cpol", invalid_policy, "-o", "wide")
    assert printed.returncode == 0, printed.stderr
    assert "False" in printed.stdout and "Multiple operations" in printed.stdout, printed.stdout


def test_namespaced_policy_applies_only_in_its_namespace(api: Api, serve: Serve, cleanup: list[tuple[str, ...]]) -> None:
    inside, outside = namespace(api, cleanup), namespace(api, cleanup)
    name = unique("local")
    policy = f"""
apiVersion: kyverno.io/v1
kind: Policy
metadata:
  name: {name}
  namespace: {inside}
spec:
  validationFailureAction: Enforce
  rules:
  - name: check-app
    match:
      any:
      - resources:
          kinds: [Pod]
    validate:
      message: "label app is required in this namespace"
      pattern:
        metadata:
          labels:
            app: "?*"
"""
    cleanup.append(("policy", name, "-n", inside))
    api.apply(policy)
    message = eventually(lambda: denied(api, inside), "Pod denied in the policy's namespace", details=serve.log)
    assert "label app is required in this namespace" in message
    assert denied(api, outside) is None
    stored = get(api, f"/apis/kyverno.io/v1/namespaces/{inside}/policies/{name}")
    assert (ready_condition(stored) or {}).get("status") == "True", json.dumps(stored.get("status"))


def test_validating_policy_from_the_cluster(api: Api, serve: Serve, cleanup: list[tuple[str, ...]]) -> None:
    ns = namespace(api, cleanup)
    name = unique("no-forbidden")
    policy = f"""
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: {name}
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [pods]
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: {ns}
  validations:
  - expression: "!has(object.metadata.labels) || !('forbidden' in object.metadata.labels)"
    message: "the forbidden label is forbidden"
"""
    cleanup.append(("validatingpolicy", name))
    api.apply(policy)
    message = eventually(lambda: denied(api, ns, {"forbidden": "yes"}), "ValidatingPolicy enforced", details=serve.log)
    assert "the forbidden label is forbidden" in message
    assert denied(api, ns, {"allowed": "yes"}) is None
    status = eventually(
        lambda: (get(api, f"/apis/policies.kyverno.io/v1/validatingpolicies/{name}").get("status") or {}).get("conditionStatus"),
        "conditionStatus written",
        details=serve.log,
    )
    assert status["ready"] is True
