"""The typed decode Kyverno does before its Pod Security checks, for the fields those checks read.

Kyverno turns the resource into a Go ``corev1.Pod`` (``appsv1.Deployment`` for the other pod controllers,
``batchv1.CronJob``) with ``encoding/json`` before checking it, so a value of the wrong JSON type (``type: 123`` in
``seLinuxOptions``, ``privileged: "true"``) makes the rule an error rather than a pass or a fail. The schema below
covers the Pod fields the checks read and reproduces Go's first error (keys visited in sorted order, as Go's
encoder writes them) in Go's wording.
"""

from __future__ import annotations

from stockade.errors import StockadeError
from dataclasses import dataclass
from typing import Any, Union


@dataclass(frozen=True)
class Scalar:
    go_type: str  # "string", "bool", "int64", "int32"
    named: str = ""  # a named Go type over it, as errors print it (``v1.Capability``)


@dataclass(frozen=True)
class Struct:
    go_name: str  # e.g. "SELinuxOptions"; printed as "v1.SELinuxOptions" when the struct itself is mistyped
    fields: dict[str, "Schema"]


@dataclass(frozen=True)
class Slice:
    item: "Schema"


@dataclass(frozen=True)
class StringMap:
    pass


Schema = Union[Scalar, Struct, Slice, StringMap]

_STRING, _BOOL, _INT64, _INT32 = Scalar("string"), Scalar("bool"), Scalar("int64"), Scalar("int32")
_CAPABILITY = Scalar("string", "v1.Capability")

_SELINUX = Struct("SELinuxOptions", {"user": _STRING, "role": _STRING, "type": _STRING, "level": _STRING})
_SECCOMP = Struct("SeccompProfile", {"type": _STRING, "localhostProfile": _STRING})
_APPARMOR = Struct("AppArmorProfile", {"type": _STRING, "localhostProfile": _STRING})
_WINDOWS = Struct("WindowsSecurityContextOptions", {"hostProcess": _BOOL, "runAsUserName": _STRING, "gmsaCredentialSpecName": _STRING})
_CONTAINER_SECURITY = Struct("SecurityContext", {
    "capabilities": Struct("Capabilities", {"add": Slice(_CAPABILITY), "drop": Slice(_CAPABILITY)}),
    "privileged": _BOOL,
    "seLinuxOptions": _SELINUX,
    "windowsOptions": _WINDOWS,
    "runAsUser": _INT64,
    "runAsGroup": _INT64,
    "runAsNonRoot": _BOOL,
    "readOnlyRootFilesystem": _BOOL,
    "allowPrivilegeEscalation": _BOOL,
    "procMount": _STRING,
    "seccompProfile": _SECCOMP,
    "appArmorProfile": _APPARMOR,
})
_CONTAINER = Struct("Container", {
    "name": _STRING,
    "image": _STRING,
    "ports": Slice(Struct("ContainerPort", {"name": _STRING, "hostPort": _INT32, "containerPort": _INT32, "protocol": _STRING, "hostIP": _STRING})),
    "securityContext": _CONTAINER_SECURITY,
})
_EPHEMERAL = Struct("EphemeralContainer", dict(_CONTAINER.fields))
_POD_SECURITY = Struct("PodSecurityContext", {
    "seLinuxOptions": _SELINUX,
    "windowsOptions": _WINDOWS,
    "runAsUser": _INT64,
    "runAsGroup": _INT64,
    "runAsNonRoot": _BOOL,
    "supplementalGroups": Slice(_INT64),
    "fsGroup": _INT64,
    "sysctls": Slice(Struct("Sysctl", {"name": _STRING, "value": _STRING})),
    "seccompProfile": _SECCOMP,
    "appArmorProfile": _APPARMOR,
})
_POD_SPEC = Struct("PodSpec", {
    "volumes": Slice(Struct("Volume", {"name": _STRING, "hostPath": Struct("HostPathVolumeSource", {"path": _STRING, "type": _STRING})})),
    "initContainers": Slice(_CONTAINER),
    "containers": Slice(_CONTAINER),
    "ephemeralContainers": Slice(_EPHEMERAL),
    "hostNetwork": _BOOL,
    "hostPID": _BOOL,
    "hostIPC": _BOOL,
    "securityContext": _POD_SECURITY,
})
_OBJECT_META = Struct("ObjectMeta", {"name": _STRING, "namespace": _STRING, "labels": StringMap(), "annotations": StringMap()})
_POD_TEMPLATE = Struct("PodTemplateSpec", {"metadata": _OBJECT_META, "spec": _POD_SPEC})
_ROOTS: dict[str, Struct] = {
    "Pod": Struct("Pod", {"metadata": _OBJECT_META, "spec": _POD_SPEC}),
    "Deployment": Struct("Deployment", {"metadata": _OBJECT_META, "spec": Struct("DeploymentSpec", {"template": _POD_TEMPLATE})}),
    "CronJob": Struct("CronJob", {"metadata": _OBJECT_META, "spec": Struct("CronJobSpec", {
        "jobTemplate": Struct("JobTemplateSpec", {"metadata": _OBJECT_META, "spec": Struct("JobSpec", {"template": _POD_TEMPLATE})}),
    })}),
}
# Kyverno decodes every other pod controller into an appsv1.Deployment.
_DECODED_AS = {"DaemonSet": "Deployment", "Job": "Deployment", "StatefulSet": "Deployment", "ReplicaSet": "Deployment", "ReplicationController": "Deployment"}


