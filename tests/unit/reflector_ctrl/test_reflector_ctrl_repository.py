"""ImageRepository reconcile: scan, status shape, when to rescan, and the failure conditions."""

from __future__ import annotations

from typing import Any

from stockade.images.registry import RegistryAuthError
from stockade.reflector.models import condition
from stockade.reflector.repository import ImageRepositoryReconciler, canonical_image_name, parse_repository_image, tags_revision

import pytest


def repo(image: str = "ghcr.io/org/app", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "image.toolkit.fluxcd.io/v1",
        "kind": "ImageRepository",
        "metadata": {"name": "app", "namespace": "flux-system", "generation": 1},
        "spec": {"image": image, "interval": "5m", **spec},
    }


def reconciler(store, registry, clock, **kwargs) -> ImageRepositoryReconciler:  # type: ignore[no-untyped-def]
    return ImageRepositoryReconciler(store, client_factory=registry.factory, clock=clock, **kwargs)


def test_first_scan_stores_sorted_tags_and_reports_flux_status(store, registry, clock) -> None:  # type: ignore[no-untyped-def]
    registry.tags["org/app"] = ["1.0.0", "latest", "6.2.0", "sha256-abc.sig", "0.9.0"]
    result = reconciler(store, registry, clock).reconcile(repo())
    status = result.status
    assert result.ready and result.error is None
    assert status["canonicalImageName"] == "ghcr.io/org/app"
    assert status["observedExclusionList"] == ["^.*\\.sig$"]
    assert status["lastScanResult"]["tagCount"] == 4
    assert status["lastScanResult"]["latestTags"] == ["latest", "6.2.0", "1.0.0", "0.9.0"]
    assert status["lastScanResult"]["scanTime"] == "2025-05-27T12:00:00Z"
    assert status["observedGeneration"] == 1
    revision = status["lastScanResult"]["revision"]
    assert condition(result.object, "Ready")["message"] == f"successful scan: found 4 tags with checksum {revision}"
    assert store.tags(result_key()) == ["latest", "6.2.0", "1.0.0", "0.9.0"]
    assert result.requeue_after == 300
    assert [e.type for e in result.events] == ["Normal"]


def result_key():  # type: ignore[no-untyped-def]
    from stockade.reflector.models import ObjectKey

    return ObjectKey("flux-system", "app")


def test_latest_tags_are_capped_at_ten(store, registry, clock) -> None:  # type: ignore[no-untyped-def]
    registry.tags["org/app"] = list("abcdefghijk")
    status = reconciler(store, registry, clock).reconcile(repo()).status
    assert status["lastScanResult"]["latestTags"] == list("kjihgfedcb")
    assert status["lastScanResult"]["tagCount"] == 11


def test_revision_does_not_depend_on_registry_order() -> None:
    assert tags_revision(sorted(["c", "d", "a", "b"], reverse=True)) == tags_revision(sorted(["c", "b", "a", "d"], reverse=True))
    assert tags_revision(["b", "a"]) != tags_revision(["c", "a"])


def test_custom_exclusion_list_replaces_the_default(store, registry, clock) -> None:  # type: ignore[no-untyped-def]
    registry.tags["org/app"] = ["1.0", "1.0-dev", "x.sig"]
    result = reconciler(store, registry, clock).reconcile(repo(exclusionList=["-dev$", "^0"]))
    assert result.status["lastScanResult"]["latestTags"] == ["x.sig", "1.0"]
    assert result.status["observedExclusionList"] == ["-dev$", "^0"]


def test_no_rescan_before_interval_then_rescan_after(store, registry, clock) -> None:  # type: ignore[no-untyped-def]
    registry.tags["org/app"] = ["1.0.0"]
    rec = reconciler(store, registry, clock)
    first = rec.reconcile(repo())
    clock.advance(120)
    registry.tags["org/app"].append("1.1.0")
    second = rec.reconcile(first.object)
    assert len(registry.list_calls) == 1
    assert second.requeue_after == pytest.approx(180)
    assert second.status["lastScanResult"]["tagCount"] == 1
    assert second.events[0].type == "Trace"
    clock.advance(180)
    third = rec.reconcile(second.object)
    assert len(registry.list_calls) == 2 and third.detail == "triggered by interval"
    assert third.status["lastScanResult"]["tagCount"] == 2
    assert third.events[0].type == "Normal"  # the message (tag count, checksum) changed


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda o: o["metadata"].setdefault("annotations", {}).update({"reconcile.fluxcd.io/requestedAt": "now"}), "reconcile requested"),
        (lambda o: o["spec"].update(image="ghcr.io/org/other"), "new image name"),
        (lambda o: o["spec"].update(exclusionList=["^x"]), "updated exclusion list"),
    ],
)
def test_spec_changes_trigger_an_immediate_scan(store, registry, clock, change, reason) -> None:  # type: ignore[no-untyped-def]
    registry.tags["org/app"] = ["1.0.0"]
    registry.tags["org/other"] = ["2.0.0"]
    rec = reconciler(store, registry, clock)
    obj = rec.reconcile(repo()).object
    change(obj)
    result = rec.reconcile(obj)
    assert result.detail == reason and len(registry.list_calls) == 2


