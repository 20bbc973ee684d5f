"""ValidatingAdmissionPolicy / MutatingAdmissionPolicy generation: which policies qualify, the generated objects (as
Kyverno's e2e tests assert them), and create / update / delete against an in-memory cluster."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from stockade.controllers.admissionpolicygen import (
    NotTranslatable,
    AdmissionPolicyGenerator,
    build_cpol_binding,
    build_cpol_vap,
    build_vpol_binding,
    build_vpol_vap,
    discovery_from,
    mpol_blocker,
    vap_blocker,
)
from stockade.controllers.webhookconfig import ApiResource
from stockade.policy.loader import Document
from tests.unit.controllers.fakecluster import RESOURCES, FakeCluster

SERVED = [
    *RESOURCES,
    ApiResource("apps", "v1", "deployments", "Deployment"),
    ApiResource("apps", "v1", "statefulsets", "StatefulSet"),
    ApiResource("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy", False),
    ApiResource("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding", False),
    ApiResource("admissionregistration.k8s.io", "v1beta1", "mutatingadmissionpolicies", "MutatingAdmissionPolicy", False),
    ApiResource("admissionregistration.k8s.io", "v1beta1", "mutatingadmissionpolicybindings", "MutatingAdmissionPolicyBinding", False),
]
HOST_PATH = "!has(object.spec.template.spec.volumes) || object.spec.template.spec.volumes.all(volume, !has(volume.hostPath))"


def cpol(name: str, match: dict[str, Any], *, exclude: dict[str, Any] | None = None, action: str = "Audit", generate: bool = True, uid: str = "u-1") -> dict[str, Any]:
    rule: dict[str, Any] = {
        "name": "host-path",
        "match": match,
        "validate": {"failureAction": action, "cel": {"generate": generate, "expressions": [{"expression": HOST_PATH, "message": "no hostPath"}]}},
    }
    if exclude:
        rule["exclude"] = exclude
    return {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": name, "uid": uid}, "spec": {"rules": [rule]}}


def test_all_match_with_object_selector() -> None:
    policy = cpol(
        "disallow-host-path-t9",
        {"all": [{"resources": {"kinds": ["Deployment", "StatefulSet"], "operations": ["CREATE", "UPDATE"], "selector": {"matchLabels": {"app": "critical"}}}}]},
    )
    assert vap_blocker(policy["spec"]) == ""
    vap = build_cpol_vap(policy, [], discovery_from(SERVED))
    assert vap["metadata"] == {
        "name": "cpol-disallow-host-path-t9",
        "labels": {"app.kubernetes.io/managed-by": "kyverno"},
        "ownerReferences": [{"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "name": "disallow-host-path-t9", "uid": "u-1"}],
    }
    assert vap["spec"] == {
        "matchConstraints": {
            "resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments", "statefulsets"]}],
            "objectSelector": {"matchLabels": {"app": "critical"}},
        },
        "validations": [{"expression": HOST_PATH, "message": "no hostPath"}],
    }
    binding = build_cpol_binding(policy)
    assert binding["metadata"]["name"] == "cpol-disallow-host-path-t9-binding"
    assert binding["spec"] == {"policyName": "cpol-disallow-host-path-t9", "validationActions": ["Audit", "Warn"]}


def test_pods_include_ephemeral_containers_and_enforce_denies() -> None:
    policy = cpol("block", {"any": [{"resources": {"kinds": ["Pod"], "operations": ["CREATE", "UPDATE"]}}]}, action="Enforce")
    vap = build_cpol_vap(policy, [], discovery_from(SERVED))
    assert vap["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods", "pods/ephemeralcontainers"]}
    ]
    assert build_cpol_binding(policy)["spec"]["validationActions"] == ["Deny"]


def test_a_subresource_kind_names_that_subresource_only() -> None:
    """Kyverno's e2e block-exec-in-pods: ``Pod/exec`` becomes ``pods/exec`` (FindResources returns the subresource,
    so no pods/ephemeralcontainers companion); an unknown subresource cannot be translated."""
    subresources = [ApiResource("", "v1", "pods/exec", "PodExecOptions"), ApiResource("", "v1", "pods/ephemeralcontainers", "Pod")]
    policy = cpol("exec", {"any": [{"resources": {"kinds": ["Pod/exec"], "operations": ["CONNECT"]}}]}, action="Enforce")
    vap = build_cpol_vap(policy, [], discovery_from(SERVED, subresources))
    assert vap["spec"]["matchConstraints"]["resourceRules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CONNECT"], "resources": ["pods/exec"]}]
    unknown = cpol("nothing", {"any": [{"resources": {"kinds": ["Pod/nothing"]}}]})
    with pytest.raises(NotTranslatable):
        build_cpol_vap(unknown, [], discovery_from(SERVED, subresources))


def test_namespaces_become_selectors_and_excluded_namespaces_rules() -> None:
    policy = cpol(
        "p",
        {"any": [{"resources": {"kinds": ["Deployment"], "namespaces": ["prod"], "operations": ["CREATE"]}}]},
        exclude={"any": [{"resources": {"namespaces": ["testing-ns", "staging-ns"], "operations": ["CREATE", "UPDATE"]}}]},
    )
    assert vap_blocker(policy["spec"]) == ""
    constraints = build_cpol_vap(policy, [], discovery_from(SERVED))["spec"]["matchConstraints"]
    assert constraints["namespaceSelector"] == {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["prod"]}]}
    assert constraints["excludeResourceRules"] == [
        {"resourceNames": ["testing-ns", "staging-ns"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["namespaces"], "operations": ["CREATE", "UPDATE"]}
    ]


def test_policies_that_cannot_be_expressed_natively() -> None:
    kinds = {"kinds": ["Pod"]}
    assert "validate.cel.generate" in vap_blocker(cpol("p", {"any": [{"resources": kinds}]}, generate=False)["spec"])
    two_rules = cpol("p", {"any": [{"resources": kinds}]})["spec"]
    two_rules["rules"].append(two_rules["rules"][0])
    assert "multiple rules" in vap_blocker(two_rules)
    assert "wildcards in resource name" in vap_blocker(cpol("p", {"any": [{"resources": {**kinds, "names": ["a*"]}}]})["spec"])
    assert "Roles / ClusterRoles" in vap_blocker(cpol("p", {"any": [{"resources": kinds, "roles": ["admin"]}]})["spec"])
    assert "excluding a resource within a namespace" in vap_blocker(
        cpol("p", {"any": [{"resources": kinds}]}, exclude={"any": [{"resources": {"kinds": ["Pod"], "namespaces": ["x"]}}]})["spec"]
    )
    pattern = {"rules": [{"name": "r", "match": {"any": [{"resources": kinds}]}, "validate": {"pattern": {"spec": {}}}}]}
    assert "non CEL rules" in vap_blocker(pattern)
    exception = {"spec": {"exceptions": [{"policyName": "p", "ruleNames": ["a", "b"]}]}}
    assert "multiple ruleNames" in vap_blocker(cpol("p", {"any": [{"resources": kinds}]})["spec"], [exception])


def test_validating_policy_builders_turn_exceptions_into_conditions_and_variables() -> None:
    vpol = {
        "apiVersion": "policies.kyverno.io/v1beta1",
        "kind": "ValidatingPolicy",
        "metadata": {"name": "check", "uid": "v-1"},
        "spec": {
            "validationActions": ["Audit"],
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]}]},
            "validations": [{"expression": "object.spec.image in exceptions.allowedImages"}],
        },
    }
    exception = {"spec": {"matchConditions": [{"name": "skip", "expression": "object.metadata.name == 'x'"}], "images": ["nginx"]}}
    vap = build_vpol_vap(vpol, [exception])
    assert vap["metadata"]["name"] == "vpol-check"
    assert vap["metadata"]["ownerReferences"][0]["apiVersion"] == "policies.kyverno.io/v1beta1"
    # read back in the stored version (v1), the owner reference still names Kyverno's client version, as Kyverno writes it
    assert build_vpol_vap({**vpol, "apiVersion": "policies.kyverno.io/v1"}, [])["metadata"]["ownerReferences"][0]["apiVersion"] == "policies.kyverno.io/v1beta1"
    assert vap["spec"]["matchConditions"] == [{"name": "skip", "expression": "!(object.metadata.name == 'x')"}]
    assert vap["spec"]["variables"] == [{"name": "allowedImages", "expression": "['nginx']"}]
    assert vap["spec"]["validations"] == [{"expression": "object.spec.image in variables.allowedImages"}]
    assert build_vpol_binding(vpol)["spec"] == {"policyName": "vpol-check", "validationActions": ["Audit"]}
    assert mpol_blocker({"autogen": {"mutatingAdmissionPolicy": {"enabled": True}}, "evaluation": {"useServerSideApply": True}}, False).startswith(
        "skip generating MutatingAdmissionPolicy: useServerSideApply"
    )


@dataclass
class Snapshot:
    documents: tuple[Document, ...]


def snapshot(*docs: dict[str, Any]) -> Snapshot:
    return Snapshot(tuple(Document(d, "test", i) for i, d in enumerate(docs)))


def cluster() -> FakeCluster:
    fake = FakeCluster()
    fake.resources = list(SERVED)
    return fake


def test_generator_creates_updates_and_deletes() -> None:
    fake = cluster()
    generator = AdmissionPolicyGenerator(fake)  # type: ignore[arg-type]
    policy = cpol("p", {"any": [{"resources": {"kinds": ["Deployment"], "operations": ["CREATE"]}}]})
    generator.reconcile(snapshot(policy))
    vap = fake.find("ValidatingAdmissionPolicy", "", "cpol-p")
    assert vap is not None and fake.find("ValidatingAdmissionPolicyBinding", "", "cpol-p-binding") is not None
    version = vap["metadata"]["resourceVersion"]
    generator.reconcile(snapshot(policy))  # unchanged: no write
    assert fake.find("ValidatingAdmissionPolicy", "", "cpol-p")["metadata"]["resourceVersion"] == version
    policy["spec"]["rules"][0]["validate"]["failureAction"] = "Enforce"
    policy["spec"]["rules"][0]["validate"]["cel"]["expressions"][0]["message"] = "changed"
    generator.reconcile(snapshot(policy))
    assert fake.find("ValidatingAdmissionPolicy", "", "cpol-p")["spec"]["validations"][0]["message"] == "changed"
    assert fake.find("ValidatingAdmissionPolicyBinding", "", "cpol-p-binding")["spec"]["validationActions"] == ["Deny"]
    policy["spec"]["rules"][0]["validate"]["cel"]["generate"] = False  # stops qualifying
    generator.reconcile(snapshot(policy))
    assert fake.find("ValidatingAdmissionPolicy", "", "cpol-p") is None and fake.find("ValidatingAdmissionPolicyBinding", "", "cpol-p-binding") is None


def test_generator_leaves_foreign_objects_and_removes_orphans() -> None:
    fake = cluster()
    fake.add({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "mine"}, "spec": {}})
    fake.add(
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "vpol-gone", "labels": {"app.kubernetes.io/managed-by": "kyverno"}}}
    )
    AdmissionPolicyGenerator(fake).reconcile(snapshot())  # type: ignore[arg-type]
    assert fake.find("ValidatingAdmissionPolicy", "", "mine") is not None
    assert fake.find("ValidatingAdmissionPolicy", "", "vpol-gone") is None


def test_mutating_policy_uses_the_served_version() -> None:
    fake = cluster()
    mpol = {
        "apiVersion": "policies.kyverno.io/v1beta1",
        "kind": "MutatingPolicy",
        "metadata": {"name": "add-label", "uid": "m-1"},
        "spec": {
            "autogen": {"mutatingAdmissionPolicy": {"enabled": True}},
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]},
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object{metadata: Object.metadata{labels: {'a': 'b'}}}"}}],
        },
    }
    AdmissionPolicyGenerator(fake).reconcile(snapshot(mpol))  # type: ignore[arg-type]
    generated = fake.find("MutatingAdmissionPolicy", "", "mpol-add-label")
    assert generated is not None and generated["apiVersion"] == "admissionregistration.k8s.io/v1beta1"
    assert generated["spec"]["reinvocationPolicy"] == "Never" and generated["spec"]["mutations"][0]["patchType"] == "ApplyConfiguration"
    assert fake.find("MutatingAdmissionPolicyBinding", "", "mpol-add-label-binding")["spec"] == {"policyName": "mpol-add-label"}


class StatusCluster:
    """Answers GET/PUT of one policy's status subresource; the first PUT can be made to lose a race."""

    def __init__(self, status: dict[str, Any] | None, conflicts: int = 0) -> None:
        self.stored: dict[str, Any] = {"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy", "metadata": {"name": "m", "resourceVersion": "1"}}
        if status is not None:
            self.stored["status"] = status
        self.conflicts = conflicts
        self.puts: list[dict[str, Any]] = []

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
        from stockade.kube.errors import from_response

        assert path.endswith("/mutatingpolicies/m/status")
        if method == "GET":
            return dict(self.stored)
        assert method == "PUT"
        self.puts.append(body)
        if self.conflicts:
            self.conflicts -= 1
            self.stored["status"] = {"conditionStatus": {"conditions": [{"type": "WebhookConfigured", "status": "True"}], "ready": True}}
            raise from_response(409, "the object has been modified", method=method, path=path)
        self.stored = body
        return body


