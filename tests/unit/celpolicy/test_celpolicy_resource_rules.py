"""``matchConstraints`` resource rules: one implementation (`resource_rules_match`) serves the policy evaluator
(`constraints_match`, which adds the selectors) and the admission side's UpdateRequest planning
(`stockade.controllers.updaterequest.resource_rules_select`), which differ only in how exclusions treat operations
when the include rules ignore theirs."""

from __future__ import annotations

from typing import Any

from stockade.celpolicy.matching import constraints_match, resource_rules_match
from stockade.celpolicy.request import AdmissionInput

CONFIGMAPS = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}


def update(name: str = "cm", labels: dict[str, str] | None = None) -> AdmissionInput:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns1", "labels": labels or {}}}
    return AdmissionInput(object=obj, old_object=obj, operation="UPDATE")


def constraints(**extra: Any) -> dict[str, Any]:
    return {"resourceRules": [CONFIGMAPS], **extra}


def test_include_rules_list_the_operation_unless_operations_are_ignored() -> None:
    assert not resource_rules_match(constraints(), update())
    assert resource_rules_match(constraints(), update(), ignore_operations=True)
    assert resource_rules_match({"resourceRules": []}, update())  # no include rules: any request (constraints_match's reading)
    assert not resource_rules_match({"resourceRules": [{**CONFIGMAPS, "resources": ["secrets"]}]}, update(), ignore_operations=True)


def test_exclusions_ignore_operations_with_the_rules_unless_told_to_check_them() -> None:
    excluded = constraints(excludeResourceRules=[{**CONFIGMAPS, "resourceNames": ["cm"]}])  # the exclusion lists CREATE only
    # constraints_match's reading: ignoring operations ignores them everywhere, so the exclusion drops the UPDATE
    assert not resource_rules_match(excluded, update(), ignore_operations=True)
    assert not constraints_match(excluded, update(), ignore_operations=True)
    # the UpdateRequest planner's reading: the exclusion still needs its operation, and an UPDATE is not a CREATE
    assert resource_rules_match(excluded, update(), ignore_operations=True, exclude_by_operation=True)
    assert not resource_rules_match(excluded, update("cm"), ignore_operations=True, exclude_by_operation=False)
    assert resource_rules_match(excluded, update("other"), ignore_operations=True)  # another name is not excluded
    updates_excluded = constraints(excludeResourceRules=[{**CONFIGMAPS, "operations": ["UPDATE"]}])
    assert not resource_rules_match(updates_excluded, update(), ignore_operations=True, exclude_by_operation=True)


def test_constraints_match_adds_the_selectors_to_the_resource_rules() -> None:
    selected = constraints(objectSelector={"matchLabels": {"team": "a"}})
    assert constraints_match(selected, update(labels={"team": "a"}), ignore_operations=True)
    assert not constraints_match(selected, update(labels={"team": "b"}), ignore_operations=True)
    assert not constraints_match(None, update(), ignore_operations=True)
    assert not constraints_match(constraints(), update())  # the operation still counts by default
