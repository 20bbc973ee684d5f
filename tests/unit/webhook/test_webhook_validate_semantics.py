"""ClusterPolicy/Policy validate rules at admission, as Kyverno v1.19.1's validating webhook answers
(pkg/webhooks/resource/handlers.go, validation/validation.go, utils/block.go + warning.go, policycache/cache.go).

situation                                   Kyverno                                           Stockade (before → now)
------------------------------------------  ------------------------------------------------  -----------------------
Audit rule fails                            evaluated after the answer: no warning            warned → same
Audit rule fails, spec.emitWarning          warning "policy <p>.<r>: <msg>"                   same
Audit rule errors, failurePolicy Fail       after the answer: admitted, no warning            denied → same
Enforce rule errors, failurePolicy Fail     denied                                            same
Enforce rule errors, failurePolicy Ignore   admitted, warning                                 same
denial with an Audit rule also failing      denial, results and Events: Enforce rules only   listed it → same
denial of /validate/ignore listing          every failed/errored Enforce-set rule             blocking ones → same
catch-all /validate                         errors block when any synchronous policy is Fail  per policy → same
override in the rule's namespace            policy overrides outrank a rule's failureAction   rule's action won → same
override naming namespaces + selector       either one selects the override (cache)           both needed → same
rule failureActionOverrides                 replace the policy's overrides                    fell back → same
Namespace's own request                     override applies once it exists (UPDATE warns)    always warned → same
UPDATE of an object already violating       skipped (allowExistingViolations, default true)   same (engine)
DELETE                                      old object validated; denial names it             same
object without a name (generateName)        denial names "Pod/default/"                      generateName → same
long or multi-line rule messages            go-yaml v3: never folded, line breaks as |-      folded at 80 → same
whole review out of time (worker deadline)  cannot be caused by Audit-only policies           all in play → same
CONNECT (pods/exec) denial                  names PodExecOptions/<ns>/; writes no Events      pod name, Events → same
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from webhook_helpers import pod, review

from stockade.controllers.events import admission_events
from stockade.engine.engine import Engine
from stockade.policy.model import KyvernoPolicy
from stockade.webhook.admission import AdmissionDecision, AdmissionEvaluator, parse_review

NEEDS_TEAM = {"message": "label 'team' is required", "pattern": {"metadata": {"labels": {"team": "?*"}}}}
NO_LATEST = {"message": "no latest", "pattern": {"spec": {"containers": [{"image": "!*:latest"}]}}}
BROKEN = {"pattern": {"metadata": {"name": "{{ request.object.metadata.missing }}"}}}  # an error: unknown key


def policy(name: str, rules: dict[str, dict[str, Any]], **spec: Any) -> KyvernoPolicy:
    """A ClusterPolicy with one Pod rule per ``rules`` entry (name → validate block)."""
    body = {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": name},
        "spec": {
            **spec,
            "rules": [{"name": rule, "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "validate": validate} for rule, validate in rules.items()],
        },
    }
    return KyvernoPolicy(yaml.safe_load(yaml.safe_dump(body)))


def decide(
    policies: list[KyvernoPolicy],
    obj: dict[str, Any] | None = None,
    failure: str | None = "Fail",
    *,
    labels: dict[str, str] | None = None,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
) -> AdmissionDecision:
    evaluator = AdmissionEvaluator(Engine(), policies, namespace_labels=lambda _: dict(labels or {}))
    return evaluator.validate(parse_review(review(obj if obj is not None else pod(), operation, old)), failure)


def in_namespace(namespace: str, **kwargs: Any) -> dict[str, Any]:
    obj = pod(**kwargs)
    obj["metadata"]["namespace"] = namespace
    return obj


def rules_in(decision: AdmissionDecision) -> set[tuple[str, str, str]]:
    return {(r.policy_name, rule.name, rule.status) for r in decision.responses for rule in r.rules}


@pytest.mark.parametrize("emit", [False, True])
def test_audit_failures_come_back_as_warnings_only_for_emit_warning_policies(emit: bool) -> None:
    decision = decide([policy("latest", {"no-latest": NO_LATEST}, validationFailureAction="Audit", emitWarning=emit)], pod(labels={"team": "a"}, image="nginx:latest"))
    assert decision.allowed is True
    # Kyverno's layout: "policy <policy>.<rule>: <message>", the message as the pattern failure words it
    assert decision.warnings == (["policy latest.no-latest: validation error: no latest. rule no-latest failed at path /spec/containers/0/image/"] if emit else [])
    assert rules_in(decision) == {("latest", "no-latest", "fail")}  # still reported (PolicyReports, Events)


@pytest.mark.parametrize("failure", ["Fail", None])
def test_an_audit_rule_that_errors_never_denies(failure: str | None) -> None:
    """Audit rules run after the answer, so failurePolicy Fail cannot turn their errors into denials."""
    decision = decide([policy("audit-broken", {"broken": BROKEN}, validationFailureAction="Audit")], failure=failure)
    assert decision.allowed is True and decision.warnings == []
    assert rules_in(decision) == {("audit-broken", "broken", "error")}


@pytest.mark.parametrize(("failure", "denied"), [("Fail", True), ("Ignore", False)])
def test_an_enforce_rule_that_errors_follows_the_failure_policy(failure: str, denied: bool) -> None:
    decision = decide([policy("broken", {"broken": BROKEN}, validationFailureAction="Enforce", failurePolicy=failure)], failure=failure)
    assert decision.allowed is not denied
    if denied:
        assert "resource Pod/default/web was blocked due to the following policies" in decision.message
        assert "broken:\n  broken: 'variable substitution failed" in decision.message
    else:
        assert len(decision.warnings) == 1 and decision.warnings[0].startswith("policy broken.broken: variable substitution failed")


def test_a_denial_is_made_of_the_enforce_rules_only() -> None:
    mixed = policy("mixed", {"needs-team": {**NEEDS_TEAM, "failureAction": "Enforce"}, "no-latest": {**NO_LATEST, "failureAction": "Audit"}})
    audit = policy("audit-only", {"no-latest-either": NO_LATEST}, validationFailureAction="Audit")
    decision = decide([mixed, audit], pod(image="nginx:latest"))
    assert decision.allowed is False
    assert "needs-team" in decision.message and "no-latest" not in decision.message and "audit-only" not in decision.message
    assert rules_in(decision) == {("mixed", "needs-team", "fail")}
    request = parse_review(review(pod(image="nginx:latest")))
    events = admission_events(request, decision)
    assert [e.message.split(";")[0] for e in events] == ["Pod default/web: [needs-team] fail (blocked)"]
    # admitted, both sets are evaluated and reported; only an emitWarning policy's Audit rules also warn
    admitted = decide([mixed, audit], pod(labels={"team": "a"}, image="nginx:latest"))
    assert admitted.allowed is True and admitted.warnings == []
    assert rules_in(admitted) == {("mixed", "needs-team", "pass"), ("mixed", "no-latest", "fail"), ("audit-only", "no-latest-either", "fail")}


def test_a_mixed_emit_warning_policy_warns_about_its_audit_rules() -> None:
    mixed = policy("mixed", {"needs-team": {**NEEDS_TEAM, "failureAction": "Enforce"}, "no-latest": {**NO_LATEST, "failureAction": "Audit"}}, emitWarning=True)
    decision = decide([mixed], pod(labels={"team": "a"}, image="nginx:latest"))
    assert decision.allowed is True
    assert [w.split(":")[0] for w in decision.warnings] == ["policy mixed.no-latest"]


def test_an_ignore_webhook_denial_lists_every_failed_or_errored_enforce_rule() -> None:
    """Kyverno's denial lists every synchronous result that neither passed nor was skipped, not only the failures
    that blocked: an error under failurePolicy Ignore is listed next to the failure that denied."""
    failing = policy("needs-team", {"check-team": NEEDS_TEAM}, validationFailureAction="Enforce", failurePolicy="Ignore")
    erroring = policy("broken", {"broken": BROKEN}, validationFailureAction="Enforce", failurePolicy="Ignore")
    decision = decide([failing, erroring], failure="Ignore")
    assert decision.allowed is False
    body = yaml.safe_load(decision.message.split("policies \n\n", 1)[1])
    assert set(body) == {"needs-team", "broken"} and set(body["broken"]) == {"broken"}
    # without the failure, the Ignore policy's error alone admits (with its warning)
    alone = decide([failing, erroring], pod(labels={"team": "a"}), failure="Ignore")
    assert alone.allowed is True and [w.split(":")[0] for w in alone.warnings] == ["policy broken.broken"]


def test_the_catch_all_webhook_fails_closed_when_any_synchronous_policy_is_fail() -> None:
    erroring = policy("broken", {"broken": BROKEN}, validationFailureAction="Enforce", failurePolicy="Ignore")
    strict = policy("needs-team", {"check-team": NEEDS_TEAM}, validationFailureAction="Enforce")
    team = pod(labels={"team": "a"})
    assert decide([erroring, strict], team, failure=None).allowed is False
    assert decide([erroring], team, failure=None).allowed is True
    assert decide([erroring, strict], team, failure="Ignore").allowed is True  # Kyverno's registered webhooks split by failurePolicy


@pytest.mark.parametrize(("namespace", "denied"), [("dev", False), ("prod", True)])
def test_a_policy_override_outranks_the_rules_own_failure_action(namespace: str, denied: bool) -> None:
    """The policy cache files a rule by the first matching override (the rule's own list if it has one, else the
    policy's) before it looks at the rule's failureAction: in dev this Enforce rule is audited."""
    the_policy = policy(
        "needs-team",
        {"check-team": {**NEEDS_TEAM, "failureAction": "Enforce"}},
        validationFailureAction="Enforce",
        validationFailureActionOverrides=[{"action": "Audit", "namespaces": ["dev"]}],
    )
    decision = decide([the_policy], in_namespace(namespace))
    assert decision.allowed is not denied
    assert decision.warnings == []


@pytest.mark.parametrize(
    ("namespace", "labels", "denied"),
    [("payments", {"strict": "true"}, True), ("other", {}, False), ("other", {"strict": "false"}, False)],
)
def test_an_override_is_selected_by_its_namespaces_or_its_selector(namespace: str, labels: dict[str, str], denied: bool) -> None:
    the_policy = policy(
        "needs-team",
        {"check-team": NEEDS_TEAM},
        validationFailureAction="Audit",
        validationFailureActionOverrides=[{"action": "Enforce", "namespaces": ["pay*"], "namespaceSelector": {"matchLabels": {"strict": "true"}}}],
    )
    decision = decide([the_policy], in_namespace(namespace), labels=labels)
    assert decision.allowed is not denied


def test_an_override_naming_no_namespace_and_selecting_another_namespace_is_synchronous_but_audited() -> None:
    """Selected by its namespaceSelector alone the override files the rule as Enforce (evaluated before the
    answer) while the result's own action needs namespaces and selector to agree: Kyverno admits and warns."""
    the_policy = policy(
        "needs-team",
        {"check-team": NEEDS_TEAM},
        validationFailureAction="Audit",
        validationFailureActionOverrides=[{"action": "Enforce", "namespaces": ["pay*"], "namespaceSelector": {"matchLabels": {"strict": "true"}}}],
    )
    decision = decide([the_policy], in_namespace("other"), labels={"strict": "true"})
    assert decision.allowed is True
    assert [w.split(":")[0] for w in decision.warnings] == ["policy needs-team.check-team"]


@pytest.mark.parametrize(("namespace", "denied"), [("prod", False), ("dev", False), ("staging", True)])
def test_rule_overrides_replace_the_policy_overrides(namespace: str, denied: bool) -> None:
    the_policy = policy(
        "needs-team",
        {"check-team": {**NEEDS_TEAM, "failureActionOverrides": [{"action": "Audit", "namespaces": ["dev"]}, {"action": "Enforce", "namespaces": ["staging"]}]}},
        validationFailureAction="Audit",
        validationFailureActionOverrides=[{"action": "Enforce", "namespaces": ["prod"]}],
    )
    assert decide([the_policy], in_namespace(namespace)).allowed is not denied


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


def namespace_review(operation: str, new: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
    body = review(new, operation, old)
    body["request"].update(kind={"group": "", "version": "v1", "kind": "Namespace"}, resource={"group": "", "version": "v1", "resource": "namespaces"}, namespace=new["metadata"]["name"])
    return body


@pytest.mark.parametrize(("operation", "warned"), [("CREATE", False), ("UPDATE", True)])
def test_a_namespaces_own_request_sees_overrides_once_it_exists(operation: str, warned: bool) -> None:
    """The cache looks the request's namespace up: a Namespace being created is not there yet, so the override
    cannot file its rule as Enforce; once it exists it does.  The result's own action then matches overrides
    against the object's metadata.namespace, which a Namespace lacks: Audit, so the failure comes back as a
    warning of a synchronous rule, never as a denial."""
    the_policy = KyvernoPolicy(
        yaml.safe_load("""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: namespace-owner}
spec:
  validationFailureAction: Audit
  validationFailureActionOverrides:
  - {action: Enforce, namespaces: [team-*]}
  rules:
  - name: needs-owner
    match: {any: [{resources: {kinds: [Namespace]}}]}
    validate: {message: owner needed, pattern: {metadata: {labels: {owner: "?*"}}}}
""")
    )
    old = namespace("team-a") if operation == "UPDATE" else None
    body = namespace_review(operation, namespace("team-a", {"tier": "x"}), old)
    decision = AdmissionEvaluator(Engine(), [the_policy]).validate(parse_review(body), "Fail")
    assert decision.allowed is True
    assert [w.split(":")[0] for w in decision.warnings] == (["policy namespace-owner.needs-owner"] if warned else [])


@pytest.mark.parametrize(("allow_existing", "denied"), [(None, False), (True, False), (False, True)])
def test_an_update_of_an_object_that_already_violated(allow_existing: bool | None, denied: bool) -> None:
    validate: dict[str, Any] = dict(NEEDS_TEAM)
    if allow_existing is not None:
        validate["allowExistingViolations"] = allow_existing
    the_policy = policy("needs-team", {"check-team": validate}, validationFailureAction="Enforce")
    decision = decide([the_policy], pod(image="nginx:1.28"), operation="UPDATE", old=pod())
    assert decision.allowed is not denied
    # an object that complied before the update is always held to the rule
    assert decide([the_policy], pod(image="nginx:1.28"), operation="UPDATE", old=pod(labels={"team": "a"})).allowed is False


def test_delete_is_validated_against_the_old_object_and_the_denial_names_it() -> None:
    the_policy = KyvernoPolicy(
        yaml.safe_load("""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: keep-protected}
spec:
  validationFailureAction: Enforce
  rules:
  - name: no-delete
    match: {any: [{resources: {kinds: [Pod], operations: [DELETE]}}]}
    validate:
      message: protected
      deny: {conditions: {any: [{key: "{{ request.oldObject.metadata.labels.protected || '' }}", operator: Equals, value: "yes"}]}}
""")
    )
    protected = pod("locked", labels={"protected": "yes"})
    denied = AdmissionEvaluator(Engine(), [the_policy]).validate(parse_review(review({}, "DELETE", protected)), "Fail")
    assert denied.allowed is False and "resource Pod/default/locked was blocked" in denied.message and "protected" in denied.message
    allowed = AdmissionEvaluator(Engine(), [the_policy]).validate(parse_review(review({}, "DELETE", pod("free"))), "Fail")
    assert allowed.allowed is True


def test_a_denial_names_the_object_by_its_own_name_only() -> None:
    """Kyverno prints ``Kind/namespace/name`` from the object itself: a generateName Pod has no name yet."""
    unnamed = pod()
    unnamed["metadata"] = {"generateName": "web-", "namespace": "default"}
    decision = decide([policy("needs-team", {"check-team": NEEDS_TEAM}, validationFailureAction="Enforce")], unnamed)
    assert decision.allowed is False and "resource Pod/default/ was blocked due to the following policies" in decision.message


def test_a_review_out_of_time_is_decided_by_the_policies_with_something_to_enforce() -> None:
    """When the whole evaluation overruns, only policies Kyverno would have evaluated before answering count."""
    from stockade.webhook.isolation import deadline_decision

    enforce = policy("needs-team", {"check-team": NEEDS_TEAM}, validationFailureAction="Enforce")
    audit = policy("latest", {"no-latest": NO_LATEST}, validationFailureAction="Audit")
    request = parse_review(review(pod()))
    assert deadline_decision(request, [audit], 1.0).allowed is True
    assert deadline_decision(request, [audit], 1.0).warnings == []
    denied = deadline_decision(request, [audit, enforce], 1.0)
    assert denied.allowed is False and "needs-team" in denied.message and "latest" not in denied.message


def test_a_denied_connect_names_its_options_object_and_writes_no_events() -> None:
    """A CONNECT (pods/exec) carries a PodExecOptions without a name: Kyverno's denial names it
    ``PodExecOptions/<ns>/`` and, the resource having no name, it writes no Events."""
    no_exec = KyvernoPolicy(
        yaml.safe_load("""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: no-exec}
spec:
  validationFailureAction: Enforce
  rules:
  - name: deny-exec
    match: {any: [{resources: {kinds: [Pod/exec]}}]}
    validate: {message: no exec, deny: {}}
""")
    )
    body = review({"apiVersion": "v1", "kind": "PodExecOptions", "command": ["sh"], "container": "c"}, "CONNECT")
    body["request"].update(
        kind={"group": "", "version": "v1", "kind": "PodExecOptions"},
        resource={"group": "", "version": "v1", "resource": "pods"},
        subResource="exec",
        namespace="default",
        name="web",
    )
    request = parse_review(body)
    evaluator = AdmissionEvaluator(Engine(), [no_exec], kind_resolver=lambda group, version, plural: "Pod" if plural == "pods" else None)
    decision = evaluator.validate(request, "Fail")
    assert decision.allowed is False and "resource PodExecOptions/default/ was blocked" in decision.message
    assert admission_events(request, decision) == []


def test_a_denial_keys_policies_by_name_so_a_later_namesake_replaces_an_earlier_one() -> None:
    """Kyverno's denial map is keyed by policy name alone: a Policy named like a ClusterPolicy (evaluated after it)
    takes its entry."""
    cluster = policy("needs-team", {"cluster-rule": NEEDS_TEAM}, validationFailureAction="Enforce")
    namespaced_raw = {**cluster.raw, "kind": "Policy", "metadata": {"name": "needs-team", "namespace": "default"}}
    namespaced_raw["spec"] = {**cluster.raw["spec"], "rules": [{**cluster.raw["spec"]["rules"][0], "name": "namespaced-rule"}]}
    decision = decide([cluster, KyvernoPolicy(namespaced_raw)])
    body = yaml.safe_load(decision.message.split("policies \n\n", 1)[1])
    assert decision.allowed is False and body == {"needs-team": {"namespaced-rule": body["needs-team"]["namespaced-rule"]}}
