"""Docker credential helpers that misbehave: missing, failing, printing garbage, hanging or flooding. Each is a
CredentialHelperError naming the helper and the registry, bounded in time and output, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import stat
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from stockade.cli.sign_cmd import verify
from stockade.images.auth import HELPER_TIMEOUT_SECONDS, CredentialError, CredentialHelperError, CredentialStore
from stockade.images.reference import parse_reference
from stockade.images.registry import RegistryAuthError, RegistryClient


@pytest.fixture
def helpers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ.get('PATH', '')}")
    return directory


@pytest.fixture
def alarm() -> Iterator[None]:
    """A hang fails the test instead of blocking the suite."""

    def expired(_signum: int, _frame: object) -> None:
        raise AssertionError("credential helper lookup hung")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def locked_registry() -> Iterator[str]:
    """127.0.0.1:<port> answering every call with a basic-auth challenge, so the client must ask for credentials."""

    class Challenge(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server naming
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="test"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_HEAD = do_GET

    server = ThreadingHTTPServer(("127.0.0.1", 0), Challenge)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def install(directory: Path, name: str, script: str) -> None:
    helper = directory / f"docker-credential-{name}"
    helper.write_text("#!/bin/sh\n" + script)
    helper.chmod(helper.stat().st_mode | stat.S_IEXEC)


def store_for(name: str, timeout: float = HELPER_TIMEOUT_SECONDS) -> CredentialStore:
    store = CredentialStore(helper_timeout=timeout)
    store.add_docker_config({"credHelpers": {"reg.example:5000": name}})
    return store


def test_default_timeout_is_ten_seconds() -> None:
    assert HELPER_TIMEOUT_SECONDS == 10.0 and CredentialStore().helper_timeout == 10.0


def test_missing_helper(helpers: Path) -> None:
    with pytest.raises(CredentialHelperError) as caught:
        store_for("absent").lookup("reg.example:5000")
    assert str(caught.value) == "credential helper docker-credential-absent for registry reg.example:5000: not found on PATH"
    assert caught.value.program == "docker-credential-absent" and caught.value.registry == "reg.example:5000"


def test_helper_exiting_non_zero(helpers: Path) -> None:
    install(helpers, "locked", "cat >/dev/null; echo 'keychain locked' >&2; exit 3\n")
    with pytest.raises(CredentialHelperError, match=r"docker-credential-locked for registry reg.example:5000: exited with status 3: keychain locked"):
        store_for("locked").lookup("reg.example:5000")


def test_helper_that_cannot_be_executed(helpers: Path) -> None:
    (helpers / "docker-credential-noexec").write_text("#!/bin/sh\n")
    with pytest.raises(CredentialHelperError, match="docker-credential-noexec for registry reg.example:5000: cannot be run"):
        store_for("noexec").lookup("reg.example:5000")


@pytest.mark.parametrize(
    "output",
    ["not json at all s3cr3t", '["s3cr3t"]', '{"Username": "u", "Secret": 42}', "", '{"Username": "u", "Secret": "s3cr3t"'],
    ids=["text", "array", "secret-not-string", "nothing", "truncated"],
)
def test_helper_printing_garbage(helpers: Path, output: str) -> None:
    install(helpers, "garbled", f"cat >/dev/null; printf '%s' '{output}'\n")
    with pytest.raises(CredentialHelperError) as caught:
        store_for("garbled").lookup("reg.example:5000")
    assert "docker-credential-garbled for registry reg.example:5000: printed something other than JSON" in str(caught.value)
    assert "s3cr3t" not in str(caught.value)  # what a helper prints may be a secret


def test_hanging_helper_and_its_children_are_killed(helpers: Path, tmp_path: Path, alarm: None) -> None:
    pid_file = tmp_path / "child.pid"
    install(helpers, "stuck", f"sleep 300 &\necho $! > {pid_file}\nsleep 300\n")
    with pytest.raises(CredentialHelperError, match=r"docker-credential-stuck for registry reg.example:5000: did not answer within 0.5 s \(killed\)"):
        store_for("stuck", timeout=0.5).lookup("reg.example:5000")
    child = int(pid_file.read_text())
    while _alive(child):  # SIGKILL is delivered asynchronously; the alarm fails the test if it never lands
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for init to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][:1]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_helper_flooding_output_is_cut_off(helpers: Path, alarm: None) -> None:
    install(helpers, "flood", "yes\n")
    with pytest.raises(CredentialHelperError, match="docker-credential-flood for registry reg.example:5000: printed more than 65536 bytes"):
        store_for("flood").lookup("reg.example:5000")


@pytest.mark.parametrize("name", ["../../bin/sh", "a/b", "-x", " "])
def test_helper_names_that_are_paths_are_refused(name: str) -> None:
    with pytest.raises(CredentialError, match=r"credHelpers\['r.io'\] = .* is not a credential helper name"):
        CredentialStore.from_docker_config({"credHelpers": {"r.io": name}})
    with pytest.raises(CredentialError, match="credsStore = .* is not a credential helper name"):
        CredentialStore.from_docker_config({"credsStore": name})


def test_registry_client_reports_a_failing_helper_as_an_auth_error(helpers: Path, locked_registry: str) -> None:
    install(helpers, "locked", "echo 'keychain locked' >&2; exit 1\n")
    store = CredentialStore()
    store.add_docker_config({"credsStore": "locked"})
    with RegistryClient(credentials=store, retries=0, allow_http_localhost=True) as client:
        with pytest.raises(RegistryAuthError, match=f"docker-credential-locked for registry {locked_registry}: exited with status 1"):
            client.resolve_digest(parse_reference(f"{locked_registry}/app:v1"))


def test_verify_cli_names_the_helper_without_a_traceback(helpers: Path, tmp_path: Path, locked_registry: str) -> None:
    install(helpers, "locked", "echo 'keychain locked' >&2; exit 1\n")
    config_dir = tmp_path / "docker"
    config_dir.mkdir()
    (config_dir / "config.json").write_text(json.dumps({"credsStore": "locked"}))
    key = tmp_path / "cosign.pub"
    from stockade.images.keys import generate_key_pair

    key.write_bytes(generate_key_pair("x")[1])
    image = f"{locked_registry}/app:v1"
    result = CliRunner().invoke(verify, ["--key", str(key), image], env={"DOCKER_CONFIG": str(config_dir)})
    assert result.exit_code == 1
    assert f"Verification error for {image}:" in result.output
    assert f"credential helper docker-credential-locked for registry {locked_registry}: exited with status 1: keychain locked" in result.output
    assert "Traceback" not in result.output
