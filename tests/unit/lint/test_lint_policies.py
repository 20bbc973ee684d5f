"""Static policy checks: each test feeds one common authoring mistake and expects the field and reason named."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from stockade.lint.policies import is_policy_document, validate_policy_document


def cluster_policy(rule: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    rule = rule or {
        "name": "check-team",
        "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
        "validate": {"message": "team label required", "pattern": {"metadata": {"labels": {"team": "?*"}}}},
    }
    return {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "require-team"}, "spec": {"rules": [rule], **spec}}


def with_rule(**changes: Any) -> dict[str, Any]:
    policy = cluster_policy()
    rule = policy["spec"]["rules"][0]
    for key, value in changes.items():
        if value is None:
            rule.pop(key, None)
        else:
            rule[key] = value
    return policy


def errors_of(document: dict[str, Any]) -> list[str]:
    return [str(problem) for problem in validate_policy_document(document).errors]


def test_a_valid_policy_passes() -> None:
    result = validate_policy_document(cluster_policy())
    assert result.ok and result.errors == [] and result.message() == ""


def test_bad_jmespath_in_a_variable_names_rule_and_field() -> None:
    policy = with_rule(validate={"message": "name {{ request.object.metadata.name[ }}", "pattern": {"metadata": {"name": "?*"}}})
    result = validate_policy_document(policy)
    assert not result.ok
    message = result.message()
    assert message.startswith('ClusterPolicy "require-team" is invalid: rule "check-team": spec.rules[0].validate.message: invalid JMESPath')
    assert "request.object.metadata.name[" in message


def test_unknown_jmespath_function_is_rejected() -> None:
    policy = with_rule(validate={"deny": {"conditions": {"any": [{"key": "{{ lenght(request.object.spec.containers) }}", "operator": "GreaterThan", "value": 1}]}}})
    assert any("unknown function: lenght()" in e for e in errors_of(policy))


def test_unknown_condition_operator_names_the_path() -> None:
    policy = with_rule(validate={"deny": {"conditions": {"all": [{"key": "a", "operator": "Equalz", "value": "b"}]}}})
    (error,) = errors_of(policy)
    assert "spec.rules[0].validate.deny.conditions.all[0].operator: entered value of `operator` is invalid" in error


def test_condition_without_key_is_rejected() -> None:
    policy = with_rule(preconditions={"any": [{"operator": "Equals", "value": "x"}]})
    assert any("preconditions.any[0]" in e and "missing or misspelled" in e for e in errors_of(policy))


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"validate": None}, "No operation defined in the rule 'check-team'"),
        ({"mutate": {"patchStrategicMerge": {"metadata": {"labels": {"a": "b"}}}}}, "Multiple operations defined in the rule 'check-team'"),
    ],
)
def test_rule_needs_exactly_one_type(change: dict[str, Any], expected: str) -> None:
    assert any(expected in e for e in errors_of(with_rule(**change)))


def test_duplicate_rule_names() -> None:
    policy = cluster_policy()
    policy["spec"]["rules"].append(copy.deepcopy(policy["spec"]["rules"][0]))
    assert any("spec.rules[1].name: Duplicate rule name: 'check-team'" in e for e in errors_of(policy))


def test_validate_with_two_validation_types() -> None:
    policy = with_rule(validate={"pattern": {"metadata": {}}, "deny": {}})
    assert any("only one of pattern, anyPattern, deny, foreach, cel can be specified" in e for e in errors_of(policy))


def test_malformed_anchor_in_pattern() -> None:
    policy = with_rule(validate={"pattern": {"spec": {"=(hostNetwork": False}}})
    (error,) = errors_of(policy)
    assert "spec.rules[0].validate.pattern.spec.=(hostNetwork: malformed anchor" in error


def test_add_anchor_is_not_allowed_in_validate_patterns() -> None:
    policy = with_rule(validate={"pattern": {"metadata": {"+(labels)": {"a": "b"}}}})
    assert any("only allowed in mutate patterns" in e for e in errors_of(policy))


def test_variables_are_not_allowed_in_match() -> None:
    policy = with_rule(match={"any": [{"resources": {"kinds": ["Pod"], "names": ["{{ request.object.metadata.name }}"]}}]})
    assert any('match.any[0].resources.names[0]: rule "check-team" should not have variables in match section' in e for e in errors_of(policy))


def test_any_and_all_together() -> None:
    policy = with_rule(match={"any": [{"resources": {"kinds": ["Pod"]}}], "all": [{"resources": {"kinds": ["Pod"]}}]})
    assert any("Can't specify any and all together" in e for e in errors_of(policy))


def test_missing_match() -> None:
    assert any("spec.rules[0].match: match resources not specified" in e for e in errors_of(with_rule(match=None)))


def test_json_patch_path_must_start_with_slash() -> None:
    policy = with_rule(validate=None, mutate={"patchesJson6902": "- op: add\n  path: metadata/labels/a\n  value: b\n"})
    assert any("patchesJson6902[0].path: path must begin with a forward slash" in e for e in errors_of(policy))


def test_context_entry_names_reserved_as_kyverno_reserves_them() -> None:
    """Kyverno e2e invalid-jmespath-variable-substitution names a context entry ``image``: Kyverno reserves only
    images, request, serviceAccountName(space), element and elementIndex (and dotted paths under them)."""
    allowed = with_rule(context=[{"name": "image", "variable": {"value": 1}}, {"name": "target", "variable": {"value": 1}}])
    assert not any("pre-defined variable" in e for e in errors_of(allowed))
    dotted = with_rule(context=[{"name": "element.x", "variable": {"value": 1}}])
    assert any("entry name element.x is invalid as it conflicts with a pre-defined variable element" in e for e in errors_of(dotted))


def test_context_entry_problems() -> None:
    policy = with_rule(context=[{"name": "request", "variable": {"value": 1}}, {"name": "cm", "configMap": {"name": "x"}}, {"name": "v", "variable": {"jmesPath": "a.["}}])
    errors = errors_of(policy)
    assert any("context[0].name: entry name request is invalid as it conflicts with a pre-defined variable request" in e for e in errors)
    assert any("context[1].configMap.namespace: a namespace is required" in e for e in errors)
    assert any("context[2].variable.jmesPath: failed to parse JMESPath a.[: " in e for e in errors)


def test_cel_rule_expression_must_compile() -> None:
    policy = with_rule(validate={"cel": {"expressions": [{"expression": "object.spec.replicas <"}]}})
    (error,) = errors_of(policy)
    assert "spec.rules[0].validate.cel.expressions[0].expression: CEL expression 'object.spec.replicas <' does not compile" in error


def test_timeout_out_of_range_and_unknown_failure_policy() -> None:
    errors = errors_of(cluster_policy(webhookTimeoutSeconds=45, failurePolicy="Sometimes"))
    assert any("spec.webhookTimeoutSeconds: the timeout value must be between 1 and 30 seconds" in e for e in errors)
    assert any("spec.failurePolicy: unsupported value 'Sometimes'" in e for e in errors)


def test_cluster_policy_with_namespace() -> None:
    policy = cluster_policy()
    policy["metadata"]["namespace"] = "default"
    assert errors_of(policy) == ["metadata.namespace: A clusterpolicy should not have the namespace defined"]


def test_several_errors_are_listed_one_per_line() -> None:
    policy = cluster_policy(webhookTimeoutSeconds=0)
    policy["metadata"]["namespace"] = "x"
    message = validate_policy_document(policy).message()
    assert message.startswith('ClusterPolicy "require-team" is invalid:\n- ') and message.count("\n- ") == 2


def test_escaped_variables_are_not_checked() -> None:
    policy = with_rule(validate={"message": r"literal \{{ not[ a variable }}", "pattern": {"metadata": {"name": "?*"}}})
    assert errors_of(policy) == []


def test_policy_exception_requires_exceptions_and_match() -> None:
    document = {"apiVersion": "kyverno.io/v2", "kind": "PolicyException", "metadata": {"name": "e", "namespace": "x"}, "spec": {"exceptions": [{"policyName": "p"}]}}
    errors = errors_of(document)
    assert any("spec.exceptions[0].ruleNames" in e for e in errors)
    assert any("spec.match: match resources not specified" in e for e in errors)


def validating_policy(expression: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policies.kyverno.io/v1",
        "kind": "ValidatingPolicy",
        "metadata": {"name": "vp"},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
            "validations": [{"expression": expression}],
            **spec,
        },
    }


def test_validating_policy_cel_compile_error_names_the_field() -> None:
    (error,) = errors_of(validating_policy("objekt.metadata.name != ''"))
    assert error.startswith("spec.validations[0].expression: CEL expression")
    assert "undeclared reference to 'objekt.metadata.name'" in error


def test_validating_policy_valid_and_bad_actions() -> None:
    assert errors_of(validating_policy("object.metadata.name != ''")) == []
    errors = errors_of(validating_policy("true", validationActions=["Deny", "Warn", "Block"]))
    assert any("unsupported value(s) 'Block'" in e for e in errors)
    assert any("Deny and Warn may not be used together" in e for e in errors)


def test_unknown_kinds_are_not_judged() -> None:
    document = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "{{ broken[ }}"}}
    assert not is_policy_document(document)
    assert validate_policy_document(document).ok


@pytest.mark.parametrize(
    ("rule_type", "body", "field"),
    [
        ("validate", {"message": "m", "foreach": 1}, "validate.foreach"),
        ("validate", {"message": "m", "foreach": [{"list": "request.object.spec.containers", "foreach": 2}]}, "validate.foreach[0].foreach"),
        ("mutate", {"foreach": "x"}, "mutate.foreach"),
        ("mutate", {"targets": 3, "patchStrategicMerge": {"metadata": {"labels": {"a": "b"}}}}, "mutate.targets"),
    ],
)
def test_foreach_and_targets_that_are_not_lists_are_named(rule_type: str, body: dict[str, Any], field: str) -> None:
    """Found by the fuzzer: ``foreach: 1`` raised TypeError instead of a problem naming the field."""
    changes: dict[str, Any] = {"validate": None, rule_type: body}
    errors = errors_of(with_rule(**changes))
    assert any(field in error and "must be a list" in error for error in errors), errors


# -- Kyverno's background-mode and wildcard checks (pkg/validation/policy: containsUserVariables, validateWildcard) --
BACKGROUND_PREFIX = "only select variables are allowed in background mode. Set spec.background=false to disable background mode for this policy rule: "


def test_background_policy_matching_by_roles_is_rejected() -> None:
    """A background scan has no requester: Kyverno rejects match/exclude by roles unless background is false."""
    policy = with_rule(match={"any": [{"resources": {"kinds": ["Pod"]}, "roles": ["default:foo-role"]}]})
    assert errors_of(policy) == [
        f"spec.rules[0].match.any[0].roles: {BACKGROUND_PREFIX}invalid variable used at path: spec/rules[0]/match/any[0]/roles"
    ]
    excluded = with_rule(exclude={"clusterRoles": ["admin"]})
    assert errors_of(excluded) == [
        f"spec.rules[0].exclude.clusterRoles: {BACKGROUND_PREFIX}invalid variable used at path: spec/rules[0]/exclude/clusterRoles"
    ]
    policy["spec"]["background"] = False
    assert errors_of(policy) == []


@pytest.mark.parametrize("variable", ["{{request.userInfo}}", "{{ request.userInfo.username }}", "{{request.roles}}", "{{serviceAccountName}}"])
def test_background_policy_with_requester_variables_is_rejected(variable: str) -> None:
    policy = with_rule(validate={"message": "m", "pattern": {"metadata": {"labels": {"owner": variable}}}})
    assert errors_of(policy) == [f"spec: {BACKGROUND_PREFIX}variable {variable} is not allowed"]
    policy["spec"]["background"] = False
    assert errors_of(policy) == []


def test_object_fields_named_like_requester_variables_are_allowed() -> None:
    policy = with_rule(validate={"message": "{{ request.object.spec.serviceAccountName }}", "deny": {}})
    assert errors_of(policy) == []


def test_mutate_existing_policies_may_use_requester_variables() -> None:
    rule = {
        "name": "m",
        "match": {"any": [{"resources": {"kinds": ["ConfigMap"]}}]},
        "mutate": {"targets": [{"apiVersion": "v1", "kind": "Secret", "name": "s"}], "patchStrategicMerge": {"metadata": {"labels": {"by": "{{ request.userInfo.username }}"}}}},
    }
    assert errors_of(cluster_policy(rule)) == []


def test_wildcard_kind_rules_are_limited_like_kyverno() -> None:
    """`kinds: ["*"]`: no background, no other kinds, no verifyImages/generate/foreach, metadata-only patterns."""
    verify = {
        "name": "verify-image",
        "match": {"any": [{"resources": {"kinds": ["*"]}}]},
        "verifyImages": [{"imageReferences": ["ghcr.io/kyverno/*"], "attestors": [{"entries": [{"keys": {"publicKeys": "k"}}]}]}],
    }
    assert errors_of(cluster_policy(verify, background=False)) == [
        'rule "verify-image": spec.rules[0].match.any[0].resources.kinds: wildcard policy does not support rule type'
    ]
    metadata_only = {"name": "r", "match": {"any": [{"resources": {"kinds": ["*"]}}]}, "validate": {"pattern": {"metadata": {"labels": {"a": "?*"}}}}}
    assert errors_of(cluster_policy(metadata_only, background=False)) == []
    assert "wildcard policy not allowed in background mode" in errors_of(cluster_policy(metadata_only))[0]
    spec_pattern = copy.deepcopy(metadata_only)
    spec_pattern["validate"]["pattern"] = {"spec": {"x": "y"}}
    assert errors_of(cluster_policy(spec_pattern, background=False)) == [
        'rule "r": spec.rules[0].match.any[0].resources.kinds: policy can only deal with the metadata field of the resource if the rule does not match any kind'
    ]


CLEANUP_POLICY: dict[str, Any] = {
    "apiVersion": "kyverno.io/v2",
    "kind": "ClusterCleanupPolicy",
    "metadata": {"name": "cleanup-pod"},
    "spec": {
        "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
        "conditions": {"all": [{"key": "{{ target.metadata.name }}", "operator": "Equals", "value": "example"}]},
        "schedule": "*/1 * * * *",
    },
}


def test_a_valid_cleanup_policy_passes() -> None:
    assert is_policy_document(CLEANUP_POLICY)
    assert validate_policy_document(CLEANUP_POLICY).errors == []


@pytest.mark.parametrize(
    ("context_entry", "expected"),
    [
        ({"name": "imageData", "imageRegistry": {"reference": "ghcr.io/kyverno/kyverno"}}, "ImageRegistry is not allowed in CleanUp Policy"),
        ({"name": "configData", "configMap": {"name": "cm", "namespace": "default"}}, "ConfigMap is not allowed in CleanUp Policy"),
    ],
)
def test_cleanup_policies_reject_configmap_and_image_registry_context(context_entry: dict[str, Any], expected: str) -> None:
    """Kyverno's CleanupPolicySpec.Validate (the cleanup/validation/not-supported-attributes-in-context e2e test)."""
    policy = copy.deepcopy(CLEANUP_POLICY)
    policy["spec"]["context"] = [{"name": "ok", "variable": {"value": "x"}}, context_entry]
    (problem,) = validate_policy_document(policy).errors
    assert problem.path.startswith("spec.context[1].") and problem.message == expected


