"""Bad files on the command line or in test files end in a clear error naming them: alias bombs, devices,
output paths escaping ``-o DIR``, and ``images update`` targets that cannot all be written."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from stockade.cli.main import cli

QUICKSTART = Path(__file__).resolve().parents[3] / "examples" / "quickstart"
ALIAS_BOMB = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\na: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]\n" for previous, name in zip("abcdefgh", "bcdefghi")
)
POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\nspec: {containers: [{name: c, image: nginx}]}\n"
MARKER = 'image: foo:1 # {"$imagepolicy": "ns:app"}\n'
POLICY_STATUS = (
    "apiVersion: image.toolkit.fluxcd.io/v1beta2\nkind: ImagePolicy\nmetadata: {name: app, namespace: ns}\n"
    "status: {latestRef: {name: registry.example/app, tag: v2}}\n"
)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "stockade", *args], capture_output=True, text=True, env=env, timeout=60)


def test_apply_refuses_an_alias_bomb_naming_the_file(tmp_path: Path) -> None:
    assert len(ALIAS_BOMB) < 700
    (tmp_path / "bomb.yaml").write_text(ALIAS_BOMB)
    (tmp_path / "pod.yaml").write_text(POD)
    result = run("apply", str(tmp_path / "bomb.yaml"), "-r", str(tmp_path / "pod.yaml"))
    assert result.returncode == 2
    assert f"{tmp_path / 'bomb.yaml'} (document 1): aliases expand to more than" in result.stderr
    assert "Traceback" not in result.stderr


def test_test_refuses_an_alias_bomb_in_a_listed_file_and_in_the_test_file(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    shutil.copytree(QUICKSTART, suite)
    (suite / "resources.yaml").write_text(ALIAS_BOMB)
    result = run("test", str(suite))
    assert result.returncode == 1
    assert f"{suite / 'resources.yaml'} (document 1): aliases expand to more than" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    (suite / "kyverno-test.yaml").write_text(ALIAS_BOMB.replace("kind: ConfigMap", "kind: Test"))
    result = run("test", str(suite))
    assert result.returncode == 1
    assert f"Error: cannot load test {suite / 'kyverno-test.yaml'}" in result.stderr and "aliases expand" in result.stderr


def test_test_refuses_dev_zero_named_as_a_resource(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    shutil.copytree(QUICKSTART, suite)
    test_file = suite / "kyverno-test.yaml"
    test_file.write_text(test_file.read_text().replace("resources.yaml", "/dev/zero"))
    result = run("test", str(suite))
    assert result.returncode == 1
    assert "/dev/zero: not a regular file (a character device)" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_apply_refuses_a_fifo_and_a_directory_given_as_files(tmp_path: Path) -> None:
    fifo = tmp_path / "pods.yaml"
    os.mkfifo(fifo)
    (tmp_path / "policy.yaml").write_text((QUICKSTART / "policy.yaml").read_text())
    result = run("apply", str(tmp_path / "policy.yaml"), "-r", str(fifo))
    assert result.returncode == 2 and f"{fifo}: not a regular file (a FIFO)" in result.stderr
    result = run("apply", str(tmp_path / "policy.yaml"), "--values-file", str(tmp_path), "-r", str(QUICKSTART / "resources.yaml"))
    assert result.returncode == 2 and f"{tmp_path}: is a directory" in result.stderr


def _mutating_policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: add-label}\nspec:\n  rules:\n"
        "  - name: add\n    match: {any: [{resources: {kinds: [ConfigMap]}}]}\n"
        "    mutate: {patchStrategicMerge: {metadata: {labels: {added: 'yes'}}}}\n"
    )
    return path


def test_apply_output_names_cannot_escape_the_directory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    resource = tmp_path / "cm.yaml"
    resource.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ../../escaped}\ndata: {}\n")
    result = run("apply", str(_mutating_policy(tmp_path)), "-r", str(resource), "-o", str(out))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "is not a plain file name; nothing was written" in result.stderr
    assert not (tmp_path / "escaped.yaml").exists() and not out.exists()  # not even the directory is left behind


def test_apply_output_refuses_a_symlink_out_of_the_directory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (out / "ConfigMap-default-cm.yaml").symlink_to(victim)
    resource = tmp_path / "cm.yaml"
    resource.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {}\n")
    result = run("apply", str(_mutating_policy(tmp_path)), "-r", str(resource), "-o", str(out))
    assert result.returncode == 2 and "would be written outside" in result.stderr
    assert victim.read_text() == "keep me"
    resource.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\ndata: {}\n")
    result = run("apply", str(_mutating_policy(tmp_path)), "-r", str(resource), "-o", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "added: 'yes'" in (out / "ConfigMap-default-ok.yaml").read_text()


def _manifests(tmp_path: Path) -> tuple[Path, Path]:
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("a.yaml", "b.yaml", "c.yaml"):
        (tree / name).write_text(MARKER)
    policies = tmp_path / "policies.yaml"
    policies.write_text(POLICY_STATUS)
    return tree, policies


def test_images_update_refuses_a_read_only_file_and_writes_nothing(tmp_path: Path) -> None:
    tree, policies = _manifests(tmp_path)
    os.chmod(tree / "b.yaml", 0o444)
    result = CliRunner().invoke(cli, ["images", "update", str(tree), "--policies", str(policies)])
    assert result.exit_code == 1
    assert "b.yaml: cannot write: file is read-only; no file was changed" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert all((tree / name).read_text() == MARKER for name in ("a.yaml", "b.yaml", "c.yaml"))


def test_images_update_failure_half_way_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree, policies = _manifests(tmp_path)
    real_mkstemp = tempfile.mkstemp
    calls: list[str] = []

    def failing_second(*args: object, **kwargs: object) -> tuple[int, str]:
        calls.append("mkstemp")
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_mkstemp(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tempfile, "mkstemp", failing_second)
    result = CliRunner().invoke(cli, ["images", "update", str(tree), "--policies", str(policies)])
    assert result.exit_code == 1
    assert "b.yaml: cannot write: No space left on device; no file was changed" in result.output
    assert all((tree / name).read_text() == MARKER for name in ("a.yaml", "b.yaml", "c.yaml"))
    assert sorted(p.name for p in tree.iterdir()) == ["a.yaml", "b.yaml", "c.yaml"]  # no temporary file left


def test_images_update_writes_every_file_and_keeps_modes(tmp_path: Path) -> None:
    tree, policies = _manifests(tmp_path)
    os.chmod(tree / "c.yaml", 0o600)
    result = CliRunner().invoke(cli, ["images", "update", str(tree), "--policies", str(policies)])
    assert result.exit_code == 0, result.output
    assert all((tree / name).read_text().startswith("image: registry.example/app:v2 #") for name in ("a.yaml", "b.yaml", "c.yaml"))
    assert os.stat(tree / "c.yaml").st_mode & 0o777 == 0o600


def test_images_update_refuses_an_alias_bomb_in_policies(tmp_path: Path) -> None:
    tree, policies = _manifests(tmp_path)
    policies.write_text(ALIAS_BOMB)
    result = CliRunner().invoke(cli, ["images", "update", str(tree), "--policies", str(policies)])
    assert result.exit_code == 2 and f"{policies} (document 1): aliases expand" in result.output
    assert (tree / "a.yaml").read_text() == MARKER
