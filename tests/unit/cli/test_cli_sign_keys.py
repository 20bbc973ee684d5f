"""`stockade sign` / `verify` key handling: passwords found the way cosign finds them, key files created private and
exclusively, and broken key files reported by name with a reason instead of a traceback."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from stockade.cli.sign_cmd import PasswordError, read_password, sign, verify
from stockade.images import keys as keys_module
from stockade.images.keys import generate_key_pair, load_cosign_private_key, public_key_pem

REPO_ROOT = Path(__file__).resolve().parents[3]


def _env(**extra: str) -> dict[str, str]:
    """CliRunner merges into os.environ: make sure an inherited COSIGN_PASSWORD does not leak into a test."""
    return {"COSIGN_PASSWORD": None, **extra}  # type: ignore[dict-item]


def _generate(directory: Path, stdin: str | None, **env: str) -> Any:
    return CliRunner().invoke(sign, ["--generate-key-pair", "--output-dir", str(directory)], input=stdin, env=_env(**env))


# -- where the password comes from -------------------------------------------------------------------------------------
def test_environment_password_wins_over_stdin(tmp_path: Path) -> None:
    result = _generate(tmp_path, "from-stdin\n", COSIGN_PASSWORD="from-env")
    assert result.exit_code == 0, result.output
    private_pem = (tmp_path / "cosign.key").read_bytes()
    key = load_cosign_private_key(private_pem, "from-env")
    assert public_key_pem(key) == (tmp_path / "cosign.pub").read_bytes()


def test_empty_environment_password_is_a_password(tmp_path: Path) -> None:
    result = _generate(tmp_path, "not-this\n", COSIGN_PASSWORD="")
    assert result.exit_code == 0, result.output
    load_cosign_private_key((tmp_path / "cosign.key").read_bytes(), "")


def test_piped_password_is_the_first_line(tmp_path: Path) -> None:
    result = _generate(tmp_path, "piped pass\r\nsecond line\n")
    assert result.exit_code == 0, result.output
    load_cosign_private_key((tmp_path / "cosign.key").read_bytes(), "piped pass")
    with pytest.raises(keys_module.KeyFormatError, match="wrong password"):
        load_cosign_private_key((tmp_path / "cosign.key").read_bytes(), "piped pass\r\nsecond line")


def test_password_through_a_real_pipe(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "COSIGN_PASSWORD"}
    completed = subprocess.run(
        [sys.executable, "-m", "stockade", "sign", "--generate-key-pair", "--output-dir", str(tmp_path)],
        input=b"through-a-pipe\n", capture_output=True, env=env, cwd=REPO_ROOT, timeout=120, check=False,
    )
    assert completed.returncode == 0, completed.stderr.decode()
    load_cosign_private_key((tmp_path / "cosign.key").read_bytes(), "through-a-pipe")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_prompts_twice_and_rejects_a_mismatch() -> None:
    answers = iter(["one", "one"])
    asked: list[str] = []

    def prompt(text: str) -> str:
        asked.append(text)
        return next(answers)

    assert read_password(confirm=True, environ={}, stdin=_Terminal(), prompt=prompt) == "one"
    assert asked == ["Enter password for private key", "Enter password for private key again"]
    mismatched = iter(["one", "two"])
    with pytest.raises(PasswordError, match="passwords do not match"):
        read_password(confirm=True, environ={}, stdin=_Terminal(), prompt=lambda _text: next(mismatched))
    once = iter(["only"])
    assert read_password(confirm=False, environ={}, stdin=_Terminal(), prompt=lambda _text: next(once)) == "only"


def test_closed_stdin_means_empty_password() -> None:
    assert read_password(confirm=True, environ={}, stdin=io.StringIO("")) == ""


# -- key files -------------------------------------------------------------------------------------------------------
def test_key_files_are_created_exclusively_with_their_final_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[tuple[str, int, int]] = []
    real_open = os.open

    def recording_open(path: Any, flags: int, mode: int = 0o777, *args: Any, **kwargs: Any) -> int:
        opened.append((os.fspath(path), flags, mode))
        return real_open(path, flags, mode, *args, **kwargs)

    monkeypatch.setattr(keys_module.os, "open", recording_open)
    monkeypatch.setattr(Path, "chmod", lambda *_a, **_k: pytest.fail("modes must be right at creation"))
    old_umask = os.umask(0)
    try:
        result = _generate(tmp_path, None, COSIGN_PASSWORD="pw")
    finally:
        os.umask(old_umask)
    assert result.exit_code == 0, result.output
    created = {Path(path).name: (flags, mode) for path, flags, mode in opened if flags & os.O_CREAT}
    assert set(created) == {"cosign.key", "cosign.pub"}
    for flags, _mode in created.values():
        assert flags & os.O_EXCL and flags & os.O_NOFOLLOW
    assert created["cosign.key"][1] == 0o600
    assert (tmp_path / "cosign.key").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("existing", ["cosign.key", "cosign.pub"])
def test_existing_files_and_symlinks_are_never_overwritten(tmp_path: Path, existing: str) -> None:
    target = tmp_path / "precious"
    target.write_text("keep me")
    (tmp_path / existing).symlink_to(target)
    result = _generate(tmp_path, None, COSIGN_PASSWORD="pw")
    assert result.exit_code == 1
    assert f"{tmp_path / existing} already exists" in result.output and "Traceback" not in result.output
    assert target.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["precious", existing])


def test_key_written_while_a_symlink_appears_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep me")
    (tmp_path / "cosign.pub").symlink_to(target)
    with pytest.raises(keys_module.KeyFileError, match="already exists"):
        keys_module.write_key_pair(tmp_path, b"private", b"public")
    assert not (tmp_path / "cosign.key").exists()  # no half key pair left behind
    assert target.read_text() == "keep me"


# -- signing reads an encrypted key's password the same way ------------------------------------------------------------
@pytest.fixture
def encrypted_key(tmp_path: Path) -> Path:
    private_pem, _ = generate_key_pair("right")
    path = tmp_path / "cosign.key"
    path.write_bytes(private_pem)
    return path


def test_sign_reads_the_password_from_a_pipe(encrypted_key: Path) -> None:
    wrong = CliRunner().invoke(sign, ["--key", str(encrypted_key), "127.0.0.1:9/app:v1"], input="wrong\n", env=_env())
    assert wrong.exit_code == 1
    assert f"private key {encrypted_key}: decryption failed (wrong password?)" in wrong.output
    right = CliRunner().invoke(sign, ["--key", str(encrypted_key), "127.0.0.1:9/app:v1"], input="right\n", env=_env())
    assert right.exit_code == 1  # the key opened; nothing listens on 127.0.0.1:9
    assert "signing 127.0.0.1:9/app:v1:" in right.output and "private key" not in right.output
    assert "Traceback" not in wrong.output + right.output


# -- malformed keys --------------------------------------------------------------------------------------------------
def _public_pem() -> str:
    return generate_key_pair("x")[1].decode()


def _truncated(pem: str) -> str:
    lines = pem.splitlines()
    return "\n".join(lines[:-1]) + "\n"


def _bad_base64(pem: str) -> str:
    lines = pem.splitlines()
    return "\n".join([lines[0], lines[1][:-3] + "!!!", *lines[2:]]) + "\n"


PRIVATE_CASES = {
    "empty": ("", "empty, expected a PEM block"),
    "garbage": ("this is not a key\n", "no PEM block found"),
    "public-key": (_public_pem(), "holds a PUBLIC KEY, expected a private key"),
    "truncated": (_truncated(generate_key_pair("right")[0].decode()), "no matching END line (truncated?)"),
    "bad-base64": (_bad_base64(generate_key_pair("right")[0].decode()), "not valid base64"),
    "wrong-password": (generate_key_pair("other")[0].decode(), "decryption failed (wrong password?)"),
    "pkcs8-encrypted-wrong-password": (
        ec.generate_private_key(ec.SECP256R1())
        .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"other"))
        .decode(),
        "wrong password?",
    ),
}


@pytest.mark.parametrize("case", sorted(PRIVATE_CASES))
def test_sign_names_a_malformed_private_key(tmp_path: Path, case: str) -> None:
    content, reason = PRIVATE_CASES[case]
    path = tmp_path / "cosign.key"
    path.write_text(content)
    result = CliRunner().invoke(sign, ["--key", str(path), "127.0.0.1:9/app:v1"], env=_env(COSIGN_PASSWORD="right"))
    assert result.exit_code == 1
    assert f"private key {path}: " in result.output and reason in result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)


def test_sign_names_a_missing_key_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(sign, ["--key", str(tmp_path / "absent.key"), "x.io/a:b"], env=_env(COSIGN_PASSWORD=""))
    assert result.exit_code == 1
    assert f"cannot read private key {tmp_path / 'absent.key'}: No such file or directory" in result.output


PUBLIC_CASES = {
    "empty": ("", "empty, expected a PEM public key"),
    "garbage": ("\x00\x01 nonsense", "no PEM public key found"),
    "private-key": (generate_key_pair("x")[0].decode(), "holds a ENCRYPTED SIGSTORE PRIVATE KEY, expected a PUBLIC KEY"),
    "truncated": (_truncated(_public_pem()), "no matching END line (truncated?)"),
    "bad-base64": (_bad_base64(_public_pem()), "not valid base64"),
    "bad-der": ("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "invalid PUBLIC KEY PEM"),
    "bad-certificate": ("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "invalid CERTIFICATE PEM"),
}


@pytest.mark.parametrize("case", sorted(PUBLIC_CASES))
def test_verify_names_a_malformed_public_key_before_any_network(tmp_path: Path, case: str) -> None:
    content, reason = PUBLIC_CASES[case]
    path = tmp_path / "cosign.pub"
    path.write_text(content)
    result = CliRunner().invoke(verify, ["--key", str(path), "127.0.0.1:9/app:v1"])
    assert result.exit_code == 1
    assert f"public key {path}: " in result.output and reason in result.output, result.output
    assert "127.0.0.1:9" not in result.output  # refused before the registry was asked
    assert "Traceback" not in result.output
