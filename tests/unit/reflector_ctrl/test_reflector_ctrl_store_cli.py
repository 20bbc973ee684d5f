"""Tag store persistence and the offline `stockade images update` command."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from stockade.cli.images_cmd import images
from stockade.reflector.models import ObjectKey
from stockade.reflector.store import StoreError, TagStore

DIGEST = "sha256:" + "ab" * 32
KEY = ObjectKey("flux-system", "podinfo")


def test_store_survives_a_new_instance_and_leaves_no_temp_files(tmp_path: Path) -> None:
    TagStore(tmp_path).set_tags(KEY, "ghcr.io/org/podinfo", ["b", "a"])
    TagStore(tmp_path).save_status("ImagePolicy", KEY, {"latestRef": {"name": "x", "tag": "1"}})
    again = TagStore(tmp_path)
    assert again.tags(KEY) == ["b", "a"]
    assert again.statuses("ImagePolicy") == {KEY: {"latestRef": {"name": "x", "tag": "1"}}}
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".tmp-")]


def test_missing_or_corrupt_files_read_as_nothing_stored(tmp_path: Path) -> None:
    store = TagStore(tmp_path)
    assert store.tags(KEY) is None and store.status("ImagePolicy", KEY) is None
    store.set_tags(KEY, "img", ["1"])
    next(tmp_path.rglob("tags.json")).write_text("{not json")
    assert store.tags(KEY) is None


@pytest.mark.parametrize("name", ["..", "a/b", "", "../../etc"])
def test_unsafe_names_cannot_escape_the_store(tmp_path: Path, name: str) -> None:
    with pytest.raises(StoreError):
        TagStore(tmp_path).set_tags(ObjectKey("ns", name), "img", [])


MANIFEST = textwrap.dedent(
    """\
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: podinfo
    spec:
      template:
        spec:
          containers:
          - name: app
            image: ghcr.io/org/podinfo:5.0.0 # {"$imagepolicy": "flux-system:podinfo"}
          - name: sidecar
            image: ghcr.io/org/other:1.0 # {"$imagepolicy": "flux-system:unknown"}
    ---
    apiVersion: kustomize.config.k8s.io/v1beta1
    kind: Kustomization
    images:
    - name: podinfo
      newName: ghcr.io/org/podinfo # {"$imagepolicy": "flux-system:podinfo:name"}
      newTag: 5.0.0 # {"$imagepolicy": "flux-system:podinfo:tag"}
      digest: sha256:old # {"$imagepolicy": "flux-system:podinfo:digest"}
    """
)


def policy_file(tmp_path: Path, status: dict) -> Path:  # type: ignore[type-arg]
    path = tmp_path / "policy.yaml"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "image.toolkit.fluxcd.io/v1",
                "kind": "ImagePolicy",
                "metadata": {"name": "podinfo", "namespace": "flux-system"},
                "spec": {"imageRepositoryRef": {"name": "podinfo"}, "policy": {"semver": {"range": "5.x"}}},
                "status": status,
            }
        )
    )
    return path


def run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(images, list(args), catch_exceptions=False)


def test_update_rewrites_markers_and_second_run_changes_nothing(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "app.yaml").write_text(MANIFEST)
    policies = policy_file(tmp_path, {"latestRef": {"name": "ghcr.io/org/podinfo", "tag": "5.1.0", "digest": DIGEST}})
    first = run("update", str(tree), "--policies", str(policies))
    assert first.exit_code == 0, first.output
    text = (tree / "app.yaml").read_text()
    assert f"image: ghcr.io/org/podinfo:5.1.0@{DIGEST} # " in text
    assert "newTag: 5.1.0 # " in text and f"digest: {DIGEST} # " in text
    assert "image: ghcr.io/org/other:1.0 #" in text  # unknown policy untouched
    assert "updated 3 value(s) in 1 file(s)" in first.output
    second = run("update", str(tree), "--policies", str(policies))
    assert second.exit_code == 0 and "updated 0 value(s)" in second.output
    assert (tree / "app.yaml").read_text() == text


def test_dry_run_prints_a_diff_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "app.yaml").write_text(MANIFEST)
    policies = policy_file(tmp_path, {"latestRef": {"name": "ghcr.io/org/podinfo", "tag": "5.1.0", "digest": DIGEST}})
    result = CliRunner().invoke(images, ["update", str(tmp_path / "app.yaml"), "--policies", str(policies), "--dry-run"])
    assert result.exit_code == 0
    assert "-  newTag: 5.0.0" in result.stdout and "+  newTag: 5.1.0" in result.stdout
    assert "would update 3 value(s)" in result.stderr
    assert (tmp_path / "app.yaml").read_text() == MANIFEST


def test_digest_marker_without_reflected_digest_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "app.yaml").write_text(MANIFEST)
    policies = policy_file(tmp_path, {"latestRef": {"name": "ghcr.io/org/podinfo", "tag": "5.1.0"}})
    result = CliRunner().invoke(images, ["update", str(tmp_path / "app.yaml"), "--policies", str(policies)])
    assert result.exit_code != 0 and "digest" in result.output
    assert (tmp_path / "app.yaml").read_text() == MANIFEST


def test_statuses_from_the_store_and_old_latest_image_field(tmp_path: Path) -> None:
    manifest = tmp_path / "app.yaml"
    manifest.write_text('image: ghcr.io/org/podinfo:5.0.0 # {"$imagepolicy": "flux-system:podinfo"}\n')
    TagStore(tmp_path / "state").save_status("ImagePolicy", KEY, {"latestImage": "ghcr.io/org/podinfo:5.2.0"})
    result = run("update", str(manifest), "--store", str(tmp_path / "state"))
    assert result.exit_code == 0, result.output
    assert manifest.read_text().startswith("image: ghcr.io/org/podinfo:5.2.0 #")


def test_update_needs_a_status_source(tmp_path: Path) -> None:
    result = CliRunner().invoke(images, ["update", str(tmp_path)])
    assert result.exit_code == 2 and "--policies" in result.output


def test_latest_rejects_a_bad_reference_and_policy_choice() -> None:
    bad = CliRunner().invoke(images, ["latest", "oci://ghcr.io/x", "--semver", "1.x"])
    assert bad.exit_code == 2 and "Error: " in bad.output and "should not include URL scheme" in bad.output  # an input error
    none = CliRunner().invoke(images, ["latest", "ghcr.io/x"])
    assert none.exit_code == 2 and "exactly one" in none.output
    invalid = CliRunner().invoke(images, ["latest", "ghcr.io/x", "--semver", "1.0.0p"])
    assert invalid.exit_code == 2 and "invalid policy" in invalid.output


def test_reconcile_warns_about_an_interval_without_always_and_still_reconciles(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(json.dumps({
        "apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImagePolicy",
        "metadata": {"name": "podinfo", "namespace": "flux-system"},
        "spec": {"imageRepositoryRef": {"name": "missing"}, "interval": "5m", "policy": {"semver": {"range": "5.x"}}},
    }))
    result = CliRunner().invoke(images, ["reconcile", str(path), "--store", str(tmp_path / "store")])
    assert result.exit_code == 1  # the repository is missing: DependencyNotReady, not a stall on the interval
    assert "DependencyNotReady" in result.stdout and "InvalidPolicy" not in result.stdout
    assert ("warning: ImagePolicy flux-system/podinfo: spec.interval is only accepted when "
            "spec.digestReflectionPolicy is set to 'Always'; ignored") in result.stderr
