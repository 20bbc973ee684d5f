"""`stockade images controller`'s runtime against a real kube-apiserver and OpenSSH's sshd: an ImageUpdateAutomation
pushing signed commits over SSH with push options, reconciled from watches (a new latestRef is pushed although the
interval is an hour), Flux's finalizer added and honoured on deletion, and a wrong host key reported in the Ready
condition."""

from __future__ import annotations

import base64
import os
import subprocess
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stockade.controllers.flux_runtime import FluxImageRuntime
from stockade.reflector.store import TagStore
from stockade.testing.apiserver import ControlPlane
from stockade.testing.gitservers import SshGitServer, generate_ssh_key

MANIFEST = textwrap.dedent(
    """\
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: podinfo, namespace: apps}
    spec:
      template:
        spec:
          containers:
            - name: podinfo
              image: ghcr.io/org/podinfo:5.0.0 # {"$imagepolicy": "%(ns)s:podinfo"}
    """
)
GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
IUA = "/apis/image.toolkit.fluxcd.io/v1beta2/namespaces/{ns}/imageupdateautomations"


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def request(plane: ControlPlane, method: str, path: str, body: Any = None, expect: tuple[int, ...] = (200, 201)) -> Any:
    status, answer, _ = plane.request(method, path, body)
    assert status in expect, answer
    return answer


@pytest.fixture()
def ssh_server(tmp_path: Path) -> Iterator[tuple[SshGitServer, bytes, bytes]]:
    keys = tmp_path / "keys"
    keys.mkdir()
    private, public = generate_ssh_key(keys / "flux")
    base = tmp_path / "srv"
    base.mkdir()
    server = SshGitServer(base, [public])
    try:
        yield server, private, public
    finally:
        server.stop()


@pytest.fixture()
def signing_key(tmp_path: Path) -> Iterator[tuple[bytes, str, Path]]:
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "Flux <flux@example.com>", "ed25519", "sign", "never"],
                   env=env, check=True, capture_output=True)
    listing = subprocess.run(["gpg", "--with-colons", "--list-secret-keys"], env=env, check=True, capture_output=True, text=True).stdout
    fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
    armored = subprocess.run(["gpg", "--batch", "--armor", "--export-secret-keys", fingerprint], env=env, check=True, capture_output=True).stdout
    yield armored, fingerprint, home
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True)


