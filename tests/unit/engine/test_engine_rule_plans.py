"""Rule plans: what the rule driver works out once per policy and kind (kinds, failure actions, pattern rules that
need nothing but the resource) must give exactly the results of the generic per-review steps, and must never
outlive the policy document they were built from."""

from pathlib import Path
from typing import Any

import pytest

from stockade.engine.engine import Engine, Request, kind_plans
from stockade.engine.handlers.registry import DEFAULT_HANDLERS, VALIDATE_PATTERN, HandlerResult, HandlerServices
from stockade.engine.handlers.validate import static_pattern_key, validate_resource_rule
from stockade.engine.match import ResourceKind
from stockade.engine.policycontext import PolicyContext
from stockade.policy.model import KyvernoPolicy, PolicyException, Rule
from stockade.webhook.policystore import PolicyStore

MATCH_POD = {"any": [{"resources": {"kinds": ["Pod"]}}]}
POD_KIND = ResourceKind("", "v1", "Pod")


def pod(privileged: bool = False, run_as_user: int | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    context: dict[str, Any] = {"privileged": privileged}
    if run_as_user is not None:
        context["runAsUser"] = run_as_user
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "nginx", "securityContext": context}]},
    }


def cpol(*rules: dict[str, Any], action: str = "Enforce", **spec: Any) -> KyvernoPolicy:
    return KyvernoPolicy(
        {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {"validationFailureAction": action, "rules": list(rules), **spec}}
    )


def rule(name: str, validate: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "match": MATCH_POD, "validate": {"message": f"{name} failed", **validate}, **extra}


NOT_PRIVILEGED = {"pattern": {"spec": {"containers": [{"=(securityContext)": {"=(privileged)": "false"}}]}}}
RULES = [
    rule("plain", NOT_PRIVILEGED),
    rule("conditional", {"pattern": {"metadata": {"labels": {"(tier)": "web"}}, "spec": {"containers": [{"securityContext": {"privileged": "false"}}]}}}),
    rule("any-pattern", {"anyPattern": [{"spec": {"securityContext": {"runAsNonRoot": "true"}}}, {"spec": {"containers": [{"securityContext": {"runAsUser": ">0"}}]}}]}),
    rule("negation", {"pattern": {"spec": {"X(hostNetwork)": "null"}}}),
    rule("rule-action", {**NOT_PRIVILEGED, "failureAction": "Audit"}),
    rule("overridden", {**NOT_PRIVILEGED, "failureActionOverrides": [{"action": "Audit", "namespaces": ["default"]}]}),
    rule("no-existing", {**NOT_PRIVILEGED, "allowExistingViolations": False}),
    rule("with-variable", {"pattern": {"metadata": {"name": "{{ request.object.metadata.name }}"}}}),
    rule("with-precondition", NOT_PRIVILEGED, preconditions={"all": [{"key": "{{ request.operation }}", "operator": "Equals", "value": "CREATE"}]}),
    rule("deny", {"deny": {"conditions": {"any": [{"key": "{{ request.object.spec.containers[0].securityContext.privileged }}", "operator": "Equals", "value": True}]}}}),
]


def generic_engine() -> Engine:
    """An engine whose pattern handler is a different function that does the same: the driver then takes the
    generic path for every rule, the reference the plans are checked against."""

    def same_handler(pctx: PolicyContext, rule: Rule, resource: dict[str, Any], services: HandlerServices) -> HandlerResult:
        return resource, validate_resource_rule(pctx, rule)

    registry = DEFAULT_HANDLERS.copy()
    registry.register(VALIDATE_PATTERN, same_handler)
    return Engine(handlers=registry)


def results(engine: Engine, policy: KyvernoPolicy, request: Request) -> list[tuple[str, str, str, str]]:
    response = engine.validate(engine.policy_context(policy, request))
    return [(r.name, r.status, r.message, r.failure_action) for r in response.rules]


REQUESTS = {
    "create, compliant": Request(resource=pod(run_as_user=1000)),
    "create, violating": Request(resource=pod(privileged=True, run_as_user=0, labels={"tier": "web"})),
    "create, condition not met": Request(resource=pod(privileged=True, labels={"tier": "db"})),
    "update, violation already there": Request(resource=pod(privileged=True), old_resource=pod(privileged=True), operation="UPDATE"),
    "update, violation introduced": Request(resource=pod(privileged=True), old_resource=pod(), operation="UPDATE"),
    "delete": Request(resource={}, old_resource=pod(privileged=True), operation="DELETE"),
}


@pytest.mark.parametrize("name", list(REQUESTS))
@pytest.mark.parametrize("action", ["Enforce", "Audit"])
def test_planned_rules_answer_as_the_generic_steps_do(name: str, action: str) -> None:
    policy = cpol(*RULES, action=action)
    planned = results(Engine(), policy, REQUESTS[name])
    assert planned == results(generic_engine(), policy, REQUESTS[name])
    assert planned or name == "delete"  # results to compare (a DELETE matches none of these rules)


