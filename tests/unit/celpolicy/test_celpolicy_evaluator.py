"""Behaviour of CEL policy kinds as Kyverno documents it: matching, validations, exceptions, mutations, generation."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from stockade.celpolicy import AdmissionInput, CelPolicy, CelPolicyEvaluator, PolicyCompileError
from stockade.celpolicy.autogen import autogen_specs, can_autogen
from stockade.celpolicy.compiler import PolicyCompiler
from stockade.celpolicy.mutation import apply_configuration, apply_json_patch
from stockade.celpolicy.request import kind_to_resource

POD_RULES = {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}]}


def pod(name: str = "p", labels: dict[str, str] | None = None, image: str = "nginx:1.0") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": image}]},
    }


def deployment(image: str = "nginx:1.0") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "default"},
        "spec": {"template": {"metadata": {"labels": {}}, "spec": {"containers": [{"name": "c", "image": image}]}}},
    }


def vpol(name: str = "vp", **spec: Any) -> CelPolicy:
    body = {"matchConstraints": POD_RULES, "validations": [{"expression": "!object.spec.containers.exists(c, c.image.endsWith(':latest'))", "message": "no latest"}]}
    body.update(spec)
    return CelPolicy({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy", "metadata": {"name": name}, "spec": body})


def status(response: Any) -> str | None:
    return response.rules[0].status if response is not None and response.rules else None


def test_validating_policy_pass_and_fail_with_message() -> None:
    evaluator = CelPolicyEvaluator()
    assert status(evaluator.validate(vpol(), AdmissionInput(pod()))) == "pass"
    failed = evaluator.validate(vpol(), AdmissionInput(pod(image="nginx:latest")))
    assert status(failed) == "fail"
    assert failed.rules[0].message == "no latest"
    assert failed.rules[0].name == "vp"


def test_message_expression_and_variables() -> None:
    policy = vpol(
        variables=[{"name": "images", "expression": "object.spec.containers.map(c, c.image)"}],
        validations=[{"expression": "size(variables.images) > 1", "messageExpression": "'only ' + string(size(variables.images))"}],
    )
    response = CelPolicyEvaluator().validate(policy, AdmissionInput(pod()))
    assert status(response) == "fail"
    assert response.rules[0].message == "only 1"


def test_unmatched_kind_gives_empty_response_and_match_conditions_skip() -> None:
    evaluator = CelPolicyEvaluator()
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "default"}}
    assert evaluator.validate(vpol(), AdmissionInput(service)).rules == []
    policy = vpol(matchConditions=[{"name": "red", "expression": "object.metadata.labels['color'] == 'red'"}])
    assert status(evaluator.validate(policy, AdmissionInput(pod(labels={"color": "red"})))) == "pass"
    assert status(evaluator.validate(policy, AdmissionInput(pod(labels={"color": "blue"})))) == "skip"


def test_runtime_error_is_reported_as_error() -> None:
    policy = vpol(validations=[{"expression": "object.spec.missing == 1"}])
    assert status(CelPolicyEvaluator().validate(policy, AdmissionInput(pod()))) == "error"


def test_autogen_variant_validates_deployment_template() -> None:
    evaluator = CelPolicyEvaluator()
    assert status(evaluator.validate(vpol(), AdmissionInput(deployment("nginx:latest")))) == "fail"
    assert status(evaluator.validate(vpol(), AdmissionInput(deployment()))) == "pass"
    no_autogen = vpol(autogen={"podControllers": {"controllers": []}})
    assert evaluator.validate(no_autogen, AdmissionInput(deployment("nginx:latest"))).rules == []


def test_autogen_rewrites_paths_but_keeps_metadata_namespace() -> None:
    spec = {"matchConstraints": POD_RULES, "validations": [{"expression": "object.spec.x && object.metadata.namespace == 'a'"}]}
    variants = autogen_specs(spec)
    texts = [v["validations"][0]["expression"] for v in variants]
    assert "object.spec.jobTemplate.spec.template.spec.x && object.metadata.namespace == 'a'" in texts
    assert "object.spec.template.spec.x && object.metadata.namespace == 'a'" in texts
    assert not can_autogen({"resourceRules": POD_RULES["resourceRules"], "objectSelector": {"matchLabels": {"a": "b"}}})


def test_cel_policy_exception_skips_or_passes() -> None:
    exception = CelPolicy(
        {
            "apiVersion": "policies.kyverno.io/v1",
            "kind": "PolicyException",
            "metadata": {"name": "ex", "namespace": "default"},
            "spec": {"policyRefs": [{"name": "vp", "kind": "ValidatingPolicy"}], "matchConditions": [{"name": "n", "expression": "object.metadata.name == 'skipme'"}]},
        }
    )
    evaluator = CelPolicyEvaluator(exceptions=[exception])
    assert status(evaluator.validate(vpol(), AdmissionInput(pod("skipme", image="x:latest")))) == "skip"
    assert status(evaluator.validate(vpol(), AdmissionInput(pod("other", image="x:latest")))) == "fail"
    passing = copy.deepcopy(exception.raw)
    passing["spec"]["reportResult"] = "pass"
    assert status(CelPolicyEvaluator(exceptions=[CelPolicy(passing)]).validate(vpol(), AdmissionInput(pod("skipme")))) == "pass"


def test_namespace_selector_uses_metadata_name_label_by_default() -> None:
    constraints = dict(POD_RULES, namespaceSelector={"matchLabels": {"kubernetes.io/metadata.name": "default"}})
    assert status(CelPolicyEvaluator().validate(vpol(matchConstraints=constraints), AdmissionInput(pod()))) == "pass"
    other = dict(POD_RULES, namespaceSelector={"matchLabels": {"team": "a"}})
    assert CelPolicyEvaluator().validate(vpol(matchConstraints=other), AdmissionInput(pod())) is None


def test_compile_error_names_policy_field_and_position() -> None:
    policy = vpol(validations=[{"expression": "object.spec.containers.all(c, "}])
    response = CelPolicyEvaluator().validate(policy, AdmissionInput(pod()))
    assert response is not None and status(response) == "error"
    text = response.rules[0].message
    assert "ValidatingPolicy//vp" in text and "spec.validations[0].expression" in text and "column" in text
    with pytest.raises(PolicyCompileError):
        PolicyCompiler().compile("ValidatingPolicy//vp", "spec.validations[0].expression", "object.spec.containers.all(c, ")


def test_programs_are_compiled_once_per_policy() -> None:
    compiler = PolicyCompiler()
    evaluator = CelPolicyEvaluator(compiler=compiler)
    for index in range(5):
        evaluator.validate(vpol(), AdmissionInput(pod(f"p{index}")))
    assert compiler.compiled_count == 1


def test_mutating_policy_apply_configuration_and_json_patch() -> None:
    policy = CelPolicy(
        {
            "apiVersion": "policies.kyverno.io/v1",
            "kind": "MutatingPolicy",
            "metadata": {"name": "mp"},
            "spec": {
                "matchConstraints": POD_RULES,
                "mutations": [
                    {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object{metadata: Object.metadata{labels: {'team': 'a'}}}"}},
                    {"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: '/metadata/annotations', value: {'x': 'y'}}]"}},
                ],
            },
        }
    )
    response = CelPolicyEvaluator().mutate(policy, AdmissionInput(pod(labels={"app": "web"})))
    assert status(response) == "pass"
    assert response.patched_resource["metadata"]["labels"] == {"app": "web", "team": "a"}
    assert response.patched_resource["metadata"]["annotations"] == {"x": "y"}


def test_apply_configuration_merges_containers_by_name() -> None:
    merged = apply_configuration(pod(), {"spec": {"containers": [{"name": "c", "imagePullPolicy": "Always"}, {"name": "d", "image": "x"}]}})
    assert merged["spec"]["containers"] == [{"name": "c", "image": "nginx:1.0", "imagePullPolicy": "Always"}, {"name": "d", "image": "x"}]
    with pytest.raises(ValueError):
        apply_json_patch(pod(), [{"op": "remove", "path": "/spec/nothing"}])


def test_generating_policy_collects_generated_resources() -> None:
    policy = CelPolicy(
        {
            "apiVersion": "policies.kyverno.io/v1",
            "kind": "GeneratingPolicy",
            "metadata": {"name": "gp"},
            "spec": {
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["namespaces"]}]},
                "generate": [{"expression": "generator.Apply(object.metadata.name, [{'apiVersion': dyn('v1'), 'kind': dyn('ConfigMap'), 'metadata': dyn({'name': 'cm'})}])"}],
            },
        }
    )
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    response = CelPolicyEvaluator().generate(policy, AdmissionInput(namespace))
    generated = response.rules[0].generated_resources
    assert generated == [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "team-a"}}]


def test_a_namespaced_generating_policy_applies_into_its_own_namespace() -> None:
    """Kyverno's generator library gives NamespacedGeneratingPolicies generator.Apply(resources), which writes into
    the policy's namespace; a cluster-wide policy has to name the namespace."""
    expression = "generator.apply([{'apiVersion': dyn('v1'), 'kind': dyn('ConfigMap'), 'metadata': dyn({'name': 'cm'})}])"
    rules = {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]}]}
    document = {
        "apiVersion": "policies.kyverno.io/v1beta1",
        "kind": "NamespacedGeneratingPolicy",
        "metadata": {"name": "gp", "namespace": "team-a"},
        "spec": {"matchConstraints": rules, "generate": [{"expression": expression}]},
    }
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "team-a"}}
    response = CelPolicyEvaluator().generate(CelPolicy(document), AdmissionInput(deployment))
    assert response is not None and response.rules[0].status == "pass"
    assert response.rules[0].generated_resources == [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "team-a"}}]
    cluster_wide = {**document, "kind": "GeneratingPolicy", "metadata": {"name": "gp"}}
    response = CelPolicyEvaluator().generate(CelPolicy(cluster_wide), AdmissionInput(deployment))
    assert response is not None and response.rules[0].status == "error"


