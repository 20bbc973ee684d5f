"""The Pod Security Standards checks, reimplemented from the pod-security-admission semantics.

Every check receives a `PodView` (the pod spec as decoded YAML/JSON plus its containers, collected
once) and returns `None` when the pod passes or a `CheckOutcome` with the upstream reason, detail
and field errors. Field errors are always produced because Kyverno always asks for them.
"""

from __future__ import annotations

from typing import Any, Callable

from ._model import FORBIDDEN, REQUIRED, CheckOutcome, FieldError

BASELINE = "baseline"
RESTRICTED = "restricted"

_CONTAINER_KINDS = ("initContainers", "containers", "ephemeralContainers")


def _as_dict(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


class PodView:
    """A pod spec prepared for the checks: containers are walked once, in upstream visiting order."""

    __slots__ = ("metadata", "spec", "pod_sc", "containers", "windows")

    def __init__(self, metadata: dict[str, Any] | None, spec: dict[str, Any] | None) -> None:
        spec = spec if isinstance(spec, dict) else {}
        self.metadata = metadata if isinstance(metadata, dict) else {}
        self.spec = spec
        self.pod_sc = _as_dict(spec.get("securityContext"))
        # (field path prefix, container, container securityContext or None)
        containers: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
        for kind in _CONTAINER_KINDS:
            items = spec.get(kind)
            if items:
                for index, container in enumerate(_as_list(items)):
                    if not isinstance(container, dict):
                        container = {}
                    containers.append(
                        (f"spec.{kind}[{index}]", container, _as_dict(container.get("securityContext")))
                    )
        self.containers = containers
        os_spec = _as_dict(spec.get("os"))
        self.windows = os_spec is not None and os_spec.get("name") == "windows"

    def annotations(self) -> dict[str, Any]:
        return _as_dict(self.metadata.get("annotations")) or {}


CheckFn = Callable[[PodView], "CheckOutcome | None"]


def _name(container: dict[str, Any]) -> str:
    name = container.get("name")
    return name if isinstance(name, str) else ("" if name is None else str(name))


def _plural(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def _join_quote(items: list[str]) -> str:
    return '"' + '", "'.join(items) + '"' if items else ""


def _go_quote(text: str) -> str:
    """Go's %q for the plain strings annotations hold."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = escaped.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    return f'"{escaped}"'


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def _setters_detail(setters: list[str]) -> str:
    return " and ".join(setters)


def _containers_label(names: list[str]) -> str:
    return f"{_plural('container', 'containers', len(names))} {_join_quote(names)}"


# --- baseline -------------------------------------------------------------------------------


def check_privileged(pod: PodView) -> CheckOutcome | None:
    names: list[str] = []
    errors: list[FieldError] = []
    for prefix, container, sc in pod.containers:
        if sc is not None and sc.get("privileged") is True:
            names.append(_name(container))
            errors.append(FieldError(f"{prefix}.securityContext.privileged", FORBIDDEN, True))
    if not names:
        return None
    return CheckOutcome(
        "privileged",
        "privileged",
        f"{_containers_label(names)} must not set securityContext.privileged=true",
        errors,
    )


def check_host_namespaces(pod: PodView) -> CheckOutcome | None:
    spec = pod.spec
    data: list[str] = []
    errors: list[FieldError] = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key) is True:
            data.append(f"{key}=true")
            errors.append(FieldError(f"spec.{key}", FORBIDDEN, True))
    if not data:
        return None
    return CheckOutcome("hostNamespaces", "host namespaces", ", ".join(data), errors)


def check_host_path_volumes(pod: PodView) -> CheckOutcome | None:
    names: list[str] = []
    errors: list[FieldError] = []
    for index, volume in enumerate(_as_list(pod.spec.get("volumes"))):
        if not isinstance(volume, dict):
            continue
        host_path = volume.get("hostPath")
        if host_path is not None:
            path = _str(host_path.get("path")) if isinstance(host_path, dict) else ""
            names.append(_str(volume.get("name")))
            errors.append(FieldError(f"spec.volumes[{index}].hostPath", FORBIDDEN, path))
    if not names:
        return None
    return CheckOutcome(
        "hostPathVolumes",
        "hostPath volumes",
        f"{_plural('volume', 'volumes', len(names))} {_join_quote(names)}",
        errors,
    )


def _port_number(value: Any) -> int:
    if isinstance(value, bool) or value is None:
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def check_host_ports(pod: PodView) -> CheckOutcome | None:
    names: list[str] = []
    errors: list[FieldError] = []
    ports_seen: set[str] = set()
    for prefix, container, _sc in pod.containers:
        ports = container.get("ports")
        if not ports:
            continue
        bad = False
        for index, port in enumerate(_as_list(ports)):
            if not isinstance(port, dict):
                continue
            host_port = _port_number(port.get("hostPort"))
            if host_port != 0:
                bad = True
                ports_seen.add(str(host_port))
                errors.append(FieldError(f"{prefix}.ports[{index}].hostPort", FORBIDDEN, host_port))
        if bad:
            names.append(_name(container))
    if not names:
        return None
    return CheckOutcome(
        "hostPorts",
        "hostPort",
        " ".join(
            (
                _plural("container", "containers", len(names)),
                _join_quote(names),
                _plural("uses", "use", len(names)),
                _plural("hostPort", "hostPorts", len(ports_seen)),
                ", ".join(sorted(ports_seen)),
            )
        ),
        errors,
    )


_BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)


def _capabilities(sc: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if sc is None else _as_dict(sc.get("capabilities"))


def check_capabilities_baseline(pod: PodView) -> CheckOutcome | None:
    names: list[str] = []
    errors: list[FieldError] = []
    all_forbidden: set[str] = set()
    for prefix, container, sc in pod.containers:
        caps = _capabilities(sc)
        if caps is None:
            continue
        forbidden = {_str(c) for c in _as_list(caps.get("add"))} - _BASELINE_CAPABILITIES
        if forbidden:
            all_forbidden |= forbidden
            names.append(_name(container))
            errors.append(
                FieldError(f"{prefix}.securityContext.capabilities.add", FORBIDDEN, tuple(sorted(forbidden)))
            )
    if not names:
        return None
    return CheckOutcome(
        "capabilities_baseline",
        "non-default capabilities",
        f"{_containers_label(names)} must not include {_join_quote(sorted(all_forbidden))} "
        "in securityContext.capabilities.add",
        errors,
    )


def _capabilities_restricted(pod: PodView) -> CheckOutcome | None:
    missing_drop: list[str] = []
    missing_drop_errors: list[FieldError] = []
    adding: list[str] = []
    adding_errors: list[FieldError] = []
    all_forbidden: set[str] = set()
    for prefix, container, sc in pod.containers:
        caps = _capabilities(sc)
        if caps is None:
            missing_drop.append(_name(container))
            missing_drop_errors.append(FieldError(f"{prefix}.securityContext.capabilities.drop", REQUIRED))
            continue
        drop = [_str(c) for c in _as_list(caps.get("drop"))]
        if "ALL" not in drop:
            missing_drop.append(_name(container))
            if drop:
                missing_drop_errors.append(
                    FieldError(f"{prefix}.securityContext.capabilities.drop", FORBIDDEN, tuple(sorted(set(drop))))
                )
            else:
                missing_drop_errors.append(
                    FieldError(f"{prefix}.securityContext.capabilities.drop", REQUIRED)
                )
        forbidden = {_str(c) for c in _as_list(caps.get("add"))}
        forbidden.discard("NET_BIND_SERVICE")
        if forbidden:
            all_forbidden |= forbidden
            adding.append(_name(container))
            adding_errors.append(
                FieldError(f"{prefix}.securityContext.capabilities.add", FORBIDDEN, tuple(sorted(forbidden)))
            )
    if not missing_drop and not adding:
        return None
    details: list[str] = []
    if missing_drop:
        details.append(f'{_containers_label(missing_drop)} must set securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(
            f"{_containers_label(adding)} must not include {_join_quote(sorted(all_forbidden))} "
            "in securityContext.capabilities.add"
        )
    return CheckOutcome(
        "capabilities_restricted", "unrestricted capabilities", "; ".join(details), missing_drop_errors + adding_errors
    )


def check_capabilities_restricted_1_22(pod: PodView) -> CheckOutcome | None:
    return _capabilities_restricted(pod)


def check_capabilities_restricted_1_25(pod: PodView) -> CheckOutcome | None:
    return None if pod.windows else _capabilities_restricted(pod)


def _se_linux(pod: PodView, allowed_types: frozenset[str]) -> CheckOutcome | None:
    setters: list[str] = []
    errors: list[FieldError] = []
    bad_types: set[str] = set()
    set_user = False
    set_role = False

    def inspect(options: dict[str, Any], prefix: str) -> bool:
        nonlocal set_user, set_role
        valid = True
        type_ = _str(options.get("type"))
        if type_ not in allowed_types:
            valid = False
            bad_types.add(type_)
            errors.append(FieldError(f"{prefix}.seLinuxOptions.type", FORBIDDEN, type_))
        user = _str(options.get("user"))
        if user:
            valid = False
            set_user = True
            errors.append(FieldError(f"{prefix}.seLinuxOptions.user", FORBIDDEN, user))
        role = _str(options.get("role"))
        if role:
            valid = False
            set_role = True
            errors.append(FieldError(f"{prefix}.seLinuxOptions.role", FORBIDDEN, role))
        return valid

    if pod.pod_sc is not None:
        options = _as_dict(pod.pod_sc.get("seLinuxOptions"))
        if options is not None and not inspect(options, "spec.securityContext"):
            setters.append("pod")
    bad_containers: list[str] = []
    for prefix, container, sc in pod.containers:
        if sc is None:
            continue
        options = _as_dict(sc.get("seLinuxOptions"))
        if options is not None and not inspect(options, f"{prefix}.securityContext"):
            bad_containers.append(_name(container))
    if bad_containers:
        setters.append(_containers_label(bad_containers))
    if not setters:
        return None
    data: list[str] = []
    if bad_types:
        data.append(f"{_plural('type', 'types', len(bad_types))} {_join_quote(sorted(bad_types))}")
    if set_user:
        data.append("user may not be set")
    if set_role:
        data.append("role may not be set")
    return CheckOutcome(
        "seLinuxOptions",
        "seLinuxOptions",
        f"{_setters_detail(setters)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}",
        errors,
    )


_SELINUX_TYPES_1_0 = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
_SELINUX_TYPES_1_31 = _SELINUX_TYPES_1_0 | {"container_engine_t"}


def check_se_linux_1_0(pod: PodView) -> CheckOutcome | None:
    return _se_linux(pod, _SELINUX_TYPES_1_0)


def check_se_linux_1_31(pod: PodView) -> CheckOutcome | None:
    return _se_linux(pod, _SELINUX_TYPES_1_31)


def check_proc_mount(pod: PodView) -> CheckOutcome | None:
    names: list[str] = []
    errors: list[FieldError] = []
    bad_values: set[str] = set()
    for prefix, container, sc in pod.containers:
        if sc is None:
            continue
        proc_mount = sc.get("procMount")
        if proc_mount is not None and proc_mount != "Default":
            value = _str(proc_mount)
            names.append(_name(container))
            errors.append(FieldError(f"{prefix}.securityContext.procMount", FORBIDDEN, value))
            bad_values.add(value)
    if not names:
        return None
    return CheckOutcome(
        "procMount",
        "procMount",
        f"{_containers_label(names)} must not set securityContext.procMount to {_join_quote(sorted(bad_values))}",
        errors,
    )


_SECCOMP_ANNOTATION_POD = "seccomp.security.alpha.kubernetes.io/pod"
_SECCOMP_ANNOTATION_CONTAINER = "container.seccomp.security.alpha.kubernetes.io/"


def _valid_seccomp_annotation(value: str) -> bool:
    return value in ("runtime/default", "docker/default") or value.startswith("localhost/")


def check_seccomp_baseline_1_0(pod: PodView) -> CheckOutcome | None:
    """Before v1.19 seccomp was configured through alpha annotations only."""
    annotations = pod.annotations()
    if not annotations:
        return None
    found: dict[str, list[FieldError]] = {}

    def inspect(key: str) -> None:
        if key in annotations:
            value = _str(annotations[key])
            if not _valid_seccomp_annotation(value):
                found.setdefault(f"{key}={_go_quote(value)}", []).append(
                    FieldError(f"metadata.annotations[{key}]", FORBIDDEN, value)
                )

    inspect(_SECCOMP_ANNOTATION_POD)
    for _prefix, container, _sc in pod.containers:
        inspect(_SECCOMP_ANNOTATION_CONTAINER + _name(container))
    if not found:
        return None
    values = sorted(found)
    return CheckOutcome(
        "seccompProfile_baseline",
        "seccompProfile",
        f"forbidden {_plural('annotation', 'annotations', len(values))} {', '.join(values)}",
        [error for value in values for error in found[value]],
    )


def _seccomp_type(sc: dict[str, Any] | None) -> str | None:
    """The profile type, "" when a profile is set without type, None when no profile is set."""
    if sc is None:
        return None
    profile = sc.get("seccompProfile")
    if profile is None:
        return None
    return _str(profile.get("type")) if isinstance(profile, dict) else ""


def _valid_seccomp(type_: str) -> bool:
    return type_ == "RuntimeDefault" or type_ == "Localhost"


def check_seccomp_baseline_1_19(pod: PodView) -> CheckOutcome | None:
    setters: list[str] = []
    errors: list[FieldError] = []
    bad_values: set[str] = set()
    pod_type = _seccomp_type(pod.pod_sc)
    if pod_type is not None and not _valid_seccomp(pod_type):
        setters.append("pod")
        errors.append(FieldError("spec.securityContext.seccompProfile.type", FORBIDDEN, pod_type))
        bad_values.add(pod_type)
    bad_containers: list[str] = []
    for prefix, container, sc in pod.containers:
        type_ = _seccomp_type(sc)
        if type_ is not None and not _valid_seccomp(type_):
            bad_containers.append(_name(container))
            errors.append(FieldError(f"{prefix}.securityContext.seccompProfile.type", FORBIDDEN, type_))
            bad_values.add(type_)
    if bad_containers:
        setters.append(_containers_label(bad_containers))
    if not setters:
        return None
    return CheckOutcome(
        "seccompProfile_baseline",
        "seccompProfile",
        f"{_setters_detail(setters)} must not set securityContext.seccompProfile.type to "
        f"{_join_quote(sorted(bad_values))}",
        errors,
    )


_SYSCTLS_1_0 = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
    }
)
_SYSCTLS_1_27 = _SYSCTLS_1_0 | {"net.ipv4.ip_local_reserved_ports"}
_SYSCTLS_1_29 = _SYSCTLS_1_27 | {
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
_SYSCTLS_1_32 = _SYSCTLS_1_29 | {"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}


def _sysctls(pod: PodView, allowed: frozenset[str]) -> CheckOutcome | None:
    if pod.pod_sc is None:
        return None
    names: list[str] = []
    errors: list[FieldError] = []
    for index, sysctl in enumerate(_as_list(pod.pod_sc.get("sysctls"))):
        name = _str(sysctl.get("name")) if isinstance(sysctl, dict) else ""
        if name not in allowed:
            names.append(name)
            errors.append(FieldError(f"spec.securityContext.sysctls[{index}].name", FORBIDDEN, name))
    if not names:
        return None
    return CheckOutcome("sysctls", "forbidden sysctls", ", ".join(names), errors)


def check_sysctls_1_0(pod: PodView) -> CheckOutcome | None:
    return _sysctls(pod, _SYSCTLS_1_0)


def check_sysctls_1_27(pod: PodView) -> CheckOutcome | None:
    return _sysctls(pod, _SYSCTLS_1_27)


def check_sysctls_1_29(pod: PodView) -> CheckOutcome | None:
    return _sysctls(pod, _SYSCTLS_1_29)


def check_sysctls_1_32(pod: PodView) -> CheckOutcome | None:
    return _sysctls(pod, _SYSCTLS_1_32)


def _host_process(sc: dict[str, Any] | None) -> bool:
    if sc is None:
        return False
    options = sc.get("windowsOptions")
    return isinstance(options, dict) and options.get("hostProcess") is True


def check_windows_host_process(pod: PodView) -> CheckOutcome | None:
    names: list[str] = []
    container_errors: list[FieldError] = []
    for prefix, container, sc in pod.containers:
        if _host_process(sc):
            names.append(_name(container))
            container_errors.append(
                FieldError(f"{prefix}.securityContext.windowsOptions.hostProcess", FORBIDDEN, True)
            )
    setters: list[str] = []
    errors: list[FieldError] = []
    if _host_process(pod.pod_sc):
        setters.append("pod")
        errors.append(FieldError("spec.securityContext.windowsOptions.hostProcess", FORBIDDEN, True))
    if names:
        setters.append(_containers_label(names))
        errors.extend(container_errors)
    if not setters:
        return None
    return CheckOutcome(
        "windowsHostProcess",
        "hostProcess",
        f"{_setters_detail(setters)} must not set securityContext.windowsOptions.hostProcess=true",
        errors,
    )


_APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"


def _apparmor_type(sc: dict[str, Any] | None) -> str | None:
    if sc is None:
        return None
    profile = sc.get("appArmorProfile")
    if profile is None:
        return None
    return _str(profile.get("type")) if isinstance(profile, dict) else ""


def _allowed_apparmor_type(type_: str) -> bool:
    return type_ == "RuntimeDefault" or type_ == "Localhost"


def check_app_armor(pod: PodView) -> CheckOutcome | None:
    setters: list[str] = []
    errors: list[FieldError] = []
    bad_values: set[str] = set()
    pod_type = _apparmor_type(pod.pod_sc)
    if pod_type is not None and not _allowed_apparmor_type(pod_type):
        setters.append("pod")
        errors.append(FieldError("spec.securityContext.appArmorProfile.type", FORBIDDEN, pod_type))
        bad_values.add(pod_type)
    bad_containers: list[str] = []
    for prefix, container, sc in pod.containers:
        type_ = _apparmor_type(sc)
        if type_ is not None and not _allowed_apparmor_type(type_):
            bad_containers.append(_name(container))
            errors.append(FieldError(f"{prefix}.securityContext.appArmorProfile.type", FORBIDDEN, type_))
            bad_values.add(type_)
    if bad_containers:
        setters.append(_containers_label(bad_containers))
    forbidden_annotations: list[tuple[str, FieldError]] = []
    annotations = pod.annotations()
    if annotations:
        for key, raw in annotations.items():
            if not isinstance(key, str) or not key.startswith(_APPARMOR_ANNOTATION_PREFIX):
                continue
            value = _str(raw)
            if value and value != "runtime/default" and not value.startswith("localhost/"):
                forbidden_annotations.append(
                    (f"{key}={_go_quote(value)}", FieldError(f"metadata.annotations[{key}]", FORBIDDEN, value))
                )
    bad_value_list = sorted(bad_values)
    if forbidden_annotations:
        # Upstream walks a Go map here; sorting keeps the output deterministic.
        forbidden_annotations.sort(key=lambda item: item[0])
        bad_value_list.extend(text for text, _error in forbidden_annotations)
        setters.append(_plural("annotation", "annotations", len(forbidden_annotations)))
        errors.extend(error for _text, error in forbidden_annotations)
    if not setters:
        return None
    return CheckOutcome(
        "appArmorProfile",
        _plural("forbidden AppArmor profile", "forbidden AppArmor profiles", len(bad_value_list)),
        f"{_setters_detail(setters)} must not set AppArmor profile type to {_join_quote(bad_value_list)}",
        errors,
    )


def _hosts_of(handler: Any) -> list[str]:
    if not isinstance(handler, dict):
        return []
    hosts: list[str] = []
    for key in ("httpGet", "tcpSocket"):
        action = handler.get(key)
        if isinstance(action, dict):
            host = _str(action.get("host"))
            if host:
                hosts.append(host)
    return hosts


def check_host_probes_and_lifecycle(pod: PodView) -> CheckOutcome | None:
    """Upstream records no field errors for this check, so exclusions can never remove it."""
    names: set[str] = set()
    hosts: set[str] = set()
    for _prefix, container, _sc in pod.containers:
        found: list[str] = []
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            found.extend(_hosts_of(container.get(probe)))
        lifecycle = container.get("lifecycle")
        if isinstance(lifecycle, dict):
            found.extend(_hosts_of(lifecycle.get("postStart")))
            found.extend(_hosts_of(lifecycle.get("preStop")))
        if found:
            names.add(_name(container))
            hosts.update(found)
    if not names:
        return None
    return CheckOutcome(
        "hostProbesAndHostLifecycle",
        "probe or lifecycle host",
        " ".join(
            (
                _plural("container", "containers", len(names)),
                _join_quote(sorted(names)),
                _plural("uses", "use", len(names)),
                _plural("probe or lifecycle host", "probe or lifecycle hosts", len(hosts)),
                _join_quote(sorted(hosts)),
            )
        ),
        None,
    )


# --- restricted -----------------------------------------------------------------------------


def _allow_privilege_escalation(pod: PodView) -> CheckOutcome | None:
    names: list[str] = []
    errors: list[FieldError] = []
    for prefix, container, sc in pod.containers:
        if sc is None:
            names.append(_name(container))
            errors.append(FieldError(f"{prefix}.securityContext.allowPrivilegeEscalation", REQUIRED))
            continue
        value = sc.get("allowPrivilegeEscalation")
        if value is None:
            names.append(_name(container))
            errors.append(FieldError(f"{prefix}.securityContext.allowPrivilegeEscalation", FORBIDDEN, "nil"))
        elif value is True:
            names.append(_name(container))
            errors.append(FieldError(f"{prefix}.securityContext.allowPrivilegeEscalation", FORBIDDEN, True))
    if not names:
        return None
    return CheckOutcome(
        "allowPrivilegeEscalation",
        "allowPrivilegeEscalation != false",
        f"{_containers_label(names)} must set securityContext.allowPrivilegeEscalation=false",
        errors,
    )


def check_allow_privilege_escalation_1_8(pod: PodView) -> CheckOutcome | None:
    return _allow_privilege_escalation(pod)


def check_allow_privilege_escalation_1_25(pod: PodView) -> CheckOutcome | None:
    return None if pod.windows else _allow_privilege_escalation(pod)


_ALLOWED_VOLUME_SOURCES = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
_RESTRICTED_VOLUME_SOURCES = (
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
)


def check_restricted_volumes(pod: PodView) -> CheckOutcome | None:
    names: list[str] = []
    errors: list[FieldError] = []
    bad_types: set[str] = set()
    for index, volume in enumerate(_as_list(pod.spec.get("volumes"))):
        if not isinstance(volume, dict):
            volume = {}
        if any(volume.get(source) is not None for source in _ALLOWED_VOLUME_SOURCES):
            continue
        source = next(
            (candidate for candidate in _RESTRICTED_VOLUME_SOURCES if volume.get(candidate) is not None),
            "unknown",
        )
        bad_types.add(source)
        names.append(_str(volume.get("name")))
        errors.append(FieldError(f"spec.volumes[{index}].{source}", FORBIDDEN))
    if not names:
        return None
    return CheckOutcome(
        "restrictedVolumes",
        "restricted volume types",
        " ".join(
            (
                _plural("volume", "volumes", len(names)),
                _join_quote(names),
                _plural("uses", "use", len(names)),
                _plural("restricted volume type", "restricted volume types", len(bad_types)),
                _join_quote(sorted(bad_types)),
            )
        ),
        errors,
    )


def check_run_as_non_root(pod: PodView) -> CheckOutcome | None:
    setters: list[str] = []
    setter_errors: list[FieldError] = []
    pod_non_root = False
    if pod.pod_sc is not None:
        value = pod.pod_sc.get("runAsNonRoot")
        if value is not None:
            if value is True:
                pod_non_root = True
            else:
                setters.append("pod")
                setter_errors.append(FieldError("spec.securityContext.runAsNonRoot", FORBIDDEN, False))
    explicit: list[str] = []
    implicit: list[str] = []
    implicit_errors: list[FieldError] = []
    for prefix, container, sc in pod.containers:
        value = None if sc is None else sc.get("runAsNonRoot")
        if value is not None:
            if value is not True:
                explicit.append(_name(container))
                setter_errors.append(FieldError(f"{prefix}.securityContext.runAsNonRoot", FORBIDDEN, False))
        elif not pod_non_root:
            implicit.append(_name(container))
            implicit_errors.append(FieldError(f"{prefix}.securityContext.runAsNonRoot", REQUIRED))
    if explicit:
        setters.append(_containers_label(explicit))
    if not setters and not implicit:
        return None
    details: list[str] = []
    if setters:
        details.append(f"{_setters_detail(setters)} must not set securityContext.runAsNonRoot=false")
    if implicit:
        details.append(f"pod or {_containers_label(implicit)} must set securityContext.runAsNonRoot=true")
    return CheckOutcome("runAsNonRoot", "runAsNonRoot != true", "\n".join(details), setter_errors + implicit_errors)


def _is_root_user(value: Any) -> bool:
    return value is not None and not isinstance(value, bool) and value == 0


def check_run_as_user(pod: PodView) -> CheckOutcome | None:
    setters: list[str] = []
    errors: list[FieldError] = []
    if pod.pod_sc is not None and _is_root_user(pod.pod_sc.get("runAsUser")):
        setters.append("pod")
        errors.append(FieldError("spec.securityContext.runAsUser", FORBIDDEN, 0))
    names: list[str] = []
    for prefix, container, sc in pod.containers:
        if sc is not None and _is_root_user(sc.get("runAsUser")):
            names.append(_name(container))
            errors.append(FieldError(f"{prefix}.securityContext.runAsUser", FORBIDDEN, 0))
    if names:
        setters.append(_containers_label(names))
    if not setters:
        return None
    return CheckOutcome("runAsUser", "runAsUser=0", f"{_setters_detail(setters)} must not set runAsUser=0", errors)


def _seccomp_restricted(pod: PodView) -> CheckOutcome | None:
    setters: list[str] = []
    errors: list[FieldError] = []
    bad_values: set[str] = set()
    pod_set = False
    pod_type = _seccomp_type(pod.pod_sc)
    if pod_type is not None:
        if _valid_seccomp(pod_type):
            pod_set = True
        else:
            setters.append("pod")
            errors.append(FieldError("spec.securityContext.seccompProfile.type", FORBIDDEN, pod_type))
            bad_values.add(pod_type)
    explicit: list[str] = []
    implicit: list[str] = []
    implicit_errors: list[FieldError] = []
    for prefix, container, sc in pod.containers:
        type_ = _seccomp_type(sc)
        if type_ is not None:
            if not _valid_seccomp(type_):
                explicit.append(_name(container))
                errors.append(FieldError(f"{prefix}.securityContext.seccompProfile.type", FORBIDDEN, type_))
                bad_values.add(type_)
        elif not pod_set:
            implicit.append(_name(container))
            implicit_errors.append(FieldError(f"{prefix}.securityContext.seccompProfile.type", REQUIRED))
    if explicit:
        setters.append(_containers_label(explicit))
    if setters:
        return CheckOutcome(
            "seccompProfile_restricted",
            "seccompProfile",
            f"{_setters_detail(setters)} must not set securityContext.seccompProfile.type to "
            f"{_join_quote(sorted(bad_values))}",
            errors,
        )
    if implicit:
        return CheckOutcome(
            "seccompProfile_restricted",
            "seccompProfile",
            f"pod or {_containers_label(implicit)} must set securityContext.seccompProfile.type to "
            '"RuntimeDefault" or "Localhost"',
            implicit_errors,
        )
    return None


def check_seccomp_restricted_1_19(pod: PodView) -> CheckOutcome | None:
    return _seccomp_restricted(pod)


def check_seccomp_restricted_1_25(pod: PodView) -> CheckOutcome | None:
    return None if pod.windows else _seccomp_restricted(pod)


# --- registry -------------------------------------------------------------------------------

Version = tuple[int, int]


class CheckDefinition:
    """A check with its revisions; `revisions` is sorted by minimum policy version."""

    __slots__ = ("check_id", "level", "revisions")

    def __init__(self, check_id: str, level: str, revisions: tuple[tuple[Version, CheckFn], ...]) -> None:
        self.check_id = check_id
        self.level = level
        self.revisions = revisions

    def for_version(self, version: Version | None) -> CheckFn:
        """The newest revision whose minimum is not newer than `version` (None means latest).

        As in Kyverno, the first revision applies even to versions older than its minimum.
        """
        selected = self.revisions[0][1]
        for minimum, check in self.revisions[1:]:
            if version is None or version >= minimum:
                selected = check
        return selected


# Kyverno evaluates the checks in the order upstream registers them (source file name order).
CHECKS: tuple[CheckDefinition, ...] = (
    CheckDefinition(
        "allowPrivilegeEscalation",
        RESTRICTED,
        (((1, 8), check_allow_privilege_escalation_1_8), ((1, 25), check_allow_privilege_escalation_1_25)),
    ),
    CheckDefinition("appArmorProfile", BASELINE, (((1, 0), check_app_armor),)),
    CheckDefinition("capabilities_baseline", BASELINE, (((1, 0), check_capabilities_baseline),)),
    CheckDefinition(
        "capabilities_restricted",
        RESTRICTED,
        (((1, 22), check_capabilities_restricted_1_22), ((1, 25), check_capabilities_restricted_1_25)),
    ),
    CheckDefinition("hostNamespaces", BASELINE, (((1, 0), check_host_namespaces),)),
    CheckDefinition("hostPathVolumes", BASELINE, (((1, 0), check_host_path_volumes),)),
    CheckDefinition("hostPorts", BASELINE, (((1, 0), check_host_ports),)),
    CheckDefinition("hostProbesAndHostLifecycle", BASELINE, (((1, 34), check_host_probes_and_lifecycle),)),
    CheckDefinition("privileged", BASELINE, (((1, 0), check_privileged),)),
    CheckDefinition("procMount", BASELINE, (((1, 0), check_proc_mount),)),
    CheckDefinition("restrictedVolumes", RESTRICTED, (((1, 0), check_restricted_volumes),)),
    CheckDefinition("runAsNonRoot", RESTRICTED, (((1, 0), check_run_as_non_root),)),
    CheckDefinition("runAsUser", RESTRICTED, (((1, 23), check_run_as_user),)),
    CheckDefinition("seLinuxOptions", BASELINE, (((1, 0), check_se_linux_1_0), ((1, 31), check_se_linux_1_31))),
    CheckDefinition(
        "seccompProfile_baseline",
        BASELINE,
        (((1, 0), check_seccomp_baseline_1_0), ((1, 19), check_seccomp_baseline_1_19)),
    ),
    CheckDefinition(
        "seccompProfile_restricted",
        RESTRICTED,
        (((1, 19), check_seccomp_restricted_1_19), ((1, 25), check_seccomp_restricted_1_25)),
    ),
    CheckDefinition(
        "sysctls",
        BASELINE,
        (
            ((1, 0), check_sysctls_1_0),
            ((1, 27), check_sysctls_1_27),
            ((1, 29), check_sysctls_1_29),
            ((1, 32), check_sysctls_1_32),
        ),
    ),
    CheckDefinition("windowsHostProcess", BASELINE, (((1, 0), check_windows_host_process),)),
)
