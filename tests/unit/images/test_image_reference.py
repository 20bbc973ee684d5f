"""Image reference parsing: Kyverno-style normalisation with go-containerregistry/distribution validity rules."""

from __future__ import annotations

import pytest

from stockade.images.reference import ImageReference, InvalidReferenceError, image_info, parse_reference

DIGEST = "sha256:dead07b4d8ed7e29e98de0f4504d87e8880d4347859d839686a31da35a3b532f"


@pytest.mark.parametrize(
    ("text", "registry", "path", "tag", "digest"),
    [
        ("nginx", "docker.io", "nginx", "latest", None),
        ("nginx:1.25", "docker.io", "nginx", "1.25", None),
        ("library/nginx", "docker.io", "library/nginx", "latest", None),
        ("test/nginx:v10.3", "docker.io", "test/nginx", "v10.3", None),
        ("docker.io/test/nginx:v10.3", "docker.io", "test/nginx", "v10.3", None),
        ("index.docker.io/nginx", "index.docker.io", "nginx", "latest", None),
        ("ghcr.io/org/team/app:v1", "ghcr.io", "org/team/app", "v1", None),
        ("localhost:5000/x", "localhost:5000", "x", "latest", None),
        ("localhost/netd:v0.4.4-gke.0", "localhost", "netd", "v0.4.4-gke.0", None),
        ("127.0.0.1:5000/demo/app:main", "127.0.0.1:5000", "demo/app", "main", None),
        ("[::1]:5000/demo:v1", "[::1]:5000", "demo", "v1", None),
        ("registry:5000", "docker.io", "registry", "5000", None),
        ("my-registry.example.com:8443/a/b", "my-registry.example.com:8443", "a/b", "latest", None),
        (f"docker.io/test/centos@{DIGEST}", "docker.io", "test/centos", None, DIGEST),
        (f"nginx:1.25@{DIGEST}", "docker.io", "nginx", "1.25", DIGEST),
        ("foo/bar_baz__qux---x.y", "docker.io", "foo/bar_baz__qux---x.y", "latest", None),
        ("ghcr.io/org/app:V1_RC.2-x", "ghcr.io", "org/app", "V1_RC.2-x", None),
    ],
)
def test_parse_reference_normalises_like_kyverno(
    text: str, registry: str, path: str, tag: str | None, digest: str | None
) -> None:
    assert parse_reference(text) == ImageReference(registry, path, tag, digest)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("nginx", "docker.io/nginx:latest"),
        (f"nginx@{DIGEST}", f"docker.io/nginx@{DIGEST}"),
        (f"ghcr.io/a/b:v2@{DIGEST}", f"ghcr.io/a/b:v2@{DIGEST}"),
        ("localhost:5000/x:1", "localhost:5000/x:1"),
    ],
)
def test_string_form(text: str, expected: str) -> None:
    assert str(parse_reference(text)) == expected


def test_name_is_registry_and_path() -> None:
    assert parse_reference("ghcr.io/org/app:v1").name() == "ghcr.io/org/app"


@pytest.mark.parametrize(
    ("text", "api_registry", "api_repository"),
    [
        ("nginx", "index.docker.io", "library/nginx"),
        ("docker.io/nginx", "index.docker.io", "library/nginx"),
        ("index.docker.io/nginx", "index.docker.io", "library/nginx"),
        ("registry-1.docker.io/nginx", "registry-1.docker.io", "library/nginx"),
        ("bitnami/redis", "index.docker.io", "bitnami/redis"),
        ("library/nginx", "index.docker.io", "library/nginx"),
        ("ghcr.io/app", "ghcr.io", "app"),
        ("localhost:5000/x", "localhost:5000", "x"),
    ],
)
def test_api_names_add_docker_hub_library_namespace(text: str, api_registry: str, api_repository: str) -> None:
    reference = parse_reference(text)
    assert reference.api_registry() == api_registry
    assert reference.api_repository() == api_repository