def test_deleting_policy_conditions_decide_pass_or_fail() -> None:
    policy = CelPolicy(
        {
            "apiVersion": "policies.kyverno.io/v1",
            "kind": "DeletingPolicy",
            "metadata": {"name": "dp"},
            "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}, "conditions": [{"name": "n", "expression": "object.metadata.name == 'old'"}]},
        }
    )
    evaluator = CelPolicyEvaluator()
    assert status(evaluator.delete(policy, pod("old"))) == "pass"
    assert status(evaluator.delete(policy, pod("new"))) == "fail"


def test_validating_admission_policy_with_binding_and_params() -> None:
    policy = CelPolicy(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "max-replicas"},
            "spec": {
                "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]}]},
                "validations": [{"expression": "object.spec.replicas <= int(params.data.max)"}],
            },
        }
    )
    binding = CelPolicy({"kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": "b"}, "spec": {"policyName": "max-replicas", "paramRef": {"name": "limits", "namespace": "default"}}})
    params = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "limits", "namespace": "default"}, "data": {"max": "3"}}]
    evaluator = CelPolicyEvaluator(params=params)
    small, large = deployment(), deployment()
    small["spec"]["replicas"], large["spec"]["replicas"] = 2, 5
    assert status(evaluator.validate_admission(policy, [binding], AdmissionInput(small))) == "pass"
    failed = evaluator.validate_admission(policy, [binding], AdmissionInput(large))
    assert status(failed) == "fail"
    assert failed.rules[0].message == "failed expression: object.spec.replicas <= int(params.data.max)"


