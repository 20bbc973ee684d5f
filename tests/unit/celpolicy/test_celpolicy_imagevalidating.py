"""ImageValidatingPolicy: image selection, validations over ``images``, autogen, offline verification errors."""

from __future__ import annotations

import copy
from typing import Any

from stockade.celpolicy import CelPolicy, CelPolicyEvaluator
from stockade.celpolicy.imagevalidating import (
    REGISTRY_NEEDED,
    ImageReferenceMatcher,
    ImageValidatingEvaluator,
    container_image_pointers,
    default_images,
)
from stockade.celpolicy.request import AdmissionInput
from stockade.celpolicy.testing import CelPolicyRun
from stockade.engine.match import RequestInfo
from stockade.images.verifier_api import VerificationUnavailable
from stockade.images.verify import CosignVerifier

DIGEST = "@sha256:" + "a" * 64


def _policy(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "validationActions": ["Deny"],
        "validationConfigurations": {"verifyDigest": False},
        "matchConstraints": {
            "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]
        },
        "matchImageReferences": [{"glob": "ghcr.io/*"}],
        "validations": [{"expression": "images.containers.all(i, image(i).tag() != 'latest')", "message": "no latest"}],
    }
    base.update(spec)
    return {"apiVersion": "policies.kyverno.io/v1beta1", "kind": "ImageValidatingPolicy", "metadata": {"name": "ivp"}, "spec": base}


def _pod(*images: str, name: str = "pod", namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]},
    }


def _evaluate(document: dict[str, Any], resource: dict[str, Any], verifier: Any = None) -> tuple[str, str] | None:
    evaluator = ImageValidatingEvaluator(CelPolicyEvaluator(), verifier)
    response = evaluator.validate(CelPolicy(document), AdmissionInput(object=resource, operation="CREATE"))
    if response is None or not response.rules:
        return None
    rule = response.rules[0]
    assert rule.name == "ivp"
    return rule.status, rule.message


def test_validation_passes_when_matched_images_are_acceptable() -> None:
    assert _evaluate(_policy(), _pod("ghcr.io/acme/app:1.0")) == ("pass", "success")


def test_validation_fails_with_its_message() -> None:
    assert _evaluate(_policy(), _pod("ghcr.io/acme/app:latest")) == ("fail", "no latest")


def test_images_outside_match_image_references_are_not_checked() -> None:
    assert _evaluate(_policy(), _pod("docker.io/library/nginx:latest", "ghcr.io/acme/app:2")) == ("pass", "success")


def test_match_image_references_by_cel_expression() -> None:
    document = _policy(matchImageReferences=[{"expression": "ref.startsWith('docker.io/')"}])
    assert _evaluate(document, _pod("docker.io/library/nginx:latest"))[0] == "fail"
    assert _evaluate(document, _pod("ghcr.io/acme/app:latest"))[0] == "pass"


def test_reference_matcher_globs_and_empty_list() -> None:
    assert ImageReferenceMatcher([{"glob": "ghcr.io/*"}]).matches("ghcr.io/a/b:1")
    assert not ImageReferenceMatcher([{"glob": "ghcr.io/*"}]).matches("quay.io/a/b:1")
    assert ImageReferenceMatcher([]).matches("anything")


def test_digest_is_required_by_default() -> None:
    document = _policy()
    document["spec"].pop("validationConfigurations")
    status, message = _evaluate(document, _pod("ghcr.io/acme/app:1.0"))
    assert status == "fail" and "ghcr.io/acme/app:1.0 does not have a digest" in message
    assert _evaluate(document, _pod("ghcr.io/acme/app:1.0" + DIGEST))[0] == "pass"