def test_policy_overrides_and_exceptions_are_still_decided_per_request() -> None:
    overridden = cpol(*RULES, validationFailureActionOverrides=[{"action": "Audit", "namespaces": ["default"]}])
    request = REQUESTS["create, violating"]
    assert results(Engine(), overridden, request) == results(generic_engine(), overridden, request)
    assert {r[3] for r in results(Engine(), overridden, request) if r[0] == "plain"} == {"Audit"}
    exception = PolicyException(
        {
            "apiVersion": "kyverno.io/v2",
            "kind": "PolicyException",
            "metadata": {"name": "allow-plain", "namespace": "default"},
            "spec": {"exceptions": [{"policyName": "p", "ruleNames": ["plain"]}], "match": MATCH_POD},
        }
    )
    policy = cpol(*RULES)
    with_exception = results(Engine(exceptions=[exception]), policy, request)
    assert ("plain", "skip") in [(r[0], r[1]) for r in with_exception]
    assert with_exception == results(generic_engine_with([exception]), policy, request)


def generic_engine_with(exceptions: list[PolicyException]) -> Engine:
    engine = generic_engine()
    engine.exceptions = list(exceptions)
    return engine


@pytest.mark.parametrize(
    ("index", "expected"),
    [(0, "pattern"), (1, "pattern"), (2, "anyPattern"), (3, "pattern"), (4, "pattern"), (5, "pattern"), (6, "pattern"), (7, None), (8, None), (9, None)],
)
def test_only_pattern_checks_of_the_resource_alone_are_static(index: int, expected: str | None) -> None:
    assert static_pattern_key(Rule(RULES[index])) == expected


@pytest.mark.parametrize(
    "extra",
    [{"context": [{"name": "x", "variable": {"value": 1}}]}, {"reportProperties": {"k": "v"}}, {"preconditions": {}}],
)
def test_rules_with_context_report_properties_or_preconditions_are_not_static(extra: dict[str, Any]) -> None:
    assert static_pattern_key(Rule(rule("r", NOT_PRIVILEGED, **extra))) is None


@pytest.mark.parametrize("check", ["deny", "podSecurity", "manifests", "cel"])
def test_other_checks_beside_a_pattern_are_not_static(check: str) -> None:
    assert static_pattern_key(Rule(rule("r", {**NOT_PRIVILEGED, check: {}}))) is None


def test_plans_belong_to_the_policy_document_they_were_built_from() -> None:
    first = cpol(rule("plain", NOT_PRIVILEGED))
    edited = cpol(rule("plain", {"pattern": {"spec": {"containers": [{"securityContext": {"privileged": "true"}}]}}}))
    assert kind_plans(first, POD_KIND) is kind_plans(first, POD_KIND)  # worked out once
    assert kind_plans(edited, POD_KIND)[0].rule is edited.rules[0]
    request = Request(resource=pod())
    assert [r[1] for r in results(Engine(), first, request)] == ["pass"]
    assert [r[1] for r in results(Engine(), edited, request)] == ["fail"]
    assert [r[1] for r in results(Engine(), first, request)] == ["pass"]


def test_plans_per_phase_filter_and_kind() -> None:
    policy = cpol(rule("plain", NOT_PRIVILEGED), {"name": "deployments", "match": {"any": [{"resources": {"kinds": ["Deployment"]}}]}, "validate": NOT_PRIVILEGED})
    assert [p.rule.name for p in kind_plans(policy, POD_KIND)] == ["plain"]
    # the Pod rule's autogen variant applies to Deployments too
    assert [p.rule.name for p in kind_plans(policy, ResourceKind("apps", "v1", "Deployment"))] == ["deployments", "autogen-plain"]
    assert kind_plans(policy, POD_KIND, Rule.has_generate) == []


def test_a_new_snapshot_is_evaluated_with_its_own_plans(tmp_path: Path) -> None:
    """The webhook's store: a policy file edited between two snapshots is decided by the edited rule."""
    policy_file = tmp_path / "policy.yaml"

    def write(privileged: str) -> None:
        document = cpol(rule("plain", {"pattern": {"spec": {"containers": [{"securityContext": {"privileged": privileged}}]}}})).raw
        import yaml

        policy_file.write_text(yaml.safe_dump(document))

    write("false")
    store = PolicyStore([str(policy_file)], log_rejections=False)
    first = store.load()
    engine = first.evaluator.engine
    request = Request(resource=pod(privileged=True))
    assert [r.status for r in engine.validate(engine.policy_context(first.policies[0], request)).rules] == ["fail"]
    write("true ")  # another size, so the store sees the change
    assert store.reload_if_changed()
    second = store.snapshot
    assert second is not None and second is not first
    engine = second.evaluator.engine
    assert [r.status for r in engine.validate(engine.policy_context(second.policies[0], request)).rules] == ["pass"]
