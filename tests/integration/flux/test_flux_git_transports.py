"""ImageUpdateAutomation's git side against real parts on 127.0.0.1: OpenSSH's sshd (identity + known_hosts, a wrong
host key refused), commits signed with gpg and checked by `git verify-commit`, push options seen by a pre-receive
hook, the clone size cap, and https through an authenticating CONNECT proxy to `git http-backend` over TLS."""

from __future__ import annotations

import os
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade.reflector.automation import (
    CheckoutError,
    GitAccess,
    GitCredentialError,
    RepositoryTooLargeError,
    SigningKey,
    SigningKeyError,
    SshIdentity,
    run_automation,
)
from stockade.reflector.models import ObjectKey
from stockade.testing.gitservers import HttpGitServer, SshGitServer, generate_ssh_key

MANIFEST = textwrap.dedent(
    """\
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web, namespace: prod}
    spec:
      template:
        spec:
          containers:
            - name: web
              image: ghcr.io/org/web:1.0.0 # {"$imagepolicy": "prod:web"}
    """
)
GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e", *args], cwd=cwd, env=env or GIT_ENV,
                          check=True, capture_output=True, text=True).stdout


def bare_repository(base: Path, name: str, extra_files: dict[str, bytes] | None = None) -> Path:
    bare = base / name
    subprocess.run(["git", "init", "--quiet", "--bare", "--initial-branch=main", str(bare)], check=True)
    seed = base / f"{name}-seed"
    seed.mkdir()
    git(seed, "init", "--quiet", "--initial-branch=main")
    (seed / "deploy.yaml").write_text(MANIFEST)
    for file_name, content in (extra_files or {}).items():
        (seed / file_name).write_bytes(content)
    git(seed, "add", ".")
    git(seed, "commit", "--quiet", "-m", "seed")
    git(seed, "push", "--quiet", str(bare), "main")
    return bare


def resolve(namespace: str, name: str) -> dict[str, object] | None:
    return {"image": "ghcr.io/org/web", "tag": "1.1.0", "digest": ""} if (namespace, name) == ("prod", "web") else None


def automate(access: GitAccess, **options: object) -> object:
    return run_automation(access, checkout_branch="main", push_branch="main", update_path=".", resolve=resolve,
                          author_name="fluxbot", author_email="flux@example.com", automation=ObjectKey("prod", "auto"),
                          **options)  # type: ignore[arg-type]


def head_of(bare: Path) -> str:
    return subprocess.run(["git", "--git-dir", str(bare), "rev-parse", "refs/heads/main"], check=True,
                          capture_output=True, text=True).stdout.strip()


def remote_file(bare: Path) -> str:
    return subprocess.run(["git", "--git-dir", str(bare), "show", "main:deploy.yaml"], check=True,
                          capture_output=True, text=True).stdout


# -- SSH -----------------------------------------------------------------------------------------------------------
@pytest.fixture()
def ssh_setup(tmp_path: Path) -> Iterator[tuple[SshGitServer, bytes, bytes]]:
    keys = tmp_path / "keys"
    keys.mkdir()
    private, public = generate_ssh_key(keys / "flux")
    encrypted, encrypted_public = generate_ssh_key(keys / "flux-encrypted", passphrase="s3cret", kind="ecdsa")
    base = tmp_path / "srv"
    base.mkdir()
    server = SshGitServer(base, [public, encrypted_public])
    try:
        yield server, private, encrypted
    finally:
        server.stop()


def test_push_over_ssh_with_the_secret_identity_checked_against_known_hosts(ssh_setup: tuple[SshGitServer, bytes, bytes]) -> None:
    server, private, _ = ssh_setup
    bare = bare_repository(server.base, "fleet.git")
    before = head_of(bare)
    access = GitAccess(server.url("fleet.git"), ssh=SshIdentity(private, server.known_hosts()))
    outcome = automate(access)
    assert outcome.commit == head_of(bare) != before  # type: ignore[attr-defined]
    assert "ghcr.io/org/web:1.1.0" in remote_file(bare)


