"""The client against a real, anonymous, plain-HTTP `docker-registry` (distribution 2.8)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import pytest

from stockade.images.reference import ImageReference, parse_reference
from stockade.images.registry import (
    DOCKER_MANIFEST_V2,
    OCI_IMAGE_INDEX,
    OCI_IMAGE_MANIFEST,
    DigestMismatchError,
    RegistryClient,
    RegistryError,
    RegistryNotFoundError,
)
from stockade.testing.registry import LocalRegistry, free_port

MakeRepository = Callable[[LocalRegistry, str], ImageReference]


@pytest.fixture()
def client(anonymous_registry: LocalRegistry) -> RegistryClient:
    return RegistryClient(**anonymous_registry.client_options(), retries=0)


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_push_then_resolve_tag_to_the_pushed_digest(
    client: RegistryClient, anonymous_registry: LocalRegistry, unique_repository: MakeRepository
) -> None:
    ref = unique_repository(anonymous_registry, "v1")
    digest = client.push_image(ref, [b"layer-one", b"layer-two"])
    assert digest.startswith("sha256:") and len(digest) == 71
    assert client.resolve_digest(ref) == digest


def test_manifest_and_blobs_round_trip(
    client: RegistryClient, anonymous_registry: LocalRegistry, unique_repository: MakeRepository
) -> None:
    ref = unique_repository(anonymous_registry, "v1")
    digest = client.push_image(ref, [b"layer-one", b"layer-two"], config={"os": "linux", "architecture": "arm64"})

    raw, media_type, manifest_digest = client.get_manifest(ref)
    assert media_type == OCI_IMAGE_MANIFEST
    assert manifest_digest == digest == _sha256(raw)
    manifest = json.loads(raw)
    assert [layer["digest"] for layer in manifest["layers"]] == [_sha256(b"layer-one"), _sha256(b"layer-two")]

    assert client.get_blob(ref, manifest["layers"][1]["digest"]) == b"layer-two"
    config = json.loads(client.get_blob(ref, manifest["config"]["digest"]))
    assert config == {"os": "linux", "architecture": "arm64"}

    # Fetching by digest verifies the content against the digest.
    by_digest = ref.with_digest(digest)
    assert client.get_manifest(by_digest)[0] == raw
    assert client.resolve_digest(by_digest) == digest


def test_list_tags_returns_every_pushed_tag(
    client: RegistryClient, anonymous_registry: LocalRegistry, unique_repository: MakeRepository
) -> None:
    ref = unique_repository(anonymous_registry, "latest")
    for tag in ("latest", "v1.0.0", "v1.1.0", "main-abc123", "1.2.3"):
        client.push_image(ref.with_tag(tag), [tag.encode()])
    assert sorted(client.list_tags(ref.repository())) == sorted(["latest", "v1.0.0", "v1.1.0", "main-abc123", "1.2.3"])


def test_index_and_docker_media_types_are_preserved(
    client: RegistryClient, anonymous_registry: LocalRegistry, unique_repository: MakeRepository
) -> None:
    ref = unique_repository(anonymous_registry, "amd64")
    image_digest = client.push_image(ref, [b"amd64 layer"])
    image_size = len(client.get_manifest(ref)[0])
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_IMAGE_INDEX,
            "manifests": [
                {
                    "mediaType": OCI_IMAGE_MANIFEST,
                    "digest": image_digest,
                    "size": image_size,
                    "platform": {"os": "linux", "architecture": "amd64"},
                }
            ],
        }
    ).encode()
    index_ref = ref.with_tag("multi")
    index_digest = client.push_manifest(index_ref, index, OCI_IMAGE_INDEX)
    assert client.get_manifest(index_ref) == (index, OCI_IMAGE_INDEX, index_digest)

    config = b"{}"
    config_digest = client.push_blob(ref, config)
    docker_manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": DOCKER_MANIFEST_V2,
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": config_digest, "size": 2},
            "layers": [],
        }
    ).encode()
    docker_ref = ref.with_tag("docker")
    docker_digest = client.push_manifest(docker_ref, docker_manifest, DOCKER_MANIFEST_V2)
    assert client.get_manifest(docker_ref)[1:] == (DOCKER_MANIFEST_V2, docker_digest)


def test_push_blob_twice_is_idempotent(
    client: RegistryClient, anonymous_registry: LocalRegistry, unique_repository: MakeRepository
) -> None:
    ref = unique_repository(anonymous_registry, "v1")
    assert client.push_blob(ref, b"same bytes") == client.push_blob(ref, b"same bytes") == _sha256(b"same bytes")
    assert client.get_blob(ref, _sha256(b"same bytes")) == b"same bytes"


def test_unknown_tag_and_blob_are_not_found_errors(
    client: RegistryClient, anonymous_registry: LocalRegistry, unique_repository: MakeRepository
) -> None:
    ref = unique_repository(anonymous_registry, "v1")
    client.push_image(ref, [b"x"])
    with pytest.raises(RegistryNotFoundError) as caught:
        client.get_manifest(ref.with_tag("does-not-exist"))
    error = caught.value
    assert error.status == 404
    assert "MANIFEST_UNKNOWN" in error.codes
    assert anonymous_registry.host in str(error) and ref.path in str(error) and "404" in str(error)

    with pytest.raises(RegistryNotFoundError, match="HEAD|resolve"):
        client.resolve_digest(ref.with_tag("does-not-exist"))
    with pytest.raises(RegistryNotFoundError, match="BLOB_UNKNOWN"):
        client.get_blob(ref, _sha256(b"never pushed"))


def test_pushing_manifest_under_wrong_digest_is_refused(
    client: RegistryClient, anonymous_registry: LocalRegistry, unique_repository: MakeRepository
) -> None:
    ref = unique_repository(anonymous_registry, "v1").with_digest(_sha256(b"something else"))
    with pytest.raises(DigestMismatchError):
        client.push_manifest(ref, b"{}", OCI_IMAGE_MANIFEST)


def test_plain_http_is_never_used_unless_allowed(
    anonymous_registry: LocalRegistry, unique_repository: MakeRepository
) -> None:
    ref = unique_repository(anonymous_registry, "v1")
    RegistryClient(**anonymous_registry.client_options()).push_image(ref, [b"x"])

    strict = RegistryClient(retries=0)  # HTTPS only: a plain-HTTP registry must fail, not be downgraded to
    with pytest.raises(RegistryError) as caught:
        strict.resolve_digest(ref)
    assert "https://" in str(caught.value)

    loopback_allowed = RegistryClient(allow_http_localhost=True, retries=0)
    assert loopback_allowed.resolve_digest(ref).startswith("sha256:")


def test_registry_down_is_a_registry_error() -> None:
    host = f"127.0.0.1:{free_port()}"
    client = RegistryClient(insecure_registries=[host], retries=2, backoff=0)
    with pytest.raises(RegistryError) as caught:
        client.resolve_digest(parse_reference(f"{host}/demo/app:v1"))
    message = str(caught.value)
    assert host in message and "cannot reach" in message and "3 attempt" in message


def test_stopped_registry_is_a_registry_error(unique_repository: MakeRepository) -> None:
    registry = LocalRegistry("anonymous").start()
    client = RegistryClient(**registry.client_options(), retries=0)
    ref = unique_repository(registry, "v1")
    client.push_image(ref, [b"x"])
    registry.stop()
    with pytest.raises(RegistryError, match="cannot reach"):
        client.get_manifest(ref)