@pytest.mark.parametrize(
    "user_info",
    [{"subjects": [{"kind": "User", "name": "chip"}]}, {"roles": ["admin"]}, {"clusterRoles": ["clusteradmin"]}],
)
def test_cleanup_policies_reject_user_info_in_match(user_info: dict[str, Any]) -> None:
    """A scheduled deletion has no requesting user: Kyverno rejects subjects/roles/clusterRoles (no-user-info-in-match)."""
    policy = copy.deepcopy(CLEANUP_POLICY)
    policy["kind"] = "CleanupPolicy"
    policy["spec"]["match"]["any"][0].update(user_info)
    (problem,) = validate_policy_document(policy).errors
    assert problem.path == f"spec.match.any[0].{next(iter(user_info))}"
    assert "Usage of user info is forbidden" in problem.message


def test_cleanup_policy_needs_a_schedule() -> None:
    policy = copy.deepcopy(CLEANUP_POLICY)
    del policy["spec"]["schedule"]
    assert [problem.path for problem in validate_policy_document(policy).errors] == ["spec.schedule"]


def _namespaced_validating_policy(expression: str, kind: str = "NamespacedValidatingPolicy") -> dict[str, Any]:
    return {
        "apiVersion": "policies.kyverno.io/v1beta1",
        "kind": kind,
        "metadata": {"name": "probe", "namespace": "team-a"} if kind.startswith("Namespaced") else {"name": "probe"},
        "spec": {
            "validationActions": ["Deny"],
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]},
            "variables": [{"name": "probe", "expression": expression}],
            "validations": [{"expression": "true"}],
        },
    }


