"""CredentialStore: docker config.json, pull secrets, credential helpers, lookup by registry host."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from stockade.images.auth import Credential, CredentialError, CredentialStore


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_empty_store_is_anonymous() -> None:
    assert CredentialStore.anonymous().lookup("ghcr.io") is None


def test_basic_credentials_by_host() -> None:
    store = CredentialStore.basic("registry.example.com:5000", "alice", "s3cret")
    assert store.lookup("registry.example.com:5000") == Credential("alice", "s3cret")
    assert store.lookup("registry.example.com") is None  # the port is part of the host
    assert store.lookup("other.example.com:5000") is None


def test_docker_config_auth_field_is_base64_user_password() -> None:
    store = CredentialStore.from_docker_config(
        {"auths": {"ghcr.io": {"auth": _b64("bob:pa:ss")}, "quay.io": {"username": "carol", "password": "pw"}}}
    )
    assert store.lookup("ghcr.io") == Credential("bob", "pa:ss")
    assert store.lookup("quay.io") == Credential("carol", "pw")


def test_docker_hub_aliases_share_credentials() -> None:
    store = CredentialStore.from_docker_config(
        json.dumps({"auths": {"https://index.docker.io/v1/": {"auth": _b64("hub:pw")}}})
    )
    for host in ("docker.io", "index.docker.io", "registry-1.docker.io"):
        assert store.lookup(host) == Credential("hub", "pw")


def test_config_keys_with_scheme_are_normalised() -> None:
    store = CredentialStore.from_docker_config({"auths": {"https://Registry.Example.com": {"auth": _b64("u:p")}}})
    assert store.lookup("registry.example.com") == Credential("u", "p")


def test_identity_and_registry_tokens_are_kept() -> None:
    store = CredentialStore.from_docker_config(
        {"auths": {"a.io": {"identitytoken": "refresh-me"}, "b.io": {"registrytoken": "bearer-me"}}}
    )
    assert store.lookup("a.io") is not None and store.lookup("a.io").identity_token == "refresh-me"
    assert store.lookup("b.io") is not None and store.lookup("b.io").registry_token == "bearer-me"


def test_malformed_auth_field_is_an_error() -> None:
    with pytest.raises(CredentialError, match="no ':'"):
        CredentialStore.from_docker_config({"auths": {"x.io": {"auth": _b64("no-colon")}}})
    with pytest.raises(CredentialError, match="not valid JSON"):
        CredentialStore.from_docker_config("{not json")


def test_pull_secret_dockerconfigjson() -> None:
    config = json.dumps({"auths": {"registry.corp:5000": {"auth": _b64("robot:token")}}})
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": "regcred"},
        "data": {".dockerconfigjson": _b64(config)},
    }
    store = CredentialStore.from_pull_secrets([secret])
    assert store.lookup("registry.corp:5000") == Credential("robot", "token")


def test_pull_secret_legacy_dockercfg_and_string_data() -> None:
    legacy = {"metadata": {"name": "old"}, "data": {".dockercfg": _b64(json.dumps({"old.io": {"auth": _b64("o:p")}}))}}
    new = {
        "metadata": {"name": "new"},
        "stringData": {".dockerconfigjson": json.dumps({"auths": {"new.io": {"username": "n", "password": "q"}}})},
    }
    store = CredentialStore.from_pull_secrets([legacy, new])
    assert store.lookup("old.io") == Credential("o", "p")
    assert store.lookup("new.io") == Credential("n", "q")


def test_pull_secret_without_docker_data_is_rejected() -> None:
    with pytest.raises(CredentialError, match="'opaque'"):
        CredentialStore().add_pull_secret({"metadata": {"name": "opaque"}, "data": {"token": "eA=="}})


def test_dockerconfigjson_accepts_raw_or_base64() -> None:
    raw = json.dumps({"auths": {"r.io": {"auth": _b64("x:y")}}})
    for value in (raw, _b64(raw), raw.encode()):
        store = CredentialStore()
        store.add_dockerconfigjson(value)
        assert store.lookup("r.io") == Credential("x", "y")


def test_kubernetes_style_wildcard_and_path_keys() -> None:
    store = CredentialStore.from_docker_config(
        {
            "auths": {
                "*.gcr.io": {"auth": _b64("wild:1")},
                "registry.io/team-a": {"auth": _b64("team-a:2")},
                "registry.io": {"auth": _b64("everyone:3")},
            }
        }
    )
    assert store.lookup("eu.gcr.io") == Credential("wild", "1")
    assert store.lookup("gcr.io") is None  # `*` covers exactly one label
    assert store.lookup("registry.io", "team-a/app") == Credential("team-a", "2")
    assert store.lookup("registry.io", "team-b/app") == Credential("everyone", "3")


def test_docker_config_file_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"env.io": {"auth": _b64("e:v")}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    assert CredentialStore.from_docker_config_file().lookup("env.io") == Credential("e", "v")


def test_missing_docker_config_file_means_anonymous(tmp_path: Path) -> None:
    assert CredentialStore.from_docker_config_file(tmp_path / "absent.json").lookup("x.io") is None


def _install_helper(directory: Path, name: str, script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    helper = directory / f"docker-credential-{name}"
    helper.write_text("#!/bin/sh\n" + script)
    helper.chmod(helper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ.get('PATH', '')}")


def test_cred_helper_is_asked_with_server_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_helper(
        tmp_path,
        "fake",
        'read server\n[ "$1" = get ] || exit 3\n'
        'printf \'{"ServerURL":"%s","Username":"helper-user","Secret":"for-%s"}\' "$server" "$server"\n',
        monkeypatch,
    )
    store = CredentialStore.from_docker_config({"credHelpers": {"helped.io": "fake"}})
    assert store.lookup("helped.io") == Credential("helper-user", "for-helped.io")
    assert store.lookup("unhelped.io") is None


def test_creds_store_serves_docker_hub_and_marks_identity_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install_helper(
        tmp_path,
        "store",
        'read server\nif [ "$server" = "https://index.docker.io/v1/" ]; then\n'
        '  echo \'{"Username":"<token>","Secret":"refresh"}\'\nelse\n'
        '  echo "credentials not found in native keychain"; exit 1\nfi\n',
        monkeypatch,
    )
    store = CredentialStore.from_docker_config(
        {"credsStore": "store", "auths": {"fallback.io": {"auth": _b64("f:b")}}}
    )
    assert store.lookup("docker.io") == Credential(identity_token="refresh")
    # "not found" from the store falls back to the plain auths entries.
    assert store.lookup("fallback.io") == Credential("f", "b")


def test_failing_or_missing_helper_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_helper(tmp_path, "broken", "echo 'keychain locked' >&2; exit 1\n", monkeypatch)
    with pytest.raises(CredentialError, match="keychain locked"):
        CredentialStore.from_docker_config({"credHelpers": {"b.io": "broken"}}).lookup("b.io")
    with pytest.raises(CredentialError, match="docker-credential-nonexistent"):
        CredentialStore.from_docker_config({"credsStore": "nonexistent"}).lookup("any.io")


def test_credential_repr_hides_password() -> None:
    assert "s3cret" not in repr(Credential("alice", "s3cret"))