def test_custom_image_extractor_and_variables() -> None:
    document = _policy(
        images=[{"name": "annotated", "expression": "[object.metadata.annotations.img]"}],
        variables=[{"name": "bad", "expression": "'ghcr.io/evil:1'"}],
        validations=[{"expression": "!(variables.bad in images.annotated)", "message": "evil"}],
    )
    pod = _pod("ghcr.io/acme/app:1")
    pod["metadata"]["annotations"] = {"img": "ghcr.io/evil:1"}
    assert _evaluate(document, pod) == ("fail", "evil")
    pod["metadata"]["annotations"] = {"img": "ghcr.io/good:1"}
    assert _evaluate(document, pod) == ("pass", "success")


def test_autogen_checks_deployment_template_images() -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"template": {"metadata": {}, "spec": {"containers": [{"name": "a", "image": "ghcr.io/acme/app:latest"}]}}},
    }
    assert _evaluate(_policy(), deployment) == ("fail", "no latest")
    fixed = copy.deepcopy(deployment)
    fixed["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/acme/app:3"
    assert _evaluate(_policy(), fixed) == ("pass", "success")
    assert default_images(deployment)["containers"] == ["ghcr.io/acme/app:latest"]


def test_signature_verification_offline_is_an_error_naming_policy_and_image() -> None:
    document = _policy(
        attestors=[{"name": "notary", "notary": {"certs": {"value": "x"}}}],
        validations=[{"expression": "images.containers.map(i, verifyImageSignatures(i, [attestors.notary])).all(e, e > 0)"}],
    )
    status, message = _evaluate(document, _pod("ghcr.io/acme/app:1"))
    assert status == "error"
    assert "ivp" in message and "ghcr.io/acme/app:1" in message and REGISTRY_NEEDED in message
    # no matched image: nothing needs verifying
    assert _evaluate(document, _pod("quay.io/acme/app:1")) == ("pass", "success")


def test_match_conditions_false_skips() -> None:
    document = _policy(matchConditions=[{"name": "prod", "expression": "has(object.metadata.labels)"}])
    assert _evaluate(document, _pod("ghcr.io/acme/app:latest")) == ("skip", "skip")


def test_namespaced_variant_only_applies_in_its_namespace() -> None:
    document = _policy()
    document["kind"] = "NamespacedImageValidatingPolicy"
    document["metadata"]["namespace"] = "team-a"
    assert _evaluate(document, _pod("ghcr.io/acme/app:latest", namespace="team-a")) == ("fail", "no latest")
    assert _evaluate(document, _pod("ghcr.io/acme/app:latest", namespace="team-b")) is None


def test_cel_policy_run_dispatches_image_validating_policies() -> None:
    run = CelPolicyRun(documents=[_policy()])
    responses = run.responses(_pod("ghcr.io/acme/app:latest"), "CREATE", RequestInfo(), {})
    statuses = [(r.policy_name, rule.status) for r in responses for rule in r.rules]
    assert statuses == [("ivp", "fail")]


def test_kyverno_image_verification_functions_are_declared_so_policies_validate() -> None:
    """Kyverno's image-verification CEL library (verifyImageSignatures, verifyAttestationSignatures, extractPayload,
    getImageData) is part of the ImageValidatingPolicy environment: the force-failure-policy-ignore e2e policy is
    accepted; the signatures are Kyverno's, so a wrong argument type is still rejected; other kinds don't see them."""
    from stockade.lint.policies import validate_policy_document

    document = _policy(
        attestors=[{"name": "notary", "notary": {"certs": {"value": "x"}}}],
        attestations=[{"name": "sbom", "referrer": {"type": "sbom/cyclone-dx"}}],
        variables=[{"name": "data", "expression": "getImageData('ghcr.io/acme/app:1')"}],
        validations=[
            {"expression": "images.containers.map(i, verifyImageSignatures(i, [attestors.notary])).all(e, e > 0)"},
            {"expression": "images.containers.map(i, verifyAttestationSignatures(i, attestations.sbom, [attestors.notary])).all(e, e > 0)"},
            {"expression": "images.containers.map(i, extractPayload(i, attestations.sbom).bomFormat == 'CycloneDX').all(e, e)"},
        ],
    )
    result = validate_policy_document(document)
    assert result.ok, result.errors
    wrong = _policy(validations=[{"expression": "verifyImageSignatures(1, []) > 0"}])
    problems = validate_policy_document(wrong).errors
    assert problems and "verifyImageSignatures" in problems[0].message
    validating = {
        "apiVersion": "policies.kyverno.io/v1",
        "kind": "ValidatingPolicy",
        "metadata": {"name": "vp"},
        "spec": {"matchConstraints": document["spec"]["matchConstraints"], "validations": [{"expression": "verifyImageSignatures('a', []) > 0"}]},
    }
    problems = validate_policy_document(validating).errors
    assert any("undeclared reference to 'verifyImageSignatures'" in problem.message for problem in problems)


def test_image_verification_call_outside_a_validation_is_an_evaluation_error() -> None:
    """Without a registry the functions fail (failurePolicy decides), even when called from spec.variables."""
    document = _policy(
        variables=[{"name": "payload", "expression": "extractPayload('ghcr.io/acme/app:1', 'sbom')"}],
        validations=[{"expression": "variables.payload.bomFormat == 'CycloneDX'"}],
    )
    status, message = _evaluate(document, _pod("ghcr.io/acme/app:1"))
    assert status == "error"
    assert "ivp" in message and "extractPayload(ghcr.io/acme/app:1)" in message and "registry" in message


class _Resolver(CosignVerifier):
    """Resolves tags from a table; anything else is an unreachable registry."""

    def __init__(self, digests: dict[str, str]) -> None:
        self.digests = digests

    def resolve_digest(self, image: str) -> str:
        if image not in self.digests:
            raise VerificationUnavailable(f"registry of {image} is unreachable")
        return self.digests[image]


def test_mutate_digest_pins_matched_tags_only() -> None:
    pinned = "ghcr.io/acme/sidecar" + DIGEST
    resource = _pod("ghcr.io/acme/app:1.0", pinned, "docker.io/library/nginx:1")
    resource["spec"]["initContainers"] = [{"name": "init", "image": "ghcr.io/acme/init:2"}]
    digest = "sha256:" + "b" * 64
    evaluator = ImageValidatingEvaluator(CelPolicyEvaluator(), _Resolver({"ghcr.io/acme/app:1.0": digest, "ghcr.io/acme/init:2": digest}))
    patches, problem = evaluator.mutate_digest(CelPolicy(_policy()), AdmissionInput(object=resource, operation="CREATE"))
    assert problem is None
    assert patches == [
        {"op": "replace", "path": "/spec/containers/0/image", "value": f"ghcr.io/acme/app:1.0@{digest}"},
        {"op": "replace", "path": "/spec/initContainers/0/image", "value": f"ghcr.io/acme/init:2@{digest}"},
    ]
    disabled = _policy(validationConfigurations={"mutateDigest": False})
    assert evaluator.mutate_digest(CelPolicy(disabled), AdmissionInput(object=resource, operation="CREATE")) == ([], None)


def test_mutate_digest_reports_unresolvable_images_as_an_error() -> None:
    evaluator = ImageValidatingEvaluator(CelPolicyEvaluator(), _Resolver({}))
    patches, problem = evaluator.mutate_digest(CelPolicy(_policy()), AdmissionInput(object=_pod("ghcr.io/acme/app:1.0"), operation="CREATE"))
    assert patches == []
    assert problem is not None and problem.rules[0].status == "error"
    assert "failed to resolve digest for image ghcr.io/acme/app:1.0" in problem.rules[0].message


def test_container_image_pointers_of_a_cronjob() -> None:
    cronjob = {"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x:1"}]}}}}}}
    assert container_image_pointers(cronjob) == [("/spec/jobTemplate/spec/template/spec/containers/0/image", "x:1")]
    assert container_image_pointers({"kind": "ConfigMap"}) == []