def test_an_encrypted_identity_is_used_with_its_password_and_refused_without(ssh_setup: tuple[SshGitServer, bytes, bytes]) -> None:
    server, _, encrypted = ssh_setup
    bare = bare_repository(server.base, "enc.git")
    with pytest.raises(GitCredentialError, match="encrypted and the secret has no 'password'"):
        automate(GitAccess(server.url("enc.git"), ssh=SshIdentity(encrypted, server.known_hosts())))
    with pytest.raises(GitCredentialError, match="wrong password or format"):
        automate(GitAccess(server.url("enc.git"), ssh=SshIdentity(encrypted, server.known_hosts(), b"wrong")))
    automate(GitAccess(server.url("enc.git"), ssh=SshIdentity(encrypted, server.known_hosts(), b"s3cret")))
    assert "ghcr.io/org/web:1.1.0" in remote_file(bare)


def test_a_wrong_host_key_is_refused_before_anything_is_sent(ssh_setup: tuple[SshGitServer, bytes, bytes], tmp_path: Path) -> None:
    server, private, _ = ssh_setup
    bare = bare_repository(server.base, "mitm.git")
    before = head_of(bare)
    _, other_host = generate_ssh_key(tmp_path / "impostor")
    wrong = f"[127.0.0.1]:{server.port} {' '.join(other_host.decode().split()[:2])}\n".encode()
    with pytest.raises(CheckoutError) as refused:
        automate(GitAccess(server.url("mitm.git"), ssh=SshIdentity(private, wrong)))
    assert "Host key verification failed" in str(refused.value)
    # a known_hosts naming another host does not let the connection through either (no trust on first use)
    elsewhere = f"[127.0.0.2]:{server.port} {' '.join(server.host_public_key)}\n".encode()
    with pytest.raises(CheckoutError):
        automate(GitAccess(server.url("mitm.git"), ssh=SshIdentity(private, elsewhere)))
    assert head_of(bare) == before


# -- commit signing ------------------------------------------------------------------------------------------------
def gpg_key(home: Path, uid: str, passphrase: str = "") -> tuple[bytes, str]:
    home.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    base = ["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", passphrase]
    subprocess.run([*base, "--quick-gen-key", uid, "ed25519", "sign", "never"], env=env, check=True, capture_output=True)
    listing = subprocess.run(["gpg", "--with-colons", "--list-secret-keys"], env=env, check=True, capture_output=True, text=True).stdout
    fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
    armored = subprocess.run([*base, "--armor", "--export-secret-keys", fingerprint], env=env, check=True, capture_output=True).stdout
    return armored, fingerprint


@pytest.fixture()
def gpg_homes(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    for home in tmp_path.glob("gnupg-*"):
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True)


