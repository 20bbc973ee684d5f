"""Collections, parsing, semver, random, images, URLs and x509 decoding."""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from stockade.jmespath import JMESPathError, search, set_hostname_resolver


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("lookup(`{\"a\": 1}`, 'a')", 1),
        ("lookup(`{\"a\": 1}`, 'b')", None),
        ("lookup(`[10, 20]`, `1`)", 20),
        ("lookup(`[10, 20]`, `1.0`)", 20),
        ("lookup(`[10, 20]`, `5`)", None),
        ("lookup(`[10, 20]`, `-1`)", None),
        ("items(`{\"b\": 2, \"a\": 1}`, 'key', 'value')", [{"key": "a", "value": 1}, {"key": "b", "value": 2}]),
        ("items(`[\"x\", \"y\"]`, 'i', 'v')", [{"i": 0, "v": "x"}, {"i": 1, "v": "y"}]),
        ("object_from_lists(`[\"a\", \"b\"]`, `[1]`)", {"a": 1, "b": None}),
        ("object_from_lists(`[1, true]`, `[\"x\", \"y\"]`)", {"1": "x", "true": "y"}),
        ("parse_json('{\"a\": [1, 2.5, \"x\"]}')", {"a": [1, 2.5, "x"]}),
        ("parse_json('\"s\"')", "s"),
        ("parse_yaml('a: 1\nb: [x, y]\nc: 2021-01-01\nd: yes\n1: one')",
         {"a": 1, "b": ["x", "y"], "c": "2021-01-01", "d": True, "1": "one"}),
        ("parse_yaml('')", None),
        ("semver_compare('1.2.3', '>1.0.0 <2.0.0')", True),
        ("semver_compare('2.0.0', '>1.0.0 <2.0.0')", False),
        ("semver_compare('1.0.0', '1.0.0')", True),
        ("semver_compare('1.5.0', '<1.0.0 || >=1.5.0')", True),
        ("semver_compare('1.2.9', '1.2.x')", True),
        ("semver_compare('1.3.0', '1.2.x')", False),
        ("semver_compare('1.9.0', '>=1.x')", True),
        ("semver_compare('1.0.0-alpha', '<1.0.0')", True),
        ("semver_compare('1.0.0-alpha.2', '>1.0.0-alpha.1')", True),
        ("semver_compare('1.0.0-alpha', '>1.0.0-1')", True),
        ("semver_compare('not-a-version', '0.0.0')", True),
        ("semver_compare('1.2.3', '!=1.2.3')", False),
        ("semver_compare('1.2.3', '>= 1.0.0')", True),
        ("image_normalize('nginx')", "docker.io/nginx:latest"),
        ("image_normalize('library/nginx:1.25')", "docker.io/library/nginx:1.25"),
        ("image_normalize('ghcr.io/org/app:v1')", "ghcr.io/org/app:v1"),
        ("image_normalize('localhost:5000/app')", "localhost:5000/app:latest"),
        ("image_normalize('nginx:1.0@sha256:" + "a" * 64 + "')", "docker.io/nginx@sha256:" + "a" * 64),
        ("is_external_url('https://10.1.2.3/x')", False),
        ("is_external_url('http://127.0.0.1:8080')", False),
        ("is_external_url('http://[::1]/')", False),
        ("is_external_url('http://8.8.8.8/')", True),
        ("is_external_url('http://169.254.169.254/')", True),
        ("is_external_url('http://localhost/')", False),
    ],
)
def test_misc_functions(expression: str, expected: Any) -> None:
    assert search(expression, {}) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("lookup(`{}`, `123`)", "JMESPath function 'lookup': argument #2 is not of type String"),
        ("lookup(`[]`, 'abc')", "JMESPath function 'lookup': argument #2 is not of type Number"),
        ("lookup(`[]`, `1.5`)", "JMESPath function 'lookup': argument #2: expected an integer number but got: 1.5"),
        ("lookup('x', 'a')", 'Invalid type for: x, expected: []jmespath.JpType{"object", "array"}'),
        ("items(`{}`, `1`, 'v')", 'Invalid type for: 1, expected: []jmespath.JpType{"string"}'),
        ("object_from_lists(`[[1]]`, `[]`)", "JMESPath function 'object_from_lists': argument #1 is not of type "
                                            "StringArray"),
        ("parse_json('{')", "unexpected end of JSON input"),
        ("parse_json('{} x')", "invalid character 'x' after top-level value"),
        ("parse_json('[1,]')", "invalid character ']' looking for beginning of value"),
        ("parse_json('NaN')", "invalid character 'N' looking for beginning of value"),
        ("semver_compare('1.0.0', 'v1.0.0')", 'Could not parse comparator "v" in "v1.0.0"'),
        ("semver_compare('1.0.0', '>1.0')", 'Could not parse version "1.0" in ">1.0": No Major.Minor.Patch '
                                           "elements found"),
        ("semver_compare('1.0.0', '|| 1.0.0')", "First element in range is '||'"),
        ("random('')", "no pattern provided"),
        ("image_normalize('Nginx')", "JMESPath function 'image_normalize': bad image: docker.io/Nginx, "
                                     "defaultRegistry: docker.io, enableDefaultRegistryMutation: true: invalid "
                                     "reference format: repository name (library/) must be lowercase"),
        ("is_external_url('no-scheme')", "lookup : no such host"),
    ],
)
def test_misc_errors(expression: str, message: str) -> None:
    with pytest.raises(JMESPathError) as caught:
        search(expression, {})
    assert str(caught.value) == message


