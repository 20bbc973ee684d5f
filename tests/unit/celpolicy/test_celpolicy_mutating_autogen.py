"""MutatingPolicy pod-controller variants, as Kyverno's mpol autogen builds them: only matchConditions and
ApplyConfiguration expressions are converted, and a root ``Object{...}`` is wrapped in the template structure."""

from __future__ import annotations

from stockade.celpolicy.autogen import autogen_specs, mutation_expression_for_controllers

APPLY = "Object{spec: Object.spec{containers: object.spec.containers.map(c, Object.spec.containers{name: c.name})}}"


def test_apply_configuration_is_wrapped_in_the_template() -> None:
    converted = mutation_expression_for_controllers(APPLY, "defaults")
    assert converted == (
        "Object{spec: Object.spec{template: Object.spec.template{"
        "spec: Object.spec.template.spec{containers: object.spec.template.spec.containers.map(c, Object.spec.template.spec.containers{name: c.name})}"
        "}}}"
    )
    cron = mutation_expression_for_controllers("Object{metadata: Object.metadata{labels: {'a': 'b'}}}", "cronjobs")
    assert cron.startswith("Object{spec: Object.spec{jobTemplate: Object.spec.jobTemplate{spec: Object.spec.jobTemplate.spec{template:")
    assert cron.endswith("}}}}}")


def test_labels_move_under_the_template_and_other_expressions_are_left_alone() -> None:
    assert mutation_expression_for_controllers("object.metadata.labels['x'] == 'y'", "defaults") == "object.spec.template.metadata.labels['x'] == 'y'"
    assert mutation_expression_for_controllers("object.metadata.namespace == 'n'", "defaults") == "object.metadata.namespace == 'n'"
    assert mutation_expression_for_controllers("Object {}", "defaults") == "Object {}"  # nothing inside: unchanged


def test_mutating_policy_variants_convert_conditions_and_apply_configurations_only() -> None:
    spec = {
        "autogen": {"podControllers": {"controllers": ["deployments"]}},
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
        "matchConditions": [{"name": "ns", "expression": "object.metadata.labels['a'] == 'b'"}],
        "variables": [{"name": "v", "expression": "object.spec.containers"}],
        "mutations": [
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": APPLY}},
            {"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: '/spec/x', value: object.spec.y}]"}},
        ],
    }
    (variant,) = autogen_specs(spec)
    assert variant["matchConstraints"]["resourceRules"][0]["resources"] == ["deployments"]
    assert variant["matchConditions"][0]["expression"] == "object.spec.template.metadata.labels['a'] == 'b'"
    assert variant["mutations"][0]["applyConfiguration"]["expression"].startswith("Object{spec: Object.spec{template:")
    assert variant["mutations"][1]["jsonPatch"]["expression"] == spec["mutations"][1]["jsonPatch"]["expression"]
    assert variant["variables"] == spec["variables"]