def test_validate_cel_rule_preconditions_and_default_message() -> None:
    rule = {
        "name": "no-host-path",
        "celPreconditions": [{"name": "red", "expression": "object.metadata.labels['color'] == 'red'"}],
        "validate": {"message": "no hostPath", "cel": {"expressions": [{"expression": "!has(object.spec.volumes)"}]}},
    }
    evaluator = CelPolicyEvaluator()
    red = pod(labels={"color": "red"})
    assert evaluator.validate_cel_rule("ClusterPolicy//p", rule, AdmissionInput(red)) == ("pass", "Validation rule 'no-host-path' passed.")
    red["spec"]["volumes"] = [{"name": "v", "hostPath": {"path": "/"}}]
    assert evaluator.validate_cel_rule("ClusterPolicy//p", rule, AdmissionInput(red)) == ("fail", "no hostPath")
    assert evaluator.validate_cel_rule("ClusterPolicy//p", rule, AdmissionInput(pod(labels={"color": "blue"})))[0] == "skip"


@pytest.mark.parametrize("kind,resource", [("Pod", "pods"), ("NetworkPolicy", "networkpolicies"), ("Ingress", "ingresses"), ("Endpoints", "endpoints"), ("Gateway", "gateways")])
def test_kind_to_resource(kind: str, resource: str) -> None:
    assert kind_to_resource(kind) == resource