@pytest.mark.parametrize(
    ("expression", "library"),
    [('http.Get("http://svc.team-a/")', "http"), ('globalContext.Get("entry", "")', "globalContext")],
)
def test_namespaced_cel_policies_may_not_use_http_or_global_context(expression: str, library: str) -> None:
    """Kyverno rejects http.* and globalContext.* in namespaced policies (e2e cel/http: 'not allowed in namespaced policies')."""
    (problem,) = validate_policy_document(_namespaced_validating_policy(expression)).errors
    assert problem.path == "spec.variables[0].expression"
    hint = "; set --allow-http-in-namespaced-policies to enable" if library == "http" else ""
    assert problem.message == f"{library}.* is not allowed in namespaced policies{hint}"
    # the cluster-wide kind may use them, and a field or string of that name is not the library
    assert validate_policy_document(_namespaced_validating_policy(expression, "ValidatingPolicy")).errors == []
    assert validate_policy_document(_namespaced_validating_policy(f'object.{library} == "{library}.Get"')).errors == []


@pytest.mark.parametrize("kind", ["NamespacedValidatingPolicy", "NamespacedMutatingPolicy", "NamespacedGeneratingPolicy", "NamespacedDeletingPolicy"])
def test_the_server_may_allow_http_in_namespaced_policies_but_never_global_context(kind: str) -> None:
    """Kyverno's --allowHTTPInNamespacedPolicies lifts the http.* refusal for every namespaced kind; globalContext.*
    stays refused (no flag lifts it)."""
    policy = _namespaced_validating_policy('http.Get("http://svc.team-a/")', kind)
    refused = [p.message for p in validate_policy_document(policy).errors if "http" in p.message]
    assert refused == ["http.* is not allowed in namespaced policies; set --allow-http-in-namespaced-policies to enable"]
    assert [p for p in validate_policy_document(policy, allow_namespaced_http=True).errors if "http" in p.message] == []
    both = _namespaced_validating_policy('http.Get("http://svc.team-a/") == globalContext.Get("entry", "")', kind)
    messages = [p.message for p in validate_policy_document(both, allow_namespaced_http=True).errors]
    assert "globalContext.* is not allowed in namespaced policies" in messages
    assert not any(m.startswith("http.*") for m in messages)


