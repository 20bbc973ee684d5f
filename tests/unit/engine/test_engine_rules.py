"""Rule handlers end to end through the Engine: results and messages users see."""

from typing import Any

from stockade.engine.engine import Engine, Request
from stockade.engine.processor import apply_policies
from stockade.policy.model import KyvernoPolicy, PolicyException


def pod(name: str = "web", image: str = "nginx:1.25", labels: dict[str, str] | None = None, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": image}]},
    }


def cpol(*rules: dict[str, Any], **spec: Any) -> KyvernoPolicy:
    return KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {"rules": list(rules), **spec}})


MATCH_POD = {"any": [{"resources": {"kinds": ["Pod"]}}]}


def validate(policy: KyvernoPolicy, resource: dict[str, Any], **request: Any) -> list[tuple[str, str, str]]:
    engine = Engine(exceptions=request.pop("exceptions", None))
    response = engine.validate(engine.policy_context(policy, Request(resource=resource, **request)))
    return [(r.name, r.status, r.message) for r in response.rules]


def test_pattern_pass_and_fail_messages() -> None:
    policy = cpol({"name": "no-latest", "match": MATCH_POD, "validate": {"message": "no latest", "pattern": {"spec": {"containers": [{"image": "!*:latest"}]}}}})
    assert validate(policy, pod()) == [("no-latest", "pass", "validation rule 'no-latest' passed.")]
    assert validate(policy, pod(image="nginx:latest")) == [
        ("no-latest", "fail", "validation error: no latest. rule no-latest failed at path /spec/containers/0/image/")
    ]


def test_deny_with_variables_in_message() -> None:
    rule = {
        "name": "deny-default",
        "match": MATCH_POD,
        "validate": {
            "message": "{{ request.object.metadata.name }} may not run in default",
            "deny": {"conditions": {"any": [{"key": "{{ request.object.metadata.namespace }}", "operator": "Equals", "value": "default"}]}},
        },
    }
    assert validate(cpol(rule), pod()) == [("deny-default", "fail", "web may not run in default")]
    assert validate(cpol(rule), pod(namespace="prod"))[0][1] == "pass"


def test_preconditions_skip_and_unresolved_variable_is_error() -> None:
    rule = {
        "name": "r",
        "match": MATCH_POD,
        "preconditions": {"all": [{"key": "{{ request.object.metadata.labels.app || '' }}", "operator": "Equals", "value": "web"}]},
        "validate": {"pattern": {"metadata": {"name": "?*"}}},
    }
    assert validate(cpol(rule), pod())[0][1] == "skip"
    assert validate(cpol(rule), pod(labels={"app": "web"}))[0][1] == "pass"
    broken = {**rule, "preconditions": {"all": [{"key": "{{ request.object.metadata.nope }}", "operator": "Equals", "value": "x"}]}}
    name, status, message = validate(cpol(broken), pod())[0]
    assert status == "error" and "failed to evaluate preconditions" in message


def test_unmatched_rule_produces_no_response() -> None:
    rule = {"name": "r", "match": {"any": [{"resources": {"kinds": ["Service"]}}]}, "validate": {"pattern": {"x": "y"}}}
    assert validate(cpol(rule), pod()) == []


def test_foreach_with_context_and_element() -> None:
    rule = {
        "name": "images",
        "match": MATCH_POD,
        "context": [{"name": "allowed", "variable": {"value": ["registry.io"]}}],
        "validate": {
            "message": "registry not allowed",
            "foreach": [
                {
                    "list": "request.object.spec.containers",
                    "deny": {"conditions": {"all": [{"key": "{{ images.containers.\"{{element.name}}\".registry }}", "operator": "AnyNotIn", "value": "{{ allowed }}"}]}},
                }
            ],
        },
    }
    assert validate(cpol(rule), pod(image="registry.io/app:1"))[0][1] == "pass"
    assert validate(cpol(rule), pod(image="docker.io/app:1")) == [("images", "fail", "validation failure: registry not allowed")]


def test_apply_rules_one_stops_after_first_applied_rule() -> None:
    first = {"name": "a", "match": MATCH_POD, "validate": {"pattern": {"metadata": {"name": "web"}}}}
    second = {"name": "b", "match": MATCH_POD, "validate": {"pattern": {"metadata": {"name": "web"}}}}
    assert [r[0] for r in validate(cpol(first, second, applyRules="One"), pod())] == ["a"]
    assert [r[0] for r in validate(cpol(first, second), pod())] == ["a", "b"]


