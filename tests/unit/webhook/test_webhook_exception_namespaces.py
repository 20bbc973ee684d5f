"""--exception-namespace: a PolicyException elsewhere must not exempt anybody from a cluster policy."""

from pathlib import Path

from stockade.webhook.admission import parse_review
from stockade.webhook.policystore import PolicyStore

POLICY = """\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: need-team}
spec:
  validationFailureAction: Enforce
  rules:
  - name: team
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate: {message: team label required, pattern: {metadata: {labels: {team: "?*"}}}}
"""
EXCEPTION = """\
apiVersion: kyverno.io/v2
kind: PolicyException
metadata: {{name: let-me-in, namespace: {namespace}}}
spec:
  exceptions: [{{policyName: need-team, ruleNames: [team]}}]
  match: {{any: [{{resources: {{kinds: [Pod], names: [sneaky]}}}}]}}
"""


def review() -> object:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sneaky", "namespace": "apps"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    return parse_review({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u1", "operation": "CREATE", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "apps", "name": "sneaky",
                    "object": pod, "userInfo": {"username": "dev"}},
    })


def allowed(tmp_path: Path, exception_namespace: str, allowed_namespaces: list[str] | None) -> bool:
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "exception.yaml").write_text(EXCEPTION.format(namespace=exception_namespace))
    store = PolicyStore([str(tmp_path)], exception_namespaces=allowed_namespaces)
    snapshot = store.load()
    return snapshot.evaluator.validate(review()).allowed


def test_exceptions_count_everywhere_by_default(tmp_path: Path) -> None:
    assert allowed(tmp_path, "apps", None)


def test_exceptions_outside_the_allowed_namespaces_are_ignored(tmp_path: Path) -> None:
    assert not allowed(tmp_path, "apps", ["policy-exceptions"])
    assert allowed(tmp_path, "policy-exceptions", ["policy-exceptions"])