def _mutating_policy(evaluation: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]},
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[]"}}],
    }
    if evaluation is not None:
        spec["evaluation"] = evaluation
    return {"apiVersion": "policies.kyverno.io/v1beta1", "kind": "MutatingPolicy", "metadata": {"name": "m"}, "spec": spec}


@pytest.mark.parametrize(
    ("evaluation", "rejected"),
    [
        (None, False),
        ({"admission": {"enabled": False}, "mutateExisting": {"enabled": True}}, False),
        ({"mutateExisting": {"enabled": False}}, False),  # admission stays on
        ({"admission": {"enabled": False}}, True),  # mutateExisting is off unless enabled
        ({"admission": {"enabled": False}, "mutateExisting": {"enabled": False}}, True),
    ],
)
def test_mutating_policy_needs_an_evaluation_mode(evaluation: dict[str, Any] | None, rejected: bool) -> None:
    """Kyverno's mpol validation forbids disabling both admission and mutateExisting (kyverno#16090)."""
    result = validate_policy_document(_mutating_policy(evaluation))
    problems = [str(p) for p in result.errors if "spec.evaluation" in str(p)]
    assert bool(problems) == rejected, result.errors
    if rejected:
        assert "disabling both admission and mutateExisting evaluation modes is not allowed" in problems[0]


