"""Pure decisions of the generate controller and background scanner: selectors, synchronize, drift, eligibility."""

from __future__ import annotations

from typing import Any

from stockade.controllers.background import background_blocker, scanned_rules_only
from stockade.controllers.generate import (
    APPLY,
    DELETE,
    NOTHING,
    downstream_kinds,
    downstream_selector,
    generate_existing,
    label_selector,
    orphan_on_policy_delete,
    should_update,
    synchronize,
    trigger_action,
)
from stockade.engine.response import EngineResponse, RuleResponse
from stockade.policy.model import KyvernoPolicy, Rule


def policy(spec: dict, kind: str = "ClusterPolicy", namespace: str | None = None) -> KyvernoPolicy:
    metadata = {"name": "p"}
    if namespace:
        metadata["namespace"] = namespace
    return KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": kind, "metadata": metadata, "spec": spec})


def test_selector_narrows_to_rule_and_trigger() -> None:
    selector = downstream_selector("p", "", "r", "uid-1")
    assert selector == {
        "app.kubernetes.io/managed-by": "kyverno",
        "generate.kyverno.io/policy-name": "p",
        "generate.kyverno.io/policy-namespace": "",
        "generate.kyverno.io/rule-name": "r",
        "generate.kyverno.io/trigger-uid": "uid-1",
    }
    assert "generate.kyverno.io/rule-name" not in downstream_selector("p", "ns")
    assert label_selector({"b": "2", "a": ""}) == "a=,b=2"


def test_trigger_actions_follow_synchronize() -> None:
    assert trigger_action("CREATE", True, False) == APPLY
    assert trigger_action("CREATE", False, True) == NOTHING
    assert trigger_action("UPDATE", True, True) == APPLY
    assert trigger_action("UPDATE", False, True) == DELETE
    assert trigger_action("UPDATE", False, False) == NOTHING
    assert trigger_action("DELETE", False, True) == DELETE
    assert trigger_action("DELETE", False, False) == NOTHING


def test_rule_flags() -> None:
    rule = Rule({"name": "r", "generate": {"synchronize": True, "orphanDownstreamOnPolicyDelete": True, "kind": "ConfigMap"}})
    assert synchronize(rule) and orphan_on_policy_delete(rule)
    plain = Rule({"name": "r", "generate": {"kind": "ConfigMap"}})
    assert not synchronize(plain) and not orphan_on_policy_delete(plain)
    assert generate_existing(policy({"generateExisting": True}), plain)
    assert not generate_existing(policy({"generateExisting": True}), Rule({"name": "r", "generate": {"generateExisting": False}}))
    assert generate_existing(policy({"generateExistingOnPolicyUpdate": True}), plain)
    assert not generate_existing(policy({}), plain)


