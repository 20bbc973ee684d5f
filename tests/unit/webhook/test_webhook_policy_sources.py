"""Policy sources behind PolicyStore: directories, the cluster watch cache, per-policy errors and status write-back."""

from __future__ import annotations

import copy
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from stockade.kube.errors import Gone, NotFound
from stockade.controllers.policywatch import WATCHED_KINDS, ClusterDocument, ClusterPolicySource, WatchedKind, rule_count, status_patch
from stockade.policy.loader import Document
from stockade.webhook.admission import parse_review
from stockade.webhook.policystore import DirectorySource, PolicyStore, document_problem, policy_identity
from tests.unit.kubefake import FakeKube

CLUSTER_POLICY = {
    "apiVersion": "kyverno.io/v1",
    "kind": "ClusterPolicy",
    "metadata": {"name": "require-team", "generation": 1, "resourceVersion": "10"},
    "spec": {
        "validationFailureAction": "Enforce",
        "rules": [
            {
                "name": "check-team",
                "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "validate": {"message": "label team is required", "pattern": {"metadata": {"labels": {"team": "?*"}}}},
            }
        ],
    },
}

VALIDATING_POLICY = {
    "apiVersion": "policies.kyverno.io/v1",
    "kind": "ValidatingPolicy",
    "metadata": {"name": "no-forbidden", "generation": 3},
    "spec": {
        "validationActions": ["Deny"],
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
        "validations": [{"expression": "!has(object.metadata.labels) || !('forbidden' in object.metadata.labels)", "message": "forbidden"}],
    },
}

CLUSTER_POLICY_KIND = next(k for k in WATCHED_KINDS if k.kind == "ClusterPolicy")
POLICY_KIND = next(k for k in WATCHED_KINDS if k.kind == "Policy")
VALIDATING_KIND = next(k for k in WATCHED_KINDS if k.kind == "ValidatingPolicy")


def with_changes(document: dict[str, Any], **paths: Any) -> dict[str, Any]:
    """A deep copy with dotted-path fields replaced (``metadata__name='x'`` sets metadata.name)."""
    result = copy.deepcopy(document)
    for dotted, value in paths.items():
        parts = dotted.split("__")
        target = result
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = value
    return result


class MemorySource:
    """A PolicySource whose documents a test sets directly."""

    def __init__(self, *documents: dict[str, Any]) -> None:
        self.generation = 0
        self.items = list(documents)

    def set(self, *documents: dict[str, Any]) -> None:
        self.items = list(documents)
        self.generation += 1

    def fingerprint(self) -> int:
        return self.generation

    def documents(self) -> list[Document]:
        return [Document(item, "memory", index) for index, item in enumerate(self.items)]


def pod_review(labels: dict[str, str] | None = None, namespace: str = "default") -> Any:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": namespace, "labels": labels or {}}, "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}
    return parse_review(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": namespace,
                "name": "p",
                "operation": "CREATE",
                "userInfo": {"username": "alice"},
                "object": pod,
            },
        }
    )


# -- store and sources -----------------------------------------------------------------------------------------------------


def test_directory_source_fingerprint_follows_file_changes(tmp_path: Path) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: a}\nspec: {rules: []}\n")
    source = DirectorySource([str(tmp_path)])
    before = source.fingerprint()
    assert before == source.fingerprint()
    policy_file.write_text("apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: b}\nspec: {rules: []}\n")
    os.utime(policy_file, ns=(1, 1))
    assert source.fingerprint() != before
    assert [d.data["metadata"]["name"] for d in source.documents()] == ["b"]


def test_store_reloads_when_a_source_fingerprint_changes() -> None:
    source = MemorySource(CLUSTER_POLICY)
    store = PolicyStore(sources=[source])
    seen: list[int] = []
    store.listeners.append(lambda snapshot: seen.append(len(snapshot.policies)))
    store.load()
    assert store.reload_if_changed() is False
    source.set(CLUSTER_POLICY, with_changes(CLUSTER_POLICY, metadata__name="second"))
    assert store.reload_if_changed() is True
    assert sorted(p.name for p in store.snapshot.policies) == ["require-team", "second"]
    assert seen == [1, 2]


