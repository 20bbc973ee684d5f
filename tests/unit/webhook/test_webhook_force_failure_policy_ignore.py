"""Kyverno's forceFailurePolicyIgnore install option (`serve --force-failure-policy-ignore`): every policy counts as
failurePolicy Ignore -- its webhooks are registered with Ignore (Kyverno's force-failure-policy-ignore e2e tests
assert exactly that) and the server evaluates it on the ignore path -- while the policy documents themselves are
left as written."""

from __future__ import annotations

from pathlib import Path

import yaml

from stockade.controllers.policywatch import ClusterDocument
from stockade.controllers.webhookconfig import KYVERNO_NAMING, WebhookTarget, build_configurations, static_resolver
from stockade.webhook.admission import FAILURE_POLICY_FAIL, FAILURE_POLICY_IGNORE, failure_policy
from stockade.webhook.policystore import PolicyStore

POLICIES = """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: require-labels}
spec:
  failurePolicy: Fail
  rules:
  - name: require-team
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      failureAction: Enforce
      message: team label required
      pattern: {metadata: {labels: {team: "?*"}}}
---
apiVersion: policies.kyverno.io/v1alpha1
kind: ValidatingPolicy
metadata: {name: check-deployment-labels}
spec:
  failurePolicy: Fail
  webhookConfiguration: {timeoutSeconds: 10}
  matchConstraints:
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [deployments]
  validations:
  - expression: "has(object.metadata.labels) && 'env' in object.metadata.labels"
"""


def store(tmp_path: Path, force: bool) -> PolicyStore:
    (tmp_path / "policies.yaml").write_text(POLICIES)
    policies = PolicyStore([str(tmp_path)], force_failure_policy_ignore=force)
    policies.load()
    return policies


def webhooks(policies: PolicyStore) -> list[dict[str, object]]:
    snapshot = policies.snapshot
    assert snapshot is not None
    mutating, validating = build_configurations(
        snapshot.policies, WebhookTarget("kyverno-svc", "kyverno"), b"ca", static_resolver(), cel_policies=snapshot.cel_policies, naming=KYVERNO_NAMING
    )
    return [*mutating["webhooks"], *validating["webhooks"]]


def test_forced_policies_register_only_ignore_webhooks_and_are_served_on_the_ignore_path(tmp_path: Path) -> None:
    policies = store(tmp_path, force=True)
    hooks = webhooks(policies)
    assert hooks and {hook["failurePolicy"] for hook in hooks} == {FAILURE_POLICY_IGNORE}
    assert any(str(hook["clientConfig"]["service"]["path"]) == "/vpol/check-deployment-labels" for hook in hooks)  # type: ignore[index]
    snapshot = policies.snapshot
    assert snapshot is not None
    assert [p.name for p in snapshot.evaluator.policies_for(FAILURE_POLICY_IGNORE)] == ["require-labels"]
    assert snapshot.evaluator.policies_for(FAILURE_POLICY_FAIL) == []
    assert {failure_policy(p) for p in snapshot.cel_policies} == {FAILURE_POLICY_IGNORE}


def test_without_the_option_the_policies_keep_fail(tmp_path: Path) -> None:
    hooks = webhooks(store(tmp_path, force=False))
    assert {hook["failurePolicy"] for hook in hooks} == {FAILURE_POLICY_FAIL}


class _Source:
    """A source that keeps its Document objects between reads, as the cluster watch does."""

    def __init__(self) -> None:
        self.kept = [ClusterDocument(data, "cluster", index, version="v1") for index, data in enumerate(yaml.safe_load_all(POLICIES))]

    def fingerprint(self) -> int:
        return 1

    def documents(self) -> list[Document]:
        return list(self.kept)


def test_the_source_documents_are_not_changed_and_an_unchanged_policy_is_not_copied_again() -> None:
    source = _Source()
    policies = PolicyStore(sources=[source], force_failure_policy_ignore=True)
    first = policies.load()
    assert [d.data["spec"]["failurePolicy"] for d in source.kept] == ["Fail", "Fail"]
    assert [d.data["spec"]["failurePolicy"] for d in first.documents] == ["Ignore", "Ignore"]
    assert all(isinstance(d, ClusterDocument) and d.version == "v1" for d in first.documents)  # status write-back needs them
    second = policies.load()
    assert all(a is b for a, b in zip(first.documents, second.documents))


def test_a_policy_stating_webhook_configuration_failure_policy_stays_valid_and_ready(tmp_path: Path) -> None:
    """Kyverno's current form (webhookConfiguration.failurePolicy): forcing Ignore must not add the deprecated
    spec.failurePolicy beside it, which the policy checks refuse (the policy would never become Ready)."""
    (tmp_path / "p.yaml").write_text(
        """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: add-labels}
spec:
  webhookConfiguration: {failurePolicy: Fail}
  rules:
  - name: add-labels
    match: {any: [{resources: {kinds: [Pod]}}]}
    mutate:
      patchStrategicMerge: {metadata: {labels: {foo: bar}}}
"""
    )
    snapshot = PolicyStore([str(tmp_path)], force_failure_policy_ignore=True).load()
    assert snapshot.errors == {}
    [document] = [d for d in snapshot.documents if d.kind == "ClusterPolicy"]
    assert document.data["spec"]["webhookConfiguration"]["failurePolicy"] == "Ignore"
    assert "failurePolicy" not in document.data["spec"]
    assert [p.name for p in snapshot.evaluator.policies_for(FAILURE_POLICY_IGNORE)] == ["add-labels"]
    assert snapshot.evaluator.policies_for(FAILURE_POLICY_FAIL) == []