def _mpol_document() -> dict[str, Any]:
    return {"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy", "metadata": {"name": "m", "uid": "u"}, "spec": {}}


def test_cel_policy_status_never_has_a_condition_status_without_conditions() -> None:
    """Kyverno's e2e ready step takes ``length(conditionStatus.conditions)``: the generation message must not create a
    conditionStatus whose conditions are missing (the status controller may not have written them yet)."""
    cluster = StatusCluster(None)
    AdmissionPolicyGenerator(cluster)._status(_mpol_document(), False, "skip generating MutatingAdmissionPolicy: not enabled.")  # type: ignore[arg-type]
    assert cluster.stored["status"] == {
        "conditionStatus": {"conditions": [], "message": "skip generating MutatingAdmissionPolicy: not enabled."},
        "generated": False,
    }


def test_cel_policy_status_keeps_conditions_written_concurrently() -> None:
    cluster = StatusCluster({"conditionStatus": {"message": "old"}}, conflicts=1)
    AdmissionPolicyGenerator(cluster)._status(_mpol_document(), False, "new")  # type: ignore[arg-type]
    assert len(cluster.puts) == 2
    assert cluster.stored["status"]["conditionStatus"] == {
        "conditions": [{"type": "WebhookConfigured", "status": "True"}], "ready": True, "message": "new",
    }
