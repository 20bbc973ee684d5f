from __future__ import annotations

import datetime
import gzip
import hashlib
from typing import Any

import pytest

from stockade.cel import CelActivation, CelEnvironment, CelEvalError

DIGEST = "sha256:" + "a" * 64


def test_json_and_yaml(ev: Any) -> None:
    assert ev("json.unmarshal('{\"a\": [1, \"x\"]}')") == {"a": [1.0, "x"]}
    assert ev("json.unmarshal('{\"a\": 2}').a == 2") is True
    assert ev("json.marshal({'b': 1, 'a': [true, null]})") == '{"a":[true,null],"b":1}'
    assert ev("json.marshal(object)", object={"x": "y"}) == '{"x":"y"}'
    assert ev("yaml.parse('a: b\\nlist: [x, y]')") == {"a": "b", "list": ["x", "y"]}
    with pytest.raises(CelEvalError, match="invalid JSON"):
        ev("json.unmarshal('{')")


def test_hashes(ev: Any) -> None:
    assert ev("hash.sha256('abc')") == hashlib.sha256(b"abc").hexdigest()
    assert ev("sha1('abc')") == hashlib.sha1(b"abc").hexdigest()
    assert ev("hash.md5('abc')") == hashlib.md5(b"abc").hexdigest()


def test_gzip_round_trip(ev: Any) -> None:
    assert gzip.decompress(ev("gzip.compress('hello')")) == b"hello"
    assert ev("gzip.decompress(gzip.compress('hello'))") == "hello"


def test_math_round_is_half_away_from_zero(ev: Any) -> None:
    assert ev("math.round(1.2345, 2)") == 1.23
    assert ev("math.round(2.5, 0)") == 3.0
    assert ev("math.round(-2.5, 0)") == -3.0
    assert ev("math.round(1.5)") == 2.0  # the cel-go ext.Math overload still exists


def test_time_library(ev: Any) -> None:
    assert ev("time.now() > timestamp('2024-01-01T00:00:00Z')") is True
    # 2024-03-10 was a Sunday.
    assert ev("time.toCron(timestamp('2024-03-10T14:05:00Z'))") == "5 14 10 3 0"
    truncated = ev("time.truncate(timestamp('2024-03-10T14:35:12Z'), duration('1h'))")
    assert truncated == datetime.datetime(2024, 3, 10, 14, 0, tzinfo=datetime.timezone.utc)


def test_user_parse_service_account(ev: Any) -> None:
    assert ev("user.parseServiceAccount('system:serviceaccount:ns:sa')") == {"Name": "sa", "Namespace": "ns"}
    assert ev("parseServiceAccount('system:serviceaccount:ns:sa:x').Name") == "sa:x"
    assert ev("user.parseServiceAccount('alice')") == {"Name": "", "Namespace": ""}


def test_list_obj_to_map(ev: Any) -> None:
    keys = [{"name": "a"}, {"name": "b"}]
    values = [{"value": 1}, {"value": 2}]
    result = ev("transform.listObjToMap(object.k, object.v, 'name', 'value')", object={"k": keys, "v": values})
    assert result == {"a": 1, "b": 2}
    with pytest.raises(CelEvalError, match="equal length"):
        ev("listObjToMap([{'name': 'a'}], [], 'name', 'value')")


def test_random(ev: Any) -> None:
    default = ev("random()")
    assert len(default) == 8 and all(char.isdigit() or char.islower() for char in default)
    generated = ev("random('[A-Z]{3}-[0-9]{2}')")
    assert len(generated) == 6 and generated[3] == "-" and generated[:3].isupper() and generated[4:].isdigit()
    assert ev("random.random('(ab|cd)x')") in ("abx", "cdx")


def test_random_is_the_jmespath_generator(ev: Any) -> None:
    """Kyverno backs both random() functions with goregen, so CEL shares the JMESPath generator: negated classes draw
    from printable ASCII, and output is bounded (a nested count cannot exhaust memory)."""
    assert all(not char.isalnum() and 32 <= ord(char) < 127 for char in ev("random('[^a-zA-Z0-9]{20}')"))
    with pytest.raises(CelEvalError, match="generates more than"):
        ev("random('(a{1000}){1100}')")
    with pytest.raises(CelEvalError, match="error parsing regexp"):
        ev("random('[a')")


