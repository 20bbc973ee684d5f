"""Client behaviour the Debian registry cannot exhibit, checked against a scripted stdlib HTTP fake.

distribution 2.8.2 ignores `?n=` on tags/list (so never paginates tags), never redirects blobs and never fails on
purpose; these tests script those answers.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

import pytest

from stockade.images.auth import CredentialStore
from stockade.images.registry import (
    OCI_IMAGE_INDEX,
    DigestMismatchError,
    RegistryAuthError,
    RegistryClient,
    RegistryError,
)

if TYPE_CHECKING:  # the fixture type lives in this directory's conftest.py
    from conftest import FakeRegistry

Reply = tuple[int, dict[str, str], bytes]

ALL_TAGS = [f"t{i}" for i in range(7)]


def _client(fake: FakeRegistry, **options: object) -> RegistryClient:
    return RegistryClient(insecure_registries=[fake.host], backoff=0, **options)  # type: ignore[arg-type]


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _paginating(link_style: str) -> object:
    """Serve ALL_TAGS two per page; `link_style` decides how the next-page Link is written."""

    def handle(method: str, path: str, headers: dict[str, str]) -> Reply:
        url = urlsplit(path)
        if url.path != "/v2/demo/app/tags/list":
            return 404, {}, b""
        query = parse_qs(url.query)
        size = int(query.get("n", ["2"])[0])
        start = ALL_TAGS.index(query["last"][0]) + 1 if "last" in query else 0
        page = ALL_TAGS[start : start + size]
        reply_headers = {"Content-Type": "application/json"}
        if start + size < len(ALL_TAGS):
            next_path = f"/v2/demo/app/tags/list?last={page[-1]}&n={size}"
            if link_style == "absolute-without-port":  # a real-world registry bug the client must survive
                next_path = f"http://127.0.0.1{next_path}"
            reply_headers["Link"] = f'<{next_path}>; rel="next"'
        return 200, reply_headers, json.dumps({"name": "demo/app", "tags": page}).encode()

    return handle


@pytest.mark.parametrize("link_style", ["relative", "absolute-without-port"])
def test_tag_listing_follows_link_pagination(fake_registry: FakeRegistry, link_style: str) -> None:
    fake_registry.handle = _paginating(link_style)  # type: ignore[assignment]
    tags = _client(fake_registry).list_tags(fake_registry.reference("demo/app"), page_size=2)
    assert tags == ALL_TAGS
    assert [request.path for request in fake_registry.requests] == [
        "/v2/demo/app/tags/list?n=2",
        "/v2/demo/app/tags/list?last=t1&n=2",
        "/v2/demo/app/tags/list?last=t3&n=2",
        "/v2/demo/app/tags/list?last=t5&n=2",
    ]


def test_tag_pagination_loop_is_an_error(fake_registry: FakeRegistry) -> None:
    def handle(method: str, path: str, headers: dict[str, str]) -> Reply:
        return 200, {"Link": '</v2/demo/app/tags/list?last=a>; rel="next"'}, b'{"tags": ["a"]}'

    fake_registry.handle = handle
    with pytest.raises(RegistryError, match="loops"):
        _client(fake_registry).list_tags(fake_registry.reference("demo/app"))


def test_empty_repository_has_no_tags(fake_registry: FakeRegistry) -> None:
    fake_registry.handle = lambda method, path, headers: (200, {}, b'{"name": "demo/app", "tags": null}')
    assert _client(fake_registry).list_tags(fake_registry.reference("demo/app")) == []


def test_server_errors_and_throttling_are_retried(fake_registry: FakeRegistry) -> None:
    answers: list[Reply] = [
        (503, {}, b"busy"),
        (429, {"Retry-After": "0"}, b"slow down"),
        (200, {"Docker-Content-Digest": _sha256(b"m")}, b""),
    ]
    fake_registry.handle = lambda method, path, headers: answers.pop(0)
    assert _client(fake_registry, retries=2).resolve_digest(fake_registry.reference("demo/app:v1")) == _sha256(b"m")
    assert len(fake_registry.requests) == 3


def test_persistent_server_error_reports_status_after_retries(fake_registry: FakeRegistry) -> None:
    fake_registry.handle = lambda method, path, headers: (
        500,
        {"Content-Type": "application/json"},
        b'{"errors": [{"code": "UNKNOWN", "message": "disk on fire"}]}',
    )
    with pytest.raises(RegistryError) as caught:
        _client(fake_registry, retries=2).get_manifest(fake_registry.reference("demo/app:v1"))
    assert caught.value.status == 500
    assert "disk on fire" in str(caught.value) and fake_registry.host in str(caught.value)
    assert len(fake_registry.requests) == 3


def test_client_errors_are_not_retried(fake_registry: FakeRegistry) -> None:
    fake_registry.handle = lambda method, path, headers: (400, {}, b"")
    with pytest.raises(RegistryError) as caught:
        _client(fake_registry, retries=3).get_manifest(fake_registry.reference("demo/app:v1"))
    assert caught.value.status == 400
    assert len(fake_registry.requests) == 1


def test_head_without_digest_header_falls_back_to_get(fake_registry: FakeRegistry) -> None:
    index = json.dumps({"schemaVersion": 2, "manifests": []}).encode()

    def handle(method: str, path: str, headers: dict[str, str]) -> Reply:
        return 200, {"Content-Type": "application/json"}, index

    fake_registry.handle = handle
    client = _client(fake_registry)
    assert client.resolve_digest(fake_registry.reference("demo/app:v1")) == _sha256(index)
    assert [request.method for request in fake_registry.requests] == ["HEAD", "GET"]
    # Without a specific Content-Type the media type comes from the document's shape.
    assert client.get_manifest(fake_registry.reference("demo/app:v1"))[1] == OCI_IMAGE_INDEX


def test_manifest_not_matching_its_pinned_digest_is_rejected(fake_registry: FakeRegistry) -> None:
    fake_registry.handle = lambda method, path, headers: (200, {"Content-Type": "x/y"}, b"tampered")
    ref = fake_registry.reference(f"demo/app@{_sha256(b'original')}")
    with pytest.raises(DigestMismatchError, match="expected"):
        _client(fake_registry).get_manifest(ref)


def test_manifest_not_matching_the_announced_digest_is_rejected(fake_registry: FakeRegistry) -> None:
    fake_registry.handle = lambda method, path, headers: (
        200,
        {"Docker-Content-Digest": _sha256(b"announced")},
        b"served",
    )
    with pytest.raises(DigestMismatchError, match="announced"):
        _client(fake_registry).get_manifest(fake_registry.reference("demo/app:v1"))


def test_blob_with_wrong_content_is_rejected(fake_registry: FakeRegistry) -> None:
    fake_registry.handle = lambda method, path, headers: (200, {}, b"corrupted")
    with pytest.raises(DigestMismatchError, match=_sha256(b"expected")):
        _client(fake_registry).get_blob(fake_registry.reference("demo/app"), _sha256(b"expected"))


def test_blob_redirect_to_storage_drops_credentials(
    fake_registry: FakeRegistry, second_fake_registry: FakeRegistry
) -> None:
    blob = b"stored elsewhere"
    storage_path = "/bucket/blob?signature=abc"

    def registry(method: str, path: str, headers: dict[str, str]) -> Reply:
        if "authorization" not in headers:
            return 401, {"WWW-Authenticate": 'Basic realm="r"'}, b""
        return 307, {"Location": f"http://{second_fake_registry.host}{storage_path}"}, b""

    fake_registry.handle = registry
    second_fake_registry.handle = lambda method, path, headers: (200, {}, blob)
    client = RegistryClient(
        credentials=CredentialStore.basic(fake_registry.host, "alice", "s3cret"),
        insecure_registries=[fake_registry.host, second_fake_registry.host],
        backoff=0,
    )
    assert client.get_blob(fake_registry.reference("demo/app"), _sha256(blob)) == blob
    [storage_request] = second_fake_registry.requests
    assert storage_request.path == storage_path
    assert "authorization" not in storage_request.headers
    assert fake_registry.requests[-1].headers["authorization"].startswith("Basic ")


def test_basic_auth_is_sent_up_front_after_the_first_challenge(fake_registry: FakeRegistry) -> None:
    def handle(method: str, path: str, headers: dict[str, str]) -> Reply:
        if "authorization" not in headers:
            return 401, {"WWW-Authenticate": 'Basic realm="r"'}, b""
        return 200, {"Docker-Content-Digest": _sha256(b"m")}, b""

    fake_registry.handle = handle
    client = _client(fake_registry, credentials=CredentialStore.basic(fake_registry.host, "u", "p"))
    client.resolve_digest(fake_registry.reference("demo/app:v1"))
    client.resolve_digest(fake_registry.reference("demo/app:v2"))
    assert ["authorization" in request.headers for request in fake_registry.requests] == [False, True, True]


def test_401_without_a_challenge_is_an_auth_error(fake_registry: FakeRegistry) -> None:
    fake_registry.handle = lambda method, path, headers: (401, {}, b"")
    with pytest.raises(RegistryAuthError, match="WWW-Authenticate"):
        _client(fake_registry).resolve_digest(fake_registry.reference("demo/app:v1"))
