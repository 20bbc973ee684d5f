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


CEL_POLICY = """\
apiVersion: policies.kyverno.io/v1alpha1
kind: ValidatingPolicy
metadata: {name: need-team-cel}
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: team label required
"""
CEL_EXCEPTION = """\
apiVersion: policies.kyverno.io/v1alpha1
kind: PolicyException
metadata: {name: let-me-in-cel, namespace: apps}
spec:
  policyRefs: [{name: need-team-cel, kind: ValidatingPolicy}]
  matchConditions: [{name: sneaky, expression: "object.metadata.name == 'sneaky'"}]
"""


def test_policy_exceptions_disabled_ignores_every_exception(tmp_path: Path) -> None:
    """Kyverno installed with features.policyExceptions.enabled=false (`serve --no-policy-exceptions`, which hands the
    store an empty namespace list) honours neither kyverno.io nor policies.kyverno.io PolicyExceptions."""
    assert allowed(tmp_path, "apps", None)
    assert not allowed(tmp_path, "apps", [])
    (tmp_path / "policy.yaml").unlink()
    (tmp_path / "exception.yaml").unlink()
    (tmp_path / "cel.yaml").write_text(CEL_POLICY)
    (tmp_path / "cel-exception.yaml").write_text(CEL_EXCEPTION)
    assert PolicyStore([str(tmp_path)]).load().evaluator.validate(review()).allowed
    assert not PolicyStore([str(tmp_path)], exception_namespaces=[]).load().evaluator.validate(review()).allowed


def test_serve_flag_maps_to_an_empty_exception_namespace_list() -> None:
    from stockade.cli.serve_cmd import EvaluationSettings, evaluation_store_options

    common = dict(kubeconfig=None, cluster=False, insecure_registries=(), registry_ca_file=None, webhook_timeout=10.0)
    assert evaluation_store_options(EvaluationSettings(**common, exception_namespaces=()))["exception_namespaces"] is None
    disabled = EvaluationSettings(**common, exception_namespaces=("apps",), policy_exceptions=False)
    assert evaluation_store_options(disabled)["exception_namespaces"] == []