def test_random_matches_its_pattern() -> None:
    for pattern in ("[a-z]{5}-[0-9]{3}", "(foo|bar)\\d+", "[^a-z]x?", "a.b"):
        generated = search(f"random('{pattern}')", {})
        assert re.fullmatch(pattern, generated), (pattern, generated)


@pytest.fixture()
def resolver() -> Iterator[None]:
    set_hostname_resolver(lambda host: {"internal.example": ["10.0.0.1"], "public.example": ["1.1.1.1"]}[host])
    yield
    set_hostname_resolver(None)


def test_is_external_url_uses_installed_resolver(resolver: None) -> None:
    assert search("is_external_url('https://internal.example/a')", {}) is False
    assert search("is_external_url('https://public.example/a')", {}) is True


def _certificate(key: Any, *, csr: bool = False) -> str:
    name = x509.Name([
        x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme"),
        x509.NameAttribute(NameOID.COMMON_NAME, "acme.test"),
    ])
    san = x509.SubjectAlternativeName([x509.DNSName("acme.test"), x509.DNSName("www.acme.test")])
    if csr:
        request = x509.CertificateSigningRequestBuilder().subject_name(name).add_extension(san, False).sign(
            key, hashes.SHA256())
        return request.public_bytes(serialization.Encoding.PEM).decode()
    start = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(4242)
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(san, critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=1024)


def test_x509_decode_certificate(rsa_key: rsa.RSAPrivateKey) -> None:
    pem = _certificate(rsa_key)
    decoded = search("x509_decode(@)", pem)
    numbers = rsa_key.public_key().public_numbers()
    assert decoded["PublicKey"] == {"N": str(numbers.n), "E": 65537}
    assert decoded["Subject"]["CommonName"] == "acme.test"
    assert decoded["Subject"]["Organization"] == ["Acme"]
    assert decoded["Subject"]["Names"][0] == {"Type": [2, 5, 4, 6], "Value": "US"}
    assert decoded["Issuer"]["Country"] == ["US"]
    assert decoded["SerialNumber"] == 4242
    assert decoded["NotBefore"] == "2024-01-01T00:00:00Z"
    assert decoded["Version"] == 3
    assert decoded["SignatureAlgorithm"] == 4
    assert decoded["PublicKeyAlgorithm"] == 1
    assert decoded["IsCA"] is True and decoded["MaxPathLen"] == -1
    assert decoded["DNSNames"] == ["acme.test", "www.acme.test"]
    assert decoded["ExtKeyUsage"] == [1]
    assert search("x509_decode(@).PublicKey.N", pem) == str(numbers.n)
    base64_pem = search("base64_encode(@)", pem)
    assert search("x509_decode(base64_decode(@)).SerialNumber", base64_pem) == 4242


def test_x509_decode_certificate_request(rsa_key: rsa.RSAPrivateKey) -> None:
    decoded = search("x509_decode(@)", _certificate(rsa_key, csr=True))
    assert decoded["Subject"]["CommonName"] == "acme.test"
    assert decoded["DNSNames"] == ["acme.test", "www.acme.test"]
    assert decoded["PublicKey"]["E"] == 65537


def test_x509_decode_errors() -> None:
    with pytest.raises(JMESPathError, match="failed to decode PEM block"):
        search("x509_decode('not pem')", {})
    ec_pem = _certificate(ec.generate_private_key(ec.SECP256R1()))
    with pytest.raises(JMESPathError, match="certificate should use rsa algorithm"):
        search("x509_decode(@)", ec_pem)
    other = "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"
    with pytest.raises(JMESPathError, match="neither contains a CERTIFICATE"):
        search("x509_decode(@)", other)