def test_a_synchronized_downstream_object_is_rewritten_whenever_it_differs_from_the_rendering() -> None:
    """Kyverno replaces a synchronized target with what the rule renders: edits and additions by other writers go
    (labels, annotations, fields, data keys); only server-set metadata is not a difference."""
    desired = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"x": "1"}}, "data": {"a": "1"}}
    current = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "uid": "u", "resourceVersion": "7", "labels": {"x": "1"}, "annotations": {}}, "data": {"a": "1"}}
    assert not should_update(desired, current, True)
    assert should_update(desired, {**current, "data": {"a": "2"}}, True)
    assert should_update(desired, {**current, "data": {"a": "1", "extra": "3"}}, True)
    assert should_update(desired, {**current, "metadata": {"name": "c"}}, True)  # our labels were removed
    assert should_update(desired, {**current, "metadata": {**current["metadata"], "labels": {"x": "1", "other": "y"}}}, True)
    assert should_update(desired, {**current, "metadata": {**current["metadata"], "annotations": {"note": "n"}}}, True)
    assert not should_update(desired, {**current, "data": {"a": "2"}}, False)  # no synchronize: never rewritten
    netpol = {"spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}
    assert should_update(netpol, {"spec": {"podSelector": {}, "policyTypes": ["Ingress"], "egress": [{}]}}, True)
    assert should_update(netpol, {"spec": {"podSelector": {}, "policyTypes": ["Egress"]}}, True)
    assert not should_update(netpol, {"spec": {"podSelector": {}, "policyTypes": ["Ingress"]}, "status": {"x": 1}}, True)


def test_downstream_kinds_cover_foreach_and_clone_list() -> None:
    rule = Rule(
        {
            "name": "r",
            "generate": {
                "foreach": [{"list": "x", "apiVersion": "v1", "kind": "Secret"}],
                "cloneList": {"kinds": ["v1/ConfigMap", "networking.k8s.io/v1/NetworkPolicy"]},
            },
        }
    )
    assert downstream_kinds(rule) == [("v1", "ConfigMap"), ("networking.k8s.io/v1", "NetworkPolicy"), ("v1", "Secret")]


def _validate_rule(extra: dict) -> dict:
    return {"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "validate": {"pattern": {"x": "y"}}, **extra}


def test_background_eligibility_mirrors_kyverno() -> None:
    assert background_blocker(policy({"rules": [_validate_rule({})]})) == ""
    assert "background" in background_blocker(policy({"background": False, "rules": [_validate_rule({})]}))
    uses_user = _validate_rule({"validate": {"message": "{{ request.userInfo.username }}", "pattern": {"x": "y"}}})
    assert "request.userInfo" in background_blocker(policy({"rules": [uses_user]}))
    uses_sa = _validate_rule({"validate": {"message": "{{serviceAccountName}}", "pattern": {"x": "y"}}})
    assert "serviceAccountName" in background_blocker(policy({"rules": [uses_sa]}))
    object_only = _validate_rule({"validate": {"message": "{{ request.object.metadata.name }}", "pattern": {"x": "y"}}})
    assert background_blocker(policy({"rules": [object_only]})) == ""
    by_role = {"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}, "clusterRoles": ["admin"]}]}, "validate": {"pattern": {"x": "y"}}}
    assert "clusterRoles" in background_blocker(policy({"rules": [by_role]}))


def test_verify_images_only_results_are_not_scanned() -> None:
    pol = policy(
        {
            "rules": [
                _validate_rule({}),
                {"name": "sig", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "verifyImages": [{"imageReferences": ["*"]}]},
            ]
        }
    )
    response = EngineResponse(pol, {}, {}, rules=[RuleResponse("r", "Validation", "pass"), RuleResponse("sig", "ImageVerify", "fail")])
    assert [r.name for r in scanned_rules_only(response).rules] == ["r"]


def test_untyped_rule_labels_leave_only_kyvernos_own() -> None:
    from stockade.controllers.generate import kyverno_labels_only_if_untyped

    typed = {"a": "1", "app.kubernetes.io/managed-by": "kyverno"}
    assert kyverno_labels_only_if_untyped(typed) == typed
    untyped = {"elementIndex": 0, "team": "x", "app.kubernetes.io/managed-by": "kyverno", "generate.kyverno.io/rule-name": "r"}
    assert kyverno_labels_only_if_untyped(untyped) == {"app.kubernetes.io/managed-by": "kyverno", "generate.kyverno.io/rule-name": "r"}


def test_a_trigger_not_stored_yet_is_looked_for_again_within_milliseconds_and_failures_back_off() -> None:
    from stockade.controllers.generate import PENDING_BACKOFF_SECONDS, GenerateController, TriggerEvent, TriggerPending
    from stockade.controllers.mutateexisting import TriggerFailure
    from stockade.kube.controller import Outcome, Result

    class Store:
        listeners: list[Any] = []
        snapshot = None

    controller = GenerateController(None, Store(), cluster_data=object(), max_attempts=3, backoff_seconds=0.5)  # type: ignore[arg-type]
    pending = controller.submit_event(TriggerEvent("CREATE", {"kind": "ConfigMap", "metadata": {"name": "pending"}}))
    failing = controller.submit_event(TriggerEvent("CREATE", {"kind": "ConfigMap", "metadata": {"name": "failing"}}))

    def process_event(event: TriggerEvent) -> list[TriggerFailure]:
        if event.resource["metadata"]["name"] == "pending":
            raise TriggerPending("not stored yet")
        return [TriggerFailure("p", "r", event.describe(), "server error")]

    controller.process_event = process_event  # type: ignore[method-assign]
    assert controller.reconcile(pending) == Result(requeue_after=PENDING_BACKOFF_SECONDS) and PENDING_BACKOFF_SECONDS < 0.1
    assert controller.reconcile(failing) == Result(requeue=True)  # after the key's backoff, from 0.5 s
    queue = controller.controller.queue
    assert [controller.controller.process(failing, queue) for _ in range(3)] == [Outcome.RATE_LIMITED, Outcome.RATE_LIMITED, Outcome.DONE]
    assert controller.queued_event(failing) is None  # given up after max_attempts
    assert controller.queued_event(pending) is not None and controller.stats.retries == 4


def test_nothing_is_dropped_and_a_watched_objects_changes_share_one_key() -> None:
    from stockade.controllers.generate import GenerateController, TriggerEvent, WatchedChange

    class Store:
        listeners: list[Any] = []
        snapshot = None

    controller = GenerateController(None, Store(), cluster_data=object())  # type: ignore[arg-type]
    keys = {controller.submit_event(TriggerEvent("CREATE", {"kind": "ConfigMap", "metadata": {"name": f"c{i}"}})) for i in range(3000)}
    assert len(keys) == 3000 and len(controller.controller.queue) == 3000
    obj = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns1"}}
    first = controller.submit_event(WatchedChange("MODIFIED", obj))
    newest = WatchedChange("DELETED", obj)
    assert controller.submit_event(newest) == first and controller.queued_event(first) is newest
    assert len(controller.controller.queue) == 3001


def test_a_trigger_whose_stored_object_has_another_uid_generates_nothing() -> None:
    """Kyverno #16566 (its e2e test cpol-data-nosync-rejected-create checks it through an UpdateRequest, which Stockade
    does not use): a CREATE the API server rejected (AlreadyExists) left a live object of the same name but another
    UID; the controller must not generate for the rejected request's object."""
    from stockade.controllers.generate import GenerateController, TriggerEvent

    class Store:
        listeners: list = []
        snapshot = None

    class Cluster:
        def __init__(self, stored: dict[str, Any] | None) -> None:
            self.stored = stored

        def get_object(self, *_args: Any, **_kwargs: Any) -> dict[str, Any] | None:
            return self.stored

    rejected = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "uid": "phantom"}}
    live = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "uid": "live", "labels": {"layer": "operational"}}}
    controller = GenerateController(None, Store(), cluster_data=Cluster(live))  # type: ignore[arg-type]
    assert controller._stored_trigger(TriggerEvent("CREATE", rejected)) is None
    controller = GenerateController(None, Store(), cluster_data=Cluster({**live, "metadata": {**live["metadata"], "uid": "phantom"}}))  # type: ignore[arg-type]
    assert controller._stored_trigger(TriggerEvent("CREATE", rejected)) is not None


def test_update_not_persisted_compares_the_stored_version_and_ignores_no_op_updates() -> None:
    from stockade.controllers.generate import update_not_persisted

    old = {"kind": "ConfigMap", "metadata": {"name": "a", "resourceVersion": "5", "labels": {"x": "1"}}, "data": {"k": "v"}}
    changed = {**old, "metadata": {**old["metadata"], "labels": {"x": "2"}}}
    assert update_not_persisted(old, changed, old)  # still the old object: wait
    assert not update_not_persisted(old, changed, {**changed, "metadata": {**changed["metadata"], "resourceVersion": "6"}})
    assert not update_not_persisted(old, {**old, "status": {"phase": "x"}}, old)  # nothing the main resource stores changed
    assert not update_not_persisted({**old, "metadata": {"name": "a"}}, changed, old)  # no version to compare
