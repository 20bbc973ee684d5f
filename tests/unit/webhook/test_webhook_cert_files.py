"""Where the webhook keeps its keys: a private directory, files created 0600 and replaced atomically, no symlinks
followed, and broken certificate files reported by name instead of a traceback."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from stockade.cli.serve_cmd import serve
from stockade.webhook import certs as certs_module
from stockade.webhook.certs import (
    CertificateFileError,
    CertificateManager,
    ensure_private_directory,
    generate_ca,
    issue_serving_cert,
    write_pair,
)

POLICY = "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: p}\nspec: {rules: []}\n"


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return path


def test_missing_directory_is_created_private(tmp_path: Path) -> None:
    directory = tmp_path / "a" / "certs"
    ensure_private_directory(directory)
    assert directory.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("mode, reason", [(0o770, "group- or world-writable"), (0o757, "group- or world-writable")])
def test_writable_by_others_directory_is_refused(tmp_path: Path, mode: int, reason: str) -> None:
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(mode)
    with pytest.raises(CertificateFileError) as caught:
        ensure_private_directory(directory)
    assert caught.value.path == directory
    assert reason in str(caught.value) and str(directory) in str(caught.value)


def test_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "theirs"
    directory.mkdir(mode=0o700)
    with pytest.raises(CertificateFileError, match="owned by uid"):
        ensure_private_directory(directory, owner_uid=os.geteuid() + 1)
    ensure_private_directory(directory, owner_uid=os.geteuid())  # ours: fine


def test_serve_refuses_world_writable_cert_dir(tmp_path: Path, policy: Path) -> None:
    directory = tmp_path / "open"
    directory.mkdir()
    directory.chmod(0o777)
    result = CliRunner().invoke(serve, [str(policy), "--port", "0", "--host", "127.0.0.1", "--cert-dir", str(directory)])
    assert result.exit_code == 2  # an input error
    assert f"--cert-dir {directory}: is group- or world-writable (mode 0777)" in result.output
    assert "Traceback" not in result.output
    assert list(directory.iterdir()) == []  # nothing written there


def test_serve_refuses_cert_dir_that_is_a_file(tmp_path: Path, policy: Path) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("x")
    result = CliRunner().invoke(serve, [str(policy), "--port", "0", "--host", "127.0.0.1", "--cert-dir", str(not_a_directory / "sub")])
    assert result.exit_code == 2  # an input error
    assert f"--cert-dir {not_a_directory / 'sub'}: cannot create or inspect" in result.output


def test_files_are_created_0600_exclusively_without_following_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[tuple[str, int, int]] = []
    real_open = os.open

    def recording_open(path: Any, flags: int, mode: int = 0o777, *args: Any, **kwargs: Any) -> int:
        opened.append((os.fspath(path), flags, mode))
        return real_open(path, flags, mode, *args, **kwargs)

    def no_chmod(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("permissions must be right at creation, not fixed afterwards")

    monkeypatch.setattr(certs_module.os, "open", recording_open)
    monkeypatch.setattr(certs_module.os, "chmod", no_chmod)
    old_umask = os.umask(0)  # a permissive umask must not widen anything
    try:
        write_pair(issue_serving_cert(generate_ca(), ["x"]), tmp_path / "tls.crt", tmp_path / "tls.key")
    finally:
        os.umask(old_umask)
    creations = [(path, flags, mode) for path, flags, mode in opened if flags & os.O_CREAT]
    assert len(creations) == 2
    for path, flags, mode in creations:
        assert Path(path).parent == tmp_path and Path(path).name.startswith(".")  # a temp name next to the target
        assert flags & os.O_EXCL and flags & os.O_NOFOLLOW
        assert mode == 0o600
    for name in ("tls.crt", "tls.key"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tls.crt", "tls.key"]  # no temp files left behind


def test_replacing_keeps_mode_and_swaps_content(tmp_path: Path) -> None:
    ca = generate_ca()
    first, second = issue_serving_cert(ca, ["x"]), issue_serving_cert(ca, ["x"])
    write_pair(first, tmp_path / "tls.crt", tmp_path / "tls.key")
    inode = (tmp_path / "tls.key").stat().st_ino
    write_pair(second, tmp_path / "tls.crt", tmp_path / "tls.key")
    assert (tmp_path / "tls.key").read_bytes() == second.key_pem
    assert (tmp_path / "tls.key").stat().st_ino != inode  # a new file renamed over the old one, not rewritten in place


def test_symlinked_key_path_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("precious")
    (tmp_path / "tls.key").symlink_to(target)
    with pytest.raises(CertificateFileError, match="symbolic link") as caught:
        write_pair(issue_serving_cert(generate_ca(), ["x"]), tmp_path / "tls.crt", tmp_path / "tls.key")
    assert caught.value.path == tmp_path / "tls.key"
    assert target.read_text() == "precious"


def test_symlink_planted_in_cert_dir_is_not_followed(tmp_path: Path) -> None:
    directory = tmp_path / "certs"
    CertificateManager(hosts=["127.0.0.1"], directory=directory).start()
    planted = tmp_path / "attacker.key"
    planted.write_bytes((directory / "ca.key").read_bytes())
    (directory / "ca.key").unlink()
    (directory / "ca.key").symlink_to(planted)
    with pytest.raises(CertificateFileError, match="symbolic link") as caught:
        CertificateManager(hosts=["127.0.0.1"], directory=directory).start()
    assert caught.value.path == directory / "ca.key"


def test_rotation_writes_private_files(tmp_path: Path) -> None:
    manager = CertificateManager(hosts=["127.0.0.1"], directory=tmp_path / "certs", serving_validity=dt.timedelta(days=30))
    manager.start()
    before = (tmp_path / "certs" / "tls.crt").read_bytes()
    manager.renew_before = dt.timedelta(days=31)
    assert manager.refresh() is True
    assert (tmp_path / "certs" / "tls.crt").read_bytes() != before
    assert {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "certs").iterdir()} == {
        "ca.crt": 0o600, "ca.key": 0o600, "tls.crt": 0o600, "tls.key": 0o600
    }


# -- malformed certificate files ---------------------------------------------------------------------------------------
def _pem_pair() -> tuple[bytes, bytes]:
    pair = issue_serving_cert(generate_ca(), ["127.0.0.1"])
    return pair.cert_pem, pair.key_pem


def _encrypted_key() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw"))


def _cases() -> list[tuple[str, str, str]]:
    """(id, which file is broken, expected reason)."""
    return [
        ("empty-cert", "cert", "is empty, expected a PEM certificate"),
        ("garbage-cert", "cert", "holds no PEM block, expected a PEM certificate"),
        ("key-as-cert", "cert", "holds a 'PRIVATE KEY' PEM block, expected a PEM certificate"),
        ("truncated-cert", "cert", "is not a valid PEM certificate"),
        ("empty-key", "key", "is empty, expected a PEM private key"),
        ("cert-as-key", "key", "holds a 'CERTIFICATE' PEM block, expected a PEM private key"),
        ("truncated-key", "key", "is not a valid PEM private key"),
        ("encrypted-key", "key", "is an encrypted private key"),
        ("other-key", "key", "does not belong to the certificate"),
    ]


def _break(case: str, cert_pem: bytes, key_pem: bytes) -> tuple[bytes, bytes]:
    other_cert, other_key = _pem_pair()
    lines = cert_pem.splitlines(keepends=True)
    truncated_cert = b"".join(lines[:4] + lines[-1:])
    key_lines = key_pem.splitlines(keepends=True)
    truncated_key = b"".join(key_lines[:2] + key_lines[-1:])
    return {
        "empty-cert": (b"", key_pem),
        "garbage-cert": (b"\x00\xffnot a certificate at all\n", key_pem),
        "key-as-cert": (key_pem, key_pem),
        "truncated-cert": (truncated_cert, key_pem),
        "empty-key": (cert_pem, b"  \n"),
        "cert-as-key": (cert_pem, cert_pem),
        "truncated-key": (cert_pem, truncated_key),
        "encrypted-key": (cert_pem, _encrypted_key()),
        "other-key": (cert_pem, other_key),
    }[case]


@pytest.mark.parametrize("case, broken, reason", _cases(), ids=[c[0] for c in _cases()])
def test_malformed_user_files_are_named_with_a_reason(tmp_path: Path, policy: Path, case: str, broken: str, reason: str) -> None:
    cert_pem, key_pem = _break(case, *_pem_pair())
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert_file.write_bytes(cert_pem)
    key_file.write_bytes(key_pem)
    culprit = cert_file if broken == "cert" else key_file
    with pytest.raises(CertificateFileError) as caught:
        CertificateManager(cert_file=cert_file, key_file=key_file).start()
    assert caught.value.path == culprit and reason in caught.value.reason
    result = CliRunner().invoke(serve, [str(policy), "--port", "0", "--host", "127.0.0.1", "--tls-cert-file", str(cert_file), "--tls-key-file", str(key_file)])
    assert result.exit_code == 2  # an input error
    assert f"Error: TLS certificate: {culprit}: " in result.output and reason in result.output
    assert "Traceback" not in result.output


def test_malformed_ca_file_is_named(tmp_path: Path, policy: Path) -> None:
    cert_pem, key_pem = _pem_pair()
    (tmp_path / "tls.crt").write_bytes(cert_pem)
    (tmp_path / "tls.key").write_bytes(key_pem)
    (tmp_path / "ca.crt").write_bytes(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    result = CliRunner().invoke(
        serve,
        [str(policy), "--port", "0", "--host", "127.0.0.1", "--tls-cert-file", str(tmp_path / "tls.crt"),
         "--tls-key-file", str(tmp_path / "tls.key"), "--tls-ca-file", str(tmp_path / "ca.crt")],
    )
    assert result.exit_code == 2  # an input error
    assert f"{tmp_path / 'ca.crt'}: is not a valid PEM certificate" in result.output
    assert "Traceback" not in result.output


def test_garbage_in_cert_dir_is_named(tmp_path: Path, policy: Path) -> None:
    directory = tmp_path / "certs"
    CertificateManager(hosts=["127.0.0.1"], directory=directory).start()
    (directory / "ca.crt").unlink()
    write_pair_target = directory / "ca.crt"
    write_pair_target.write_bytes(b"garbage")
    write_pair_target.chmod(0o600)
    result = CliRunner().invoke(serve, [str(policy), "--port", "0", "--host", "127.0.0.1", "--cert-dir", str(directory)])
    assert result.exit_code == 2  # an input error
    assert f"{directory / 'ca.crt'}: holds no PEM block" in result.output
    assert "Traceback" not in result.output


def test_broken_replacement_keeps_the_pair_being_served(tmp_path: Path) -> None:
    cert_pem, key_pem = _pem_pair()
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert_file.write_bytes(cert_pem)
    key_file.write_bytes(key_pem)
    manager = CertificateManager(cert_file=cert_file, key_file=key_file)
    manager.start()
    new_cert, _ = _pem_pair()
    cert_file.write_bytes(new_cert)  # the certificate was replaced, its key not yet
    os.utime(cert_file, ns=(1, 1))
    with pytest.raises(CertificateFileError, match="does not belong"):
        manager.refresh()
    assert manager.serving is not None and manager.serving.cert_pem == cert_pem