@pytest.mark.parametrize("where", ["rule", "policy"])
def test_mutate_existing_on_policy_update_needs_targets(where: str) -> None:
    """Kyverno's validateMutateTargets: mutateExistingOnPolicyUpdate without mutate.targets is rejected."""
    rule: dict[str, Any] = {
        "name": "r",
        "match": {"any": [{"resources": {"kinds": ["ConfigMap"]}}]},
        "mutate": {"patchStrategicMerge": {"metadata": {"labels": {"a": "b"}}}},
    }
    spec: dict[str, Any] = {"rules": [rule]}
    if where == "rule":
        rule["mutate"]["mutateExistingOnPolicyUpdate"] = True
    else:
        spec["mutateExistingOnPolicyUpdate"] = True
    document = {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": spec}
    problems = [str(p) for p in validate_policy_document(document).errors]
    assert any("rules[0].mutate.targets has to be specified when mutateExistingOnPolicyUpdate is set" in p for p in problems), problems
    rule["mutate"]["targets"] = [{"apiVersion": "v1", "kind": "Secret", "name": "s"}]
    assert not [p for p in validate_policy_document(document).errors if "mutateExistingOnPolicyUpdate" in str(p)]


MUTATE_RULE = {"name": "add", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "mutate": {"patchStrategicMerge": {"metadata": {"labels": {"a": "b"}}}}}


def test_admission_off_is_only_for_validation_policies() -> None:
    """Kyverno: "disabling admission processing is only allowed with validation policies" (mutate, generate and
    verifyImages act at admission); a validate policy may run in the background only."""
    assert errors_of(cluster_policy(admission=False, background=True)) == []
    assert any("only allowed with validation policies" in e for e in errors_of(cluster_policy(MUTATE_RULE, admission=False, background=True)))


def test_cel_preconditions_need_a_validate_cel_rule() -> None:
    precondition = [{"name": "labelled", "expression": "has(object.metadata.labels)"}]
    assert any("celPrecondition can only be used with validate.cel" in e for e in errors_of(with_rule(celPreconditions=precondition)))
    cel = {"cel": {"expressions": [{"expression": "has(object.metadata.labels)"}]}}
    assert errors_of(with_rule(celPreconditions=precondition, validate=cel)) == []


def test_a_subject_kind_must_be_user_group_or_service_account() -> None:
    """Kyverno #7052: a subject of kind Foo can never match a request, so the policy is refused."""
    match = {"any": [{"resources": {"kinds": ["ConfigMap"]}, "subjects": [{"kind": "Foo", "name": "foo"}]}]}
    policy = with_rule(match=match)
    policy["spec"]["background"] = False  # requester filters are admission-only
    assert any("subjects[0].kind" in e for e in errors_of(policy))
    match["any"][0]["subjects"] = [{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}]
    assert errors_of(policy) == []


def test_pod_security_exception_controls_are_checked_as_kyverno_checks_them() -> None:
    exception = {
        "apiVersion": "kyverno.io/v2",
        "kind": "PolicyException",
        "metadata": {"name": "psa", "namespace": "default"},
        "spec": {
            "exceptions": [{"policyName": "psa", "ruleNames": ["restricted"]}],
            "match": {"all": [{"resources": {"kinds": ["Pod"]}}]},
            "podSecurity": [{"controlName": "Capabilities"}, {"controlName": "Host Namespaces"}],
        },
    }
    assert errors_of(exception) == ["spec.podSecurity[0].controlName: exclude.images must be specified for the container level control"]
    exception["spec"]["podSecurity"] = [{"controlName": "Capabilities", "images": ["nginx"], "restrictedField": "spec.containers[*].securityContext.capabilities.add"}]
    assert errors_of(exception) == ["spec.podSecurity[0].values: values is required"]


def test_validating_policy_without_resource_rules_is_refused_with_kyvernos_bare_field_error() -> None:
    """Kyverno e2e validating-policies/validation-checks/missing-match-constraints: the denial is the field error
    alone (no header), also sent as a warning; policies of other evaluation modes need no matchConstraints."""
    from stockade.lint.policies import validate_policy_document

    policy = {"apiVersion": "policies.kyverno.io/v1beta1", "kind": "ValidatingPolicy", "metadata": {"name": "p"}, "spec": {"validations": [{"expression": "true"}]}}
    result = validate_policy_document(policy)
    expected = "spec.matchConstraints: Required value: a matchConstraints with at least one resource rule is required"
    assert result.message() == expected and result.warnings == [expected]
    json_mode = {**policy, "spec": {**policy["spec"], "evaluation": {"mode": "JSON"}}}
    assert validate_policy_document(json_mode).ok


@pytest.mark.parametrize(
    ("kind", "spec"),
    [
        ("GeneratingPolicy", {"generate": [{"expression": "true"}]}),
        ("NamespacedGeneratingPolicy", {"generate": [{"expression": "true"}]}),
        ("MutatingPolicy", {"mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object{}"}}]}),
        ("DeletingPolicy", {"conditions": [{"name": "c", "expression": "true"}], "schedule": "*/5 * * * *"}),
    ],
)
def test_other_cel_kinds_without_resource_rules_are_refused_like_validating_policies(kind: str, spec: dict[str, Any]) -> None:
    """Kyverno's gpol/mpol/dpol validation adds the same Required field error (generating-policies/validate/
    missing-match-constraints expects kubectl's Warning line and the bare denial)."""
    from stockade.lint.policies import validate_policy_document

    metadata = {"name": "p", **({"namespace": "team"} if kind.startswith("Namespaced") else {})}
    result = validate_policy_document({"apiVersion": "policies.kyverno.io/v1beta1", "kind": kind, "metadata": metadata, "spec": spec})
    expected = "spec.matchConstraints: Required value: a matchConstraints with at least one resource rule is required"
    assert result.message() == expected and result.warnings == [expected]