def test_autogen_rule_validates_deployments() -> None:
    rule = {"name": "no-latest", "match": MATCH_POD, "validate": {"pattern": {"spec": {"containers": [{"image": "!*:latest"}]}}}}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "default"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:latest"}]}}},
    }
    assert validate(cpol(rule), deployment) == [
        ("autogen-no-latest", "fail", "validation error: rule autogen-no-latest failed at path /spec/template/spec/containers/0/image/")
    ]


def test_policy_exception_skips_the_rule() -> None:
    rule = {"name": "r", "match": MATCH_POD, "validate": {"pattern": {"metadata": {"labels": {"team": "?*"}}}}}
    exception = PolicyException(
        {
            "apiVersion": "kyverno.io/v2",
            "kind": "PolicyException",
            "metadata": {"name": "allow-web", "namespace": "ops"},
            "spec": {"exceptions": [{"policyName": "p", "ruleNames": ["r"]}], "match": {"any": [{"resources": {"names": ["web"]}}]}},
        }
    )
    assert validate(cpol(rule), pod(), exceptions=[exception]) == [("r", "skip", "rule is skipped due to policy exceptionsops/allow-web")]
    assert validate(cpol(rule), pod(name="api"), exceptions=[exception])[0][1] == "fail"


def _exception(name: str, pod_security: list[dict[str, Any]] | None = None) -> PolicyException:
    spec: dict[str, Any] = {"exceptions": [{"policyName": "p", "ruleNames": ["baseline"]}], "match": MATCH_POD}
    if pod_security is not None:
        spec["podSecurity"] = pod_security
    return PolicyException({"apiVersion": "kyverno.io/v2", "kind": "PolicyException", "metadata": {"name": name}, "spec": spec})


def _pod_adding_capabilities(*capabilities: str) -> dict[str, Any]:
    resource = pod()
    resource["spec"]["containers"][0]["securityContext"] = {"capabilities": {"add": list(capabilities)}}
    return resource


BASELINE_RULE = {"name": "baseline", "match": MATCH_POD, "validate": {"podSecurity": {"level": "baseline", "version": "latest"}}}
SYS_TIME_ONLY = [{"controlName": "Capabilities", "images": ["nginx*"], "restrictedField": "spec.containers[*].securityContext.capabilities.add", "values": ["SYS_TIME"]}]


def test_whole_rule_exception_wins_over_narrower_pod_security_exception() -> None:
    """Kyverno (validate_pss.go): any matching exception without podSecurity controls skips the podSecurity rule, even
    when another matching exception only exempts some controls (e2e exceptions/multiple-exceptions)."""
    exceptions = [_exception("init-exception-baseline", SYS_TIME_ONLY), _exception("exception-baseline")]
    result = validate(cpol(BASELINE_RULE), _pod_adding_capabilities("NET_ADMIN"), exceptions=exceptions)
    assert result == [("baseline", "skip", "rule is skipped due to policy exception exception-baseline")]


def test_pod_security_exceptions_alone_exempt_only_their_controls() -> None:
    exceptions = [_exception("sys-time", SYS_TIME_ONLY)]
    assert validate(cpol(BASELINE_RULE), _pod_adding_capabilities("SYS_TIME"), exceptions=exceptions) == [
        ("baseline", "skip", "rule is skipped due to policy exceptions sys-time")
    ]
    assert validate(cpol(BASELINE_RULE), _pod_adding_capabilities("NET_ADMIN"), exceptions=exceptions)[0][1] == "fail"


def test_mutation_feeds_later_rules_and_validation() -> None:
    add_label = {"name": "add", "match": MATCH_POD, "mutate": {"patchStrategicMerge": {"metadata": {"labels": {"team": "core"}}}}}
    copy_label = {
        "name": "copy",
        "match": MATCH_POD,
        "mutate": {"patchStrategicMerge": {"metadata": {"labels": {"owner": "{{ request.object.metadata.labels.team }}"}}}},
    }
    check = {"name": "check", "match": MATCH_POD, "validate": {"pattern": {"metadata": {"labels": {"owner": "core"}}}}}
    result = apply_policies(Engine(), [cpol(add_label, copy_label, check)], Request(resource=pod()))
    assert result.patched_resource["metadata"]["labels"] == {"team": "core", "owner": "core"}
    statuses = [(r.name, r.status) for response in result.responses for r in response.rules]
    assert statuses == [("add", "pass"), ("copy", "pass"), ("check", "pass")]