def test_handled_annotation_does_not_rescan_again(store, registry, clock) -> None:  # type: ignore[no-untyped-def]
    registry.tags["org/app"] = ["1.0.0"]
    rec = reconciler(store, registry, clock)
    obj = repo()
    obj["metadata"]["annotations"] = {"reconcile.fluxcd.io/requestedAt": "t1"}
    first = rec.reconcile(obj)
    assert first.status["lastHandledReconcileAt"] == "t1"
    rec.reconcile(first.object)
    assert len(registry.list_calls) == 1


def test_lost_tag_store_forces_a_rescan(store, registry, clock, tmp_path) -> None:  # type: ignore[no-untyped-def]
    registry.tags["org/app"] = ["1.0.0"]
    obj = reconciler(store, registry, clock).reconcile(repo()).object
    store.delete_tags(result_key())
    result = reconciler(store, registry, clock).reconcile(obj)
    assert result.detail == "no tags in database" and store.tags(result_key()) == ["1.0.0"]


@pytest.mark.parametrize(
    "image, problem",
    [("oci://ghcr.io/org/app", "should not include URL scheme"), ("ghcr.io/org/app:1.0", "should not include a tag"), ("ghcr.io/Org/App", "lowercase")],
)
def test_invalid_image_stalls_without_contacting_the_registry(store, registry, clock, image, problem) -> None:  # type: ignore[no-untyped-def]
    result = reconciler(store, registry, clock).reconcile(repo(image))
    assert result.stalled and not result.ready
    assert condition(result.object, "Stalled")["reason"] == "ImageURLInvalid"
    assert problem in condition(result.object, "Ready")["message"]
    assert result.requeue_after is None and registry.list_calls == []
    assert result.events[0].type == "Warning" and result.events[0].reason == "ImageURLInvalid"


def test_registry_host_with_port_is_a_repository_not_a_tag() -> None:
    assert canonical_image_name(parse_repository_image("localhost:5000/app")) == "localhost:5000/app"
    assert canonical_image_name(parse_repository_image("nginx")) == "index.docker.io/library/nginx"


def test_invalid_exclusion_regexp_is_a_failed_scan_that_is_retried(store, registry, clock) -> None:  # type: ignore[no-untyped-def]
    """Flux compiles the exclusion list inside the scan: ReadOperationFailed, "scan failed: ...", retried, no stall."""
    registry.tags["org/app"] = ["1.0.0", "1.0.0.sig"]
    rec = reconciler(store, registry, clock)
    result = rec.reconcile(repo(exclusionList=["[="]))
    ready = condition(result.object, "Ready")
    assert not result.stalled and condition(result.object, "Stalled") is None
    assert ready["status"] == "False" and ready["reason"] == "ReadOperationFailed"
    assert ready["message"] == "scan failed: failed to compile regex [=: error parsing regexp: missing closing ]: `[=`"
    assert result.requeue_after is not None
    assert result.events[-1].type == "Warning" and result.events[-1].reason == "ReadOperationFailed"
    fixed = result.object
    fixed["spec"]["exclusionList"] = ["\\.sig$"]
    again = rec.reconcile(fixed)
    assert again.ready and again.status["lastScanResult"]["latestTags"] == ["1.0.0"]


