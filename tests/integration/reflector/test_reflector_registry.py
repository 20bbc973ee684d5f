"""Reflection against Debian's docker-registry: policies, digests with re-pushed tags, auth, pagination, CLI round trip."""

from __future__ import annotations

import base64
import copy
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from stockade.cli.images_cmd import images
from stockade.reflector.imagepolicy import ImagePolicyReconciler
from stockade.reflector.models import ObjectKey, condition
from stockade.reflector.repository import ImageRepositoryReconciler
from stockade.reflector.store import TagStore
from stockade.testing.registry import free_port


def repository(image: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "image.toolkit.fluxcd.io/v1",
        "kind": "ImageRepository",
        "metadata": {"name": "app", "namespace": "flux-system"},
        "spec": {"image": image, "interval": "5m", "insecure": True, **spec},
    }


def policy(policy_spec: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "image.toolkit.fluxcd.io/v1",
        "kind": "ImagePolicy",
        "metadata": {"name": "app", "namespace": "flux-system"},
        "spec": {"imageRepositoryRef": {"name": "app"}, "policy": policy_spec, **spec},
    }


class Setup:
    def __init__(self, tmp_path: Path, repo: dict[str, Any], secrets: Any = None) -> None:
        self.store = TagStore(tmp_path / "state")
        self.repo = repo
        self.repositories = ImageRepositoryReconciler(self.store, secrets=secrets)
        self.policies = ImagePolicyReconciler(self.store, lambda key: self.repo, secrets=secrets)

    def scan(self) -> Any:
        result = self.repositories.reconcile(self.repo, force=True)
        self.repo = result.object
        return result


@pytest.mark.parametrize(
    "tags, policy_spec, filter_tags, expected",
    [
        (["1.0.0", "1.0.1", "1.2.0", "0.1.0", "1.0.0p"], {"semver": {"range": "1.0.x"}}, None, "1.0.1"),
        (["v1.2.3", "v1.0.0", "v0.1.0"], {"semver": {"range": "1.0.x"}}, None, "v1.0.0"),
        (["artful", "bionic", "zesty", "xenial"], {"alphabetical": {"order": "asc"}}, None, "zesty"),
        (["artful", "bionic", "zesty", "xenial"], {"alphabetical": {"order": "desc"}}, None, "artful"),
        (["build-9", "build-10", "build-2", "latest"], {"numerical": {"order": "asc"}}, {"pattern": "^build-(?P<n>[0-9]+)$", "extract": "$n"}, "build-10"),
        (["main-1700000000", "main-1600000000", "dev-1800000000"], {"alphabetical": {}}, {"pattern": "^main-([0-9]+)$", "extract": "$1"}, "main-1700000000"),
    ],
)
def test_policy_kinds_against_a_real_registry(anonymous_registry, push, tmp_path, tags, policy_spec, filter_tags, expected) -> None:  # type: ignore[no-untyped-def]
    image, push_tag = push(anonymous_registry)
    for tag in tags:
        push_tag(tag)
    setup = Setup(tmp_path, repository(image))
    assert setup.scan().status["lastScanResult"]["tagCount"] == len(tags)
    result = setup.policies.reconcile(policy(policy_spec, **({"filterTags": filter_tags} if filter_tags else {})))
    assert result.ready, result.error
    assert result.status["latestRef"] == {"name": image, "tag": expected}