@pytest.mark.parametrize(
    ("kind", "metadata", "spec", "path"),
    [
        ("DeletingPolicy", {"name": "p"}, {"conditions": [{"name": "c", "expression": "true"}], "schedule": "*/5 * * * *"}, "spec.matchConstraints"),
        ("ValidatingPolicy", {"name": "p"}, {"validations": [{"expression": "true"}]}, "spec.matchConstraints"),
        (
            "DeletingPolicy",
            {"name": "p"},
            {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
             "conditions": [{"name": "c", "expression": "true"}], "schedule": "every day"},
            "spec.schedule",
        ),
        (
            "NamespacedValidatingPolicy",
            {"name": "p", "namespace": "team"},
            {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
             "validations": [{"expression": "globalContext.Get('x', '') == ''"}]},
            "spec.validations[0].expression",
        ),
    ],
)
def test_checks_only_kyvernos_policy_webhook_makes_are_warnings_offline(kind: str, metadata: dict[str, Any], spec: dict[str, Any], path: str) -> None:
    """Kyverno's CLI (`test`, `apply`) loads and compiles the CEL policy kinds but never runs their webhook validation
    (pkg/cel/policies/*/validate.go is called from pkg/webhooks/policy only): the missing matchConstraints, the cron
    schedule and the namespaced-library rule refuse a policy at admission and in lint, and are warnings offline."""
    from stockade.lint.check import Code, Severity, check_policy

    document = {"apiVersion": "policies.kyverno.io/v1beta1", "kind": kind, "metadata": metadata, "spec": spec}
    refused = [f for f in check_policy(document, admission=True) if f.severity is Severity.ERROR]
    assert [f.path for f in refused] == [path]
    offline = check_policy(document, offline=True)
    assert not [f for f in offline if f.severity is Severity.ERROR]
    warned = [f for f in offline if f.code is Code.WEBHOOK_ONLY]
    kyverno_warning = [f for f in offline if f.code is Code.POLICY_WARNING]
    assert len(warned) + len(kyverno_warning) >= 1 and all(f.path == path for f in warned)