def test_scan_failure_keeps_last_result_and_retries(store, registry, clock) -> None:  # type: ignore[no-untyped-def]
    registry.tags["org/app"] = ["1.0.0"]
    rec = reconciler(store, registry, clock)
    good = rec.reconcile(repo()).object
    registry.fail_with = RegistryAuthError("list tags of ghcr.io/org/app: HTTP 401")
    clock.advance(301)
    result = rec.reconcile(good)
    assert not result.ready and not result.stalled
    assert condition(result.object, "Ready")["reason"] == "ReadOperationFailed"
    assert condition(result.object, "Ready")["message"].startswith("scan failed: ")
    assert condition(result.object, "Reconciling")["status"] == "True"
    assert result.status["lastScanResult"] == good["status"]["lastScanResult"]
    assert store.tags(result_key()) == ["1.0.0"]
    assert result.requeue_after is not None
    # the interval since the last good scan has elapsed, so the retry scans and recovers
    registry.fail_with = None
    recovered = rec.reconcile(result.object)
    assert recovered.ready and recovered.detail == "triggered by interval"


def test_failed_scan_within_interval_is_not_retried_until_due(store, registry, clock) -> None:  # type: ignore[no-untyped-def]
    """Flux decides a rescan from the last scan time and interval alone, not from the Ready condition: a
    retry before the interval has elapsed does not scan, and reports the last successful scan as Ready."""
    registry.tags["org/app"] = ["1.0.0"]
    rec = reconciler(store, registry, clock)
    good = rec.reconcile(repo()).object
    registry.fail_with = RegistryAuthError("list tags of ghcr.io/org/app: HTTP 401")
    clock.advance(10)
    good["metadata"]["annotations"] = {"reconcile.fluxcd.io/requestedAt": "t1"}
    failed = rec.reconcile(good)
    assert failed.detail == "" and condition(failed.object, "Ready")["reason"] == "ReadOperationFailed"
    assert failed.status["lastHandledReconcileAt"] == "t1"
    registry.fail_with = None
    clock.advance(10)
    retry = rec.reconcile(failed.object)
    assert len(registry.list_calls) == 2 and retry.detail == "not due"
    assert retry.ready and condition(retry.object, "Ready")["message"] == condition(good, "Ready")["message"]
    assert condition(retry.object, "Reconciling") is None
    assert retry.requeue_after == pytest.approx(280)
    assert retry.events[-1].type == "Normal"
    clock.advance(280)
    rescanned = rec.reconcile(retry.object)
    assert len(registry.list_calls) == 3 and rescanned.detail == "triggered by interval"
    assert rescanned.events[-1].type == "Trace"
    assert rescanned.events[-1].message == "tags did not change, next scan in 5m0s"


def test_missing_secret_is_an_authentication_failure(store, registry, clock) -> None:  # type: ignore[no-untyped-def]
    rec = reconciler(store, registry, clock, secrets=lambda ns, name: None)
    result = rec.reconcile(repo(secretRef={"name": "pull"}))
    assert condition(result.object, "Ready")["reason"] == "AuthenticationFailed"
    assert "flux-system/pull" in condition(result.object, "Ready")["message"]


def test_secret_credentials_insecure_and_timeout_reach_the_client(store, registry, clock) -> None:  # type: ignore[no-untyped-def]
    registry.tags["org/app"] = ["1"]
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "pull", "namespace": "flux-system"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": '{"auths": {"ghcr.io": {"username": "u", "password": "p"}}}'},
    }
    seen: list[tuple[str, str]] = []

    def lookup(namespace: str, name: str):  # type: ignore[no-untyped-def]
        seen.append((namespace, name))
        return secret

    rec = reconciler(store, registry, clock, secrets=lookup)
    assert rec.reconcile(repo(secretRef={"name": "pull"}, insecure=True, timeout="20s")).ready
    access = registry.accesses[0]
    assert seen == [("flux-system", "pull")]
    assert access.credentials.lookup("ghcr.io").username == "u"
    assert access.insecure is True and access.timeout == 20


def test_timeout_defaults_to_interval(store, registry, clock) -> None:  # type: ignore[no-untyped-def]
    registry.tags["org/app"] = ["1"]
    reconciler(store, registry, clock).reconcile(repo(interval="45s"))
    assert registry.accesses[0].timeout == 45


def test_bad_interval_stalls(store, registry, clock) -> None:  # type: ignore[no-untyped-def]
    result = reconciler(store, registry, clock).reconcile(repo(interval="five minutes"))
    assert result.stalled and registry.list_calls == []


def test_suspended_repository_is_left_alone(store, registry, clock) -> None:  # type: ignore[no-untyped-def]
    result = reconciler(store, registry, clock).reconcile(repo(suspend=True))
    assert registry.list_calls == [] and "conditions" not in result.status


