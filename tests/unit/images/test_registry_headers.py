"""Pure helpers of the registry client: WWW-Authenticate and Link parsing, digests."""

from __future__ import annotations

import hashlib

import pytest

from stockade.images.registry import Challenge, compute_digest, parse_link_next, parse_www_authenticate


def test_bearer_challenge_with_quoted_params() -> None:
    [challenge] = parse_www_authenticate(
        ['Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
         'scope="repository:library/nginx:pull",error="insufficient_scope"']
    )
    assert challenge == Challenge(
        "bearer",
        {
            "realm": "https://auth.docker.io/token",
            "service": "registry.docker.io",
            "scope": "repository:library/nginx:pull",
            "error": "insufficient_scope",
        },
    )


def test_basic_challenge_and_case_insensitive_scheme() -> None:
    [challenge] = parse_www_authenticate(['basic realm="basic-realm"'])
    assert challenge.scheme == "basic"
    assert challenge.params["realm"] == "basic-realm"


def test_scope_with_commas_and_escaped_quotes_survives() -> None:
    [challenge] = parse_www_authenticate(['Bearer realm="r\\"x",scope="repository:a/b:pull,push"'])
    assert challenge.params == {"realm": 'r"x', "scope": "repository:a/b:pull,push"}


def test_several_challenges_in_one_header_and_bare_values() -> None:
    challenges = parse_www_authenticate(['Basic realm="a", Bearer realm=https://t/token,service=svc'])
    assert [c.scheme for c in challenges] == ["basic", "bearer"]
    assert challenges[1].params == {"realm": "https://t/token", "service": "svc"}


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (['</v2/app/tags/list?last=b&n=2>; rel="next"'], "/v2/app/tags/list?last=b&n=2"),
        (["<https://r.io/v2/x/tags/list?last=z>; rel=next"], "https://r.io/v2/x/tags/list?last=z"),
        (['</a>; rel="prev", </b>; rel="next"'], "/b"),
        (['</a>; rel="prev"'], None),
        ([], None),
    ],
)
def test_link_next(values: list[str], expected: str | None) -> None:
    assert parse_link_next(values) == expected


def test_compute_digest() -> None:
    assert compute_digest(b"abc") == "sha256:" + hashlib.sha256(b"abc").hexdigest()
    assert compute_digest(b"abc", "sha512") == "sha512:" + hashlib.sha512(b"abc").hexdigest()
    with pytest.raises(ValueError, match="md5"):
        compute_digest(b"abc", "md5")
