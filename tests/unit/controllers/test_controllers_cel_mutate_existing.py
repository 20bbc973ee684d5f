"""MutatingPolicy mutateExisting in the cluster (Kyverno's CELMutate update requests), against an in-memory cluster:
admission triggers, policy events, target expressions, background requests, unchanged targets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stockade.celpolicy.model import CelPolicy
from stockade.controllers.celmutate import CelMutateExisting, CelMutateTrigger, target_constraints
from stockade.controllers.generate import GenerateController, TriggerEvent
from stockade.controllers.webhookconfig import ApiResource
from stockade.engine.match import RequestInfo
from stockade.kube.controller import Outcome
from tests.unit.controllers.fakecluster import FakeCluster

BACKGROUND_USER = "system:serviceaccount:kyverno:kyverno-background-controller"
LABEL_FOO = "Object{metadata: Object.metadata{labels: Object.metadata.labels{foo: \"bar\"}}}"
CONFIGMAPS = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}
NAMESPACES = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["namespaces"]}


def mpol(name: str = "m", *, evaluation: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "evaluation": evaluation if evaluation is not None else {"mutateExisting": {"enabled": True}},
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": LABEL_FOO}}],
    }
    body.update(spec)
    return {"apiVersion": "policies.kyverno.io/v1beta1", "kind": "MutatingPolicy", "metadata": {"name": name}, "spec": body}


@dataclass
class Snapshot:
    cel_policies: list[CelPolicy]
    documents: tuple[Any, ...] = ()
    policies: list[Any] = field(default_factory=list)


def controller(cluster: FakeCluster, *docs: dict[str, Any]) -> CelMutateExisting:
    snapshot = Snapshot([CelPolicy(d) for d in docs])
    return CelMutateExisting(cluster, lambda: snapshot, background_username=BACKGROUND_USER)  # type: ignore[arg-type]


def seed(cluster: FakeCluster) -> None:
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1", "labels": {"test": "enabled"}}})
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns2"}})
    cluster.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns1"}, "data": {"k": "v"}})
    cluster.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns2"}, "data": {"k": "v"}})


def labels(cluster: FakeCluster, namespace: str, name: str = "cm", kind: str = "ConfigMap") -> dict[str, str]:
    found = cluster.find(kind, namespace, name) or {}
    return dict((found.get("metadata") or {}).get("labels") or {})


def namespace_update(cluster: FakeCluster, user: str = "alice") -> CelMutateTrigger:
    namespace = cluster.find("Namespace", "", "ns1")
    assert namespace is not None
    return CelMutateTrigger("UPDATE", namespace, namespace, {"username": user}, ("m",), False)


DIFFERENT_TARGET = mpol(
    matchConstraints={"resourceRules": [{**NAMESPACES, "resourceNames": ["ns1"]}]},
    targetMatchConstraints={"namespaceSelector": {"matchLabels": {"test": "enabled"}}, "resourceRules": [CONFIGMAPS]},
)


def test_an_admitted_trigger_mutates_the_targets_its_target_constraints_list() -> None:
    """Kyverno's CELMutate processor lists targetMatchConstraints (namespace selector included), not the trigger."""
    cluster = FakeCluster()
    seed(cluster)
    ctl = controller(cluster, DIFFERENT_TARGET)
    assert ctl.process_trigger(namespace_update(cluster)) == []
    assert labels(cluster, "ns1") == {"foo": "bar"}
    assert labels(cluster, "ns2") == {}  # its namespace does not carry test=enabled
    assert labels(cluster, "", "ns1", "Namespace") == {"test": "enabled"}  # the trigger itself is not a target


def test_a_request_that_does_not_match_the_policy_triggers_nothing() -> None:
    cluster = FakeCluster()
    seed(cluster)
    ctl = controller(cluster, DIFFERENT_TARGET)
    namespace = cluster.find("Namespace", "", "ns2")
    assert namespace is not None
    assert ctl.process_trigger(CelMutateTrigger("UPDATE", namespace, namespace, {"username": "alice"}, ("m",), False)) == []
    assert labels(cluster, "ns1") == {}


def test_background_requests_trigger_only_policies_that_opt_in() -> None:
    """skipBackgroundRequests defaults to true: the background controller's own requests are ignored."""
    cluster = FakeCluster()
    seed(cluster)
    ctl = controller(cluster, DIFFERENT_TARGET)
    ctl.process_trigger(namespace_update(cluster, BACKGROUND_USER))
    assert labels(cluster, "ns1") == {}
    opted_in = mpol(**{k: v for k, v in DIFFERENT_TARGET["spec"].items() if k != "evaluation"}, evaluation={"mutateExisting": {"enabled": True}, "skipBackgroundRequests": False})
    ctl = controller(cluster, opted_in)
    ctl.process_trigger(namespace_update(cluster, BACKGROUND_USER))
    assert labels(cluster, "ns1") == {"foo": "bar"}