def test_digest_reflection_tracks_a_re_pushed_tag_only_with_always(anonymous_registry, push, tmp_path) -> None:  # type: ignore[no-untyped-def]
    image, push_tag = push(anonymous_registry)
    first = push_tag("latest")
    push_tag("stable")
    setup = Setup(tmp_path, repository(image))
    setup.scan()
    pick = {"alphabetical": {}}
    filt = {"pattern": "^latest$"}
    specs = {
        "Never": policy(pick, filterTags=filt),
        "IfNotPresent": policy(pick, filterTags=filt, digestReflectionPolicy="IfNotPresent"),
        "Always": policy(pick, filterTags=filt, digestReflectionPolicy="Always", interval="1m"),
    }
    one = {mode: setup.policies.reconcile(spec) for mode, spec in specs.items()}
    assert one["Never"].status["latestRef"] == {"name": image, "tag": "latest"}
    assert one["IfNotPresent"].status["latestRef"]["digest"] == first
    assert one["Always"].status["latestRef"]["digest"] == first

    second = push_tag("latest")  # same tag, new content
    assert second != first
    setup.scan()
    two = {mode: setup.policies.reconcile({**copy.deepcopy(spec), "status": one[mode].status}) for mode, spec in specs.items()}
    assert "digest" not in two["Never"].status["latestRef"]
    assert two["IfNotPresent"].status["latestRef"]["digest"] == first
    assert two["Always"].status["latestRef"]["digest"] == second
    assert two["Always"].status["observedPreviousRef"] == {"name": image, "tag": "latest", "digest": first}
    assert two["Always"].events[-1].type == "Normal" and f"(previously {image}:latest@{first})" in two["Always"].events[-1].message
    assert two["IfNotPresent"].events[-1].type == "Trace"


def test_private_registry_needs_the_pull_secret(private_registry, push, tmp_path) -> None:  # type: ignore[no-untyped-def]
    image, push_tag = push(private_registry, private_registry.credentials())
    digest = push_tag("1.0.0")
    config = {"auths": {private_registry.host: {"auth": base64.b64encode(b"alice:s3cret").decode()}}}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": "regcred", "namespace": "flux-system"},
        "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
    }
    anonymous = Setup(tmp_path / "anon", repository(image))
    failed = anonymous.scan()
    assert condition(failed.object, "Ready")["reason"] == "ReadOperationFailed"
    assert "scan failed" in failed.error

    secrets = {("flux-system", "regcred"): secret}
    setup = Setup(tmp_path / "auth", repository(image, secretRef={"name": "regcred"}), secrets=lambda ns, name: secrets.get((ns, name)))
    assert setup.scan().ready
    result = setup.policies.reconcile(policy({"semver": {"range": "1.x"}}, digestReflectionPolicy="IfNotPresent"))
    assert result.status["latestRef"] == {"name": image, "tag": "1.0.0", "digest": digest}


def test_tag_listing_follows_pagination(paginating_registry, tmp_path) -> None:  # type: ignore[no-untyped-def]
    host, tags, requested = paginating_registry
    setup = Setup(tmp_path, repository(f"{host}/paged/app"))
    result = setup.scan()
    assert result.status["lastScanResult"]["tagCount"] == len(tags) and len(requested) == 4
    assert setup.store.tags(ObjectKey("flux-system", "app")) == sorted(tags, reverse=True)


def test_unreachable_registry_and_unknown_repository(anonymous_registry, tmp_path) -> None:  # type: ignore[no-untyped-def]
    down = Setup(tmp_path / "down", repository(f"127.0.0.1:{free_port()}/app")).scan()
    assert condition(down.object, "Ready")["reason"] == "ReadOperationFailed" and not down.stalled
    missing = Setup(tmp_path / "missing", repository(f"{anonymous_registry.host}/does/not-exist")).scan()
    assert "404" in missing.error


def test_restart_reuses_stored_tags_without_rescanning(anonymous_registry, push, tmp_path) -> None:  # type: ignore[no-untyped-def]
    image, push_tag = push(anonymous_registry)
    push_tag("1.0.0")
    setup = Setup(tmp_path, repository(image))
    scanned = setup.scan().object
    push_tag("1.1.0")
    restarted = ImageRepositoryReconciler(TagStore(tmp_path / "state"))
    again = restarted.reconcile(scanned)
    assert again.status["lastScanResult"] == scanned["status"]["lastScanResult"]  # interval not elapsed: no scan
    policies = ImagePolicyReconciler(TagStore(tmp_path / "state"), lambda key: again.object)
    assert policies.reconcile(policy({"semver": {"range": "1.x"}})).status["latestRef"]["tag"] == "1.0.0"


