"""Kyverno's `podSecurity.exclude` semantics: controls, images, restricted fields and values."""

from __future__ import annotations

from stockade.engine.podsecurity import (
    apply_pod_security_exclusions,
    evaluate_pod_security,
    validate_excludes,
    wildcard_match,
)


def privileged(name: str, image: str) -> dict:
    return {"name": name, "image": image, "securityContext": {"privileged": True}}


def check_ids(result) -> list[str]:
    return [failure.check_id for failure in result.failures]


def test_wildcards() -> None:
    assert wildcard_match("nginx", "nginx")
    assert not wildcard_match("nginx", "nginx:1.2")
    assert wildcard_match("nginx:*", "nginx:1.2.3")
    assert wildcard_match("ghcr.io/kyverno/test-nginx*", "ghcr.io/kyverno/test-nginx:latest")
    assert wildcard_match("nginx:1.?", "nginx:1.2")
    assert not wildcard_match("nginx:1.?", "nginx:1.")
    assert not wildcard_match("nginx:1.?", "nginx:1.22")
    assert wildcard_match("*", "")
    assert not wildcard_match("", "x")
    assert wildcard_match("a.b", "a.b") and not wildcard_match("a.b", "axb")


def test_container_exclusion_only_covers_matching_images() -> None:
    spec = {"containers": [privileged("web", "nginx:1.25"), privileged("cache", "redis:7")]}
    exclude = [{"controlName": "Privileged Containers", "images": ["nginx:*"]}]
    result = evaluate_pod_security({}, spec, "baseline", "latest", exclude)
    assert not result.allowed
    assert [error.field for error in result.failures[0].field_errors] == [
        "spec.containers[1].securityContext.privileged"
    ]
    exclude.append({"controlName": "Privileged Containers", "images": ["redis*"]})
    assert evaluate_pod_security({}, spec, "baseline", "latest", exclude).allowed


def test_container_exclusion_matches_by_container_name_not_index() -> None:
    spec = {
        "initContainers": [privileged("setup", "busybox")],
        "containers": [privileged("app", "busybox"), privileged("sidecar", "envoy")],
    }
    exclude = [{"controlName": "Privileged Containers", "images": ["envoy"]}]
    result = evaluate_pod_security({}, spec, "baseline", "latest", exclude)
    fields = [error.field for error in result.failures[0].field_errors]
    assert fields == [
        "spec.initContainers[0].securityContext.privileged",
        "spec.containers[0].securityContext.privileged",
    ]


def test_removed_error_is_replaced_by_the_last_one_like_kyverno() -> None:
    spec = {"containers": [privileged("a", "x"), privileged("b", "y"), privileged("c", "z")]}
    result = evaluate_pod_security({}, spec, "baseline", "latest", [{"controlName": "Privileged Containers", "images": ["x"]}])
    assert [error.field for error in result.failures[0].field_errors] == [
        "spec.containers[2].securityContext.privileged",
        "spec.containers[1].securityContext.privileged",
    ]


def test_unrelated_control_does_not_exclude() -> None:
    spec = {"containers": [privileged("web", "nginx")]}
    result = evaluate_pod_security({}, spec, "baseline", "latest", [{"controlName": "Host Ports", "images": ["nginx"]}])
    assert check_ids(result) == ["privileged"]


def test_pod_level_exclusion() -> None:
    spec = {"hostNetwork": True, "hostPID": True, "containers": [{"name": "a", "image": "nginx"}]}
    result = evaluate_pod_security({}, spec, "baseline", "latest", [{"controlName": "Host Namespaces"}])
    assert result.allowed
    narrowed = [{"controlName": "Host Namespaces", "restrictedField": "spec.hostNetwork", "values": ["true"]}]
    result = evaluate_pod_security({}, spec, "baseline", "latest", narrowed)
    assert [error.field for error in result.failures[0].field_errors] == ["spec.hostPID"]