def test_admission_disabled_policies_are_not_triggered_by_requests_but_run_on_policy_events() -> None:
    """Kyverno: admission-disabled mutateExisting policies are driven by policy events (and periodic scans) only;
    a policy event mutates every existing target on behalf of itself."""
    cluster = FakeCluster()
    seed(cluster)
    background_only = mpol(
        evaluation={"admission": {"enabled": False}, "mutateExisting": {"enabled": True}},
        matchConstraints={"resourceRules": [{**CONFIGMAPS, "resourceNames": ["cm"]}]},
        matchConditions=[{"name": "ns1-only", "expression": "object.metadata.namespace == 'ns1'"}],
        targetMatchConditions=[{"name": "ns1-only", "expression": "object.metadata.namespace == 'ns1'"}],
    )
    ctl = controller(cluster, background_only)
    configmap = cluster.find("ConfigMap", "ns1", "cm")
    assert configmap is not None
    ctl.process_trigger(CelMutateTrigger("UPDATE", configmap, configmap, {"username": "alice"}, ("m",), False))
    assert labels(cluster, "ns1") == {}
    ctl.reconcile()
    assert labels(cluster, "ns1") == {"foo": "bar"}
    assert labels(cluster, "ns2") == {}  # targetMatchConditions hold only in ns1
    written = cluster.find("ConfigMap", "ns1", "cm")
    ctl.reconcile()  # unchanged policy: nothing is applied again
    assert cluster.find("ConfigMap", "ns1", "cm") == written


def test_an_unchanged_target_is_not_written() -> None:
    cluster = FakeCluster()
    seed(cluster)
    ctl = controller(cluster, DIFFERENT_TARGET)
    ctl.process_trigger(namespace_update(cluster))
    version = (cluster.find("ConfigMap", "ns1", "cm") or {})["metadata"]["resourceVersion"]
    ctl.process_trigger(namespace_update(cluster))
    assert (cluster.find("ConfigMap", "ns1", "cm") or {})["metadata"]["resourceVersion"] == version
    assert ctl.stats.unchanged == 1


def test_a_target_expression_of_a_delete_trigger_sees_the_deleted_object() -> None:
    """On a DELETE the target expression evaluates with the deleted object as ``object`` (Kyverno's oldObject)."""
    cluster = FakeCluster()
    seed(cluster)
    policy = mpol(
        matchConstraints={"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["secrets"]}]},
        targetMatchConstraints={"expression": 'resource.Get("v1", "configmaps", object.metadata.namespace, "cm")'},
    )
    ctl = controller(cluster, policy)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "trigger", "namespace": "ns2"}}
    assert ctl.process_trigger(CelMutateTrigger("DELETE", {}, secret, {"username": "alice"}, ("m",), False)) == []
    assert labels(cluster, "ns2") == {"foo": "bar"}
    assert labels(cluster, "ns1") == {}


def test_request_variables_name_the_trigger_in_target_mutations() -> None:
    """``request.object`` is the trigger while ``object`` is the target (auto-binding a ServiceAccount)."""
    cluster = FakeCluster()
    cluster.resources.append(ApiResource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False))
    cluster.resources.append(ApiResource("", "v1", "serviceaccounts", "ServiceAccount"))
    cluster.add({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "crb"}, "roleRef": {"kind": "ClusterRole", "name": "view"}})
    subject = 'dyn({"kind": "ServiceAccount", "name": variables.saName, "namespace": variables.saNamespace})'
    policy = mpol(
        matchConstraints={"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["serviceaccounts"]}]},
        matchConditions=[{"name": "annotated", "expression": "request.object.metadata.?annotations[?'bind'].orValue('') == 'true'"}],
        targetMatchConstraints={"resourceRules": [{"apiGroups": ["rbac.authorization.k8s.io"], "apiVersions": ["v1"], "resources": ["clusterrolebindings"], "resourceNames": ["crb"]}]},
        variables=[{"name": "saName", "expression": "request.object.metadata.name"}, {"name": "saNamespace", "expression": "request.object.metadata.namespace"}],
        mutations=[{"patchType": "JSONPatch", "jsonPatch": {"expression": f'[JSONPatch{{op: "add", path: "/subjects", value: [{subject}]}}]'}}],
    )
    ctl = controller(cluster, policy)
    plain = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "plain", "namespace": "default"}}
    ctl.process_trigger(CelMutateTrigger("CREATE", plain, {}, {"username": "alice"}, ("m",), False))
    assert "subjects" not in (cluster.find("ClusterRoleBinding", "", "crb") or {})
    bound = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa", "namespace": "default", "annotations": {"bind": "true"}}}
    assert ctl.process_trigger(CelMutateTrigger("CREATE", bound, {}, {"username": "alice"}, ("m",), False)) == []
    assert (cluster.find("ClusterRoleBinding", "", "crb") or {})["subjects"] == [{"kind": "ServiceAccount", "name": "sa", "namespace": "default"}]