def test_cli_scan_and_latest(anonymous_registry, push) -> None:  # type: ignore[no-untyped-def]
    image, push_tag = push(anonymous_registry)
    for tag in ["1.0.0", "1.1.0", "2.0.0-rc.1", "sha256-x.sig"]:
        push_tag(tag)
    digest = push_tag("1.2.0")
    runner = CliRunner()
    scan = runner.invoke(images, ["scan", image, "--insecure", "-o", "json"])
    assert scan.exit_code == 0, scan.output
    assert json.loads(scan.stdout)["tags"] == ["2.0.0-rc.1", "1.2.0", "1.1.0", "1.0.0"]
    latest = runner.invoke(images, ["latest", image, "--insecure", "--semver", "^1.0", "--digest"])
    assert latest.exit_code == 0 and latest.stdout.strip() == f"{image}:1.2.0@{digest}"
    pre = runner.invoke(images, ["latest", image, "--insecure", "--semver", ">=1.0.0-0"])
    assert pre.stdout.strip() == "2.0.0-rc.1"
    unreachable = runner.invoke(images, ["scan", f"127.0.0.1:{free_port()}/x", "--insecure", "--timeout", "2s"])
    assert unreachable.exit_code == 1 and "registry error" in unreachable.output
    none = runner.invoke(images, ["latest", image, "--insecure", "--semver", ">=9"])
    assert none.exit_code == 1 and "no tag" in none.output


def test_cli_reconcile_then_update_round_trip(anonymous_registry, push, tmp_path) -> None:  # type: ignore[no-untyped-def]
    image, push_tag = push(anonymous_registry)
    push_tag("5.0.0")
    digest = push_tag("5.1.0")
    objects = tmp_path / "objects.yaml"
    objects.write_text(
        textwrap.dedent(
            f"""\
            apiVersion: image.toolkit.fluxcd.io/v1
            kind: ImageRepository
            metadata: {{name: podinfo, namespace: flux-system}}
            spec: {{image: "{image}", interval: 5m, insecure: true}}
            ---
            apiVersion: image.toolkit.fluxcd.io/v1
            kind: ImagePolicy
            metadata: {{name: podinfo, namespace: flux-system}}
            spec:
              imageRepositoryRef: {{name: podinfo}}
              policy: {{semver: {{range: 5.x}}}}
              digestReflectionPolicy: IfNotPresent
            """
        )
    )
    tree = tmp_path / "deploy"
    tree.mkdir()
    manifest = tree / "deployment.yaml"
    manifest.write_text(
        textwrap.dedent(
            f"""\
            spec:
              containers:
              - name: app
                image: {image}:5.0.0 # {{"$imagepolicy": "flux-system:podinfo"}}
              - name: pinned
                image: {image}@sha256:{'0' * 64} # {{"$imagepolicy": "flux-system:podinfo:digest"}}
            """
        )
    )
    runner = CliRunner()
    state = str(tmp_path / "state")
    reconciled = runner.invoke(images, ["reconcile", str(objects), "--store", state])
    assert reconciled.exit_code == 0, reconciled.output
    assert "ImagePolicy flux-system/podinfo: Ready" in reconciled.stdout
    updated = runner.invoke(images, ["update", str(tree), "--store", state])
    assert updated.exit_code == 0, updated.output
    text = manifest.read_text()
    assert f"image: {image}:5.1.0@{digest} # " in text
    assert f"image: {image}@sha256:{'0' * 64} #" not in text and f"image: {digest} #" in text
    again = runner.invoke(images, ["update", str(tree), "--store", state])
    assert "updated 0 value(s)" in again.output and manifest.read_text() == text


def test_cli_reconcile_reports_failures_with_exit_code(tmp_path) -> None:  # type: ignore[no-untyped-def]
    objects = tmp_path / "objects.yaml"
    objects.write_text(
        "apiVersion: image.toolkit.fluxcd.io/v1\nkind: ImageRepository\n"
        "metadata: {name: bad, namespace: flux-system}\nspec: {image: 'oci://ghcr.io/x', interval: 5m}\n"
    )
    result = CliRunner().invoke(images, ["reconcile", str(objects), "--store", str(tmp_path / "state")])
    assert result.exit_code == 1 and "Stalled (ImageURLInvalid)" in result.stdout