class PodDecodeError(StockadeError, ValueError):
    """A field holds a JSON value Go cannot decode into the field's type; the message is Go's."""


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _go_type(schema: Schema) -> str:
    if isinstance(schema, Scalar):
        return schema.named or schema.go_type
    if isinstance(schema, Struct):
        return "v1." + schema.go_name
    if isinstance(schema, Slice):
        return "[]" + _go_type(schema.item)
    return "map[string]string"


def _mismatch(value: Any, schema: Schema, struct: str, path: str) -> str:
    kind = _json_kind(value)
    # Go quotes the literal only when a number does not fit a numeric field (a fraction, out of range)
    shown = f"number {value}" if kind == "number" and isinstance(schema, Scalar) and schema.go_type.startswith("int") else kind
    return f"json: cannot unmarshal {shown} into Go struct field {struct}.{path} of type {_go_type(schema)}"


def _first_error(value: Any, schema: Schema, struct: str, path: str) -> str | None:
    if value is None:
        return None  # Go leaves the zero value
    if isinstance(schema, Scalar):
        if schema.go_type == "string":
            ok = isinstance(value, str)
        elif schema.go_type == "bool":
            ok = isinstance(value, bool)
        else:
            ok = isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and value.is_integer()
            bits = 63 if schema.go_type == "int64" else 31
            ok = ok and -(2**bits) <= int(value) < 2**bits
        return None if ok else _mismatch(value, schema, struct, path)
    if isinstance(schema, StringMap):
        if not isinstance(value, dict):
            return _mismatch(value, schema, struct, path)
        for key in sorted(value):
            item = value[key]
            if item is not None and not isinstance(item, str):
                return f"json: cannot unmarshal {_json_kind(item)} into Go struct field {struct}.{path} of type string"
        return None
    if isinstance(schema, Slice):
        if not isinstance(value, list):
            return _mismatch(value, schema, struct, path)
        for item in value:
            found = _first_error(item, schema.item, struct, path)
            if found:
                return found
        return None
    if not isinstance(value, dict):
        return _mismatch(value, schema, struct, path)
    for key in sorted(value):
        child = schema.fields.get(key)
        if child is None:
            continue
        found = _first_error(value[key], child, schema.go_name, f"{path}.{key}" if path else key)
        if found:
            return found
    return None


def check_pod_decodes(resource: dict[str, Any]) -> None:
    """Raise PodDecodeError with Go's message when Kyverno's typed decode of ``resource`` would fail."""
    kind = str(resource.get("kind", ""))
    root = _ROOTS.get(_DECODED_AS.get(kind, kind))
    if root is None:
        return
    found = _first_error(resource, root, root.go_name, "")
    if found:
        raise PodDecodeError(found)
