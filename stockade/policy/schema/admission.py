"""Kubernetes admissionregistration shapes (and the core/v1 pieces they use) that the CEL policy kinds embed.

Written once from the Kubernetes API types (``k8s.io/api/admissionregistration/v1`` and ``v1alpha1``): the
policies.kyverno.io kinds reuse them as they are, so a ``matchConstraints`` or a ``matchConditions`` list means the
same in a ValidatingPolicy as in a ValidatingAdmissionPolicy.
"""

from __future__ import annotations

from stockade.policy.schema.common import LABEL_SELECTOR
from stockade.policy.schema.types import Node, array, atomic, obj, string, string_list

# admissionregistration/v1 NamedRuleWithOperations: RuleWithOperations (operations + Rule) inlined, plus resource
# names; +structType=atomic
NAMED_RULE_WITH_OPERATIONS = atomic(
    obj(
        {
            "apiGroups": string_list(list_type="atomic"),
            "apiVersions": string_list(list_type="atomic"),
            "operations": string_list(list_type="atomic"),
            "resourceNames": string_list(list_type="atomic"),
            "resources": string_list(list_type="atomic"),
            "scope": string(),
        }
    )
)

# admissionregistration/v1 MatchResources (+structType=atomic)
MATCH_RESOURCES = atomic(
    obj(
        {
            "excludeResourceRules": array(NAMED_RULE_WITH_OPERATIONS, list_type="atomic"),
            "matchPolicy": string(),
            "namespaceSelector": LABEL_SELECTOR,
            "objectSelector": LABEL_SELECTOR,
            "resourceRules": array(NAMED_RULE_WITH_OPERATIONS, list_type="atomic"),
        }
    )
)

# admissionregistration/v1 MatchCondition: a named CEL expression
MATCH_CONDITION = obj({"expression": string(), "name": string()}, required=["expression", "name"])
# the usual list of them: a map keyed by name (+listType=map, +listMapKey=name)
MATCH_CONDITIONS = array(MATCH_CONDITION, list_type="map", list_map_keys=["name"])

# admissionregistration/v1 Variable (+structType=atomic)
VARIABLE = atomic(obj({"expression": string(), "name": string()}, required=["expression", "name"]))
VARIABLES = array(VARIABLE, list_type="map", list_map_keys=["name"])

# admissionregistration/v1 Validation
VALIDATION = obj(
    {"expression": string(), "message": string(), "messageExpression": string(), "reason": string()},
    required=["expression"],
)

# admissionregistration/v1 AuditAnnotation
AUDIT_ANNOTATION = obj({"key": string(), "valueExpression": string()}, required=["key", "valueExpression"])

# admissionregistration/v1 FailurePolicyType, as the policy kinds constrain it
FAILURE_POLICY = string(enum=["Ignore", "Fail"])

# admissionregistration/v1 ValidationAction items, as the policy kinds constrain them (+listType=set)
VALIDATION_ACTIONS = array(string(enum=["Deny", "Audit", "Warn"]), list_type="set")


def _expression() -> Node:
    return obj({"expression": string()})


# admissionregistration/v1alpha1 Mutation: an apply configuration or a JSON patch, both CEL
MUTATION = obj(
    {"applyConfiguration": _expression(), "jsonPatch": _expression(), "patchType": string()},
    required=["patchType"],
)

# core/v1 LocalObjectReference (+structType=atomic)
LOCAL_OBJECT_REFERENCE = atomic(obj({"name": string(default="")}))
