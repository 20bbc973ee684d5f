"""mutate.targets: patches computed for existing objects, never for the trigger itself."""

from typing import Any

from stockade.engine.engine import Engine, Request
from stockade.engine.processor import apply_policies
from stockade.policy.model import KyvernoPolicy


def secret(name: str, namespace: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace, "labels": labels or {}}}


TRIGGER = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "trigger", "namespace": "staging"}, "data": {"team": "blue"}}


def policy(target: dict[str, Any], kind: str = "ClusterPolicy", namespace: str = "") -> KyvernoPolicy:
    metadata = {"name": "label-secrets", **({"namespace": namespace} if namespace else {})}
    rule = {
        "name": "label",
        "match": {"any": [{"resources": {"kinds": ["ConfigMap"]}}]},
        "mutate": {"targets": [target], "patchStrategicMerge": {"metadata": {"labels": {"team": "{{ request.object.data.team }}", "was": "{{ target.metadata.name }}"}}}},
    }
    return KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": kind, "metadata": metadata, "spec": {"rules": [rule]}})


def lookup_over(objects: list[dict[str, Any]]) -> Any:
    def lookup(api_version: str, kind: str, namespace: str, name: str | None) -> list[dict[str, Any]]:
        return [
            o for o in objects
            if o["kind"] == kind and o["apiVersion"] == api_version
            and (not namespace or o["metadata"]["namespace"] == namespace)
            and (name is None or o["metadata"]["name"] == name)
        ]

    return lookup


STORED = [secret("db", "staging"), secret("db", "prod"), secret("cache", "staging", {"tier": "fast"})]


def run(pol: KyvernoPolicy, include_existing: bool = True) -> Any:
    engine = Engine(resource_lookup=lookup_over(STORED))
    return engine.mutate(engine.policy_context(pol, Request(resource=TRIGGER)), include_existing=include_existing)


def test_each_matching_target_is_patched_with_target_and_trigger_variables() -> None:
    response = run(policy({"apiVersion": "v1", "kind": "Secret", "name": "db"}))
    patched = {(r.patched_target["metadata"]["namespace"], r.patched_target["metadata"]["name"]): r.patched_target for r in response.rules}
    assert sorted(patched) == [("prod", "db"), ("staging", "db")]
    assert patched[("prod", "db")]["metadata"]["labels"] == {"team": "blue", "was": "db"}
    assert all(r.status == "pass" and r.message.startswith("mutated Secret/db in namespace") for r in response.rules)
    assert response.patched_resource == TRIGGER  # the trigger itself is never changed
    assert STORED[0]["metadata"]["labels"] == {}  # nor the stored objects: patches are copies


def test_selector_variables_namespace_wildcards_and_label_selector() -> None:
    by_variable = run(policy({"apiVersion": "v1", "kind": "Secret", "name": "*", "namespace": "{{ request.object.metadata.namespace }}"}))
    assert sorted(r.patched_target["metadata"]["name"] for r in by_variable.rules) == ["cache", "db"]
    by_labels = run(policy({"apiVersion": "v1", "kind": "Secret", "selector": {"matchLabels": {"tier": "fast"}}}))
    assert [r.patched_target["metadata"]["name"] for r in by_labels.rules] == ["cache"]


def test_namespaced_policy_only_reaches_its_own_namespace() -> None:
    response = run(policy({"apiVersion": "v1", "kind": "Secret", "name": "db", "namespace": "prod"}, kind="Policy", namespace="staging"))
    assert [(r.patched_target["metadata"]["namespace"]) for r in response.rules] == ["staging"]


def test_per_target_preconditions_skip_and_unresolvable_selector_errors() -> None:
    target = {"apiVersion": "v1", "kind": "Secret", "name": "*", "preconditions": {"all": [{"key": "{{ target.metadata.name }}", "operator": "Equals", "value": "cache"}]}}
    statuses = sorted((r.status, (r.patched_target or {}).get("metadata", {}).get("name", "")) for r in run(policy(target)).rules)
    assert statuses == [("pass", "cache"), ("skip", ""), ("skip", "")]
    broken = run(policy({"apiVersion": "v1", "kind": "Secret", "name": "{{ request.object.missing.field }}"}))
    assert [r.status for r in broken.rules] == ["error"]
    assert "target[0]" in broken.rules[0].message


def test_admission_mutation_leaves_targets_alone_and_processor_includes_them() -> None:
    assert run(policy({"apiVersion": "v1", "kind": "Secret", "name": "db"}), include_existing=False).rules == []
    engine = Engine(resource_lookup=lookup_over(STORED))
    result = apply_policies(engine, [policy({"apiVersion": "v1", "kind": "Secret", "name": "db"})], Request(resource=TRIGGER))
    assert len(result.responses[0].rules) == 2


def test_without_a_lookup_the_rule_reports_an_error() -> None:
    engine = Engine()
    response = engine.mutate(engine.policy_context(policy({"apiVersion": "v1", "kind": "Secret"}), Request(resource=TRIGGER)), include_existing=True)
    assert [r.status for r in response.rules] == ["error"]


def test_a_target_named_exactly_is_read_as_one_object_as_kyvernos_get() -> None:
    """Kyverno's GetResources: a namespace and a name without wildcards are one GET, so the label selector does not
    filter it and a missing object is an error of the rule (not a rule without targets); ``uid`` filters nothing."""
    unselected = run(policy({"apiVersion": "v1", "kind": "Secret", "name": "db", "namespace": "staging", "selector": {"matchLabels": {"tier": "fast"}}}))
    assert [(r.status, r.patched_target["metadata"]["name"]) for r in unselected.rules] == [("pass", "db")]
    by_uid = run(policy({"apiVersion": "v1", "kind": "Secret", "name": "db", "namespace": "staging", "uid": "some-other-uid"}))
    assert [r.status for r in by_uid.rules] == ["pass"]
    missing = run(policy({"apiVersion": "v1", "kind": "Secret", "name": "gone", "namespace": "staging"}))
    assert [r.status for r in missing.rules] == ["error"]
    assert "target[0]" in missing.rules[0].message and "not found" in missing.rules[0].message


def test_wildcards_or_a_missing_namespace_list_and_find_nothing_without_error() -> None:
    for target in (
        {"apiVersion": "v1", "kind": "Secret", "name": "gone*", "namespace": "staging"},
        {"apiVersion": "v1", "kind": "Secret", "name": "gone", "namespace": "stag*"},
        {"apiVersion": "v1", "kind": "Secret", "name": "gone"},
    ):
        assert run(policy(target)).rules == []
    # listing applies the label selector
    assert run(policy({"apiVersion": "v1", "kind": "Secret", "name": "d*", "namespace": "staging", "selector": {"matchLabels": {"tier": "fast"}}})).rules == []