def test_restricted_field_and_values_for_host_path() -> None:
    spec = {
        "volumes": [{"name": "host", "hostPath": {"path": "/var/lib1"}}],
        "containers": [{"name": "nginx", "image": "nginx"}],
    }
    def exclude(values: list[str], field: str = "spec.volumes[*].hostPath") -> list[dict]:
        return [{"controlName": "HostPath Volumes", "restrictedField": field, "values": values}]

    assert evaluate_pod_security({}, spec, "baseline", "latest", exclude(["/var/lib1"])).allowed
    assert evaluate_pod_security({}, spec, "baseline", "latest", exclude(["/var/*"])).allowed
    assert not evaluate_pod_security({}, spec, "baseline", "latest", exclude(["/var/lib2"])).allowed
    assert not evaluate_pod_security({}, spec, "baseline", "latest", exclude(["/var/lib1"], "spec.volumes[0].hostPath")).allowed


def test_values_must_cover_every_bad_value() -> None:
    container = {"name": "a", "image": "alpine", "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}}}
    spec = {"containers": [container]}
    field = "spec.containers[*].securityContext.capabilities.add"

    def exclude(values: list[str]) -> list[dict]:
        return [{"controlName": "Capabilities", "images": ["alpine"], "restrictedField": field, "values": values}]

    assert not evaluate_pod_security({}, spec, "baseline", "latest", exclude(["NET_ADMIN"])).allowed
    assert evaluate_pod_security({}, spec, "baseline", "latest", exclude(["NET_ADMIN", "NET_RAW"])).allowed
    assert evaluate_pod_security({}, spec, "baseline", "latest", exclude(["NET_*"])).allowed


def test_capabilities_control_covers_baseline_and_restricted_checks() -> None:
    def container(name: str, image: str) -> dict:
        return {
            "name": name,
            "image": image,
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"},
                "capabilities": {"add": ["SYS_ADMIN"]},
            },
        }

    exclude = [{"controlName": "Capabilities", "images": ["ghcr.io/kyverno/test-nginx*", "redis*"]}]
    allowed = {"containers": [container("web", "ghcr.io/kyverno/test-nginx:1"), container("db", "redis:7")]}
    assert evaluate_pod_security({}, allowed, "restricted", "latest", exclude).allowed
    denied = {"containers": [container("web", "ghcr.io/kyverno/test-nginx:1"), container("app", "busybox")]}
    result = evaluate_pod_security({}, denied, "restricted", "latest", exclude)
    assert check_ids(result) == ["capabilities_baseline", "capabilities_restricted"]
    assert all("containers[1]" in error.field for failure in result.failures for error in failure.field_errors)


def test_seccomp_pod_level_exclusion_with_values() -> None:
    spec = {"securityContext": {"seccompProfile": {"type": "Unconfined"}}, "containers": [{"name": "a", "image": "x"}]}
    exclude = [{"controlName": "Seccomp", "restrictedField": "spec.securityContext.seccompProfile.type", "values": ["Unconfined"]}]
    assert evaluate_pod_security({}, spec, "baseline", "latest", exclude).allowed


def test_app_armor_annotation_exclusion_keeps_pod_metadata() -> None:
    metadata = {"annotations": {"container.apparmor.security.beta.kubernetes.io/a": "unconfined"}}
    spec = {"containers": [{"name": "a", "image": "x"}]}
    exclude = [
        {
            "controlName": "AppArmor",
            "restrictedField": "metadata.annotations[container.apparmor.security.beta.kubernetes.io/a]",
            "values": ["unconfined"],
        }
    ]
    assert not evaluate_pod_security(metadata, spec, "baseline").allowed
    assert evaluate_pod_security(metadata, spec, "baseline", "latest", exclude).allowed
    # With images the reduced pod has no annotations, so nothing is excluded.
    with_images = [{"controlName": "AppArmor", "images": ["x"]}]
    assert not evaluate_pod_security(metadata, spec, "baseline", "latest", with_images).allowed


def test_probe_host_failures_cannot_be_excluded() -> None:
    container = {"name": "a", "image": "x", "livenessProbe": {"httpGet": {"host": "h", "port": 1}}}
    result = evaluate_pod_security({}, {"containers": [container]}, "baseline", "latest", [{"controlName": "Host Ports", "images": ["*"]}])
    assert check_ids(result) == ["hostProbesAndHostLifecycle"]