def test_the_webhook_names_the_policies_a_trigger_may_run() -> None:
    cluster = FakeCluster()
    seed(cluster)
    ctl = controller(cluster, DIFFERENT_TARGET)
    namespace = cluster.find("Namespace", "", "ns1")
    ctl.process_trigger(CelMutateTrigger("UPDATE", namespace or {}, namespace or {}, {"username": "alice"}, ("other",), False))
    ctl.process_trigger(CelMutateTrigger("UPDATE", namespace or {}, namespace or {}, {"username": "alice"}, ("m",), True))  # namespaced webhook
    assert labels(cluster, "ns1") == {}


def test_targets_come_from_target_rules_unless_an_expression_selects_them() -> None:
    with_rules = CelPolicy(DIFFERENT_TARGET)
    assert target_constraints(with_rules)["resourceRules"] == [CONFIGMAPS]
    own = CelPolicy(mpol(matchConstraints={"resourceRules": [CONFIGMAPS]}))
    assert target_constraints(own)["resourceRules"] == [CONFIGMAPS]


def test_the_generate_worker_queues_mutating_webhook_reviews_and_retries_unstored_triggers() -> None:
    """A CREATE trigger is reported before it is stored; a target expression reads it, so the work waits for it."""

    class Store:
        listeners: list[Any] = []

        def __init__(self, snapshot: Any) -> None:
            self.snapshot = snapshot

    cluster = FakeCluster()
    seed(cluster)
    policy = mpol(
        matchConstraints={"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["secrets"]}]},
        targetMatchConstraints={"expression": 'resource.Get("v1", "configmaps", object.metadata.namespace, "cm")'},
    )
    store = Store(Snapshot([CelPolicy(policy)]))
    generator = GenerateController(None, store, cluster_data=cluster)  # type: ignore[arg-type]
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns1"}}

    from stockade.engine.match import ResourceKind
    from stockade.webhook.admission import AdmissionRequest

    review = AdmissionRequest(
        uid="r1", operation="CREATE", kind=ResourceKind("", "v1", "Secret"), resource={"group": "", "version": "v1", "resource": "secrets"},
        sub_resource="", namespace="ns1", name="s", object=dict(secret), old_object={}, user_info=RequestInfo(username="alice"), dry_run=False,
    )
    generator.submit_mutating(review, ("m",), False)
    queue = generator.controller.queue
    key = queue.get(timeout=0)
    assert key is not None
    event = generator.queued_event(key)
    assert isinstance(event, TriggerEvent) and event.cel_mutate is not None
    assert generator.controller.process(key, queue) == Outcome.REQUEUED_AFTER  # the secret is not stored yet
    queue.done(key)
    assert labels(cluster, "ns1") == {} and queue.waiting() == 1 and generator.queued_event(key) is event
    cluster.add(secret)
    assert queue.get(timeout=5) == key  # looked for again within milliseconds
    assert generator.controller.process(key, queue) == Outcome.DONE
    queue.done(key)
    assert labels(cluster, "ns1") == {"foo": "bar"} and generator.queued_event(key) is None


def test_targets_are_written_through_the_subresource_their_target_rule_names() -> None:
    """Kyverno's resolveTargetRoute: the first target resource rule naming the target's group/version/resource gives
    the subresource of the write (pods/resize changes requests in place); a plain rule, or none, writes the object."""
    from stockade.celpolicy.model import CelPolicy
    from stockade.controllers.celmutate import target_subresource
    from stockade.controllers.webhookconfig import ApiResource

    pods = ApiResource("", "v1", "pods", "Pod", True)
    deployments = ApiResource("apps", "v1", "deployments", "Deployment", True)

    def policy(target: dict[str, Any]) -> CelPolicy:
        spec = {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}]}, "targetMatchConstraints": target}
        return CelPolicy({"apiVersion": "policies.kyverno.io/v1beta1", "kind": "MutatingPolicy", "metadata": {"name": "p"}, "spec": spec})

    resize = {"expression": "resource.get('v1', 'pods', 'ns', 'p')", "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods/resize"]}]}
    assert target_subresource(policy(resize), pods) == "resize"
    assert target_subresource(policy(resize), deployments) == ""
    wildcard = {"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["*/scale"]}]}
    assert target_subresource(policy(wildcard), deployments) == "scale"
    plain = {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}]}
    assert target_subresource(policy(plain), pods) == ""
    assert target_subresource(policy({"expression": "[]"}), pods) == ""