def verify_head(bare: Path, home: Path, tmp_path: Path) -> str:
    clone = tmp_path / "verify"
    subprocess.run(["git", "clone", "--quiet", str(bare), str(clone)], check=True)
    env = {**GIT_ENV, "GNUPGHOME": str(home)}
    completed = subprocess.run(["git", "verify-commit", "--raw", "HEAD"], cwd=clone, env=env, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr
    return completed.stderr


def test_commits_are_signed_with_the_secret_key_and_verify_with_git(gpg_homes: Path) -> None:
    tmp_path = gpg_homes
    armored, fingerprint = gpg_key(tmp_path / "gnupg-signer", "Flux Bot <flux@example.com>")
    bare = bare_repository(tmp_path, "signed.git")
    automate(GitAccess(f"file://{bare}"), signing_key=SigningKey(armored, secret_name="signing"))
    status = verify_head(bare, tmp_path / "gnupg-signer", tmp_path)
    assert f"VALIDSIG {fingerprint}" in status
    # no gpg-agent of ours is left behind
    agents = subprocess.run(["pgrep", "-f", "stockade-automation-.*gnupg"], capture_output=True, text=True).stdout
    assert agents == ""


def test_a_protected_key_needs_its_passphrase(gpg_homes: Path) -> None:
    tmp_path = gpg_homes
    armored, fingerprint = gpg_key(tmp_path / "gnupg-protected", "Flux Bot <flux@example.com>", passphrase="pgp-pass")
    bare = bare_repository(tmp_path, "protected.git")
    before = head_of(bare)
    with pytest.raises(SigningKeyError, match="without 'passphrase' field present in secret signing"):
        automate(GitAccess(f"file://{bare}"), signing_key=SigningKey(armored, secret_name="signing"))
    with pytest.raises(SigningKeyError, match="could not decrypt private key"):
        automate(GitAccess(f"file://{bare}"), signing_key=SigningKey(armored, b"nope", "signing"))
    assert head_of(bare) == before
    automate(GitAccess(f"file://{bare}"), signing_key=SigningKey(armored, b"pgp-pass", "signing"))
    assert f"VALIDSIG {fingerprint}" in verify_head(bare, tmp_path / "gnupg-protected", tmp_path)


def test_two_keys_in_one_secret_are_refused(gpg_homes: Path) -> None:
    tmp_path = gpg_homes
    first, _ = gpg_key(tmp_path / "gnupg-a", "A <a@example.com>")
    second, _ = gpg_key(tmp_path / "gnupg-b", "B <b@example.com>")
    bare = bare_repository(tmp_path, "two.git")
    with pytest.raises(SigningKeyError, match="multiple entities"):
        automate(GitAccess(f"file://{bare}"), signing_key=SigningKey(first + second, secret_name="signing"))


# -- push options and the size cap ---------------------------------------------------------------------------------
def test_push_options_reach_the_server(tmp_path: Path) -> None:
    bare = bare_repository(tmp_path, "options.git")
    subprocess.run(["git", "--git-dir", str(bare), "config", "receive.advertisePushOptions", "true"], check=True)
    seen = tmp_path / "options.txt"
    hook = bare / "hooks" / "pre-receive"
    hook.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        i=0
        while [ "$i" -lt "${{GIT_PUSH_OPTION_COUNT:-0}}" ]; do
          eval "echo \\"\\$GIT_PUSH_OPTION_$i\\"" >> {seen}
          i=$((i + 1))
        done
        """))
    hook.chmod(0o755)
    automate(GitAccess(f"file://{bare}"), push_options={"merge_request.create": "", "merge_request.target": "main"},
             push_refspec="refs/heads/main:refs/heads/review")
    # both pushes (branch, then refspec) carry the options, as Flux's
    assert seen.read_text().splitlines() == ["merge_request.create=", "merge_request.target=main"] * 2


def test_a_repository_over_the_size_cap_is_refused(tmp_path: Path) -> None:
    incompressible = bare_repository(tmp_path, "big.git", {"blob.bin": os.urandom(3 * 1024 * 1024)})
    before = head_of(incompressible)
    with pytest.raises(RepositoryTooLargeError, match="clone size limit of 1048576 bytes"):
        automate(GitAccess(f"file://{incompressible}", max_bytes=1024 * 1024))
    # a small pack that would expand past the cap on checkout is refused before checkout
    compressible = bare_repository(tmp_path, "zeros.git", {"zeros.bin": bytes(8 * 1024 * 1024)})
    with pytest.raises(RepositoryTooLargeError, match="checkout would be"):
        automate(GitAccess(f"file://{compressible}", max_bytes=1024 * 1024))
    assert head_of(incompressible) == before
    automate(GitAccess(f"file://{incompressible}", max_bytes=16 * 1024 * 1024))
    assert "ghcr.io/org/web:1.1.0" in remote_file(incompressible)


# -- https through a proxy -----------------------------------------------------------------------------------------
def test_https_through_the_proxy_of_proxy_secret_ref(tmp_path: Path) -> None:
    from conftest import CountingConnectProxy

    bare = bare_repository(tmp_path, "web.git")
    server = HttpGitServer(tmp_path, tls=True, credentials=("git", "token"))
    try:
        with CountingConnectProxy(credentials=("proxyuser", "proxypass")) as proxy:
            wrong = GitAccess(server.url("web.git"), username="git", password="token", ca_pem=server.ca_pem,
                              proxy_url=f"http://proxyuser:bad@127.0.0.1:{proxy.port}")
            with pytest.raises(CheckoutError):
                automate(wrong)
            assert proxy.refused >= 1 and server.requests == 0
            access = GitAccess(server.url("web.git"), username="git", password="token", ca_pem=server.ca_pem,
                               proxy_url=f"http://proxyuser:proxypass@127.0.0.1:{proxy.port}")
            outcome = automate(access)
            assert proxy.tunnels >= 1
        assert outcome.commit == head_of(bare)  # type: ignore[attr-defined]
    finally:
        server.stop()
