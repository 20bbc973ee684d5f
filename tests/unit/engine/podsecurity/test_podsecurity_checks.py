"""Each Pod Security Standards check, with a pod that passes it and one that fails it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from stockade.engine.podsecurity import (
    CheckFailure,
    FieldError,
    PodSecurityVersionError,
    evaluate_pod_security,
    parse_version,
)


def restricted_container(name: str = "app", image: str = "nginx", **security: Any) -> dict:
    """A container that satisfies every restricted check on its own."""
    context = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    context.update(security)
    return {"name": name, "image": image, "securityContext": context}


def restricted_spec(**fields: Any) -> dict:
    spec: dict = {"containers": [restricted_container()]}
    spec.update(fields)
    return spec


def failures(spec: dict, level: str = "restricted", version: str = "latest", metadata: dict | None = None) -> dict[str, CheckFailure]:
    result = evaluate_pod_security(metadata or {"name": "pod"}, spec, level, version)
    assert result.allowed == (not result.failures)
    return {failure.check_id: failure for failure in result.failures}


def test_compliant_pod_passes_restricted_and_baseline() -> None:
    assert failures(restricted_spec()) == {}
    assert failures(restricted_spec(), level="baseline") == {}


def test_plain_pod_passes_baseline_but_not_restricted() -> None:
    spec = {"containers": [{"name": "nginx", "image": "nginx"}]}
    assert failures(spec, level="baseline") == {}
    assert set(failures(spec)) == {
        "allowPrivilegeEscalation",
        "capabilities_restricted",
        "runAsNonRoot",
        "seccompProfile_restricted",
    }


# --- baseline checks ---------------------------------------------------------------------


def test_privileged() -> None:
    assert "privileged" not in failures(restricted_spec(containers=[restricted_container(privileged=False)]))
    found = failures(restricted_spec(containers=[restricted_container("nginx", privileged=True)]), level="baseline")
    assert found["privileged"].reason == "privileged"
    assert found["privileged"].detail == 'container "nginx" must not set securityContext.privileged=true'
    assert found["privileged"].control_name == "Privileged Containers"
    assert found["privileged"].field_errors == (
        FieldError("spec.containers[0].securityContext.privileged", "Forbidden", True),
    )


@pytest.mark.parametrize("key", ["hostNetwork", "hostPID", "hostIPC"])
def test_host_namespaces(key: str) -> None:
    assert "hostNamespaces" not in failures(restricted_spec(**{key: False}), level="baseline")
    found = failures(restricted_spec(**{key: True}), level="baseline")
    assert found["hostNamespaces"].detail == f"{key}=true"
    assert found["hostNamespaces"].field_errors == (FieldError(f"spec.{key}", "Forbidden", True),)


def test_host_namespaces_lists_every_namespace() -> None:
    found = failures(restricted_spec(hostNetwork=True, hostIPC=True), level="baseline")
    assert found["hostNamespaces"].detail == "hostNetwork=true, hostIPC=true"


def test_host_path_volumes() -> None:
    assert failures(restricted_spec(volumes=[{"name": "data", "emptyDir": {}}]), level="baseline") == {}
    spec = restricted_spec(volumes=[{"name": "host", "hostPath": {"path": "/var/lib"}}, {"name": "etc", "hostPath": {"path": "/etc"}}])
    found = failures(spec, level="baseline")
    assert found["hostPathVolumes"].detail == 'volumes "host", "etc"'
    assert found["hostPathVolumes"].field_errors[0] == FieldError("spec.volumes[0].hostPath", "Forbidden", "/var/lib")


def test_host_ports() -> None:
    ok = restricted_container()
    ok["ports"] = [{"containerPort": 80}, {"containerPort": 81, "hostPort": 0}]
    assert failures(restricted_spec(containers=[ok]), level="baseline") == {}
    first = restricted_container("a")
    first["ports"] = [{"containerPort": 80, "hostPort": 9090}, {"containerPort": 81, "hostPort": 10080}]
    second = restricted_container("b")
    second["ports"] = [{"containerPort": 80, "hostPort": 9090}]
    found = failures(restricted_spec(containers=[first, second]), level="baseline")
    # Ports are listed once each, in string order.
    assert found["hostPorts"].detail == 'containers "a", "b" use hostPorts 10080, 9090'
    assert [error.bad_value for error in found["hostPorts"].field_errors] == [9090, 10080, 9090]


def test_capabilities_baseline() -> None:
    allowed = restricted_container(capabilities={"add": ["CHOWN", "NET_BIND_SERVICE", "KILL"]})
    assert "capabilities_baseline" not in failures(restricted_spec(containers=[allowed]), level="baseline")
    bad = restricted_container("nginx", capabilities={"add": ["SYS_ADMIN", "NET_RAW", "CHOWN", "NET_RAW"]})
    found = failures(restricted_spec(containers=[bad]), level="baseline")
    failure = found["capabilities_baseline"]
    assert failure.reason == "non-default capabilities"
    assert failure.detail == 'container "nginx" must not include "NET_RAW", "SYS_ADMIN" in securityContext.capabilities.add'
    assert failure.field_errors[0].bad_value == ("NET_RAW", "SYS_ADMIN")


def test_capabilities_restricted_requires_drop_all() -> None:
    no_caps = {"name": "a", "securityContext": {"allowPrivilegeEscalation": False}}
    drops_some = restricted_container("b", capabilities={"drop": ["NET_RAW", "CHOWN"]})
    drops_none = restricted_container("c", capabilities={})
    found = failures(restricted_spec(containers=[no_caps, drops_some, drops_none]))
    failure = found["capabilities_restricted"]
    assert failure.detail == 'containers "a", "b", "c" must set securityContext.capabilities.drop=["ALL"]'
    assert failure.field_errors == (
        FieldError("spec.containers[0].securityContext.capabilities.drop", "Required"),
        FieldError("spec.containers[1].securityContext.capabilities.drop", "Forbidden", ("CHOWN", "NET_RAW")),
        FieldError("spec.containers[2].securityContext.capabilities.drop", "Required"),
    )


def test_capabilities_restricted_only_allows_adding_net_bind_service() -> None:
    allowed = restricted_container(capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]})
    assert failures(restricted_spec(containers=[allowed])) == {}
    bad = restricted_container("x", capabilities={"drop": ["ALL"], "add": ["CHOWN"]})
    found = failures(restricted_spec(containers=[bad]))
    assert found["capabilities_restricted"].detail == 'container "x" must not include "CHOWN" in securityContext.capabilities.add'
    # CHOWN is in the default set, so baseline accepts it.
    assert "capabilities_baseline" not in found


def test_capabilities_restricted_joins_both_problems() -> None:
    bad_drop = restricted_container("a", capabilities={"add": ["SYS_TIME"]})
    found = failures(restricted_spec(containers=[bad_drop]))
    assert found["capabilities_restricted"].detail == (
        'container "a" must set securityContext.capabilities.drop=["ALL"]; '
        'container "a" must not include "SYS_TIME" in securityContext.capabilities.add'
    )
    # Kyverno also runs the baseline capabilities check at the restricted level.
    assert "capabilities_baseline" in found


def test_se_linux_options() -> None:
    ok = restricted_spec(securityContext={"seLinuxOptions": {"type": "container_t", "level": "s0:c1"}})
    assert failures(ok, level="baseline") == {}
    spec = restricted_spec(
        securityContext={"seLinuxOptions": {"type": "spc_t"}},
        containers=[restricted_container("a", seLinuxOptions={"user": "root", "role": "sysadm_r"})],
    )
    failure = failures(spec, level="baseline")["seLinuxOptions"]
    assert failure.detail == (
        'pod and container "a" set forbidden securityContext.seLinuxOptions: '
        'type "spc_t"; user may not be set; role may not be set'
    )
    assert [error.field for error in failure.field_errors] == [
        "spec.securityContext.seLinuxOptions.type",
        "spec.containers[0].securityContext.seLinuxOptions.user",
        "spec.containers[0].securityContext.seLinuxOptions.role",
    ]


def test_se_linux_container_engine_type_allowed_from_1_31() -> None:
    spec = restricted_spec(securityContext={"seLinuxOptions": {"type": "container_engine_t"}})
    assert "seLinuxOptions" in failures(spec, level="baseline", version="v1.30")
    assert "seLinuxOptions" not in failures(spec, level="baseline", version="v1.31")
    assert "seLinuxOptions" not in failures(spec, level="baseline")


def test_proc_mount() -> None:
    assert failures(restricted_spec(containers=[restricted_container(procMount="Default")]), level="baseline") == {}
    found = failures(restricted_spec(containers=[restricted_container("a", procMount="Unmasked")]), level="baseline")
    assert found["procMount"].detail == 'container "a" must not set securityContext.procMount to "Unmasked"'


def test_seccomp_baseline_fields() -> None:
    for allowed in ("RuntimeDefault", "Localhost"):
        spec = restricted_spec(securityContext={"seccompProfile": {"type": allowed}})
        assert failures(spec, level="baseline") == {}
    spec = {
        "securityContext": {"seccompProfile": {"type": "Unconfined"}},
        "containers": [{"name": "a", "securityContext": {"seccompProfile": {"type": "Unconfined"}}}],
    }
    failure = failures(spec, level="baseline")["seccompProfile_baseline"]
    assert failure.detail == 'pod and container "a" must not set securityContext.seccompProfile.type to "Unconfined"'
    # Baseline does not require a profile.
    assert failures({"containers": [{"name": "a"}]}, level="baseline") == {}


def test_seccomp_baseline_uses_annotations_before_1_19() -> None:
    metadata = {"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}}
    spec = {"containers": [{"name": "a"}]}
    found = failures(spec, level="baseline", version="v1.18", metadata=metadata)
    assert found["seccompProfile_baseline"].detail == (
        'forbidden annotation seccomp.security.alpha.kubernetes.io/pod="unconfined"'
    )
    assert failures(spec, level="baseline", version="v1.19", metadata=metadata) == {}
    allowed = {"annotations": {"container.seccomp.security.alpha.kubernetes.io/a": "localhost/profile"}}
    assert failures(spec, level="baseline", version="v1.18", metadata=allowed) == {}


def test_sysctls_allowed_set_grows_with_version() -> None:
    safe = restricted_spec(securityContext={"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]})
    assert failures(safe, level="baseline", version="v1.19") == {}
    newer = restricted_spec(securityContext={"sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "1"}]})
    assert "sysctls" in failures(newer, level="baseline", version="v1.31")
    assert "sysctls" not in failures(newer, level="baseline", version="v1.32")
    reserved = restricted_spec(securityContext={"sysctls": [{"name": "net.ipv4.ip_local_reserved_ports", "value": "1"}]})
    assert "sysctls" in failures(reserved, level="baseline", version="v1.26")
    assert "sysctls" not in failures(reserved, level="baseline", version="v1.27")
    bad = restricted_spec(securityContext={"sysctls": [{"name": "kernel.msgmax"}, {"name": "vm.swappiness"}]})
    failure = failures(bad, level="baseline")["sysctls"]
    assert failure.detail == "kernel.msgmax, vm.swappiness"
    assert failure.field_errors[1] == FieldError("spec.securityContext.sysctls[1].name", "Forbidden", "vm.swappiness")


def test_windows_host_process() -> None:
    ok = restricted_spec(securityContext={"windowsOptions": {"hostProcess": False}})
    assert failures(ok, level="baseline") == {}
    spec = restricted_spec(
        securityContext={"windowsOptions": {"hostProcess": True}},
        containers=[restricted_container("a", windowsOptions={"hostProcess": True})],
    )
    failure = failures(spec, level="baseline")["windowsHostProcess"]
    assert failure.detail == 'pod and container "a" must not set securityContext.windowsOptions.hostProcess=true'
    assert failure.control_name == "HostProcess"


def test_app_armor_fields_and_annotations() -> None:
    ok_meta = {"annotations": {"container.apparmor.security.beta.kubernetes.io/app": "localhost/custom"}}
    ok = restricted_spec(securityContext={"appArmorProfile": {"type": "RuntimeDefault"}})
    assert failures(ok, level="baseline", metadata=ok_meta) == {}
    bad_meta = {"annotations": {"container.apparmor.security.beta.kubernetes.io/app": "unconfined"}}
    spec = restricted_spec(containers=[restricted_container("app", appArmorProfile={"type": "Unconfined"})])
    failure = failures(spec, level="baseline", metadata=bad_meta)["appArmorProfile"]
    assert failure.reason == "forbidden AppArmor profiles"
    assert failure.detail == (
        'container "app" and annotation must not set AppArmor profile type to '
        '"Unconfined", "container.apparmor.security.beta.kubernetes.io/app="unconfined""'
    )
    assert failure.field_errors[-1] == FieldError(
        "metadata.annotations[container.apparmor.security.beta.kubernetes.io/app]", "Forbidden", "unconfined"
    )


def test_host_probes_and_lifecycle_has_no_field_errors() -> None:
    container = restricted_container("web")
    container["livenessProbe"] = {"httpGet": {"host": "10.0.0.1", "port": 80}}
    container["lifecycle"] = {"preStop": {"tcpSocket": {"host": "evil", "port": 1}}}
    failure = failures(restricted_spec(containers=[container]), level="baseline")["hostProbesAndHostLifecycle"]
    assert failure.detail == 'container "web" uses probe or lifecycle hosts "10.0.0.1", "evil"'
    assert failure.field_errors == ()
    assert failure.control_name == ""
    plain = restricted_container("web")
    plain["readinessProbe"] = {"httpGet": {"port": 80, "host": ""}}
    assert failures(restricted_spec(containers=[plain]), level="baseline") == {}


# --- restricted checks -------------------------------------------------------------------


def test_allow_privilege_escalation() -> None:
    missing_context = {"name": "a"}
    unset = restricted_container("b")
    del unset["securityContext"]["allowPrivilegeEscalation"]
    enabled = restricted_container("c", allowPrivilegeEscalation=True)
    spec = restricted_spec(containers=[missing_context, unset, enabled])
    failure = failures(spec)["allowPrivilegeEscalation"]
    assert failure.detail == 'containers "a", "b", "c" must set securityContext.allowPrivilegeEscalation=false'
    assert failure.field_errors == (
        FieldError("spec.containers[0].securityContext.allowPrivilegeEscalation", "Required"),
        FieldError("spec.containers[1].securityContext.allowPrivilegeEscalation", "Forbidden", "nil"),
        FieldError("spec.containers[2].securityContext.allowPrivilegeEscalation", "Forbidden", True),
    )
    assert "allowPrivilegeEscalation" not in failures(spec, level="baseline")


def test_restricted_volume_types() -> None:
    allowed = [
        {"name": "a", "configMap": {"name": "x"}},
        {"name": "b", "secret": {"secretName": "x"}},
        {"name": "c", "persistentVolumeClaim": {"claimName": "x"}},
        {"name": "d", "ephemeral": {}},
        {"name": "e", "image": {"reference": "x"}},
        {"name": "f", "csi": {"driver": "x"}},
    ]
    assert failures(restricted_spec(volumes=allowed)) == {}
    spec = restricted_spec(volumes=[{"name": "n", "nfs": {"server": "s", "path": "/"}}, {"name": "u"}])
    failure = failures(spec)["restrictedVolumes"]
    assert failure.detail == 'volumes "n", "u" use restricted volume types "nfs", "unknown"'
    assert failure.field_errors == (
        FieldError("spec.volumes[0].nfs"),
        FieldError("spec.volumes[1].unknown"),
    )
    assert "restrictedVolumes" not in failures(spec, level="baseline")


def test_run_as_non_root_pod_level_covers_containers() -> None:
    container = restricted_container()
    del container["securityContext"]["runAsNonRoot"]
    spec = restricted_spec(containers=[container], securityContext={"runAsNonRoot": True})
    assert failures(spec) == {}
    spec["securityContext"] = {}
    failure = failures(spec)["runAsNonRoot"]
    assert failure.detail == 'pod or container "app" must set securityContext.runAsNonRoot=true'


def test_run_as_non_root_explicit_false() -> None:
    spec = restricted_spec(
        securityContext={"runAsNonRoot": False},
        containers=[restricted_container("a", runAsNonRoot=False), {"name": "b", "securityContext": {}}],
    )
    failure = failures(spec)["runAsNonRoot"]
    assert failure.detail == (
        'pod and container "a" must not set securityContext.runAsNonRoot=false\n'
        'pod or container "b" must set securityContext.runAsNonRoot=true'
    )
    assert [error.type for error in failure.field_errors] == ["Forbidden", "Forbidden", "Required"]


def test_run_as_user() -> None:
    assert failures(restricted_spec(securityContext={"runAsUser": 1000})) == {}
    spec = restricted_spec(securityContext={"runAsUser": 0}, containers=[restricted_container("a", runAsUser=0)])
    failure = failures(spec)["runAsUser"]
    assert failure.detail == 'pod and container "a" must not set runAsUser=0'
    assert failure.field_errors[0] == FieldError("spec.securityContext.runAsUser", "Forbidden", 0)


def test_seccomp_restricted_requires_a_profile() -> None:
    container = restricted_container("a")
    del container["securityContext"]["seccompProfile"]
    spec = restricted_spec(containers=[container])
    failure = failures(spec)["seccompProfile_restricted"]
    assert failure.detail == 'pod or container "a" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"'
    spec["securityContext"] = {"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}
    assert failures(spec) == {}


def test_seccomp_restricted_reports_explicit_bad_values_first() -> None:
    spec = restricted_spec(
        containers=[
            restricted_container("a", seccompProfile={"type": "Unconfined"}),
            {"name": "b", "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True}},
        ]
    )
    failure = failures(spec)["seccompProfile_restricted"]
    assert failure.detail == 'container "a" must not set securityContext.seccompProfile.type to "Unconfined"'


@pytest.mark.parametrize("check_id", ["allowPrivilegeEscalation", "capabilities_restricted", "seccompProfile_restricted"])
def test_windows_pods_are_exempt_from_linux_only_checks_from_1_25(check_id: str) -> None:
    spec = {"os": {"name": "windows"}, "securityContext": {"runAsNonRoot": True}, "containers": [{"name": "w"}]}
    assert check_id not in failures(spec, version="v1.25")
    assert check_id in failures(spec, version="v1.24")


# --- containers, levels and versions ----------------------------------------------------


def test_init_and_ephemeral_containers_are_checked_in_upstream_order() -> None:
    spec = {
        "containers": [{"name": "main", "securityContext": {"privileged": True}}],
        "initContainers": [{"name": "init", "securityContext": {"privileged": True}}],
        "ephemeralContainers": [{"name": "debug", "securityContext": {"privileged": True}}],
    }
    failure = failures(spec, level="baseline")["privileged"]
    assert failure.detail == 'containers "init", "main", "debug" must not set securityContext.privileged=true'
    assert [error.field for error in failure.field_errors] == [
        "spec.initContainers[0].securityContext.privileged",
        "spec.containers[0].securityContext.privileged",
        "spec.ephemeralContainers[0].securityContext.privileged",
    ]


def test_failures_follow_upstream_registration_order() -> None:
    spec = {
        "hostNetwork": True,
        "securityContext": {"sysctls": [{"name": "kernel.msgmax"}]},
        "containers": [{"name": "a", "securityContext": {"privileged": True}}],
    }
    result = evaluate_pod_security({}, spec, "baseline")
    assert [failure.check_id for failure in result.failures] == ["hostNamespaces", "privileged", "sysctls"]


def test_first_revision_applies_to_older_versions_like_kyverno() -> None:
    """Kyverno runs a check's first revision even below its minimum version (runAsUser is 1.23+)."""
    spec = restricted_spec(securityContext={"runAsUser": 0})
    assert "runAsUser" in failures(spec, version="v1.19")
    probe = restricted_container("web")
    probe["livenessProbe"] = {"tcpSocket": {"host": "example", "port": 1}}
    assert "hostProbesAndHostLifecycle" in failures(restricted_spec(containers=[probe]), level="baseline", version="v1.24")


def test_privileged_level_runs_every_check_like_kyverno() -> None:
    assert "runAsNonRoot" in failures({"containers": [{"name": "a"}]}, level="privileged")


def test_version_parsing() -> None:
    assert parse_version("latest") is None
    assert parse_version("") is None
    assert parse_version("v1.29") == (1, 29)
    for invalid in ("1.29", "v2.1", "v1.029", "v1.x", "latest "):
        with pytest.raises(PodSecurityVersionError):
            parse_version(invalid)
    with pytest.raises(PodSecurityVersionError):
        evaluate_pod_security({}, {}, "strict")


def test_input_is_not_modified() -> None:
    spec = restricted_spec(
        hostNetwork=True,
        containers=[restricted_container("a", privileged=True, image="nginx")],
        volumes=[{"name": "h", "hostPath": {"path": "/"}}],
    )
    metadata = {"name": "p", "annotations": {"container.apparmor.security.beta.kubernetes.io/a": "unconfined"}}
    before = copy.deepcopy((metadata, spec))
    evaluate_pod_security(
        metadata, spec, "restricted", "latest",
        [{"controlName": "Privileged Containers", "images": ["nginx"]}, {"controlName": "Host Namespaces"}],
    )
    assert (metadata, spec) == before