def test_compile_errors_of_cel_policies_still_refuse_offline() -> None:
    """What Kyverno's CLI does check for the CEL kinds is the compile: an undeclared reference refuses the policy."""
    from stockade.lint.check import Severity, check_policy

    document = {
        "apiVersion": "policies.kyverno.io/v1beta1",
        "kind": "ValidatingPolicy",
        "metadata": {"name": "p"},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
            "validations": [{"expression": "objekt.metadata.name == 'x'"}],
        },
    }
    assert [f.path for f in check_policy(document, offline=True) if f.severity is Severity.ERROR] == ["spec.validations[0].expression"]


@pytest.mark.parametrize(
    ("exclude", "path", "message"),
    [
        ({"controlName": "/proc Mount Type", "images": ["nginx"], "restrictedField": "spec.containers[*].securityContext.procMount"}, "values", "values is required"),
        ({"controlName": "/proc Mount Type", "images": ["nginx"], "values": ["bar"]}, "restrictedField", "restrictedField is required"),
    ],
)
def test_pod_security_exclusion_errors_are_named_from_the_rule_as_kyverno_does(exclude: dict[str, Any], path: str, message: str) -> None:
    """Kyverno's Rule.ValidatePSaControlNames builds the path from the rule, without `validate`
    (e2e policy-validation/cluster-policy/invalid-pod-security-rule greps `spec.rules[0].podSecurity.exclude[0].values`)."""
    policy = {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "psa"},
        "spec": {"rules": [{
            "name": "baseline",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "validate": {"podSecurity": {"level": "baseline", "version": "latest", "exclude": [exclude]}},
        }]},
    }
    result = validate_policy_document(policy)
    assert [(e.path, e.message) for e in result.errors] == [(f"spec.rules[0].podSecurity.exclude[0].{path}", message)]