def test_at_sign_in_a_patch_reads_the_value_at_the_same_path_of_the_resource() -> None:
    """Kyverno's path for ``{{@}}`` skips ``mutate`` and the patch's own key: ``metadata.labels."deploy-zone"``."""
    rule = {
        "name": "upper",
        "match": MATCH_POD,
        "mutate": {"patchStrategicMerge": {"metadata": {"labels": {"deploy-zone": "{{ to_upper('{{@}}') }}", "corp.com/retention": "{{ regex_replace_all('([0-9])([0-9])', '{{ @ }}', '${1}0') }}"}}}},
    }
    engine = Engine()
    resource = pod(labels={"deploy-zone": "frankfurt", "corp.com/retention": "days_37"})
    response = engine.mutate(engine.policy_context(cpol(rule), Request(resource=resource)))
    assert [r.status for r in response.rules] == ["pass"]
    assert response.patched_resource["metadata"]["labels"] == {"deploy-zone": "FRANKFURT", "corp.com/retention": "days_30"}


def test_mutate_without_change_is_skip() -> None:
    rule = {"name": "noop", "match": MATCH_POD, "mutate": {"patchStrategicMerge": {"metadata": {"name": "web"}}}}
    engine = Engine()
    response = engine.mutate(engine.policy_context(cpol(rule), Request(resource=pod())))
    assert [(r.status, r.message) for r in response.rules] == [("skip", "no patches applied")]


def test_generate_data_rule_produces_downstream_resource() -> None:
    rule = {
        "name": "gen",
        "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
        "generate": {"apiVersion": "v1", "kind": "ConfigMap", "name": "defaults", "namespace": "{{ request.object.metadata.name }}", "data": {"data": {"k": "v"}}},
    }
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    engine = Engine()
    response = engine.generate(engine.policy_context(cpol(rule), Request(resource=namespace)))
    [generated] = response.rules[0].generated_resources
    assert generated["kind"] == "ConfigMap"
    assert generated["metadata"]["namespace"] == "team-a" and generated["data"] == {"k": "v"}
    assert generated["metadata"]["labels"]["generate.kyverno.io/policy-name"] == "p"


def test_update_values_make_old_object_visible() -> None:
    rule = {
        "name": "immutable",
        "match": MATCH_POD,
        "validate": {"deny": {"conditions": {"any": [{"key": "{{ request.oldObject.metadata.labels.app || '' }}", "operator": "NotEquals", "value": "{{ request.object.metadata.labels.app || '' }}"}]}}},
    }
    old = pod(labels={"app": "a"})
    new = pod(labels={"app": "b"})
    assert validate(cpol(rule), new, operation="UPDATE", old_resource=old)[0][1] == "fail"
    assert validate(cpol(rule), new, operation="UPDATE", old_resource=new)[0][1] == "pass"


def test_rules_chosen_per_kind_keep_their_order_and_leave_out_only_other_kinds() -> None:
    """The per-kind rule list of a policy is worked out once; a rule without kinds, or with a wildcard, stays in."""
    named = {"name": "pods", "match": MATCH_POD, "validate": {"pattern": {"metadata": {"name": "web"}}}}
    services = {"name": "services", "match": {"any": [{"resources": {"kinds": ["Service"]}}]}, "validate": {"pattern": {"metadata": {"name": "x"}}}}
    anything = {"name": "any-kind", "match": {"any": [{"resources": {"kinds": ["*"]}}]}, "validate": {"pattern": {"metadata": {"name": "web"}}}}
    by_name = {"name": "by-name", "match": {"any": [{"resources": {"names": ["web"]}}]}, "validate": {"pattern": {"metadata": {"name": "web"}}}}
    policy = cpol(named, services, anything, by_name)
    for _ in range(2):  # the second run is served from the per-kind list
        assert [r[0] for r in validate(policy, pod())] == ["pods", "any-kind", "by-name"]
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"}}
    assert [(r[0], r[1]) for r in validate(policy, service)] == [("services", "fail"), ("any-kind", "pass"), ("by-name", "pass")]


def test_a_rule_dict_shared_by_two_policies_takes_each_policys_failure_action() -> None:
    """YAML aliases can put one rule dict in two policies; the failure action cached per rule must still follow the
    policy it runs in."""
    shared = {"name": "labelled", "match": MATCH_POD, "validate": {"pattern": {"metadata": {"labels": {"app": "?*"}}}}}
    enforcing, auditing = cpol(shared, validationFailureAction="Enforce"), cpol(shared, validationFailureAction="Audit")
    assert enforcing.rules[0].raw is shared and auditing.rules[0].raw is shared
    engine = Engine()
    for _ in range(2):  # the second round is served from the cache
        for policy, expected in ((enforcing, "Enforce"), (auditing, "Audit")):
            response = engine.validate(engine.policy_context(policy, Request(resource=pod())))
            assert [(r.name, r.status, r.failure_action) for r in response.rules] == [("labelled", "fail", expected)]


