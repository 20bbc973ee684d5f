"""The client against a real `docker-registry` delegating to our stdlib bearer-token server."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from stockade.images.auth import CredentialStore
from stockade.images.reference import ImageReference
from stockade.images.registry import RegistryAuthError, RegistryClient
from stockade.testing.registry import LocalRegistry

MakeRepository = Callable[[LocalRegistry, str], ImageReference]


def _alice(registry: LocalRegistry) -> RegistryClient:
    return RegistryClient(credentials=registry.credentials("alice"), **registry.client_options())


def test_push_and_pull_with_a_token_fetched_once(
    token_registry: LocalRegistry, unique_repository: MakeRepository
) -> None:
    assert token_registry.token_server is not None
    ref = unique_repository(token_registry, "v1")
    client = _alice(token_registry)
    before = len(token_registry.token_server.requests)

    digest = client.push_image(ref, [b"layer"])
    assert client.resolve_digest(ref) == digest
    assert client.get_manifest(ref)[2] == digest
    assert client.list_tags(ref.repository()) == ["v1"]

    asked = token_registry.token_server.requests[before:]
    # One token for the push covers every later pull of the same repository.
    assert len(asked) == 1
    assert asked[0].username == "alice"
    assert f"repository:{ref.path}:pull,push" in asked[0].scopes


def test_anonymous_pull_is_allowed_but_push_is_not(
    token_registry: LocalRegistry, unique_repository: MakeRepository
) -> None:
    ref = unique_repository(token_registry, "v1")
    digest = _alice(token_registry).push_image(ref, [b"public"])
    anonymous = RegistryClient(**token_registry.client_options(), retries=0)
    assert anonymous.resolve_digest(ref) == digest
    with pytest.raises(RegistryAuthError) as caught:
        anonymous.push_image(ref.with_tag("v2"), [b"vandalism"])
    assert caught.value.status == 401


def test_wrong_password_is_rejected_by_the_token_endpoint(
    token_registry: LocalRegistry, unique_repository: MakeRepository
) -> None:
    ref = unique_repository(token_registry, "v1")
    _alice(token_registry).push_image(ref, [b"x"])
    intruder = RegistryClient(
        credentials=CredentialStore.basic(token_registry.host, "alice", "guess"),
        **token_registry.client_options(),
        retries=0,
    )
    with pytest.raises(RegistryAuthError) as caught:
        intruder.get_manifest(ref)
    message = str(caught.value)
    assert "token endpoint" in message and "'alice'" in message and "HTTP 401" in message
    assert token_registry.host in message


def test_identity_token_uses_the_oauth2_refresh_grant(
    token_registry: LocalRegistry, unique_repository: MakeRepository
) -> None:
    assert token_registry.token_server is not None
    ref = unique_repository(token_registry, "v1")
    digest = _alice(token_registry).push_image(ref, [b"x"])
    store = CredentialStore.from_docker_config({"auths": {token_registry.host: {"identitytoken": "refresh-for-alice"}}})
    client = RegistryClient(credentials=store, **token_registry.client_options())
    before = len(token_registry.token_server.requests)
    assert client.get_manifest(ref)[2] == digest
    [request] = token_registry.token_server.requests[before:]
    assert (request.method, request.username, request.granted) == ("POST", "alice", True)


@pytest.fixture()
def private_token_registry() -> Iterator[LocalRegistry]:
    with LocalRegistry("token", anonymous_pull=False) as registry:
        yield registry


def test_private_repository_refuses_anonymous_pull(
    private_token_registry: LocalRegistry, unique_repository: MakeRepository
) -> None:
    ref = unique_repository(private_token_registry, "v1")
    _alice(private_token_registry).push_image(ref, [b"private"])
    anonymous = RegistryClient(**private_token_registry.client_options(), retries=0)
    with pytest.raises(RegistryAuthError) as caught:
        anonymous.get_manifest(ref)
    assert caught.value.status == 401 and private_token_registry.host in str(caught.value)


def test_plain_http_token_realm_is_refused_for_a_tls_registry(unique_repository: MakeRepository) -> None:
    """Credentials must not travel to a plain-HTTP realm unless the user allowed plain HTTP for it."""
    with LocalRegistry("token", tls=True) as registry:
        strict = RegistryClient(credentials=registry.credentials(), ca_file=registry.ca_file, retries=0)
        with pytest.raises(RegistryAuthError, match="plain-HTTP token realm"):
            strict.resolve_digest(unique_repository(registry, "v1"))
        allowed = RegistryClient(
            credentials=registry.credentials(), ca_file=registry.ca_file, allow_http_localhost=True
        )
        ref = unique_repository(registry, "v1")
        assert allowed.resolve_digest(ref.with_digest(allowed.push_image(ref, [b"x"]))).startswith("sha256:")
