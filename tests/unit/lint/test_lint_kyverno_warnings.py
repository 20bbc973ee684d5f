"""Kyverno's policy warnings and refusal phrases, one test per condition of Kyverno v1.19.1's policy validation
(pkg/validation/policy/validate.go, pkg/deprecations, pkg/webhooks/exception): each case sets the condition and
expects Kyverno's sentence, and the nearest case without the condition expects no such warning."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from stockade.lint.policies import validate_policy_document
from stockade.webhook.admission import AdmissionRequest, parse_review
from stockade.webhook.server import exception_namespace_warnings, policy_validation_decision


def policy(rule: dict[str, Any], kind: str = "ClusterPolicy", annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p"}
    if annotations:
        metadata["annotations"] = annotations
    if kind == "Policy":
        metadata["namespace"] = "team"
    return {"apiVersion": "kyverno.io/v1", "kind": kind, "metadata": metadata, "spec": {"rules": [rule], **spec}}


def deny_rule(conditions: Any, kinds: list[str] | None = None) -> dict[str, Any]:
    return {"name": "r", "match": {"any": [{"resources": {"kinds": kinds or ["Pod"]}}]}, "validate": {"message": "no", "deny": {"conditions": conditions}}}


def warnings_of(document: dict[str, Any]) -> list[str]:
    result = validate_policy_document(document)
    assert result.ok, result.message()
    return result.warnings


NOT_IN = 'Operator NotIn has been deprecated and will be removed soon. Use these instead: ["AllNotIn" "AnyNotIn"]'
IN = 'Operator In has been deprecated and will be removed soon. Use these instead: ["AllIn" "AnyIn"]'


@pytest.mark.parametrize("operator, expected", [("NotIn", NOT_IN), ("In", IN)])
def test_deprecated_operators_in_deny_conditions_warn(operator: str, expected: str) -> None:
    condition = {"key": "{{ request.object.metadata.name }}", "operator": operator, "value": ["a"]}
    assert warnings_of(policy(deny_rule({"any": [condition]}))) == [expected]
    assert warnings_of(policy(deny_rule([condition]))) == [expected]  # the legacy list form too


def test_replacement_operators_do_not_warn() -> None:
    conditions = {"all": [{"key": "{{ request.object.metadata.name }}", "operator": op, "value": ["a"]} for op in ("AnyNotIn", "AllIn")]}
    assert warnings_of(policy(deny_rule(conditions))) == []


def test_deprecated_operators_warn_in_foreach_and_attestations_but_not_in_rule_preconditions() -> None:
    """Kyverno looks at validate foreach preconditions/deny and attestation conditions; rule preconditions are not
    checked for deprecated operators."""
    condition = {"key": "{{ element.name }}", "operator": "NotIn", "value": ["a"]}
    foreach = {"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
               "validate": {"message": "no", "foreach": [{"list": "request.object.spec.containers", "preconditions": {"all": [condition]}, "deny": {"conditions": {"any": [condition]}}}]}}
    assert warnings_of(policy(foreach)) == [NOT_IN]
    attestation = {"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "verifyImages": [{
        "imageReferences": ["ghcr.io/x/*"],
        "attestations": [{"type": "https://slsa.dev/provenance/v0.2", "conditions": [{"all": [{"key": "{{ builder.id }}", "operator": "In", "value": ["b"]}]}]}],
    }]}
    assert warnings_of(policy(attestation, validationFailureAction="Enforce")) == [IN]
    preconditions = deny_rule({"any": [{"key": "a", "operator": "Equals", "value": "a"}]})
    preconditions["preconditions"] = {"all": [{"key": "{{ request.operation }}", "operator": "In", "value": ["CREATE"]}]}
    assert warnings_of(policy(preconditions)) == []


def test_lowercase_failure_actions_warn_at_each_place() -> None:
    rule = deny_rule({"any": [{"key": "a", "operator": "Equals", "value": "b"}]})
    rule["validate"]["failureAction"] = "audit"
    rule["validate"]["failureActionOverrides"] = [{"action": "Enforce", "namespaces": ["a"]}, {"action": "enforce", "namespaces": ["b"]}]
    document = policy(rule, validationFailureAction="enforce", validationFailureActionOverrides=[{"action": "audit", "namespaces": ["c"]}])
    tail = ": Validation failure actions enforce/audit are deprecated, use Enforce/Audit instead."
    assert warnings_of(document) == [
        "spec.validationFailureAction" + tail,
        "spec.validationFailureActionOverrides[0].action" + tail,
        "spec.rules[0].validate.failureAction" + tail,
        "spec.rules[0].validate.failureActionOverrides[1].action" + tail,
    ]
    assert warnings_of(policy(deny_rule({"any": [{"key": "a", "operator": "Equals", "value": "b"}]}), validationFailureAction="Enforce")) == []


SCALE = "You are matching on replicas but not including the scale subresource in the policy."
STATUS = "You are matching on status but not including the status subresource in the policy."


def test_replicas_without_the_scale_subresource_warns() -> None:
    rule: dict[str, Any] = {"name": "r", "match": {"any": [{"resources": {"kinds": ["Deployment"]}}]}, "validate": {"message": "m", "pattern": {"spec": {"replicas": "<5"}}}}
    assert warnings_of(policy(rule)) == [SCALE]
    rule["match"]["any"][0]["resources"]["kinds"] = ["Deployment", "Deployment/scale"]
    assert warnings_of(policy(rule, background=False)) == []


def test_status_in_a_mutation_warns_unless_a_status_kind_is_matched() -> None:
    rule = {"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "mutate": {"patchStrategicMerge": {"status": {"phase": "x"}}}}
    assert warnings_of(policy(rule)) == [STATUS]
    rule["exclude"] = {"any": [{"resources": {"kinds": ["Pod/status"], "namespaces": ["kube-system"]}}]}
    assert warnings_of(policy(rule)) == []


def test_deny_conditions_are_left_out_of_the_subresource_search() -> None:
    """Kyverno blanks deny conditions before searching the validate section, but the message stays in."""
    conditions = {"any": [{"key": "{{ request.object.spec.replicas }}", "operator": "GreaterThan", "value": 3}]}
    assert warnings_of(policy(deny_rule(conditions, ["Deployment"]))) == []
    rule = deny_rule(conditions, ["Deployment"])
    rule["validate"]["message"] = "at most 3 replicas"
    assert warnings_of(policy(rule)) == [SCALE]


def test_json_patch_on_pods_warns() -> None:
    rule = {"name": "r", "match": {"resources": {"kinds": ["Pod"]}}, "mutate": {"patchesJson6902": "- op: add\n  path: /metadata/labels/a\n  value: b\n"}}
    assert warnings_of(policy(rule)) == [
        "Pods managed by workload controllers should not be directly mutated using policies. Use the autogen feature or write policies that match Pod controllers."
    ]
    rule["match"] = {"resources": {"kinds": ["Deployment"]}}
    assert warnings_of(policy(rule)) == []


def test_pod_rules_warn_when_autogen_leaves_out_controllers() -> None:
    rule = deny_rule({"any": [{"key": "a", "operator": "Equals", "value": "b"}]})
    expected = "Policies that match Pods apply to all Pods including those created and managed by controllers excluded from autogen."
    (warning,) = warnings_of(policy(rule, annotations={"pod-policies.kyverno.io/autogen-controllers": "Deployment,StatefulSet"}))
    assert warning.startswith(expected)
    for value in ("none", "DaemonSet,Deployment,Job,StatefulSet,CronJob"):
        assert warnings_of(policy(rule, annotations={"pod-policies.kyverno.io/autogen-controllers": value})) == []
    assert warnings_of(policy(deny_rule(rule["validate"]["deny"]["conditions"], ["Pod", "Service"]),
                              annotations={"pod-policies.kyverno.io/autogen-controllers": "Deployment"})) == []


def test_predicate_type_is_deprecated() -> None:
    rule = {"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "verifyImages": [{
        "imageReferences": ["ghcr.io/x/*"], "attestations": [{"predicateType": "https://slsa.dev/provenance/v0.2"}],
    }]}
    assert warnings_of(policy(rule, validationFailureAction="Enforce")) == [
        "spec.rules[0].verifyImages[0].attestations[0]: predicateType has been deprecated use "
        "'type: https://slsa.dev/provenance/v0.2' instead of 'predicateType: https://slsa.dev/provenance/v0.2'"
    ]


def test_cluster_policy_with_a_namespace_is_refused_and_warned() -> None:
    document = policy(deny_rule({"any": [{"key": "a", "operator": "Equals", "value": "b"}]}))
    document["metadata"]["namespace"] = "default"
    result = validate_policy_document(document)
    assert "A clusterpolicy should not have the namespace defined" in result.message()
    assert result.warnings == ["A clusterpolicy should not have the namespace defined"]


# ---- refusals in Kyverno's words -----------------------------------------------------------------------------


def refusal(document: dict[str, Any]) -> str:
    result = validate_policy_document(document)
    assert not result.ok
    return result.message()


def test_invalid_operator_is_refused_in_kyvernos_words_and_case_sensitively() -> None:
    for operator in ("Invalid", "equals"):  # Kyverno compares the spelling as listed
        message = refusal(policy(deny_rule({"any": [{"key": "a", "operator": operator, "value": "b"}]})))
        assert "spec.rules[0].validate.deny.conditions.any[0].operator: entered value of `operator` is invalid. valid values: [" in message
    # mutate-existing target preconditions are not part of Kyverno's operator check
    rule = {"name": "r", "match": {"any": [{"resources": {"kinds": ["ConfigMap"]}}]},
            "mutate": {"targets": [{"apiVersion": "v1", "kind": "Secret", "preconditions": {"any": [{"key": "a", "operator": "equals", "value": "a"}]}}],
                       "patchStrategicMerge": {"metadata": {"labels": {"a": "b"}}}}}
    assert validate_policy_document(policy(rule)).ok


def test_request_operation_values_are_refused_in_kyvernos_words() -> None:
    condition = {"key": "{{ request.operation }}", "operator": "AnyIn", "value": ["CREATE", "PATCH"]}
    message = refusal(policy(deny_rule({"any": [condition]})))
    assert "unknown value 'PATCH' found under the 'value' field. Only the following values are allowed: [CREATE, UPDATE, DELETE, CONNECT]" in message


def test_a_match_entry_without_kinds_is_refused_even_for_metadata_rules() -> None:
    metadata_rule: dict[str, Any] = {"name": "r", "match": {"any": [{"resources": {"namespaces": ["a"]}}]}, "validate": {"message": "m", "pattern": {"metadata": {"labels": {"a": "?*"}}}}}
    assert "at least one element must be specified in a kind block, the kind attribute is mandatory when working with the resources element" in refusal(policy(metadata_rule))
    spec_rule = copy.deepcopy(metadata_rule)
    spec_rule["validate"]["pattern"] = {"spec": {"hostNetwork": False}}
    assert "policy can only deal with the metadata field of the resource if the rule does not match any kind" in refusal(policy(spec_rule))


def test_any_all_with_direct_resources_is_refused_per_block() -> None:
    rule = deny_rule({"any": [{"key": "a", "operator": "Equals", "value": "b"}]})
    rule["match"]["resources"] = {"kinds": ["Pod"]}
    assert "can't specify any/all together with match resources" in refusal(policy(rule))


def test_context_entry_refusals_in_kyvernos_words() -> None:
    rule = deny_rule({"any": [{"key": "a", "operator": "Equals", "value": "b"}]})
    rule["context"] = [{"name": "a", "variable": {"value": 1, "default": 2}}, {"name": "b", "imageRegistry": {}}, {"name": "c", "configMap": {"namespace": "x"}}]
    message = refusal(policy(rule))
    assert "a variable must define a default value only when a jmesPath expression is defined" in message
    assert "a ref is required for imageRegistry context entry" in message
    assert "a name is required for configMap context entry" in message


# ---- the webhook's own warnings ----------------------------------------------------------------------------------


def review(document: dict[str, Any], version: str = "v1", namespace: str = "") -> AdmissionRequest:
    group, _, _ = document["apiVersion"].rpartition("/")
    return parse_review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": group, "version": version, "kind": document["kind"]},
        "resource": {"group": group, "version": version, "resource": "x"}, "operation": "CREATE", "namespace": namespace,
        "name": document["metadata"]["name"], "object": document, "userInfo": {"username": "u"},
    }})


def test_the_webhook_warns_about_the_legacy_kind_and_the_deprecated_operator() -> None:
    decision = policy_validation_decision(review(policy(deny_rule({"any": [{"key": "a", "operator": "NotIn", "value": ["b"]}]}))))
    assert decision.allowed
    assert NOT_IN in decision.warnings
    assert (
        "kyverno.io/v1 ClusterPolicy is deprecated and will be removed in a future release; migrate to ValidatingPolicy, "
        "MutatingPolicy, GeneratingPolicy or ImageValidatingPolicy (policies.kyverno.io), see https://kyverno.io/docs/guides/migration-to-cel/"
    ) in decision.warnings


def test_policy_exception_warnings_follow_where_exceptions_are_honoured() -> None:
    assert exception_namespace_warnings("kyverno.io", "team", []) == ["PolicyException resources would not be processed until it is enabled."]
    assert exception_namespace_warnings("policies.kyverno.io", "team", []) == ["PolicyException resources would not be processed until it is enabled."]
    assert exception_namespace_warnings("kyverno.io", "team", ["exceptions"]) == ["PolicyException resource namespace must match the defined namespace."]
    assert exception_namespace_warnings("kyverno.io", "exceptions", ["exceptions"]) == []
    assert exception_namespace_warnings("kyverno.io", "team", ["*"]) == []
    assert exception_namespace_warnings("kyverno.io", "team", None) == []  # every namespace: Kyverno's "*"
