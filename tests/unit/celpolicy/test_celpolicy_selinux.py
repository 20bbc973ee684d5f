"""The Pod Security Standards' SELinux check (k8s.io/pod-security-admission ``check_seLinuxOptions.go``) written as a
ValidatingPolicy, the way Kyverno's policy library writes it: ``type`` unset or one of container_t, container_init_t,
container_kvm_t; ``user`` and ``role`` unset; ``level`` free; pod level, containers, initContainers and
ephemeralContainers.  The policy's optional chains (``?.``/``orValue``) run inside ``all`` next to an ``exists`` that
stops early, which must not disturb the next container's evaluation.
"""

from __future__ import annotations

from typing import Any

import pytest

from stockade.celpolicy import AdmissionInput, CelPolicy, CelPolicyEvaluator

OPTS = "?securityContext.?seLinuxOptions"
POLICY = CelPolicy(
    {
        "apiVersion": "policies.kyverno.io/v1",
        "kind": "ValidatingPolicy",
        "metadata": {"name": "selinux"},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
            "variables": [
                {"name": "containers", "expression": "object.spec.containers + object.spec.?initContainers.orValue([]) + object.spec.?ephemeralContainers.orValue([])"},
                {"name": "allowed", "expression": "['container_t', 'container_init_t', 'container_kvm_t']"},
            ],
            "validations": [
                {
                    "expression": f"(object.spec.{OPTS}.?type.orValue('') == '' || variables.allowed.exists(type, type == object.spec.securityContext.seLinuxOptions.type))"
                    f" && variables.containers.all(c, c.{OPTS}.?type.orValue('') == '' || variables.allowed.exists(type, type == c.securityContext.seLinuxOptions.type))",
                    "message": "type",
                },
                {
                    "expression": f"object.spec.{OPTS}.?user.orValue('') == '' && object.spec.{OPTS}.?role.orValue('') == ''"
                    f" && variables.containers.all(c, c.{OPTS}.?user.orValue('') == '' && c.{OPTS}.?role.orValue('') == '')",
                    "message": "user/role",
                },
            ],
        },
    }
)


def _container(name: str, options: dict[str, str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": "busybox"}
    if options is not None:
        container["securityContext"] = {"seLinuxOptions": options}
    return container


def _pod(pod_options: dict[str, str] | None = None, **lists: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": lists.pop("containers", [_container("c")]), **lists}
    if pod_options is not None:
        spec["securityContext"] = {"seLinuxOptions": pod_options}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": spec}


CASES = [
    ("no options", _pod(), []),
    ("pod type allowed", _pod({"type": "container_init_t"}), []),
    ("pod type empty", _pod({"type": ""}), []),
    ("pod type forbidden", _pod({"type": "spc_t"}), ["type"]),
    ("pod level only", _pod({"level": "s0:c1,c2"}), []),
    ("pod user", _pod({"user": "sysadm_u"}), ["user/role"]),
    ("pod role", _pod({"role": "sysadm_r"}), ["user/role"]),
    ("container allowed then level only", _pod(containers=[_container("a", {"type": "container_t"}), _container("b", {"level": "s0"})]), []),
    ("container allowed then forbidden", _pod(containers=[_container("a", {"type": "container_kvm_t"}), _container("b", {"type": "spc_t"})]), ["type"]),
    ("init allowed then user", _pod(initContainers=[_container("i1", {"type": "container_init_t"}), _container("i2", {"user": "u"})]), ["user/role"]),
    ("ephemeral forbidden", _pod(ephemeralContainers=[_container("e", {"type": "spc_t"})]), ["type"]),
    ("ephemeral role", _pod(ephemeralContainers=[_container("e", {"role": "r"})]), ["user/role"]),
]


@pytest.mark.parametrize(("pod", "failed"), [(pod, failed) for _, pod, failed in CASES], ids=[name for name, _, _ in CASES])
def test_selinux_options_as_pod_security_standards_define_them(pod: dict[str, Any], failed: list[str]) -> None:
    response = CelPolicyEvaluator().validate(POLICY, AdmissionInput(pod))
    assert response is not None
    assert [rule.status for rule in response.rules] == (["fail"] if failed else ["pass"])
    if failed:
        assert [rule.message for rule in response.rules] == failed