def test_every_evaluated_target_gets_its_result_in_its_own_report() -> None:
    """Kyverno's CELMutate processor audits each target it evaluated, mutated or already as wanted (e2e
    mutating-policies/reporting/existing-admission-flow): the target's report holds the MutatingPolicy's pass, from a
    background evaluation, filed as a mutate-existing result."""
    from stockade.controllers.reports import PROCESS_BACKGROUND

    class Reports:
        def __init__(self) -> None:
            self.submitted: list[tuple[str, str, list[str], dict[str, Any]]] = []

        def submit(self, resource: dict[str, Any], responses: list[Any], **options: Any) -> None:
            metadata = resource.get("metadata") or {}
            statuses = [rule.status for response in responses for rule in response.rules]
            self.submitted.append((str(metadata.get("namespace")), str(metadata.get("name")), statuses, options))

    cluster = FakeCluster()
    seed(cluster)
    ctl = controller(cluster, DIFFERENT_TARGET)
    reports = Reports()
    ctl.reports = reports
    assert ctl.process_trigger(namespace_update(cluster)) == []
    assert [(ns, name, statuses) for ns, name, statuses, _ in reports.submitted] == [("ns1", "cm", ["pass"])]
    assert reports.submitted[0][3] == {"process": PROCESS_BACKGROUND, "wait": True, "existing": True}
    assert ctl.process_trigger(namespace_update(cluster)) == []  # already labelled: still reported
    assert [(ns, name, statuses) for ns, name, statuses, _ in reports.submitted][1:] == [("ns1", "cm", ["pass"])]


def test_targets_named_by_the_configmaps_resource_filters_are_left_alone() -> None:
    """Kyverno's CELMutate processor skips a target its ConfigMap's ``resourceFilters`` name (``ToFilter`` on the
    target's kind, namespace and name), whether the policy event or an admitted trigger reached it."""
    from stockade.engine.kyvernoconfig import parse_kyverno_config

    cluster = FakeCluster()
    seed(cluster)
    every_configmap = mpol(matchConstraints={"resourceRules": [CONFIGMAPS]})
    ctl = controller(cluster, every_configmap)
    config = parse_kyverno_config({"resourceFilters": "[ConfigMap,ns2,*][Secret,*,*]"})
    ctl.kyverno_config = lambda: config
    ctl.reconcile()
    assert labels(cluster, "ns1") == {"foo": "bar"}
    assert labels(cluster, "ns2") == {}
    by_name = parse_kyverno_config({"resourceFilters": "[ConfigMap,*,cm]"})
    ctl.kyverno_config = lambda: by_name
    cluster.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other", "namespace": "ns2"}})
    configmap = cluster.find("ConfigMap", "ns2", "other")
    assert configmap is not None
    assert ctl.process_trigger(CelMutateTrigger("UPDATE", configmap, configmap, {"username": "alice"}, ("m",), False)) == []
    assert labels(cluster, "ns2", "other") == {"foo": "bar"} and labels(cluster, "ns2") == {}


def test_every_evaluated_target_is_audited_with_kyvernos_admission_events() -> None:
    """Kyverno's processor audits each target it evaluated, changed or already as wanted, with the Events its
    webhook writes (GenerateEvents, not blocked): a clean result is a PolicyApplied success Event, written only when
    the ConfigMap's generateSuccessEvents is on."""
    from stockade.engine.kyvernoconfig import parse_kyverno_config

    class Events:
        def __init__(self) -> None:
            self.specs: list[Any] = []

        def submit(self, spec: Any) -> None:
            self.specs.append(spec)

    cluster = FakeCluster()
    seed(cluster)
    ctl = controller(cluster, mpol(matchConstraints={"resourceRules": [{**CONFIGMAPS, "resourceNames": ["cm"]}]}))
    events = Events()
    ctl.events = events
    enabled = parse_kyverno_config({"generateSuccessEvents": "true"})
    ctl.kyverno_config = lambda: enabled
    ctl.reconcile()
    assert labels(cluster, "ns1") == {"foo": "bar"} and labels(cluster, "ns2") == {"foo": "bar"}
    applied = sorted((e.reason, e.message, e.type, dict(e.regarding)["kind"], e.source) for e in events.specs)
    assert applied == [
        ("PolicyApplied", "ConfigMap ns1/cm is successfully mutated", "Normal", "MutatingPolicy", "admission"),
        ("PolicyApplied", "ConfigMap ns2/cm is successfully mutated", "Normal", "MutatingPolicy", "admission"),
    ]
    # already as wanted: evaluated and audited again, not written
    events.specs.clear()
    assert ctl.apply_policy(ctl.policies()[0]) == []
    assert len(events.specs) == 2 and ctl.stats.unchanged == 2
    # success Events off (Kyverno's default): nothing
    events.specs.clear()
    disabled = parse_kyverno_config({})
    ctl.kyverno_config = lambda: disabled
    assert ctl.apply_policy(ctl.policies()[0]) == []
    assert events.specs == []
