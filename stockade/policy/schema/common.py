"""Kubernetes shapes the policy kinds embed (meta/v1 label selectors and the like), written once."""

from __future__ import annotations

from stockade.policy.schema.types import array, obj, string, string_list, string_map

LABEL_SELECTOR_REQUIREMENT = obj(
    {"key": string(), "operator": string(), "values": string_list(list_type="atomic")},
    required=["key", "operator"],
)
# metav1.LabelSelector: controller-gen marks it map-type atomic
LABEL_SELECTOR = {
    **obj({"matchExpressions": array(LABEL_SELECTOR_REQUIREMENT, list_type="atomic"), "matchLabels": string_map()}),
    "x-kubernetes-map-type": "atomic",
}
