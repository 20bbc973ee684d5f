"""The mutate-existing lifecycle of ClusterPolicy/Policy ``mutate.targets`` rules, event by event, as Kyverno v1.19.1
implements it (webhooks/resource/updaterequest.go, background/mutate/mutate.go, engine/handlers/mutation/
mutate_existing.go + load_targets.go, clients/dclient/helpers.go, policy/mutate.go + policy_controller.go,
event/events.go + controller.go) against Stockade:

| event | Kyverno | Stockade | before |
|---|---|---|---|
| admitted DELETE of a trigger | only rules whose match lists DELETE get an UpdateRequest | `mutateexisting.rules_for_trigger` (process and `updaterequest.plan_update_requests`) | different: every matching rule ran |
| request by the background SA | rules with skipBackgroundRequests (default true) skipped | `rules_for_trigger` through `MutateExisting.is_background` | different: never skipped |
| dry run | no UpdateRequest | `GenerateController.submit` / `plan_update_requests` | same |
| target named exactly (namespace and name) that does not exist | GET NotFound: rule error, UR failed and retried | `mutate_existing._find_targets` raises TargetNotFound: rule error, trigger retried | different: no target, no error |
| target named exactly with a label selector / a uid | GET: selector unused; uid never used | `_find_targets` | different: both filtered |
| rule error/fail/warn before any target | error, UR failed; Event needs a target: none | `MutateExisting._write` returns a failure, no Event | different: PolicyError without target; warn ignored |
| target written | PolicyApplied "resource mutated" (success Event: generateSuccessEvents), related = target kind/ns/name | `MutateExisting._event` via `submit_success` | different: always written, no related |
| target write failed | PolicyError "policy p/r error: ...", related = target | `_event` via `submit` | different: no related |
| trigger evaluated | every rule result (pass with patched-target, skip, error) in the trigger's report, before writing | `MutateExisting._report`, one submission | different: only written targets, one submission each |
| policy created / spec changed (any field) | every rule with mutateExistingOnPolicyUpdate applied to existing triggers | `MutateExisting.reconcile` compares the whole spec | different: only new/changed rules |
| policy-update pass | background context without operation: rules listing `operations` never match, request.operation "" | `apply_to_existing` evaluates with operation "" | different: evaluated as CREATE |
| per-target context, preconditions, foreach, `target.*` | per target | `mutate_existing._mutate_target` | same |
| namespaced Policy | targets only in its namespace | `_find_targets` | same |

MutatingPolicy ``mutateExisting`` (webhooks/resource/mpol, background/mpol/processor.go, policy/mpol.go), tested in
test_controllers_cel_mutate_existing.py:

| event | Kyverno | Stockade | before |
|---|---|---|---|
| admitted request, admission enabled, not dry run | cel-mutate UR per matching policy | `celmutate.CelMutateExisting.wanted`, `updaterequest.plan_mutating_requests` | same |
| background SA request | skipped unless skipBackgroundRequests: false | `wanted` | same |
| policy created / spec changed | bare UR (all targets) or, with a target expression, one UR per trigger (UPDATE) | `CelMutateExisting.reconcile` / `apply_policy` | same |
| target named by the ConfigMap's resourceFilters | skipped (ToFilter) | `CelMutateExisting.filtered` | different: mutated |
| target evaluated (written or unchanged) | audit: report + GenerateEvents(not blocked) | `CelMutateExisting._audit` with `events.audit_events` | different: report only |
| unchanged target / target gone (NotFound) | no write / not a failure | `_mutate` | same |
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from stockade.controllers.generate import GenerateController, TriggerEvent
from stockade.controllers.mutateexisting import rules_for_trigger
from stockade.controllers.updaterequest import plan_update_requests
from stockade.engine.match import RequestInfo
from stockade.policy.model import KyvernoPolicy
from tests.unit.controllers.fakecluster import FakeCluster, refuse_writes
from tests.unit.controllers.test_controllers_mutate_existing import Events, Store, labels
from tests.unit.controllers.test_controllers_update_requests import review

BACKGROUND_USER = "system:serviceaccount:kyverno:kyverno-background-controller"


def rule(name: str, *, operations: list[str] | None = None, target: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {"kinds": ["ConfigMap"], "names": ["trigger"]}
    if operations:
        resources["operations"] = operations
    mutate: dict[str, Any] = {
        "targets": [target or {"apiVersion": "v1", "kind": "Secret", "name": "secret-*", "namespace": "{{ request.object.metadata.namespace }}"}],
        "patchStrategicMerge": {"metadata": {"labels": {name: "{{ request.object.metadata.name }}"}}},
    }
    mutate.update(extra.pop("mutate", {}))
    return {"name": name, "match": {"any": [{"resources": resources}]}, "mutate": mutate, **extra}


def cluster_policy(*rules: dict[str, Any], **spec: Any) -> KyvernoPolicy:
    return KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "mutate-secrets", "uid": "pol-uid"}, "spec": {"rules": list(rules), **spec}})


def setup(*policies: KyvernoPolicy, successes_enabled: bool = True) -> tuple[FakeCluster, GenerateController, Events]:
    cluster = FakeCluster()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"}})
    cluster.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "secret-a", "namespace": "ns1"}})
    events = Events(successes_enabled)
    controller = GenerateController(None, Store(*policies), cluster_data=cluster, events=events)  # type: ignore[arg-type]
    controller.mutate_existing.is_background = lambda username: username == BACKGROUND_USER
    return cluster, controller, events


def trigger(cluster: FakeCluster) -> dict[str, Any]:
    return cluster.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "trigger", "namespace": "ns1", "uid": "cm-uid"}})


# -- admission: which rules a request runs ----------------------------------------------------------------------------


def test_a_deleted_trigger_runs_only_the_rules_that_list_the_delete_operation() -> None:
    any_operation, on_delete, on_create = rule("any-op"), rule("on-delete", operations=["CREATE", "DELETE"]), rule("on-create", operations=["CREATE"])
    cluster, controller, _ = setup(cluster_policy(any_operation, on_delete, on_create))
    cm = trigger(cluster)
    assert controller.process_event(TriggerEvent("DELETE", {}, old_resource=cm)) == []
    assert labels(cluster, "ns1", "secret-a") == {"on-delete": "trigger"}
    # a CREATE runs every rule its operations admit
    assert controller.process_event(TriggerEvent("CREATE", cm)) == []
    assert labels(cluster, "ns1", "secret-a") == {"on-delete": "trigger", "any-op": "trigger", "on-create": "trigger"}


def test_the_background_controllers_own_requests_run_only_rules_that_do_not_skip_them() -> None:
    skipping, listening = rule("skipping"), rule("listening", skipBackgroundRequests=False)
    cluster, controller, _ = setup(cluster_policy(skipping, listening))
    cm = trigger(cluster)
    assert controller.process_event(TriggerEvent("CREATE", cm, info=RequestInfo(username=BACKGROUND_USER))) == []
    assert labels(cluster, "ns1", "secret-a") == {"listening": "trigger"}
    assert controller.process_event(TriggerEvent("CREATE", cm, info=RequestInfo(username="alice"))) == []
    assert labels(cluster, "ns1", "secret-a") == {"listening": "trigger", "skipping": "trigger"}


def test_rules_for_trigger_combines_both_choices() -> None:
    policy = cluster_policy(rule("a"), rule("b", operations=["DELETE"], skipBackgroundRequests=False), rule("c", operations=["DELETE"]))
    assert [r.name for r in rules_for_trigger(policy, "UPDATE", False)] == ["a", "b", "c"]
    assert [r.name for r in rules_for_trigger(policy, "DELETE", False)] == ["b", "c"]
    assert [r.name for r in rules_for_trigger(policy, "DELETE", True)] == ["b"]
    assert [r.name for r in rules_for_trigger(policy, "CREATE", True)] == ["b"]


def test_a_deleted_trigger_records_update_requests_only_for_rules_listing_delete() -> None:
    policy = cluster_policy(rule("any-op"), rule("on-delete", operations=["DELETE"]))
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "trigger", "namespace": "ns1", "uid": "cm-uid"}}
    recorded = plan_update_requests("kyverno", [policy], review("DELETE", {}, cm, kind="ConfigMap"))
    assert [r["spec"]["rule"] for r in recorded] == ["on-delete"]
    assert [r["spec"]["rule"] for r in plan_update_requests("kyverno", [policy], review("CREATE", cm, kind="ConfigMap"))] == ["any-op"]


# -- targets, failures and Events ---------------------------------------------------------------------------------------


def test_a_missing_target_named_exactly_is_an_error_without_an_event_and_is_retried() -> None:
    named = rule("named", target={"apiVersion": "v1", "kind": "Secret", "name": "later", "namespace": "ns1"})
    cluster, controller, events = setup(cluster_policy(named))
    cm = trigger(cluster)
    [failure] = controller.process_event(TriggerEvent("CREATE", cm))
    assert failure.rule == "named" and "not found" in str(failure)
    assert events.specs == []  # no target, no Event (Kyverno's report() needs the patched target)
    cluster.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "later", "namespace": "ns1"}})
    assert controller.process_event(TriggerEvent("CREATE", cm)) == []  # the retry finds it
    assert labels(cluster, "ns1", "later") == {"named": "trigger"}


def test_a_wildcard_target_that_matches_nothing_is_no_error() -> None:
    wildcard = rule("wild", target={"apiVersion": "v1", "kind": "Secret", "name": "nothing-*", "namespace": "ns1"})
    cluster, controller, events = setup(cluster_policy(wildcard))
    assert controller.process_event(TriggerEvent("CREATE", trigger(cluster))) == []
    assert events.specs == []


def test_success_events_follow_generate_success_events_and_errors_are_always_written() -> None:
    cluster, controller, events = setup(cluster_policy(rule("label")), successes_enabled=False)
    cm = trigger(cluster)
    assert controller.process_event(TriggerEvent("CREATE", cm)) == []
    assert labels(cluster, "ns1", "secret-a") == {"label": "trigger"}
    assert events.specs == []  # PolicyApplied is a success Event: off by default in Kyverno's ConfigMap
    cluster, controller, events = setup(cluster_policy(rule("label")), successes_enabled=False)
    cm = trigger(cluster)
    refuse_writes(cluster)
    [failure] = controller.process_event(TriggerEvent("CREATE", cm))
    assert failure.rule == "label"
    [event] = events.specs
    assert (event.reason, event.type, dict(event.related)) == ("PolicyError", "Warning", {"kind": "Secret", "name": "secret-a", "namespace": "ns1"})


# -- policy changes ------------------------------------------------------------------------------------------------------


def test_any_spec_change_reapplies_every_on_update_rule() -> None:
    on_update = rule("label", mutate={"mutateExistingOnPolicyUpdate": True})
    cluster, controller, _ = setup(cluster_policy(on_update))
    trigger(cluster)
    controller.reconcile_policies()
    assert labels(cluster, "ns1", "secret-a") == {"label": "trigger"}
    secret = cluster.find("Secret", "ns1", "secret-a")
    cluster.add({**secret, "metadata": {**secret["metadata"], "labels": {}}})
    # the rule itself is unchanged; another part of the spec is not
    controller.store.snapshot = replace(controller.store.snapshot, policies=[cluster_policy(on_update, background=False)])  # type: ignore[attr-defined]
    controller.reconcile_policies()
    assert labels(cluster, "ns1", "secret-a") == {"label": "trigger"}


def test_the_policy_update_pass_has_no_operation() -> None:
    """Kyverno's policy controller evaluates existing triggers without an operation: a rule listing operations does
    not match them, and ``request.operation`` is empty."""
    listed = rule("listed", operations=["CREATE", "UPDATE"], mutate={"mutateExistingOnPolicyUpdate": True})
    unlisted = rule("unlisted", mutate={"mutateExistingOnPolicyUpdate": True, "patchStrategicMerge": {"metadata": {"labels": {"op": "x{{ request.operation }}"}}}})
    cluster, controller, _ = setup(cluster_policy(listed, unlisted))
    trigger(cluster)
    controller.reconcile_policies()
    assert labels(cluster, "ns1", "secret-a") == {"op": "x"}


# -- reports ---------------------------------------------------------------------------------------------------------------


class Reports:
    """A ReportWriter stand-in: each submission as (trigger, [(rule, status, message, properties)])."""

    def __init__(self) -> None:
        self.submissions: list[tuple[str, list[tuple[str, str, str, dict[str, str]]]]] = []

    def submit(self, trigger: dict[str, Any], responses: list[Any], **options: Any) -> None:
        assert options.get("existing") is True
        results = [(r.name, r.status, r.message, r.properties) for response in responses for r in response.rules]
        self.submissions.append((trigger["metadata"]["name"], results))


def test_the_triggers_report_gets_every_result_in_one_submission_before_the_writes() -> None:
    """Kyverno reports the whole evaluation of the trigger (a skipped target, a rule error) in one report, pass
    results included even when the write then fails."""
    only_b = rule("only-b", target={"apiVersion": "v1", "kind": "Secret", "name": "secret-*", "namespace": "ns1", "preconditions": {"all": [{"key": "{{ target.metadata.name }}", "operator": "Equals", "value": "secret-b"}]}})
    missing = rule("missing", target={"apiVersion": "v1", "kind": "Secret", "name": "gone", "namespace": "ns1"})
    cluster, controller, _ = setup(cluster_policy(only_b, missing))
    cluster.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "secret-b", "namespace": "ns1"}})
    reports = Reports()
    controller.mutate_existing.reports = reports
    refuse_writes(cluster)
    assert len(controller.process_event(TriggerEvent("CREATE", trigger(cluster)))) == 2  # the write and the missing target
    [(name, results)] = reports.submissions
    assert name == "trigger"
    assert sorted((r[0], r[1]) for r in results) == [("missing", "error"), ("only-b", "pass"), ("only-b", "skip")]
    [passed] = [r for r in results if r[1] == "pass"]
    assert passed[2] == "mutated Secret/secret-b in namespace ns1"
    assert passed[3] == {"patched-target": "/v1, Kind=Secret Name=secret-b Namespace=ns1"}
