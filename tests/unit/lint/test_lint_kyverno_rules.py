"""Kyverno's admission checks beyond the schema (stockade.lint.kyverno_rules), each against a policy that differs from
a valid one only in the field at fault."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from stockade.lint.policies import validate_policy_document

POD_MATCH: dict[str, Any] = {"any": [{"resources": {"kinds": ["Pod"]}}]}


def policy(rule_changes: dict[str, Any] | None = None, kind: str = "ClusterPolicy", **spec: Any) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "name": "check-team",
        "match": copy.deepcopy(POD_MATCH),
        "validate": {"message": "team label required", "pattern": {"metadata": {"labels": {"team": "?*"}}}},
    }
    for key, value in (rule_changes or {}).items():
        if value is None:
            rule.pop(key, None)
        else:
            rule[key] = value
    metadata: dict[str, Any] = {"name": "require-team"}
    if kind == "Policy":
        metadata["namespace"] = "team-a"
    return {"apiVersion": "kyverno.io/v1", "kind": kind, "metadata": metadata, "spec": {"rules": [rule], **spec}}


def problems(document: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p.path, p.message) for p in validate_policy_document(document).errors]


def paths(document: dict[str, Any]) -> list[str]:
    return [path for path, _ in problems(document)]


def test_the_base_policy_is_valid() -> None:
    assert problems(policy()) == []
    assert problems(policy(kind="Policy")) == []


def test_policy_names_are_limited_to_63_characters() -> None:
    document = policy()
    document["metadata"]["name"] = "p" * 64
    assert paths(document) == ["metadata.name"]
    document["metadata"]["name"] = "p" * 63
    assert problems(document) == []


def test_autogen_annotation_all_is_refused() -> None:
    document = policy()
    document["metadata"]["annotations"] = {"pod-policies.kyverno.io/autogen-controllers": "all"}
    assert paths(document) == ["metadata.annotations[pod-policies.kyverno.io/autogen-controllers]"]
    document["metadata"]["annotations"] = {"pod-policies.kyverno.io/autogen-controllers": "Deployment"}
    assert problems(document) == []


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ({"subjects": [{"kind": "User"}]}, "spec.rules[0].match.any[0].subjects[0].name"),
        ({"subjects": [{"kind": "ServiceAccount", "name": "builder"}]}, "spec.rules[0].match.any[0].subjects[0].namespace"),
        ({"roles": ["admin"]}, "spec.rules[0].match.any[0].roles[0]"),
    ],
)
def test_user_info_must_be_complete(extra: dict[str, Any], path: str) -> None:
    match = {"any": [{"resources": {"kinds": ["Pod"]}, **extra}]}
    assert paths(policy({"match": match}, background=False)) == [path]


def test_well_formed_user_info_passes() -> None:
    match = {"any": [{"resources": {"kinds": ["Pod"]}, "roles": ["ns:admin"], "subjects": [{"kind": "ServiceAccount", "name": "b", "namespace": "ci"}]}]}
    assert problems(policy({"match": match}, background=False)) == []


def test_match_filters_need_resources_besides_user_info() -> None:
    match = {"any": [{"subjects": [{"kind": "User", "name": "chip"}]}]}
    assert paths(policy({"match": match}, background=False)) == ["spec.rules[0].match.any[0].resources"]


@pytest.mark.parametrize(
    ("resources", "path"),
    [
        ({"kinds": ["Pod"], "name": "a", "names": ["b"]}, "spec.rules[0].match.any[0].resources"),
        ({"kinds": ["Pod"], "selector": {}}, "spec.rules[0].match.any[0].resources.selector"),
        ({"kinds": ["Pod"], "selector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}, "spec.rules[0].match.any[0].resources.selector"),
        ({"kinds": ["Pod"], "selector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}}, "spec.rules[0].match.any[0].resources.selector"),
        ({"kinds": ["Pod"], "selector": {"matchExpressions": [{"key": "a", "operator": "Near", "values": ["x"]}]}}, "spec.rules[0].match.any[0].resources.selector"),
    ],
)
def test_resource_descriptions_are_checked(resources: dict[str, Any], path: str) -> None:
    assert paths(policy({"match": {"any": [{"resources": resources}]}})) == [path]


def test_wildcard_selectors_are_kyvernos_own_and_pass() -> None:
    resources = {"kinds": ["Pod"], "selector": {"matchLabels": {"app": "*"}}}
    assert problems(policy({"match": {"any": [{"resources": resources}]}})) == []


def test_namespaced_policies_cannot_filter_namespaces() -> None:
    match = {"any": [{"resources": {"kinds": ["Pod"], "namespaces": ["other"]}}]}
    assert paths(policy({"match": match}, kind="Policy")) == ["spec.rules[0].match.any[0].resources.namespaces"]
    assert problems(policy({"match": match})) == []


@pytest.mark.parametrize(
    ("match", "exclude", "empty"),
    [
        (POD_MATCH, POD_MATCH, True),
        (POD_MATCH, {"any": [{"resources": {"kinds": ["Pod"], "namespaces": ["kube-system"]}}]}, False),
        ({"resources": {"kinds": ["Pod"]}}, {"resources": {"kinds": ["Pod"]}}, True),
        ({"resources": {"kinds": ["Pod", "Service"]}}, {"resources": {"kinds": ["Pod"]}}, False),
        ({"resources": {"kinds": ["Pod"], "names": ["web-1"]}}, {"resources": {"names": ["web-*"]}}, True),
        ({"resources": {"kinds": ["Pod"], "selector": {"matchLabels": {"a": "b"}}}}, {"resources": {"kinds": ["Pod"]}}, False),
    ],
)
def test_exclude_that_removes_every_match_is_refused(match: dict[str, Any], exclude: dict[str, Any], empty: bool) -> None:
    found = [p for p in paths(policy({"match": copy.deepcopy(match), "exclude": copy.deepcopy(exclude)})) if p == "spec.rules[0]"]
    assert bool(found) is empty


def test_element_variables_only_inside_foreach() -> None:
    outside = policy({"validate": {"message": "{{ element.name }}", "pattern": {"metadata": {"labels": {"team": "?*"}}}}})
    assert paths(outside) == ["spec.rules[0].validate.message"]
    inside = policy({"validate": {"foreach": [{"list": "request.object.spec.containers", "deny": {"conditions": {"any": [{"key": "{{ element.name }}", "operator": "Equals", "value": "x"}]}}}]}})
    assert problems(inside) == []


@pytest.mark.parametrize(
    ("condition", "path"),
    [
        ({"key": "{{ request.operation }}", "operator": "Equals"}, "spec.rules[0].preconditions.all[0].value"),
        ({"key": "{{request.operation}}", "operator": "Equals", "value": "PATCH"}, "spec.rules[0].preconditions.all[0].value"),
        ({"key": "{{request.operation}}", "operator": "AnyIn", "value": ["CREATE", "APPLY"]}, "spec.rules[0].preconditions.all[0].value[1]"),
    ],
)
def test_condition_values(condition: dict[str, Any], path: str) -> None:
    assert paths(policy({"preconditions": {"all": [condition]}})) == [path]


def test_request_operation_may_compare_with_a_variable() -> None:
    condition = {"key": "{{request.operation}}", "operator": "Equals", "value": "{{ op.data.value }}"}
    rule = {"preconditions": {"all": [condition]}, "context": [{"name": "op", "configMap": {"name": "c", "namespace": "d"}}]}
    assert problems(policy(rule)) == []


def test_validate_foreach_needs_exactly_one_check() -> None:
    none = policy({"validate": {"foreach": [{"list": "request.object.spec.containers"}]}})
    assert paths(none) == ["spec.rules[0].validate.foreach[0]"]
    both = {"list": "x", "pattern": {"name": "?*"}, "deny": {}}
    assert paths(policy({"validate": {"foreach": [both]}})) == ["spec.rules[0].validate.foreach[0]"]


def test_mutate_foreach_shapes() -> None:
    mutate_rule = {"validate": None, "mutate": {"foreach": [{"list": "x", "patchStrategicMerge": {"a": 1}, "patchesJson6902": "[]"}]}}
    assert "spec.rules[0].mutate.foreach[0]" in paths(policy(mutate_rule))
    nested = {"validate": None, "mutate": {"foreach": [{"list": "x", "preconditions": {"all": []}, "foreach": [{"list": "y", "patchStrategicMerge": {"a": 1}}]}]}}
    assert paths(policy(nested)) == ["spec.rules[0].mutate.foreach[0]"]
    fine = {"validate": None, "mutate": {"foreach": [{"list": "x", "foreach": [{"list": "y", "patchStrategicMerge": {"a": 1}}]}]}}
    assert problems(policy(fine)) == []


def test_json_patch_operations_that_write_need_a_value() -> None:
    rule = {"validate": None, "mutate": {"patchesJson6902": "- op: add\n  path: /metadata/labels/a\n"}}
    assert paths(policy(rule)) == ["spec.rules[0].mutate.patchesJson6902[0].value"]
    rule = {"validate": None, "mutate": {"patchesJson6902": "- op: remove\n  path: /metadata/labels/a\n"}}
    assert problems(policy(rule)) == []


@pytest.mark.parametrize(
    ("cel", "path"),
    [
        ({"expressions": [{"message": "x"}]}, "spec.rules[0].validate.cel.expressions[0].expression"),
        ({"expressions": [{"expression": "true"}], "paramKind": {"kind": "ConfigMap"}, "paramRef": {"name": "p", "parameterNotFoundAction": "Deny"}}, "spec.rules[0].validate.cel.paramKind.apiVersion"),
        ({"expressions": [{"expression": "true"}], "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"}, "paramRef": {"parameterNotFoundAction": "Deny"}}, "spec.rules[0].validate.cel.paramRef"),
        ({"expressions": [{"expression": "true"}], "auditAnnotations": [{"key": "k"}]}, "spec.rules[0].validate.cel.auditAnnotations[0].valueExpression"),
    ],
)
def test_cel_rule_fields(cel: dict[str, Any], path: str) -> None:
    assert path in paths(policy({"validate": {"cel": cel}}))


def test_generate_needs_api_version_and_no_anchors() -> None:
    generate = {"kind": "ConfigMap", "name": "cm", "namespace": "default", "data": {"(data)": {"a": "b"}}}
    found = paths(policy({"validate": None, "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]}, "generate": generate}))
    assert found == ["spec.rules[0].generate.data.(data)", "spec.rules[0].generate.apiVersion"]


def test_image_extractor_jmespath_with_mutate_digest() -> None:
    rule: dict[str, Any] = {
        "validate": None,
        "imageExtractors": {"Pod": [{"path": "/spec/image", "jmesPath": "trim_prefix(@, 'x')"}]},
        "verifyImages": [{"imageReferences": ["ghcr.io/*"], "mutateDigest": True, "attestors": [{"entries": [{"keys": {"publicKeys": "k"}}]}]}],
    }
    assert paths(policy(rule)) == ["spec.rules[0].imageExtractors"]
    rule["verifyImages"][0]["mutateDigest"] = False
    assert problems(policy(rule)) == []


@pytest.mark.parametrize(
    ("entry", "path"),
    [
        ({"failureAction": "Audit", "mutateDigest": True, "attestors": [{"entries": [{"keys": {"publicKeys": "k"}}]}]}, "spec.rules[0].verifyImages[0].mutateDigest"),
        ({"attestors": [{"count": 2, "entries": [{"keys": {"publicKeys": "k"}}]}]}, "spec.rules[0].verifyImages[0].attestors[0].count"),
        ({"attestors": [{"entries": []}]}, "spec.rules[0].verifyImages[0].attestors[0].entries"),
        ({"attestors": [{"entries": [{"keys": {"publicKeys": "k"}, "certificates": {"cert": "c"}}]}]}, "spec.rules[0].verifyImages[0].attestors[0].entries[0]"),
        ({"attestors": [{"entries": [{"keys": {"signatureAlgorithm": "sha256"}}]}]}, "spec.rules[0].verifyImages[0].attestors[0].entries[0].keys"),
        ({"attestors": [{"entries": [{"keys": {"publicKeys": "k", "signatureAlgorithm": "md5"}}]}]}, "spec.rules[0].verifyImages[0].attestors[0].entries[0].keys.signatureAlgorithm"),
        ({"attestors": [{"entries": [{"certificates": {}}]}]}, "spec.rules[0].verifyImages[0].attestors[0].entries[0].certificates"),
        ({"attestors": [{"entries": [{"keyless": {"subject": "s"}}]}]}, "spec.rules[0].verifyImages[0].attestors[0].entries[0].keyless"),
        ({"type": "Notary", "attestors": [{"entries": [{"keys": {"publicKeys": "k"}}]}]}, "spec.rules[0].verifyImages[0].attestors[0].entries[0].keys"),
    ],
)
def test_verify_images_attestors(entry: dict[str, Any], path: str) -> None:
    rule = {"validate": None, "verifyImages": [{"imageReferences": ["ghcr.io/*"], **entry}]}
    assert paths(policy(rule)) == [path]


def test_keyless_with_rekor_passes() -> None:
    entry = {"imageReferences": ["ghcr.io/*"], "attestors": [{"entries": [{"keyless": {"subject": "s", "rekor": {"url": "https://rekor.sigstore.dev"}}}]}]}
    assert problems(policy({"validate": None, "verifyImages": [entry]})) == []


def test_labels_must_be_strings() -> None:
    rule = {"validate": {"pattern": {"metadata": {"labels": {"replicas": 3}}}}}
    assert paths(policy(rule)) == ["spec.rules[0].validate"]


def test_failure_action_overrides_must_not_overlap() -> None:
    overrides = [{"action": "Enforce", "namespaces": ["prod"]}, {"action": "Audit", "namespaces": ["prod"]}]
    assert paths(policy(validationFailureActionOverrides=overrides)) == ["spec.validationFailureActionOverrides[1].namespaces"]
    overrides = [{"action": "Enforce", "namespaces": ["prod"]}, {"action": "Audit", "namespaces": ["pr*"]}]
    assert paths(policy(validationFailureActionOverrides=overrides)) == ["spec.validationFailureActionOverrides[1].namespaces"]
    overrides = [{"action": "Enforce", "namespaces": ["prod"]}, {"action": "Audit", "namespaces": ["dev*"]}]
    assert problems(policy(validationFailureActionOverrides=overrides)) == []


def test_namespaced_policy_context_and_targets() -> None:
    context = [{"name": "g", "globalReference": {"name": "entry"}}]
    assert paths(policy({"context": context}, kind="Policy")) == ["spec.rules[0].context[0].globalReference"]
    assert problems(policy({"context": context})) == []
    mutate = {"targets": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": "elsewhere"}], "patchStrategicMerge": {"metadata": {"labels": {"a": "b"}}}}
    assert paths(policy({"validate": None, "mutate": mutate}, kind="Policy")) == ["spec.rules[0].mutate.targets[0].namespace"]


def test_image_registry_reference_must_parse() -> None:
    context = [{"name": "img", "imageRegistry": {"reference": "Bad Reference!"}}]
    assert paths(policy({"context": context})) == ["spec.rules[0].context[0].imageRegistry.reference"]
    context = [{"name": "img", "imageRegistry": {"reference": "{{ request.object.spec.image }}"}}]
    assert problems(policy({"context": context})) == []


# -- cleanup policies ------------------------------------------------------------------------------------------------
CLEANUP: dict[str, Any] = {
    "apiVersion": "kyverno.io/v2",
    "kind": "ClusterCleanupPolicy",
    "metadata": {"name": "cleanup"},
    "spec": {"match": copy.deepcopy(POD_MATCH), "schedule": "*/5 * * * *"},
}


@pytest.mark.parametrize(("schedule", "valid"), [("*/5 * * * *", True), ("@hourly", True), ("@every 1h30m", True), ("CRON_TZ=UTC 0 * * * *", True), ("61 * * * *", False), ("* * *", False), ("@every soon", False)])
def test_cleanup_schedule_must_be_cron(schedule: str, valid: bool) -> None:
    document = copy.deepcopy(CLEANUP)
    document["spec"]["schedule"] = schedule
    assert paths(document) == ([] if valid else ["spec.schedule"])


def test_cleanup_exclude_of_everything_is_refused() -> None:
    document = copy.deepcopy(CLEANUP)
    document["spec"]["exclude"] = copy.deepcopy(POD_MATCH)
    assert paths(document) == ["spec"]


def test_namespaced_cleanup_cannot_filter_namespaces() -> None:
    document = copy.deepcopy(CLEANUP)
    document["kind"] = "CleanupPolicy"
    document["spec"]["match"]["any"][0]["resources"]["namespaces"] = ["x"]
    assert paths(document) == ["spec.match.any[0].resources.namespaces"]


# -- GlobalContextEntry ----------------------------------------------------------------------------------------------
GCTX: dict[str, Any] = {
    "apiVersion": "kyverno.io/v2alpha1",
    "kind": "GlobalContextEntry",
    "metadata": {"name": "deployments"},
    "spec": {"kubernetesResource": {"group": "apps", "version": "v1", "resource": "deployments"}, "projections": [{"name": "count", "jmesPath": "length(@)"}]},
}


def test_a_valid_global_context_entry_passes() -> None:
    assert problems(GCTX) == []
    core = copy.deepcopy(GCTX)
    core["spec"]["kubernetesResource"] = {"version": "v1", "resource": "pods"}
    assert problems(core) == []
    api_call = copy.deepcopy(GCTX)
    api_call["spec"] = {"apiCall": {"urlPath": "/api/v1/pods", "refreshInterval": "10s"}}
    assert problems(api_call) == []


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({}, "spec.kubernetesResource"),
        ({"kubernetesResource": {"version": "v1beta1", "resource": "things"}}, "spec.kubernetesResource.group"),
        ({"kubernetesResource": {"group": "apps", "version": "v1"}}, "spec.kubernetesResource.resource"),
        ({"apiCall": {"urlPath": "/api/v1/pods", "refreshInterval": "0s"}}, "spec.apiCall.refreshInterval"),
        ({"apiCall": {"refreshInterval": "10s"}}, "spec.apiCall.service"),
        ({"apiCall": {"urlPath": "/x", "refreshInterval": "1m", "data": [{"key": "a", "value": "b"}]}}, "spec.apiCall.method"),
        ({"apiCall": {"urlPath": "/x", "refreshInterval": "1m"}, "projections": [{"name": "deployments", "jmesPath": "@"}]}, "spec.projections[0].name"),
        ({"apiCall": {"urlPath": "/x", "refreshInterval": "1m"}, "projections": [{"name": "p", "jmesPath": "[?"}]}, "spec.projections[0].jmesPath"),
    ],
)
def test_global_context_entry_problems(spec: dict[str, Any], path: str) -> None:
    document = {**copy.deepcopy(GCTX), "spec": spec}
    assert path in paths(document)


# -- PolicyException (kyverno.io) ------------------------------------------------------------------------------------
def exception(match_entry: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kyverno.io/v2",
        "kind": "PolicyException",
        "metadata": {"name": "ex", "namespace": "kyverno"},
        "spec": {"exceptions": [{"policyName": "p", "ruleNames": ["r"]}], "match": {"any": [match_entry]}, **spec},
    }


def test_background_exceptions_cannot_use_user_info() -> None:
    entry = {"resources": {"kinds": ["Pod"]}, "subjects": [{"kind": "User", "name": "chip"}]}
    assert paths(exception(entry)) == ["spec.match.any[0].subjects"]
    assert problems(exception(entry, background=False)) == []
    bad_role = {"resources": {"kinds": ["Pod"]}, "roles": ["admin"]}
    assert paths(exception(bad_role, background=False)) == ["spec.match.any[0].roles[0]"]


# -- CEL policy kinds ------------------------------------------------------------------------------------------------
RULES = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]


def cel(kind: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "policies.kyverno.io/v1", "kind": kind, "metadata": {"name": "p"}, "spec": spec}


@pytest.mark.parametrize("kind", ["MutatingPolicy", "NamespacedMutatingPolicy", "GeneratingPolicy", "DeletingPolicy", "NamespacedDeletingPolicy"])
def test_cel_policies_need_match_constraints(kind: str) -> None:
    extra: dict[str, Any] = {"schedule": "0 * * * *"} if "Deleting" in kind else {}
    assert "spec.matchConstraints" in paths(cel(kind, **extra))
    assert "spec.matchConstraints" not in paths(cel(kind, matchConstraints={"resourceRules": RULES}, **extra))


@pytest.mark.parametrize(("schedule", "valid"), [("0 * * * *", True), ("0 0 * * * *", True), ("0 0 0 * * * 2030", True), ("0 0 L * *", True), ("99 * * * *", False), ("", False)])
def test_deleting_policy_schedule(schedule: str, valid: bool) -> None:
    document = cel("DeletingPolicy", matchConstraints={"resourceRules": RULES}, schedule=schedule, conditions=[{"name": "old", "expression": "true"}])
    assert paths(document) == ([] if valid else ["spec.schedule"])


def test_generating_policy_entries_need_expression_or_template() -> None:
    base = {"matchConstraints": {"resourceRules": RULES}}
    assert paths(cel("GeneratingPolicy", generate=[{}], **base)) == ["spec.generate[0]"]
    both = {"expression": "generator.Apply('default', [])", "template": {"value": "x"}}
    assert paths(cel("GeneratingPolicy", generate=[both], **base)) == ["spec.generate[0]"]


def test_mutating_policy_generating_a_map_cannot_use_variables_in_match_conditions() -> None:
    spec: dict[str, Any] = {
        "matchConstraints": {"resourceRules": RULES},
        "autogen": {"mutatingAdmissionPolicy": {"enabled": True}},
        "variables": [{"name": "team", "expression": "'a'"}],
        "matchConditions": [{"name": "team", "expression": "variables.team == 'a'"}],
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object{}"}}],
    }
    assert "spec.matchConditions[0].expression" in paths(cel("MutatingPolicy", **spec))
    spec["autogen"]["mutatingAdmissionPolicy"]["enabled"] = False
    assert "spec.matchConditions[0].expression" not in paths(cel("MutatingPolicy", **spec))


def test_cel_policy_exception_refs_and_match_conditions() -> None:
    document = cel("PolicyException", policyRefs=[{"name": "p"}], matchConditions=[{"name": "a", "expression": "true"}, {"name": "a", "expression": "true"}, {"name": "Not Valid", "expression": "true"}, {"expression": "true"}])
    assert paths(document) == ["spec.policyRefs[0].kind", "spec.matchConditions[1].name", "spec.matchConditions[2].name", "spec.matchConditions[3].name"]
    fine = cel("PolicyException", policyRefs=[{"name": "p", "kind": "ValidatingPolicy"}], matchConditions=[{"name": "example.com/a", "expression": "true"}])
    assert problems(fine) == []