@pytest.mark.parametrize(
    ("reference", "registry", "repository", "tag", "digest", "identifier"),
    [
        ("nginx", "index.docker.io", "library/nginx", "latest", "", "latest"),
        ("nginx:1.25", "index.docker.io", "library/nginx", "1.25", "", "1.25"),
        ("docker.io/bitnami/redis:7", "index.docker.io", "bitnami/redis", "7", "", "7"),
        ("ghcr.io/org/app:v1", "ghcr.io", "org/app", "v1", "", "v1"),
        ("localhost:5000/app", "localhost:5000", "app", "latest", "", "latest"),
        (f"ghcr.io/org/app@{DIGEST}", "ghcr.io", "org/app", "", DIGEST, DIGEST),
        # Kyverno keeps a tag written before the digest: tag() gives it, identifier() gives both
        (f"ghcr.io/org/app:v1@{DIGEST}", "ghcr.io", "org/app", "v1", DIGEST, f"v1@{DIGEST}"),
        (f"registry.example:10443/app:my_tag@{DIGEST}", "registry.example:10443", "app", "my_tag", DIGEST, f"my_tag@{DIGEST}"),
        (f"registry.example:10443/app@{DIGEST}", "registry.example:10443", "app", "", DIGEST, DIGEST),
    ],
)
def test_image_references(ev: Any, reference: str, registry: str, repository: str, tag: str, digest: str,
                          identifier: str) -> None:
    image = {"ref": reference}
    assert ev("image(object.ref).registry()", object=image) == registry
    assert ev("parseImageReference(object.ref).repository()", object=image) == repository
    assert ev("image(object.ref).tag()", object=image) == tag
    assert ev("image(object.ref).digest()", object=image) == digest
    assert ev("image(object.ref).identifier()", object=image) == identifier
    assert ev("image(object.ref).containsDigest()", object=image) is bool(digest)


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("registry.k8s.io/app:testtag", ":testtag"),
        ("registry.k8s.io/app", ":latest"),
        (f"registry.k8s.io/app@{DIGEST}", f"@{DIGEST}"),
        (f"registry.k8s.io/app:latest@{DIGEST}", f"@{DIGEST}"),
        ("localhost:5000/app", ":latest"),
    ],
)
def test_identifier_with_separator(ev: Any, reference: str, expected: str) -> None:
    """What stale-image checks append to a repository to rebuild a reference: the digest wins over the tag."""
    assert ev("image(object.ref).identifierWithSeparator()", object={"ref": reference}) == expected
    assert ev("image(object.ref).registry() + '/' + image(object.ref).repository() + image(object.ref).identifierWithSeparator()",
              object={"ref": reference}).endswith(expected)


def test_invalid_images(ev: Any) -> None:
    assert ev("isImage('nginx:1.0')") is True
    assert ev("isImage('UPPER/case')") is False
    assert ev("isImage('nginx@sha256:short')") is False
    with pytest.raises(CelEvalError, match="could not parse reference: bad image"):
        ev("image('bad image')")
    with pytest.raises(CelEvalError, match="could not parse reference: UPPER:tag"):
        ev("parseImageReference('UPPER:tag')")


def _self_signed_pem() -> str:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "stockade-test")])
    now = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(42).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("example.com")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def test_x509_decode(ev: Any) -> None:
    decoded = ev("x509.decode(object.pem)", object={"pem": _self_signed_pem()})
    assert decoded["Subject"]["CommonName"] == "stockade-test"
    assert decoded["SerialNumber"] == 42
    assert decoded["IsCA"] is True
    assert decoded["DNSNames"] == ["example.com"]
    assert decoded["PublicKey"]["E"] == 65537
    assert decoded["NotBefore"] == "2024-01-01T00:00:00Z"
    with pytest.raises(CelEvalError, match="PEM"):
        ev("x509.decode('garbage')")


