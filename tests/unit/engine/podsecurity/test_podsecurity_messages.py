"""Kyverno's wording of podSecurity rule results."""

from __future__ import annotations

from stockade.engine.podsecurity import evaluate_pod_security


def test_pass_message() -> None:
    result = evaluate_pod_security({}, {"containers": [{"name": "a"}]}, "baseline")
    assert result.allowed
    assert result.message("baseline") == "Validation rule 'baseline' passed."


def test_required_value_message() -> None:
    spec = {
        "containers": [
            {
                "name": "container01",
                "image": "dummyimagename",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "runAsNonRoot": True,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
            }
        ]
    }
    result = evaluate_pod_security({"name": "badpod01"}, spec, "restricted", "latest")
    assert result.message("restricted") == (
        "Validation rule 'restricted' failed. It violates PodSecurity \"restricted:latest\": "
        "(Forbidden reason: unrestricted capabilities, field error list: "
        "[spec.containers[0].securityContext.capabilities.drop: Required value])"
    )
    assert result.failures[0].images == ("dummyimagename",)


def test_forbidden_values_are_printed_go_style() -> None:
    spec = {
        "hostNetwork": True,
        "containers": [
            {
                "name": "a",
                "image": "nginx",
                "ports": [{"containerPort": 80, "hostPort": 8080}],
                "securityContext": {"capabilities": {"add": ["SYS_ADMIN", "NET_RAW"]}},
            }
        ],
    }
    result = evaluate_pod_security({}, spec, "baseline", "v1.29")
    assert result.message("baseline") == (
        "Validation rule 'baseline' failed. It violates PodSecurity \"baseline:v1.29\": "
        "(Forbidden reason: non-default capabilities, field error list: "
        "[spec.containers[0].securityContext.capabilities.add is forbidden, forbidden values found: [NET_RAW SYS_ADMIN]])"
        "(Forbidden reason: host namespaces, field error list: [spec.hostNetwork is forbidden, forbidden values found: true])"
        "(Forbidden reason: hostPort, field error list: "
        "[spec.containers[0].ports[0].hostPort is forbidden, forbidden values found: 8080])"
    )


def test_forbidden_without_value_and_nil_marker() -> None:
    spec = {
        "volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}],
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "a", "securityContext": {"capabilities": {"drop": ["ALL"]}}}],
    }
    result = evaluate_pod_security({}, spec, "restricted", "v1.30")
    assert result.checks_text() == (
        "(Forbidden reason: allowPrivilegeEscalation != false, field error list: "
        "[spec.containers[0].securityContext.allowPrivilegeEscalation is forbidden, forbidden values found: nil])"
        "(Forbidden reason: restricted volume types, field error list: [spec.volumes[0].nfs: Forbidden])"
    )


def test_check_without_field_errors_prints_empty_list() -> None:
    container = {"name": "a", "startupProbe": {"tcpSocket": {"host": "h", "port": 1}}}
    result = evaluate_pod_security({}, {"containers": [container]}, "baseline")
    assert result.checks_text() == "(Forbidden reason: probe or lifecycle host, field error list: [])"


def test_controller_paths_are_rewritten() -> None:
    spec = {"containers": [{"name": "a", "securityContext": {"privileged": True}}]}
    deployment = evaluate_pod_security({}, spec, "baseline", "latest", resource_kind="Deployment")
    assert "spec.template.spec.containers[0].securityContext.privileged is forbidden" in deployment.message("r")
    cronjob = evaluate_pod_security({}, spec, "baseline", "latest", resource_kind="CronJob")
    assert "spec.jobTemplate.spec.template.spec.containers[0]" in cronjob.checks_text()
    # The field errors themselves stay relative to the pod.
    assert deployment.failures[0].field_errors[0].field == "spec.containers[0].securityContext.privileged"


def test_metadata_paths_are_rewritten_even_for_pods() -> None:
    metadata = {"annotations": {"container.apparmor.security.beta.kubernetes.io/a": "unconfined"}}
    result = evaluate_pod_security(metadata, {"containers": [{"name": "a"}]}, "baseline")
    assert result.checks_text() == (
        "(Forbidden reason: forbidden AppArmor profile, field error list: "
        "[spec.template.metadata.annotations[container.apparmor.security.beta.kubernetes.io/a] "
        "is forbidden, forbidden values found: unconfined])"
    )


def test_version_is_printed_as_written_in_the_policy() -> None:
    spec = {"hostPID": True, "containers": [{"name": "a"}]}
    assert 'PodSecurity "baseline:":' in evaluate_pod_security({}, spec, "baseline", "").message("r")


def test_images_come_from_the_detail_and_can_be_normalized() -> None:
    spec = {
        "initContainers": [{"name": "init", "image": "busybox", "securityContext": {"privileged": True}}],
        "containers": [{"name": "app", "image": "nginx", "securityContext": {"privileged": True}}],
    }
    result = evaluate_pod_security(
        {}, spec, "baseline", normalize_image=lambda image: f"docker.io/library/{image}:latest"
    )
    assert result.failures[0].images == ("docker.io/library/busybox:latest", "docker.io/library/nginx:latest")
    # A detail that does not name containers before "must" reports no image.
    ports = {"containers": [{"name": "a", "image": "x", "ports": [{"hostPort": 1}]}]}
    assert evaluate_pod_security({}, ports, "baseline").failures[0].images == ()
