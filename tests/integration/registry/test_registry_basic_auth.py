"""The client against a real `docker-registry` with htpasswd basic auth behind TLS (throw-away CA)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import pytest

from stockade.images.auth import CredentialStore
from stockade.images.reference import ImageReference
from stockade.images.registry import RegistryAuthError, RegistryClient, RegistryError
from stockade.testing.registry import LocalRegistry

MakeRepository = Callable[[LocalRegistry, str], ImageReference]


def test_push_pull_and_list_with_the_right_password(
    basic_auth_registry: LocalRegistry, unique_repository: MakeRepository
) -> None:
    client = RegistryClient(credentials=basic_auth_registry.credentials("alice"), ca_file=basic_auth_registry.ca_file)
    ref = unique_repository(basic_auth_registry, "v1")
    digest = client.push_image(ref, [b"secret layer"])
    client.push_image(ref.with_tag("v2"), [b"other layer"])
    assert client.resolve_digest(ref) == digest
    assert client.get_manifest(ref)[2] == digest
    assert sorted(client.list_tags(ref.repository())) == ["v1", "v2"]


def test_anonymous_access_is_refused_with_a_clear_error(
    basic_auth_registry: LocalRegistry, unique_repository: MakeRepository
) -> None:
    ref = unique_repository(basic_auth_registry, "v1")
    anonymous = RegistryClient(ca_file=basic_auth_registry.ca_file, retries=0)
    with pytest.raises(RegistryAuthError) as caught:
        anonymous.resolve_digest(ref)
    error = caught.value
    assert error.status == 401
    assert error.registry == basic_auth_registry.host
    assert "no credentials" in str(error) and ref.path in str(error)


def test_wrong_password_is_an_auth_error(
    basic_auth_registry: LocalRegistry, unique_repository: MakeRepository
) -> None:
    owner = RegistryClient(credentials=basic_auth_registry.credentials(), ca_file=basic_auth_registry.ca_file)
    ref = unique_repository(basic_auth_registry, "v1")
    owner.push_image(ref, [b"x"])

    intruder = RegistryClient(
        credentials=CredentialStore.basic(basic_auth_registry.host, "alice", "wrong"),
        ca_file=basic_auth_registry.ca_file,
        retries=0,
    )
    with pytest.raises(RegistryAuthError) as caught:
        intruder.get_manifest(ref)
    assert caught.value.status == 401
    assert basic_auth_registry.host in str(caught.value) and "401" in str(caught.value)


def test_untrusted_certificate_fails_without_retrying_and_says_why(
    basic_auth_registry: LocalRegistry, unique_repository: MakeRepository
) -> None:
    client = RegistryClient(credentials=basic_auth_registry.credentials(), retries=3, backoff=60)
    with pytest.raises(RegistryError, match="not trusted.*ca_file"):
        client.resolve_digest(unique_repository(basic_auth_registry, "v1"))


def test_insecure_listing_accepts_the_self_signed_certificate(
    basic_auth_registry: LocalRegistry, unique_repository: MakeRepository
) -> None:
    """Docker semantics: an insecure TLS registry is still spoken to over TLS, just without verification."""
    trusted = RegistryClient(credentials=basic_auth_registry.credentials(), ca_file=basic_auth_registry.ca_file)
    ref = unique_repository(basic_auth_registry, "v1")
    digest = trusted.push_image(ref, [b"x"])
    insecure = RegistryClient(
        credentials=basic_auth_registry.credentials(), insecure_registries=[basic_auth_registry.host]
    )
    assert insecure.resolve_digest(ref) == digest


def test_credentials_from_a_pull_secret(basic_auth_registry: LocalRegistry, unique_repository: MakeRepository) -> None:
    config = {"auths": {basic_auth_registry.host: {"auth": base64.b64encode(b"bob:hunter2").decode()}}}
    secret = {
        "kind": "Secret",
        "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": "regcred"},
        "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
    }
    client = RegistryClient(
        credentials=CredentialStore.from_pull_secrets([secret]), ca_file=basic_auth_registry.ca_file
    )
    ref = unique_repository(basic_auth_registry, "v1")
    assert client.resolve_digest(ref.with_digest(client.push_image(ref, [b"from bob"]))).startswith("sha256:")
    assert client.list_tags(ref.repository()) == ["v1"]