def test_rule_and_exception_excludes_apply_one_after_the_other() -> None:
    def init(name: str, image: str, caps: list[str]) -> dict:
        return {"name": name, "image": image, "securityContext": {"capabilities": {"add": caps, "drop": ["ALL"]}}}

    spec = {
        "containers": [{"name": "primary", "image": "alpine:latest"}],
        "initContainers": [init("init1", "alpine:latest", ["NET_ADMIN", "NET_RAW"]), init("init2", "busybox:latest", ["SYS_TIME"])],
    }
    field = "spec.initContainers[*].securityContext.capabilities.add"
    first = {"controlName": "Capabilities", "images": ["alpine:latest"], "restrictedField": field, "values": ["NET_ADMIN", "NET_RAW"]}
    second = {"controlName": "Capabilities", "images": ["busybox:latest"], "restrictedField": field, "values": ["SYS_TIME"]}
    only_second = evaluate_pod_security({}, spec, "baseline", "v1.29", [second])
    assert [error.field for error in only_second.failures[0].field_errors] == [
        "spec.initContainers[0].securityContext.capabilities.add"
    ]
    # The detail keeps describing the full evaluation, so both images are still reported.
    assert only_second.failures[0].images == ("alpine:latest", "busybox:latest")
    assert evaluate_pod_security({}, spec, "baseline", "v1.29", [second, first]).allowed


def test_validate_excludes() -> None:
    assert validate_excludes("restricted", [{"controlName": "Capabilities", "images": ["nginx"]}]) == []
    problems = [f"{path}: {message}" for path, message in validate_excludes(
        "baseline",
        [
            {"controlName": "Privileged Containers"},
            {"controlName": "Host Namespaces", "images": ["nginx"]},
            {"controlName": "Sysctls", "restrictedField": "spec.securityContext.sysctls[*].name"},
            {"controlName": "Sysctls", "values": ["x"]},
            {"controlName": "Running as Non-root"},
            {"controlName": "Seccomp"},
        ],
    )]
    assert problems == [
        "podSecurity.exclude[0].controlName: exclude.images must be specified for the container level control",
        "podSecurity.exclude[1].controlName: exclude.images must not be specified for the pod level control",
        "podSecurity.exclude[2].values: values is required",
        "podSecurity.exclude[3].restrictedField: restrictedField is required",
        "podSecurity.exclude[4].controlName: Invalid control name defined at the given level",
    ]


def test_exception_exclusions_apply_to_an_earlier_failure() -> None:
    spec = {
        "volumes": [{"name": "host", "hostPath": {"path": "/var/lib1"}}],
        "containers": [{"name": "nginx", "image": "nginx", "livenessProbe": {"httpGet": {"host": "h", "port": 1}}}],
    }
    exception = [{"controlName": "HostPath Volumes", "restrictedField": "spec.volumes[*].hostPath", "values": ["/var/lib1"]}]
    failed = evaluate_pod_security({}, spec, "baseline", "latest")
    assert check_ids(failed) == ["hostPathVolumes", "hostProbesAndHostLifecycle"]
    after = apply_pod_security_exclusions(failed, {}, spec, exception)
    # The probe failure records no field errors, so it survives every exclusion.
    assert check_ids(after) == ["hostProbesAndHostLifecycle"]
    assert after.level == "baseline" and after.version == "latest"
    del spec["containers"][0]["livenessProbe"]
    skipped = apply_pod_security_exclusions(evaluate_pod_security({}, spec, "baseline", "latest"), {}, spec, exception)
    assert skipped.allowed and skipped.failures == ()
    other_path = [dict(exception[0], values=["/etc"])]
    assert not apply_pod_security_exclusions(evaluate_pod_security({}, spec, "baseline"), {}, spec, other_path).allowed


def test_omitted_level_runs_every_check_like_kyverno() -> None:
    result = evaluate_pod_security({}, {"containers": [{"name": "a"}]}, "", None)  # type: ignore[arg-type]
    assert "runAsNonRoot" in check_ids(result)
    assert 'PodSecurity ":"' in result.message("r")