def _mpol(**spec: Any) -> CelPolicy:
    body: dict[str, Any] = {
        "matchConstraints": POD_RULES,
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object{metadata: Object.metadata{labels: {'team': 'a'}}}"}}],
    }
    body.update(spec)
    return CelPolicy({"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy", "metadata": {"name": "mp"}, "spec": body})


def test_request_carries_the_admitted_objects() -> None:
    """Kyverno's CEL ``request`` includes ``object`` and ``oldObject`` (request.object.metadata.labels...)."""
    policy = _mpol(matchConditions=[{"name": "labelled", "expression": "has(request.object.metadata.labels) && 'app' in request.object.metadata.labels"}])
    assert status(CelPolicyEvaluator().mutate(policy, AdmissionInput(pod(labels={"app": "web"})))) == "pass"
    assert status(CelPolicyEvaluator().mutate(policy, AdmissionInput(pod()))) == "skip"
    old = pod(labels={"was": "here"})
    policy = _mpol(matchConditions=[{"name": "old", "expression": "request.oldObject.metadata.labels['was'] == 'here'"}])
    assert status(CelPolicyEvaluator().mutate(policy, AdmissionInput(pod(), old_object=old, operation="UPDATE"))) == "pass"


def test_mutating_policy_match_conditions_see_its_variables() -> None:
    """Kyverno binds a MutatingPolicy's variables before its matchConditions, so conditions may use them."""
    policy = _mpol(
        variables=[{"name": "team", "expression": "object.metadata.?labels[?'team'].orValue('none')"}],
        matchConditions=[{"name": "blue", "expression": "variables.team == 'blue'"}],
    )
    assert status(CelPolicyEvaluator().mutate(policy, AdmissionInput(pod(labels={"team": "blue"})))) == "pass"
    assert status(CelPolicyEvaluator().mutate(policy, AdmissionInput(pod(labels={"team": "red"})))) == "skip"


def test_mutating_policy_audit_annotations_become_result_properties() -> None:
    """Kyverno surfaces auditAnnotations, evaluated on the mutated object, as report result properties."""
    policy = _mpol(
        auditAnnotations=[
            {"key": "team", "valueExpression": "'team=' + object.metadata.labels['team']"},
            {"key": "empty", "valueExpression": "''"},
        ]
    )
    response = CelPolicyEvaluator().mutate(policy, AdmissionInput(pod()))
    assert response is not None and response.rules[0].properties == {"team": "team=a"}


def test_mutating_policy_exemption_is_the_exception_rule() -> None:
    """Kyverno names the rule response of a MutatingPolicy exempted by a PolicyException "exception"."""
    exception = CelPolicy(
        {
            "apiVersion": "policies.kyverno.io/v1",
            "kind": "PolicyException",
            "metadata": {"name": "skip-p", "namespace": "default"},
            "spec": {"policyRefs": [{"name": "mp", "kind": "MutatingPolicy"}], "matchConditions": [{"name": "p", "expression": "object.metadata.name == 'p'"}]},
        }
    )
    response = CelPolicyEvaluator(exceptions=[exception]).mutate(_mpol(), AdmissionInput(pod()))
    assert response is not None
    (rule,) = response.rules
    assert (rule.name, rule.status, rule.exceptions) == ("exception", "skip", ["default/skip-p"])
    assert rule.message == "rule is skipped due to policy exception: default/skip-p"