def test_custom_default_registry() -> None:
    assert parse_reference("team/app:1", default_registry="mirror.example.com") == ImageReference(
        "mirror.example.com", "team/app", "1", None
    )
    # An explicit registry wins over the default.
    assert parse_reference("ghcr.io/team/app", default_registry="mirror.example.com").registry == "ghcr.io"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty"),
        ("Nginx", "lowercase"),
        ("docker.io/Library/nginx", "lowercase"),
        ("ghcr.io/Org/app:v1", "lowercase"),
        ("MyRegistry/nginx", "lowercase"),
        ("a..b", "components"),
        ("-nginx", "components"),
        ("nginx-", "components"),
        ("foo//bar", "components"),
        ("ghcr.io/", "empty"),
        ("++", "components"),
        ("white space", "whitespace"),
        ("nginx:-bad", "tag"),
        ("nginx:bad!tag", "tag"),
        ("nginx:" + "a" * 128, "tag"),
        ("nginx@sha256:abc", "digest"),
        ("nginx@sha256:" + "A" * 64, "lower-case hex"),
        ("nginx@sha256:" + "a" * 63, "digest"),
        ("nginx@md5:" + "a" * 32, "unsupported digest algorithm"),
        ("nginx@" + DIGEST + "@" + DIGEST, "'@'"),
        ("https://ghcr.io/app", "URL scheme"),
        ("bad_host!/app", "components"),
        ("ghcr.io:notaport/app", "registry"),
        ("ghcr.io/" + "a" * 250, "longer than 255"),
    ],
)
def test_invalid_references_are_rejected_with_a_reason(text: str, problem: str) -> None:
    with pytest.raises(InvalidReferenceError) as caught:
        parse_reference(text)
    message = str(caught.value)
    assert repr(text) in message  # names the reference …
    assert problem in message  # … and what is wrong with it


def test_invalid_reference_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_reference("UPPER")


def test_tag_of_127_characters_is_accepted() -> None:
    assert parse_reference("nginx:" + "a" * 127).tag == "a" * 127


def test_reference_helpers() -> None:
    reference = parse_reference("ghcr.io/app:v1")
    assert reference.identifier() == "v1"
    assert reference.with_digest(DIGEST).identifier() == DIGEST
    assert str(reference.with_digest(DIGEST)) == f"ghcr.io/app:v1@{DIGEST}"
    assert str(reference.with_tag("v2")) == "ghcr.io/app:v2"
    assert reference.repository() == ImageReference("ghcr.io", "app", None, None)


# -- Kyverno `images.*` variable entries ------------------------------------------------------------------------
def test_image_info_for_short_docker_hub_name() -> None:
    assert image_info("nginx", "/spec/containers/0/image") == {
        "registry": "docker.io",
        "name": "nginx",
        "path": "nginx",
        "tag": "latest",
        "reference": "docker.io/nginx:latest",
        "referenceWithTag": "docker.io/nginx:latest",
        "jsonPointer": "/spec/containers/0/image",
    }


def test_image_info_keeps_nested_path_and_short_name() -> None:
    info = image_info("localhost:4443/test/nginx")
    assert (info["registry"], info["path"], info["name"], info["tag"]) == (
        "localhost:4443",
        "test/nginx",
        "nginx",
        "latest",
    )
    assert info["reference"] == "localhost:4443/test/nginx:latest"


def test_image_info_digest_only_omits_tag_and_has_bare_colon_reference_with_tag() -> None:
    info = image_info(f"docker.io/test/centos@{DIGEST}")
    assert "tag" not in info
    assert info["digest"] == DIGEST
    assert info["reference"] == f"docker.io/test/centos@{DIGEST}"
    assert info["referenceWithTag"] == "docker.io/test/centos:"


def test_image_info_tag_and_digest() -> None:
    info = image_info(f"ghcr.io/a/b:v1@{DIGEST}")
    assert info["tag"] == "v1"
    assert info["digest"] == DIGEST
    assert info["reference"] == f"ghcr.io/a/b@{DIGEST}"
    assert info["referenceWithTag"] == "ghcr.io/a/b:v1"


def test_image_info_accepts_distribution_host_forms_that_registry_calls_reject() -> None:
    # distribution/reference treats an upper-case first segment as a host name.
    assert image_info("MyReg/nginx")["registry"] == "MyReg"


def test_image_info_rejects_bad_images() -> None:
    with pytest.raises(InvalidReferenceError):
        image_info("++")