def test_automation_over_ssh_signed_with_push_options_from_watches(
    flux_crds: ControlPlane, api_client: Any, ssh_server: tuple[SshGitServer, bytes, bytes],
    signing_key: tuple[bytes, str, Path], tmp_path: Path,
) -> None:
    server, private, public = ssh_server
    armored, fingerprint, gnupg_home = signing_key
    ns = f"watch-{os.getpid()}"
    plane = flux_crds
    plane.ensure_namespace(ns)

    bare = server.base / "fleet.git"
    subprocess.run(["git", "init", "--quiet", "--bare", "--initial-branch=main", str(bare)], check=True)
    subprocess.run(["git", "--git-dir", str(bare), "config", "receive.advertisePushOptions", "true"], check=True)
    options_seen = tmp_path / "push-options"
    hook = bare / "hooks" / "pre-receive"
    hook.write_text(f'#!/bin/sh\n[ -n "$GIT_PUSH_OPTION_0" ] && echo "$GIT_PUSH_OPTION_0" >> {options_seen}\nexit 0\n')
    hook.chmod(0o755)
    seed = tmp_path / "seed"
    seed.mkdir()
    git = ["git", "-c", "user.name=dev", "-c", "user.email=dev@example.com"]
    subprocess.run([*git, "init", "--quiet", "--initial-branch=main"], cwd=seed, check=True, env=GIT_ENV)
    (seed / "podinfo.yaml").write_text(MANIFEST % {"ns": ns})
    subprocess.run([*git, "add", "."], cwd=seed, check=True, env=GIT_ENV)
    subprocess.run([*git, "commit", "--quiet", "-m", "seed"], cwd=seed, check=True, env=GIT_ENV)
    subprocess.run([*git, "push", "--quiet", str(bare), "main"], cwd=seed, check=True, env=GIT_ENV)

    def remote_head() -> str:
        return subprocess.run(["git", "--git-dir", str(bare), "rev-parse", "main"], capture_output=True, text=True, check=True).stdout.strip()

    seeded = remote_head()
    request(plane, "POST", f"/api/v1/namespaces/{ns}/secrets", {"metadata": {"name": "ssh"}, "data": {
        "identity": b64(private), "identity.pub": b64(public), "known_hosts": b64(server.known_hosts())}})
    request(plane, "POST", f"/api/v1/namespaces/{ns}/secrets", {"metadata": {"name": "signing"}, "data": {"git.asc": b64(armored)}})
    request(plane, "POST", f"/apis/source.toolkit.fluxcd.io/v1/namespaces/{ns}/gitrepositories", {
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "metadata": {"name": "fleet"},
        "spec": {"url": server.url("fleet.git"), "interval": "1h", "ref": {"branch": "main"}, "secretRef": {"name": "ssh"}}})
    request(plane, "POST", f"/apis/image.toolkit.fluxcd.io/v1/namespaces/{ns}/imagepolicies", {
        "apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImagePolicy", "metadata": {"name": "podinfo"},
        "spec": {"imageRepositoryRef": {"name": "podinfo"}, "policy": {"semver": {"range": "5.x"}}, "suspend": True}})

    def set_latest(tag: str) -> None:
        for _ in range(10):  # the controller may add its finalizer meanwhile: 409, read again
            policy = request(plane, "GET", f"/apis/image.toolkit.fluxcd.io/v1/namespaces/{ns}/imagepolicies/podinfo")
            policy["status"] = {"latestRef": {"name": "ghcr.io/org/podinfo", "tag": tag}}
            status, answer, _ = plane.request("PUT", f"/apis/image.toolkit.fluxcd.io/v1/namespaces/{ns}/imagepolicies/podinfo/status", policy)
            if status == 200:
                return
            assert status == 409, answer
        raise AssertionError("status update kept conflicting")

    set_latest("5.1.0")
    request(plane, "POST", IUA.format(ns=ns), {
        "apiVersion": "image.toolkit.fluxcd.io/v1beta2", "kind": "ImageUpdateAutomation", "metadata": {"name": "fleet"},
        "spec": {"interval": "1h", "sourceRef": {"kind": "GitRepository", "name": "fleet"},
                 "git": {"commit": {"author": {"name": "fluxbot", "email": "flux@example.com"}, "signingKey": {"secretRef": {"name": "signing"}}},
                         "push": {"branch": "main", "options": {"ci.skip": ""}}},
                 "update": {"path": ".", "strategy": "Setters"}}})

    runtime = FluxImageRuntime(api_client, TagStore(tmp_path / "tags"), watch_timeout=60)
    runtime.start()
    try:
        first = wait_for("the first push", lambda: (head := remote_head()) != seeded and head)
        automation = request(plane, "GET", f"{IUA.format(ns=ns)}/fleet")
        assert "finalizers.fluxcd.io" in automation["metadata"]["finalizers"]
        wait_for("status of the push", lambda: request(plane, "GET", f"{IUA.format(ns=ns)}/fleet").get("status", {}).get("lastPushCommit") == first)

        clone = tmp_path / "check"
        subprocess.run(["git", "clone", "--quiet", str(bare), str(clone)], check=True, env=GIT_ENV)
        verified = subprocess.run(["git", "verify-commit", "--raw", "HEAD"], cwd=clone, capture_output=True, text=True,
                                  env={**GIT_ENV, "GNUPGHOME": str(gnupg_home)})
        assert verified.returncode == 0 and f"VALIDSIG {fingerprint}" in verified.stderr
        assert "ghcr.io/org/podinfo:5.1.0" in (clone / "podinfo.yaml").read_text()
        assert options_seen.read_text().splitlines() == ["ci.skip="]

        # a new latestRef reaches git through the ImagePolicy watch, long before the hour-long interval
        set_latest("5.2.0")
        second = wait_for("the push of 5.2.0", lambda: (head := remote_head()) != first and head)
        shown = subprocess.run(["git", "--git-dir", str(bare), "show", f"{second}:podinfo.yaml"], capture_output=True, text=True, check=True).stdout
        assert "ghcr.io/org/podinfo:5.2.0" in shown

        # a wrong host key: not Ready, with ssh's refusal in the message, and nothing pushed
        _, impostor = generate_ssh_key(tmp_path / "impostor")
        wrong = f"[127.0.0.1]:{server.port} {' '.join(impostor.decode().split()[:2])}\n"
        secret = request(plane, "GET", f"/api/v1/namespaces/{ns}/secrets/ssh")
        secret["data"]["known_hosts"] = b64(wrong)
        request(plane, "PUT", f"/api/v1/namespaces/{ns}/secrets/ssh", secret)
        set_latest("5.3.0")

        def refused() -> dict[str, Any] | None:
            status = request(plane, "GET", f"{IUA.format(ns=ns)}/fleet").get("status", {})
            ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), None)
            return ready if ready and ready["status"] == "False" else None

        ready = wait_for("the host key refusal", refused)
        assert ready["reason"] == "GitOperationFailed"
        assert "Host key verification failed" in ready["message"]
        assert remote_head() == second

        # deletion: our finalizer is removed and the object goes
        request(plane, "DELETE", f"{IUA.format(ns=ns)}/fleet")
        wait_for("the automation to be gone", lambda: plane.request("GET", f"{IUA.format(ns=ns)}/fleet")[0] == 404)
    finally:
        runtime.stop()