def _pull_secret(name: str, user: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "flux-system"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": '{"auths": {"ghcr.io": {"username": "%s", "password": "p"}}}' % user},
    }


def test_service_account_image_pull_secrets_and_cert_secret_reach_the_client(store, registry, clock) -> None:  # type: ignore[no-untyped-def]
    registry.tags["org/app"] = ["1"]
    secrets = {"from-sa": _pull_secret("from-sa", "sa-user"),
               "ca": {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ca"}, "data": {"ca.crt": "LS0tQ0EtLS0="}}}
    accounts = {"puller": {"metadata": {"name": "puller"}, "imagePullSecrets": [{"name": "from-sa"}]}}
    rec = reconciler(store, registry, clock, secrets=lambda ns, n: secrets.get(n),
                     service_accounts=lambda ns, n: accounts.get(n))
    assert rec.reconcile(repo(serviceAccountName="puller", certSecretRef={"name": "ca"})).ready
    access = registry.accesses[-1]
    found = access.credentials.lookup("ghcr.io", "org/app")
    assert found is not None and found.username == "sa-user"
    assert access.ca_pem == b"---CA---"


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"serviceAccountName": "nobody"}, "service account 'flux-system/nobody' not found"),
        ({"certSecretRef": {"name": "missing"}}, "certSecretRef: secret 'flux-system/missing' not found"),
        ({"proxySecretRef": {"name": "proxy"}}, "secret 'flux-system/proxy' not found"),
    ],
)
def test_unusable_credentials_are_authentication_failures_that_retry(store, registry, clock, spec, message) -> None:  # type: ignore[no-untyped-def]
    rec = reconciler(store, registry, clock, secrets=lambda ns, n: None, service_accounts=lambda ns, n: None)
    result = rec.reconcile(repo(**spec))
    ready = condition(result.object, "Ready")
    assert ready["reason"] == "AuthenticationFailed" and message in ready["message"]
    assert not result.stalled and result.requeue_after is not None
    assert registry.list_calls == []


def _proxy_secret(**data: str) -> dict[str, Any]:
    import base64

    return {"metadata": {"name": "proxy"}, "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


@pytest.mark.parametrize(
    "data, proxy_url",
    [
        ({"address": "http://proxy.example:3128"}, "http://proxy.example:3128"),
        ({"address": "http://proxy.example:3128", "username": "u"}, "http://u@proxy.example:3128"),
        ({"address": "http://proxy.example", "username": "u@corp", "password": "p:w/d"}, "http://u%40corp:p%3Aw%2Fd@proxy.example:80"),
    ],
)
def test_proxy_secret_reaches_the_client_as_one_proxy_url(store, registry, clock, data, proxy_url) -> None:  # type: ignore[no-untyped-def]
    registry.tags["org/app"] = ["1"]
    rec = reconciler(store, registry, clock, secrets=lambda ns, n: _proxy_secret(**data) if n == "proxy" else None)
    assert rec.reconcile(repo(proxySecretRef={"name": "proxy"})).ready
    assert registry.accesses[-1].proxy_url == proxy_url


@pytest.mark.parametrize(
    "data, message",
    [
        ({"username": "u", "password": "secret-pw"}, "secret 'flux-system/proxy': key 'address' not found"),
        ({"address": ""}, "secret 'flux-system/proxy': proxy address is empty"),
        ({"address": "://invalid-url", "password": "secret-pw"}, "secret 'flux-system/proxy': failed to parse proxy address"),
        ({"address": "http://proxy.example:notaport"}, "secret 'flux-system/proxy': failed to parse proxy address"),
        ({"address": "socks5://proxy.example:1080"}, "secret 'flux-system/proxy': proxy scheme 'socks5' is not supported"),
    ],
)
def test_malformed_proxy_secret_is_an_authentication_failure(store, registry, clock, data, message) -> None:  # type: ignore[no-untyped-def]
    rec = reconciler(store, registry, clock, secrets=lambda ns, n: _proxy_secret(**data))
    result = rec.reconcile(repo(proxySecretRef={"name": "proxy"}))
    ready = condition(result.object, "Ready")
    assert ready["status"] == "False" and ready["reason"] == "AuthenticationFailed"
    assert message in ready["message"] and "secret-pw" not in ready["message"]
    assert registry.list_calls == [] and result.requeue_after is not None