def test_paths_and_sources_are_served_together(tmp_path: Path) -> None:
    (tmp_path / "file.yaml").write_text(
        "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: from-file}\nspec:\n  rules:\n"
        "  - name: r\n    match: {any: [{resources: {kinds: [ConfigMap]}}]}\n    validate: {pattern: {data: {a: '?*'}}}\n"
    )
    store = PolicyStore([str(tmp_path)], sources=[MemorySource(CLUSTER_POLICY)])
    assert sorted(p.name for p in store.load().policies) == ["from-file", "require-team"]


def test_an_invalid_policy_is_skipped_and_the_others_keep_working() -> None:
    duplicate = with_changes(CLUSTER_POLICY, metadata__name="duplicate-rules")
    duplicate["spec"]["rules"].append(copy.deepcopy(duplicate["spec"]["rules"][0]))
    bad_cel = with_changes(VALIDATING_POLICY, metadata__name="bad-cel")
    bad_cel["spec"]["validations"][0]["expression"] = "object.metadata.name =="
    store = PolicyStore(sources=[MemorySource(CLUSTER_POLICY, duplicate, bad_cel, VALIDATING_POLICY)])
    snapshot = store.load()
    assert [p.name for p in snapshot.policies] == ["require-team"]
    assert [p.name for p in snapshot.cel_policies] == ["no-forbidden"]
    errors = {identity[3]: message for identity, message in snapshot.errors.items()}
    assert set(errors) == {"duplicate-rules", "bad-cel"}
    assert "spec.rules[1].name: Duplicate rule name: 'check-team'" in errors["duplicate-rules"]
    assert errors["bad-cel"].startswith("spec.validations[0].expression:") and "does not compile" in errors["bad-cel"]
    decision = snapshot.evaluator.validate(pod_review(), None)
    assert decision.allowed is False and "label team is required" in decision.message


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"spec__rules": [{"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "validate": {"deny": {}}, "mutate": {"patchStrategicMerge": {}}}]}, "spec.rules[0]: Multiple operations defined in the rule 'r', only one operation (mutate,validate,generate,verifyImages) is allowed per rule"),
        ({"spec__rules": [{"name": "r", "validate": {"deny": {}}}]}, "spec.rules[0].match: Required value"),  # the CRD schema speaks first, as the API server does
        ({"spec__rules": [{"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}], "all": [{"resources": {"kinds": ["Pod"]}}]}, "validate": {"deny": {}}}]}, "spec.rules[0].match: Invalid value: any and all may not be set together"),
        ({"spec__rules": [{"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "validate": {"deny": {"conditions": {"any": [{"key": "a", "operator": "Bigger", "value": "b"}]}}}}]}, "spec.rules[0].validate.deny.conditions.any[0].operator: entered value of `operator` is invalid"),
        ({"spec__rules": [{"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "context": [{"name": "x", "variable": {"jmesPath": "a.["}}], "validate": {"deny": {}}}]}, "spec.rules[0].context[0].variable.jmesPath: failed to parse JMESPath a.["),
        ({"spec__rules": [{"match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "validate": {"deny": {}}}]}, "spec.rules[0].name: Required value"),
    ],
)
def test_policy_problems_name_the_field(change: dict[str, Any], expected: str) -> None:
    document = Document(with_changes(CLUSTER_POLICY, **change), "memory", 0)
    problem = document_problem(document)
    assert problem is not None and expected in problem


def test_valid_documents_have_no_problem() -> None:
    for data in (CLUSTER_POLICY, VALIDATING_POLICY):
        assert document_problem(Document(data, "memory", 0)) is None
    exception = {
        "apiVersion": "kyverno.io/v2",
        "kind": "PolicyException",
        "metadata": {"name": "e", "namespace": "team"},
        "spec": {"exceptions": [{"policyName": "require-team", "ruleNames": ["check-team"]}], "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}},
    }
    assert document_problem(Document(exception, "memory", 0)) is None
    assert "policyName" in (document_problem(Document(with_changes(exception, spec__exceptions=[{}]), "memory", 0)) or "")


def test_unreadable_directory_keeps_the_previous_snapshot(tmp_path: Path) -> None:
    policy_file = tmp_path / "p.yaml"
    policy_file.write_text(_yaml(CLUSTER_POLICY))
    store = PolicyStore([str(tmp_path)])
    store.load()
    policy_file.write_text("kind: [broken\n")
    os.utime(policy_file, ns=(1, 1))
    assert store.reload_if_changed() is False
    assert store.last_error and [p.name for p in store.snapshot.policies] == ["require-team"]


def _yaml(data: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(data)


# -- the cluster source's cache ----------------------------------------------------------------------------------------------


def test_status_only_changes_do_not_bump_the_fingerprint() -> None:
    source = ClusterPolicySource(api_client=None)
    assert source.apply_event(CLUSTER_POLICY_KIND, "v1", "ADDED", CLUSTER_POLICY) is True
    before = source.fingerprint()
    status_written = with_changes(CLUSTER_POLICY, status={"conditions": [{"type": "Ready", "status": "True"}]}, metadata__resourceVersion="11")
    assert source.apply_event(CLUSTER_POLICY_KIND, "v1", "MODIFIED", status_written) is False
    assert source.fingerprint() == before
    # the cache still follows the object, so the next status comparison sees what we wrote
    assert source.documents()[0].data["status"]["conditions"][0]["status"] == "True"
    annotated = with_changes(status_written, metadata__annotations={"pod-policies.kyverno.io/autogen-controllers": "none"}, metadata__resourceVersion="12")
    assert source.apply_event(CLUSTER_POLICY_KIND, "v1", "MODIFIED", annotated) is True
    edited = with_changes(annotated, spec__validationFailureAction="Audit", metadata__generation=2)
    assert source.apply_event(CLUSTER_POLICY_KIND, "v1", "MODIFIED", edited) is True
    assert source.apply_event(CLUSTER_POLICY_KIND, "v1", "DELETED", edited) is True
    assert source.documents() == [] and source.fingerprint() == before + 3


def test_relist_bumps_only_on_real_differences() -> None:
    source = ClusterPolicySource(api_client=None)
    listed = [with_changes(CLUSTER_POLICY, metadata__managedFields=[{"manager": "kubectl"}])]
    assert source.replace_kind(CLUSTER_POLICY_KIND, "v1", listed) is True
    assert source.replace_kind(CLUSTER_POLICY_KIND, "v1", [with_changes(CLUSTER_POLICY, metadata__resourceVersion="99")]) is False
    assert source.replace_kind(CLUSTER_POLICY_KIND, "v1", []) is True
    assert source.documents() == []


def test_documents_are_independent_copies_with_kind_and_origin() -> None:
    source = ClusterPolicySource(api_client=None)
    namespaced = {"metadata": {"name": "local", "namespace": "team-a", "generation": 1}, "spec": copy.deepcopy(CLUSTER_POLICY["spec"])}
    source.apply_event(POLICY_KIND, "v1", "ADDED", namespaced)  # watch objects normally carry apiVersion/kind; fill them in if not
    (document,) = source.documents()
    assert isinstance(document, ClusterDocument)
    assert document.kind == "Policy" and document.api_version == "kyverno.io/v1"
    assert document.origin == "cluster Policy/team-a/local"
    assert source.documents()[0] is document, "an unchanged object is handed out once, not copied on every rebuild"
    document.data["spec"]["rules"].clear()
    source.apply_event(POLICY_KIND, "v1", "MODIFIED", {**namespaced, "status": {"ready": True}})
    assert source.documents()[0].data["spec"]["rules"], "the cache must not share objects with a snapshot"


def test_namespaced_policy_from_the_source_applies_only_in_its_namespace() -> None:
    source = ClusterPolicySource(api_client=None)
    policy = with_changes(CLUSTER_POLICY, kind="Policy", metadata__namespace="team-a")
    source.apply_event(POLICY_KIND, "v1", "ADDED", policy)
    snapshot = PolicyStore(sources=[source]).load()
    assert snapshot.evaluator.validate(pod_review(namespace="team-a"), None).allowed is False
    assert snapshot.evaluator.validate(pod_review(namespace="team-b"), None).allowed is True


# -- status ----------------------------------------------------------------------------------------------------------------


def _snapshot_of(*documents: dict[str, Any]) -> Any:
    return PolicyStore(sources=[MemorySource(*documents)]).load()


def test_ready_status_with_rule_count_and_autogen_rules() -> None:
    snapshot = _snapshot_of(CLUSTER_POLICY)
    patch = status_patch(CLUSTER_POLICY_KIND, CLUSTER_POLICY, snapshot, policy_identity(CLUSTER_POLICY), None)
    assert patch is not None
    (ready,) = patch["conditions"]
    assert (ready["type"], ready["status"], ready["reason"], ready["message"]) == ("Ready", "True", "Succeeded", "Ready")
    assert ready["observedGeneration"] == 1 and ready["lastTransitionTime"].endswith("Z")
    assert patch["rulecount"] == {"validate": 1, "generate": 0, "mutate": 0, "verifyimages": 0}
    assert [rule["name"] for rule in patch["autogen"]["rules"]] == ["autogen-check-team", "autogen-cronjob-check-team"]
    # what is already there is not written again
    assert status_patch(CLUSTER_POLICY_KIND, CLUSTER_POLICY, snapshot, policy_identity(CLUSTER_POLICY), copy.deepcopy(patch)) is None


def test_autogen_status_rules_have_the_crd_defaults_kyverno_generates_them_with() -> None:
    """Kyverno autogenerates from the API-server-defaulted policy and writes Go structs: every status rule carries
    ``skipBackgroundRequests: true``, ``validate.allowExistingViolations: true`` and ``match.resources: {}``."""
    cel_rule = {
        "name": "cel-check",
        "match": {"any": [{"resources": {"kinds": ["Pod"], "operations": ["CREATE"]}}]},
        "validate": {"cel": {"expressions": [{"expression": "true"}]}},
    }
    policy = with_changes(CLUSTER_POLICY, spec__rules=[*CLUSTER_POLICY["spec"]["rules"], cel_rule])
    patch = status_patch(CLUSTER_POLICY_KIND, policy, _snapshot_of(policy), policy_identity(policy), None)
    assert patch is not None
    rules = patch["autogen"]["rules"]
    assert sorted(rule["name"] for rule in rules) == ["autogen-cel-check", "autogen-check-team", "autogen-cronjob-cel-check", "autogen-cronjob-check-team"]
    for rule in rules:
        assert rule["skipBackgroundRequests"] is True
        assert rule["validate"]["allowExistingViolations"] is True
        assert rule["match"]["resources"] == {}
    cel_status = next(rule for rule in rules if rule["name"] == "autogen-cel-check")
    assert cel_status["validate"]["cel"]["generate"] is False
    # a value the policy sets is kept
    explicit = with_changes(policy, spec__rules=[{**CLUSTER_POLICY["spec"]["rules"][0], "skipBackgroundRequests": False}])
    patch = status_patch(CLUSTER_POLICY_KIND, explicit, _snapshot_of(explicit), policy_identity(explicit), None)
    assert patch is not None
    assert {rule["skipBackgroundRequests"] for rule in patch["autogen"]["rules"]} == {False}


def test_failed_status_carries_the_error_and_a_new_transition_time() -> None:
    broken = with_changes(CLUSTER_POLICY, spec__rules=[{"name": "r", "validate": {"deny": {}}}])
    snapshot = _snapshot_of(broken)
    was_ready = {"conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded", "message": "Ready", "lastTransitionTime": "2020-01-01T00:00:00Z"}, {"type": "Other", "status": "True"}]}
    patch = status_patch(CLUSTER_POLICY_KIND, broken, snapshot, policy_identity(broken), was_ready)
    assert patch is not None
    ready, other = patch["conditions"]
    assert other == {"type": "Other", "status": "True"}
    assert ready["status"] == "False" and ready["reason"] == "Failed"
    assert "spec.rules[0].match: Required value" in ready["message"]
    assert ready["lastTransitionTime"] != "2020-01-01T00:00:00Z"
    assert patch["autogen"] == {"rules": None}


def test_rule_count_counts_declared_rules_by_type() -> None:
    policy = with_changes(
        CLUSTER_POLICY,
        spec__rules=[
            {"name": "v", "validate": {"deny": {}}},
            {"name": "m", "mutate": {"patchStrategicMerge": {}}},
            {"name": "g", "generate": {"kind": "ConfigMap"}},
            {"name": "i", "verifyImages": [{"imageReferences": ["*"]}]},
            {"name": "m2", "mutate": {"patchStrategicMerge": {}}},
        ],
    )
    assert rule_count(policy) == {"validate": 1, "generate": 1, "mutate": 2, "verifyimages": 1}


def test_cel_policy_status_has_kyvernos_webhook_and_rbac_conditions() -> None:
    """Kyverno's policystatus controller: conditionStatus.conditions = WebhookConfigured ("Webhook configured.") then
    RBACPermissionsGranted ("Policy is ready for reporting."), ready = all true, and status.generated false for
    ValidatingPolicy; the chainsaw "validating-policy-ready" step asserts exactly these."""
    snapshot = _snapshot_of(VALIDATING_POLICY)
    patch = status_patch(VALIDATING_KIND, VALIDATING_POLICY, snapshot, policy_identity(VALIDATING_POLICY), {})
    assert patch is not None
    status = patch["conditionStatus"]
    assert status["ready"] is True and patch["generated"] is False
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in status["conditions"]] == [
        ("WebhookConfigured", "True", "Succeeded", "Webhook configured."),
        ("RBACPermissionsGranted", "True", "Succeeded", "Policy is ready for reporting."),
    ]
    # with native generation requested, ``generated`` is the generator's to write: a false from here could land last
    requesting = {**VALIDATING_POLICY, "spec": {**VALIDATING_POLICY["spec"], "autogen": {"validatingAdmissionPolicy": {"enabled": True}}}}
    requested = status_patch(VALIDATING_KIND, requesting, _snapshot_of(requesting), policy_identity(requesting), {})
    assert requested is not None and "generated" not in requested
    current = copy.deepcopy(patch)
    assert status_patch(VALIDATING_KIND, VALIDATING_POLICY, snapshot, policy_identity(VALIDATING_POLICY), current) is None
    # a Ready condition an older Stockade wrote is dropped (Kyverno's MutatingPolicy step asserts exactly 2 conditions)
    current["conditionStatus"]["conditions"].insert(0, {"type": "Ready", "status": "True"})
    patch = status_patch(VALIDATING_KIND, VALIDATING_POLICY, snapshot, policy_identity(VALIDATING_POLICY), current)
    assert patch is not None and [c["type"] for c in patch["conditionStatus"]["conditions"]] == ["WebhookConfigured", "RBACPermissionsGranted"]


def test_cel_policy_status_follows_admission_and_background_switches() -> None:
    """Kyverno leaves WebhookConfigured out of background-only policies and says reporting permissions are not
    required when background scans are off."""
    background_only = with_changes(VALIDATING_POLICY, spec__evaluation={"admission": {"enabled": False}})
    patch = status_patch(VALIDATING_KIND, background_only, _snapshot_of(background_only), policy_identity(background_only), {})
    assert patch is not None
    assert [c["type"] for c in patch["conditionStatus"]["conditions"]] == ["RBACPermissionsGranted"]
    admission_only = with_changes(VALIDATING_POLICY, spec__evaluation={"background": {"enabled": False}})
    patch = status_patch(VALIDATING_KIND, admission_only, _snapshot_of(admission_only), policy_identity(admission_only), {})
    assert patch is not None
    rbac = patch["conditionStatus"]["conditions"][1]
    assert rbac["status"] == "True" and rbac["message"] == "Background scanning disabled; reporting permissions not required."


def test_cel_policy_status_when_stockade_cannot_serve_it() -> None:
    # no generate list: the CRD schema refuses it (as the API server would under Kyverno's CRDs)
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["namespaces"]}]
    generating = {"apiVersion": "policies.kyverno.io/v1", "kind": "GeneratingPolicy", "metadata": {"name": "gen"}, "spec": {"matchConstraints": {"resourceRules": rules}}}
    generating_kind = next(k for k in WATCHED_KINDS if k.kind == "GeneratingPolicy")
    snapshot = _snapshot_of(generating)
    patch = status_patch(generating_kind, generating, snapshot, policy_identity(generating), {})
    assert patch is not None and patch["conditionStatus"]["ready"] is False
    assert "spec.generate: Required value" in patch["conditionStatus"]["message"] and "generated" not in patch
    webhook = patch["conditionStatus"]["conditions"][0]
    assert (webhook["type"], webhook["status"], webhook["reason"]) == ("WebhookConfigured", "False", "Failed")


class RecordingSource(ClusterPolicySource):
    """Status writes go to a list and come back as the apiserver would answer them."""

    def __init__(self) -> None:
        super().__init__(api_client=None)
        self.patches: list[tuple[str, str, dict[str, Any]]] = []

    def _patch_status(self, watched: WatchedKind, version: str, namespace: str, name: str, patch: dict[str, Any]) -> Any:
        self.patches.append((watched.kind, name, patch))
        with self._lock:
            _, current = self._objects[(watched, namespace, name)]
        updated = copy.deepcopy(current)
        updated["status"] = {**(updated.get("status") or {}), **patch}
        return updated


def test_statuses_are_written_once_and_not_again_for_the_same_snapshot() -> None:
    source = RecordingSource()
    source.apply_event(CLUSTER_POLICY_KIND, "v1", "ADDED", CLUSTER_POLICY)
    source.apply_event(VALIDATING_KIND, "v1", "ADDED", VALIDATING_POLICY)
    store = PolicyStore(sources=[source])
    snapshot = store.load()
    fingerprint = source.fingerprint()
    assert source.write_statuses(snapshot) == 0
    assert sorted((kind, name) for kind, name, _ in source.patches) == [("ClusterPolicy", "require-team"), ("ValidatingPolicy", "no-forbidden")]
    assert source.fingerprint() == fingerprint, "our own status write must not trigger a reload"
    assert store.reload_if_changed() is False
    source.write_statuses(snapshot)
    assert len(source.patches) == 2


def test_status_of_a_policy_changed_since_the_snapshot_is_left_for_the_next_one() -> None:
    source = RecordingSource()
    source.apply_event(CLUSTER_POLICY_KIND, "v1", "ADDED", CLUSTER_POLICY)
    snapshot = PolicyStore(sources=[source]).load()
    source.apply_event(CLUSTER_POLICY_KIND, "v1", "MODIFIED", with_changes(CLUSTER_POLICY, metadata__generation=2, spec__background=False))
    assert source.write_statuses(snapshot) == 0 and source.patches == []


# -- the watch loop ---------------------------------------------------------------------------------------------------------


def discovery(*plurals: str) -> dict[str, Any]:
    """The discovery document of a group version serving ``plurals``."""
    return {"kind": "APIResourceList", "groupVersion": "kyverno.io/v1", "resources": [{"name": plural, "namespaced": False} for plural in plurals]}


def serving_cluster_policies_only() -> FakeKube:
    """Serves ClusterPolicy under kyverno.io/v1 only; every other group version is missing (GET answers NotFound)."""
    return FakeKube({"/apis/kyverno.io/v1": discovery("clusterpolicies")})


class BlockingWatch:
    """A healthy watch: no events until it is closed."""

    def __init__(self) -> None:
        self.closed = threading.Event()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self.closed.wait()
        return iter(())

    def close(self) -> None:
        self.closed.set()


class ScriptedListWatch:
    """Lists one ClusterPolicy (a new resourceVersion each time); the first watch answers 410 Gone."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.lists = 0
        self.watched_from: list[str] = []

    def list(self) -> tuple[list[dict[str, Any]], str]:
        self.lists += 1
        return [copy.deepcopy(item) for item in self.items], str(self.lists)

    def watch(self, resource_version: str, timeout_seconds: int) -> BlockingWatch:
        self.watched_from.append(resource_version)
        if len(self.watched_from) == 1:
            raise Gone("too old resource version", method="WATCH")
        return BlockingWatch()


def test_missing_kinds_are_skipped_and_gone_watches_relist(monkeypatch: pytest.MonkeyPatch) -> None:
    source = ClusterPolicySource(api_client=None, kinds=(CLUSTER_POLICY_KIND, VALIDATING_KIND), write_status=False, rediscover_interval=3600)
    monkeypatch.setattr(source, "client", serving_cluster_policies_only())
    scripted = ScriptedListWatch([CLUSTER_POLICY])
    asked: list[tuple[str, str]] = []

    def list_watch(watched: WatchedKind, version: str) -> ScriptedListWatch:
        asked.append((watched.label, version))
        return scripted

    monkeypatch.setattr(source, "list_watch", list_watch)
    source.start()
    try:
        assert source.wait_synced(timeout=10)
        deadline = time.monotonic() + 10
        while len(scripted.watched_from) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        source.stop()
    assert asked == [("ClusterPolicy.kyverno.io", "v1")], "only the served kind is watched, under its served version"
    assert source.missing_kinds == ["ValidatingPolicy.policies.kyverno.io"]
    assert scripted.watched_from == ["1", "2"], "after 410 Gone the kind is listed again and watched from the new list"
    assert [d.data["metadata"]["name"] for d in source.documents()] == ["require-team"]


def test_a_kind_whose_crd_goes_away_loses_its_policies(monkeypatch: pytest.MonkeyPatch) -> None:
    served = {"clusterpolicies"}

    kube = FakeKube()
    kube.on("GET", "/apis/kyverno.io/v1", lambda _call: discovery(*sorted(served)))

    class VanishingListWatch(ScriptedListWatch):
        def watch(self, resource_version: str, timeout_seconds: int) -> BlockingWatch:
            self.watched_from.append(resource_version)
            if served:
                return BlockingWatch()
            raise NotFound("the server could not find the requested resource", method="WATCH")

    source = ClusterPolicySource(api_client=None, kinds=(CLUSTER_POLICY_KIND,), write_status=False, rediscover_interval=3600)
    monkeypatch.setattr(source, "client", kube)
    scripted = VanishingListWatch([CLUSTER_POLICY])
    monkeypatch.setattr(source, "list_watch", lambda watched, version: scripted)
    source.start()
    try:
        assert source.wait_synced(timeout=10)
        assert [d.data["metadata"]["name"] for d in source.documents()] == ["require-team"]
        before = source.fingerprint()
        served.clear()  # the CRD is deleted: the open watch ends and the next one is answered 404
        informer = source.informer(CLUSTER_POLICY_KIND)
        assert informer is not None
        watch = informer._watch
        assert isinstance(watch, BlockingWatch)
        watch.close()
        deadline = time.monotonic() + 10
        while source.missing_kinds == [] and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        source.stop()
    assert source.missing_kinds == ["ClusterPolicy.kyverno.io"]
    assert source.documents() == [] and source.fingerprint() > before
    assert source.informer(CLUSTER_POLICY_KIND) is None


def test_serve_needs_policies_or_from_cluster() -> None:
    from stockade.cli.serve_cmd import serve

    result = CliRunner().invoke(serve, [])
    assert result.exit_code == 2
    assert "give POLICIES (files or directories) and/or --from-cluster" in result.output


def test_validating_policy_status_lists_its_autogen_configs() -> None:
    """Kyverno e2e validating-policies/autogen: status.autogen.configs holds each replacement set's targets and the
    rewritten spec (``defaults`` for deployments, ``cronjobs``), and is an empty ``autogen: {}`` without controllers."""
    policy = with_changes(VALIDATING_POLICY, spec__autogen={"podControllers": {"controllers": ["deployments", "cronjobs"]}})
    patch = status_patch(VALIDATING_KIND, policy, _snapshot_of(policy), policy_identity(policy), {})
    assert patch is not None
    configs = patch["autogen"]["configs"]
    assert sorted(configs) == ["cronjobs", "defaults"]
    assert configs["defaults"]["targets"] == [{"group": "apps", "version": "v1", "resource": "deployments", "kind": "Deployment"}]
    assert configs["cronjobs"]["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["cronjobs"]
    assert "object.spec.jobTemplate.spec.template.metadata.labels" in configs["cronjobs"]["spec"]["validations"][0]["expression"]
    assert status_patch(VALIDATING_KIND, policy, _snapshot_of(policy), policy_identity(policy), copy.deepcopy(patch)) is None
    every = status_patch(VALIDATING_KIND, VALIDATING_POLICY, _snapshot_of(VALIDATING_POLICY), policy_identity(VALIDATING_POLICY), {})
    assert every is not None
    assert [t["resource"] for t in every["autogen"]["configs"]["defaults"]["targets"]] == ["daemonsets", "deployments", "replicasets", "statefulsets", "jobs"]
    none = with_changes(VALIDATING_POLICY, spec__autogen={"podControllers": {"controllers": []}})
    patch = status_patch(VALIDATING_KIND, none, _snapshot_of(none), policy_identity(none), {})
    assert patch is not None and patch["autogen"] == {"configs": None}
    written = copy.deepcopy(patch)
    written["autogen"] = {}  # what the merge patch leaves stored
    assert status_patch(VALIDATING_KIND, none, _snapshot_of(none), policy_identity(none), written) is None


IMAGE_VALIDATING_POLICY = {
    "apiVersion": "policies.kyverno.io/v1beta1",
    "kind": "ImageValidatingPolicy",
    "metadata": {"name": "signed", "generation": 1},
    "spec": {
        "validationActions": ["Deny"],
        "webhookConfiguration": {"timeoutSeconds": 20},
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
        "matchImageReferences": [{"glob": "ghcr.io/*"}],
        "attestors": [{"name": "cosign", "cosign": {"key": {"data": "k"}}}],
        "validations": [{"expression": "images.containers.all(i, verifyImageSignatures(i, [attestors.cosign]) > 0)", "message": "unsigned"}],
    },
}

MUTATING_POLICY = {
    "apiVersion": "policies.kyverno.io/v1beta1",
    "kind": "MutatingPolicy",
    "metadata": {"name": "add-label", "generation": 1},
    "spec": {
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object{metadata: Object.metadata{labels: {'a': 'b'}}}"}}],
    },
}


@pytest.mark.parametrize("kind", ["ImageValidatingPolicy", "NamespacedImageValidatingPolicy", "MutatingPolicy", "NamespacedMutatingPolicy"])
def test_image_validating_and_mutating_policies_report_their_autogen_configs_too(kind: str) -> None:
    """Kyverno's policy status controller writes status.autogen for (Namespaced)ImageValidating and Mutating policies
    as for ValidatingPolicies (e2e image-validating-policies/autogen/none, namespaced .../should-autogen): the
    variants per replacement set with the rewritten spec, and ``autogen: {}`` when no controller is asked for."""
    watched = next(k for k in WATCHED_KINDS if k.kind == kind)
    base = IMAGE_VALIDATING_POLICY if "Image" in kind else MUTATING_POLICY
    policy = with_changes(base, kind=kind, **({"metadata__namespace": "team"} if kind.startswith("Namespaced") else {}))
    patch = status_patch(watched, policy, _snapshot_of(policy), policy_identity(policy), {})
    assert patch is not None
    configs = patch["autogen"]["configs"]
    assert sorted(configs) == ["cronjobs", "defaults"]
    assert configs["cronjobs"]["targets"] == [{"group": "batch", "version": "v1", "resource": "cronjobs", "kind": "CronJob"}]
    if "Image" in kind:
        assert configs["defaults"]["spec"]["validationActions"] == ["Deny"]
        assert configs["defaults"]["spec"]["webhookConfiguration"] == {"timeoutSeconds": 20}
    none = with_changes(policy, spec__autogen={"podControllers": {"controllers": []}})
    patch = status_patch(watched, none, _snapshot_of(none), policy_identity(none), {})
    assert patch is not None and patch["autogen"] == {"configs": None}