class FakeCluster:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def last(self) -> tuple[Any, ...]:
        return self.calls[-1]

    def get(self, api_version: str, resource: str, namespace: str | None, name: str) -> dict[str, Any]:
        self.calls.append(("get", api_version, resource, namespace, name))
        return {"data": {"allowed": "a, b"}}

    def list(self, api_version: str, resource: str, namespace: str | None, selector: Any) -> dict[str, Any]:
        self.calls.append(("list", api_version, resource, namespace, selector))
        return {"items": [{"metadata": {"name": "one"}}]}

    def post(self, api_version: str, resource: str, namespace: str | None, payload: Any) -> dict[str, Any]:
        self.calls.append(("post", api_version, resource, namespace, payload))
        return {"status": {"allowed": True}}

    def to_gvr(self, api_version: str, kind: str) -> str:
        if kind == "Unknown":
            raise LookupError(f"no matches for kind {kind}")
        return kind.lower() + "s"


class FakeHttp:
    def get(self, url: str, headers: Any) -> Any:
        return {"body": {"allowed": url.endswith("/ok")}, "headers": headers}

    def post(self, url: str, body: Any, headers: Any) -> Any:
        return {"body": {"echo": body}}


class FakeGlobalContext:
    def get(self, name: str, projection: str) -> Any:
        return {"items": [1, 2]} if name == "deployments" else None


class FakeImages:
    def get_metadata(self, image: str) -> Any:
        return {"config": {"architecture": "amd64", "Env": ["NVIDIA_VISIBLE_DEVICES=all"]}, "ref": image}


class FakeGenerator:
    def __init__(self) -> None:
        self.generated: list[tuple[str, list[Any]]] = []

    def apply(self, namespace: str, resources: list[Any]) -> None:
        self.generated.append((namespace, resources))


def test_providers_answer_offline_calls(cel_env: CelEnvironment) -> None:
    cluster, generator = FakeCluster(), FakeGenerator()
    activation = CelActivation(
        {"object": {"metadata": {"name": "p", "namespace": "ns"}}},
        providers={"resource": cluster, "http": FakeHttp(), "globalContext": FakeGlobalContext(),
                   "image": FakeImages(), "generator": generator},
    )

    def run(expression: str) -> Any:
        return cel_env.compile(expression).evaluate(activation)

    assert run("resource.Get('v1', 'configmaps', 'default', 'cm').data.allowed.split(', ')") == ["a", "b"]
    assert cluster.last() == ("get", "v1", "configmaps", "default", "cm")
    assert run("resource.get('v1', 'configmaps', 'cm').data.allowed") == "a, b"
    assert cluster.last() == ("get", "v1", "configmaps", None, "cm")
    assert run("resource.List('apps/v1', 'deployments', 'ns', {'app': 'x'}).items.size()") == 1
    assert cluster.last() == ("list", "apps/v1", "deployments", "ns", {"app": "x"})
    assert run("resource.Post('authorization.k8s.io/v1', 'subjectaccessreviews', 'ns', {'spec': {}})"
               ".status.allowed") is True
    assert run("http.Get('https://cfg/ok').body.allowed") is True
    assert run("http.Get('https://cfg/no', {'Authorization': 'x'}).headers") == {"Authorization": "x"}
    assert run("http.Post('https://authz', {'name': object.metadata.name}).body.echo") == {"name": "p"}
    assert run("size(globalContext.Get('deployments', '').items)") == 2
    assert run("globalContext.Get('other', '')") is None
    assert run("image.GetMetadata('nginx').config.architecture") == "amd64"
    assert run("image.GetMetadata('nginx').config.?Env.orValue([]).exists(e, e.startsWith('NVIDIA'))") is True
    assert run("generator.Apply('target', [{'kind': 'ConfigMap'}])") is True
    assert generator.generated == [("target", [{"kind": "ConfigMap"}])]


def test_missing_provider_is_an_evaluation_error(ev: Any) -> None:
    with pytest.raises(CelEvalError, match="resource.Get"):
        ev("resource.Get('v1', 'configmaps', 'default', 'cm')")