def test_patterns_with_request_data_substituted_are_not_kept_between_reviews() -> None:
    """A policy's own patterns are compiled once and kept; a pattern that had request data substituted into it is
    new on every review and must not be held (memory stays bounded by the policies, not by the traffic)."""
    from stockade.engine.pattern import validate as pattern_walk

    rule = {"name": "own-name", "match": MATCH_POD, "validate": {"pattern": {"metadata": {"labels": {"copy": "{{ request.object.metadata.name }}"}}}}}
    policy = cpol(rule)
    before = len(pattern_walk._TREES)
    for index in range(50):
        name = f"web-{index}"
        assert validate(policy, pod(name=name, labels={"copy": name}))[0][1] == "pass"
    assert len(pattern_walk._TREES) == before
    static = cpol({"name": "static", "match": MATCH_POD, "validate": {"pattern": {"metadata": {"labels": {"app": "?*"}}}}})
    for _ in range(3):
        assert validate(static, pod(labels={"app": "web"}))[0][1] == "pass"
    assert len(pattern_walk._TREES) == before + 1  # the pattern, once


def test_a_policy_view_with_some_rules_runs_only_those_and_leaves_the_policy_alone() -> None:
    """Controllers apply a policy's generate or mutate-existing rules apart from its others (``with_rules``)."""
    first = {"name": "first", "match": MATCH_POD, "validate": {"pattern": {"metadata": {"name": "web"}}}}
    second = {"name": "second", "match": MATCH_POD, "validate": {"pattern": {"metadata": {"name": "other"}}}}
    policy = cpol(first, second, applyRules="One")
    names = [rule.name for rule in policy.rules]
    view = policy.with_rules([rule for rule in policy.rules if rule.name == "second"])
    assert view.raw is policy.raw and view.key == policy.key
    assert [(r[0], r[1]) for r in validate(view, pod())] == [("second", "fail")]
    assert [rule.name for rule in policy.rules] == names
    assert [(r[0], r[1]) for r in validate(policy, pod())] == [("first", "pass")]  # applyRules: One stops there


def failure_actions(policy: KyvernoPolicy, resource: dict[str, Any], labels: dict[str, str]) -> list[str]:
    engine = Engine()
    response = engine.validate(engine.policy_context(policy, Request(resource=resource, namespace_labels=labels)))
    return [r.failure_action for r in response.rules]


def test_rule_failure_action_overrides_select_namespaces_by_label() -> None:
    """Kyverno e2e enforce-validate-labeled-action-override: a rule's ``failureActionOverrides`` entry with a
    namespaceSelector turns its Enforce into Audit in namespaces with that label, and only there."""
    deny = {"conditions": {"any": [{"key": "{{ request.object.metadata.labels.foo || '' }}", "operator": "NotEquals", "value": "bar"}]}}
    override = {"action": "Audit", "namespaceSelector": {"matchExpressions": [{"key": "kyverno-audit", "operator": "In", "values": ["true"]}]}}
    policy = cpol({"name": "check-labels", "match": MATCH_POD, "validate": {"failureAction": "Enforce", "failureActionOverrides": [override], "deny": deny}})
    bad = pod(labels={"foo": "bad"}, namespace="labeled")
    assert failure_actions(policy, bad, {"kyverno-audit": "true"}) == ["Audit"]
    assert failure_actions(policy, bad, {"kubernetes.io/metadata.name": "labeled"}) == ["Enforce"]


def test_first_matching_policy_override_wins_and_a_rule_action_outranks_it() -> None:
    """Kyverno resolves the rule's own action before the policy's overrides, and takes the first matching override."""
    rule = {"name": "r", "match": MATCH_POD, "validate": {"pattern": {"metadata": {"name": "x"}}}}
    overrides = [{"action": "Enforce", "namespaces": ["team-*"]}, {"action": "Audit", "namespaces": ["team-a"]}]
    policy = cpol(rule, validationFailureAction="Audit", validationFailureActionOverrides=overrides)
    assert failure_actions(policy, pod(namespace="team-a"), {}) == ["Enforce"]
    assert failure_actions(policy, pod(namespace="other"), {}) == ["Audit"]
    with_own = cpol({**rule, "validate": {**rule["validate"], "failureAction": "Audit"}}, validationFailureActionOverrides=overrides)
    assert failure_actions(with_own, pod(namespace="team-a"), {}) == ["Audit"]
