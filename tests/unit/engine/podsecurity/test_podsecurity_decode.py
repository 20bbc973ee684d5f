"""Kyverno decodes the resource into Go's Pod types before its Pod Security checks: a field of the wrong JSON type
makes the rule an error, with Go's message. Messages below are the ones Kyverno 1.19.1 prints for the same pods."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.engine.podsecurity import PodDecodeError, check_pod_decodes


def _pod(spec: dict[str, Any], metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata or {"name": "p"}, "spec": spec}


def _container(security_context: Any, **extra: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "nginx", "securityContext": security_context, **extra}]}


FIELD = "json: cannot unmarshal {} into Go struct field {} of type {}"


@pytest.mark.parametrize(
    ("resource", "message"),
    [
        (_pod(_container({"seLinuxOptions": {"type": 123}})),
         FIELD.format("number", "SELinuxOptions.spec.containers.securityContext.seLinuxOptions.type", "string")),
        (_pod(_container({"privileged": "true"})),
         FIELD.format("string", "SecurityContext.spec.containers.securityContext.privileged", "bool")),
        (_pod({"securityContext": {"runAsUser": "0"}, "containers": [{"name": "c"}]}),
         FIELD.format("string", "PodSecurityContext.spec.securityContext.runAsUser", "int64")),
        (_pod(_container({"runAsUser": 1.5})),
         FIELD.format("number 1.5", "SecurityContext.spec.containers.securityContext.runAsUser", "int64")),
        (_pod(_container("abc")),
         FIELD.format("string", "Container.spec.containers.securityContext", "v1.SecurityContext")),
        (_pod(_container({"capabilities": {"add": [1]}})),
         FIELD.format("number", "Capabilities.spec.containers.securityContext.capabilities.add", "v1.Capability")),
        # Go reports the first error in its encoder's (sorted) key order: containers before hostNetwork
        (_pod({"hostNetwork": "yes", **_container({"seLinuxOptions": {"type": 5}})}),
         FIELD.format("number", "SELinuxOptions.spec.containers.securityContext.seLinuxOptions.type", "string")),
        (_pod({"containers": [{"name": "c"}]}, {"name": "p", "labels": {"a": 1}}),
         FIELD.format("number", "ObjectMeta.metadata.labels", "string")),
        ({"kind": "DaemonSet", "spec": {"template": {"spec": _container({"seLinuxOptions": {"role": True}})}}},
         FIELD.format("bool", "SELinuxOptions.spec.template.spec.containers.securityContext.seLinuxOptions.role", "string")),
        ({"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": "80"}]}]}}}}}},
         FIELD.format("string", "ContainerPort.spec.jobTemplate.spec.template.spec.containers.ports.containerPort", "int32")),
    ],
)
def test_mistyped_fields_fail_the_decode_with_gos_message(resource: dict[str, Any], message: str) -> None:
    with pytest.raises(PodDecodeError) as caught:
        check_pod_decodes(resource)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "resource",
    [
        _pod(_container({"seLinuxOptions": {"type": "spc_t", "level": "s0:c123,c456"}})),  # a bad value, not a bad type
        _pod(_container({"seLinuxOptions": None})),
        _pod(_container({"seLinuxOptions": {}})),
        _pod(_container({"runAsUser": 1000.0})),  # an integral number decodes into int64
        _pod({"containers": [{"name": "c", "unknownField": {"x": 1}}]}),
        {"kind": "ConfigMap", "data": {"a": 1}},
    ],
)
def test_well_typed_or_unchecked_resources_decode(resource: dict[str, Any]) -> None:
    check_pod_decodes(resource)