def test_provider_failures_become_evaluation_errors(cel_env: CelEnvironment) -> None:
    class Failing:
        def get(self, name: str, projection: str) -> Any:
            raise LookupError("entry not found")

    activation = CelActivation({"object": {}}, providers={"globalContext": Failing()})
    with pytest.raises(CelEvalError, match="entry not found"):
        cel_env.compile("globalContext.Get('x', '')").evaluate(activation)


def test_to_gvr_feeds_get_and_list(cel_env: CelEnvironment) -> None:
    """``resource.ToGVR(apiVersion, kind)`` (Kyverno's resource library) maps a kind through the provider; Get and
    List accept its value in place of (apiVersion, resource), cluster-wide and namespaced overloads alike."""
    cluster = FakeCluster()
    activation = CelActivation({"object": {}}, providers={"resource": cluster})

    def run(expression: str) -> Any:
        return cel_env.compile(expression).evaluate(activation)

    assert run("resource.get(resource.ToGVR('v1', 'Pod'), 'ns', 'policy-pod').data.allowed") == "a, b"
    assert cluster.last() == ("get", "v1", "pods", "ns", "policy-pod")
    assert run("resource.Get(resource.toGVR('apps/v1', 'Deployment'), 'web').data.allowed") == "a, b"
    assert cluster.last() == ("get", "apps/v1", "deployments", None, "web")
    run("resource.List(resource.ToGVR('apps/v1', 'Deployment'), 'ns', {'app': 'x'})")
    assert cluster.last() == ("list", "apps/v1", "deployments", "ns", {"app": "x"})
    run("resource.list(resource.ToGVR('apps/v1', 'Deployment'))")
    assert cluster.last() == ("list", "apps/v1", "deployments", None, None)
    with pytest.raises(CelEvalError, match="no matches for kind Unknown"):
        run("resource.ToGVR('v1', 'Unknown')")
    with pytest.raises(CelEvalError, match="unexpected GroupVersion"):
        run("resource.ToGVR('a/b/c', 'Pod')")
    # a plain map is not a GroupVersionResource
    with pytest.raises(CelEvalError, match="schema.GroupVersionResource"):
        run("resource.Get({'group': '', 'version': 'v1', 'resource': 'pods'}, 'ns', 'x')")


class TrustingHttp(FakeHttp):
    def __init__(self, ca_bundle: str = "") -> None:
        self.ca_bundle = ca_bundle

    def with_ca_bundle(self, ca_bundle: str) -> "TrustingHttp":
        return TrustingHttp(ca_bundle)

    def get(self, url: str, headers: Any) -> Any:
        return {"trusted": bool(self.ca_bundle), "url": url, "headers": headers}


def test_http_client_with_a_ca_bundle(cel_env: CelEnvironment) -> None:
    """``http.Client(caBundle)`` (Kyverno's http library): an empty bundle keeps the default client, a bundle with a
    certificate gives a client trusting it, anything else fails as Kyverno's "failed to parse PEM CA bundle"."""
    pem = _self_signed_pem()
    http = TrustingHttp()
    activation = CelActivation({"object": {"ca": pem}}, providers={"http": http})

    def run(expression: str) -> Any:
        return cel_env.compile(expression).evaluate(activation)

    assert run("http.Client(object.ca).Get('https://svc/x').trusted") is True
    assert run("http.client('').get('https://svc/x').trusted") is False
    assert run("http.Client(object.ca).Get('https://svc/x', {'A': 'b'}).headers") == {"A": "b"}
    assert run("http.Client('').Post('https://authz', {'n': 1}).body.echo") == {"n": 1}
    assert run("http.Get('https://svc/ok').trusted") is False  # the plain calls are unchanged
    with pytest.raises(CelEvalError, match="failed to parse PEM CA bundle for APICall"):
        run("http.Client('not a certificate').Get('https://svc/x')")
    with pytest.raises(CelEvalError, match="kyverno.http.Client"):
        run("{'a': 1}.Get('https://svc/x')")
    # a provider that cannot take a bundle (offline mocks) answers the call itself
    plain = CelActivation({"object": {"ca": pem}}, providers={"http": FakeHttp()})
    assert cel_env.compile("http.Client(object.ca).Get('https://cfg/ok').body.allowed").evaluate(plain) is True
