from __future__ import annotations

from typing import Any

import pytest

from stockade.cel import CelActivation, CelEnvironment, CelEvalError, request_resource_check


def test_lists_library(ev: Any) -> None:
    assert ev("[1, 2, 3].isSorted()") is True
    assert ev("['b', 'a'].isSorted()") is False
    assert ev("[1, 2, 3].sum()") == 6
    assert ev("[1.5, 2.0].sum()") == 3.5
    assert ev("[].sum()") == 0
    assert ev("[3, 1, 2].min()") == 1 and ev("[3, 1, 2].max()") == 3
    assert ev("[1, 2, 2, 3].indexOf(2)") == 1
    assert ev("[1, 2, 2, 3].lastIndexOf(2)") == 2
    assert ev("['a'].indexOf('z')") == -1
    with pytest.raises(CelEvalError, match="empty list"):
        ev("[].min()")


def test_cel_equality_in_list_functions(ev: Any) -> None:
    # CEL never equates bools with numbers, unlike Python.
    assert ev("[true, 1].indexOf(1)") == 1
    assert ev("[1, 2.0].distinct()") == [1, 2.0]
    assert ev("[1, 1.0, 2].distinct()") == [1, 2]


def test_ext_lists_functions(ev: Any) -> None:
    assert ev("[1, 2, 3, 4].slice(1, 3)") == [2, 3]
    assert ev("[1, [2, [3]]].flatten()") == [1, 2, [3]]
    assert ev("[1, [2, [3]]].flatten(2)") == [1, 2, 3]
    assert ev("[3, 1, 2].sort()") == [1, 2, 3]
    assert ev("[1, 2].reverse()") == [2, 1]
    assert ev("lists.range(3)") == [0, 1, 2]
    with pytest.raises(CelEvalError, match="slice"):
        ev("[1].slice(2, 1)")
    with pytest.raises(CelEvalError):
        ev("[1, 'a'].sort()")


def test_sets_library(ev: Any) -> None:
    assert ev("sets.contains([1, 2, 3], [3, 1])") is True
    assert ev("sets.contains([1], [2])") is False
    assert ev("sets.equivalent([1, 2, 2], [2, 1])") is True
    assert ev("sets.intersects([1, 2], [2, 5])") is True
    assert ev("sets.intersects([1], [5])") is False


def test_regex_library(ev: Any) -> None:
    assert ev("'abc 123 456'.find('[0-9]+')") == "123"
    assert ev("'abc'.find('[0-9]+')") == ""
    assert ev("'abc 123 456'.findAll('[0-9]+')") == ["123", "456"]
    assert ev("'a1 b2 c3'.findAll('[0-9]', 2)") == ["1", "2"]
    assert ev("'x'.matches('^x$')") is True


def test_url_library(ev: Any) -> None:
    assert ev("url('https://example.com:8080/a%20b?x=1&x=2&y=').getScheme()") == "https"
    assert ev("url('https://example.com:8080/path').getHost()") == "example.com:8080"
    assert ev("url('https://example.com:8080/path').getHostname()") == "example.com"
    assert ev("url('https://example.com:8080/path').getPort()") == "8080"
    assert ev("url('https://[::1]:80/').getHostname()") == "::1"
    assert ev("url('https://[::1]:80/').getHost()") == "[::1]:80"
    assert ev("url('https://example.com/a%20b').getEscapedPath()") == "/a%20b"
    assert ev("url('https://example.com/p?x=1&x=2&y=').getQuery()") == {"x": ["1", "2"], "y": [""]}
    assert ev("url('/absolute/path').getHost()") == ""
    assert ev("isURL('https://example.com')") is True
    assert ev("isURL('../relative')") is False
    assert ev("isURL('https://a:b:c/')") is False
    with pytest.raises(CelEvalError):
        ev("url('relative/path')")


def test_ip_library(ev: Any) -> None:
    assert ev("isIP('10.0.0.1') && isIP('::1')") is True
    assert ev("isIP('10.0.0.256')") is False
    assert ev("isIP('::ffff:10.0.0.1')") is False
    assert ev("ip('10.0.0.1').family()") == 4
    assert ev("ip('fe80::1').family()") == 6
    assert ev("ip('127.0.0.1').isLoopback()") is True
    assert ev("ip('0.0.0.0').isUnspecified()") is True
    assert ev("ip('169.254.1.1').isLinkLocalUnicast()") is True
    assert ev("ip('224.0.0.5').isLinkLocalMulticast()") is True
    assert ev("ip('8.8.8.8').isGlobalUnicast()") is True
    assert ev("ip('255.255.255.255').isGlobalUnicast()") is False
    assert ev("string(ip('2001:db8:0::1'))") == "2001:db8::1"
    assert ev("ip.isCanonical('2001:db8::1')") is True
    assert ev("ip.isCanonical('2001:db8:0::1')") is False
    assert ev("ip('10.0.0.1') == ip('10.0.0.1')") is True
    with pytest.raises(CelEvalError):
        ev("ip('nope')")


def test_cidr_library(ev: Any) -> None:
    assert ev("isCIDR('10.0.0.0/8')") is True
    assert ev("isCIDR('10.0.0.0/33')") is False
    assert ev("cidr('10.0.0.0/8').containsIP('10.1.2.3')") is True
    assert ev("cidr('10.0.0.0/8').containsIP(ip('11.1.2.3'))") is False
    assert ev("cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16')") is True
    assert ev("cidr('10.1.0.0/16').containsCIDR(cidr('10.0.0.0/8'))") is False
    assert ev("cidr('192.168.0.1/24').prefixLength()") == 24
    assert ev("string(cidr('192.168.0.1/24').ip())") == "192.168.0.1"
    assert ev("string(cidr('192.168.0.1/24').masked())") == "192.168.0.0/24"
    assert ev("cidr('::1/128').ip().family()") == 6


def test_quantity_library(ev: Any) -> None:
    assert ev("isQuantity('500m') && isQuantity('1Gi')") is True
    assert ev("isQuantity('1Gb')") is False
    assert ev("quantity('1Gi').isGreaterThan(quantity('1000Mi'))") is True
    assert ev("quantity('500m').isLessThan(quantity('1'))") is True
    assert ev("quantity('1').compareTo(quantity('1000m'))") == 0
    assert ev("quantity('1') == quantity('1000m')") is True
    assert ev("quantity('1').add(quantity('500m')).asApproximateFloat()") == 1.5
    assert ev("quantity('2').add(3).asInteger()") == 5
    assert ev("quantity('2').sub(quantity('3')).sign()") == -1
    assert ev("quantity('1.5').isInteger()") is False
    assert ev("quantity('1k').asInteger()") == 1000
    with pytest.raises(CelEvalError):
        ev("quantity('1.5').asInteger()")
    with pytest.raises(CelEvalError):
        ev("quantity('abc')")
    limits = {"resources": {"limits": {"memory": "512Mi"}}}
    assert ev("quantity(object.resources.limits.memory).isLessThan(quantity('1Gi'))", object=limits) is True


def test_semver_library(ev: Any) -> None:
    assert ev("isSemver('1.2.3')") is True
    assert ev("isSemver('v1.2')") is False
    assert ev("isSemver('v1.2', true)") is True
    assert ev("semver('1.2.3-rc.1+build').major()") == 1
    assert ev("semver('1.2.3').minor() + semver('1.2.3').patch()") == 5
    assert ev("semver('v01.2', true).major()") == 1
    assert ev("semver('1.2.3').isLessThan(semver('1.10.0'))") is True
    assert ev("semver('1.0.0-alpha').isLessThan(semver('1.0.0'))") is True
    assert ev("semver('1.0.0-alpha.2').compareTo(semver('1.0.0-alpha.10'))") == -1
    assert ev("semver('1.0.0-beta').isGreaterThan(semver('1.0.0-alpha.1'))") is True
    with pytest.raises(CelEvalError):
        ev("semver('1.2')")
    with pytest.raises(CelEvalError, match="cannot compare"):
        ev("semver('1.2.3').isLessThan(quantity('1'))")


def test_format_library(ev: Any) -> None:
    assert ev("format.dns1123Label().validate('my-name').hasValue()") is False
    assert ev("format.dns1123Label().validate('My_Name').hasValue()") is True
    assert len(ev("format.dns1123Label().validate('My_Name').value()")) == 1
    assert ev("format.dns1123Subdomain().validate('apiextensions.k8s.io').hasValue()") is False
    assert ev("format.dns1035Label().validate('1abc').hasValue()") is True
    assert ev("format.dns1123LabelPrefix().validate('my-prefix-').hasValue()") is False
    assert ev("format.qualifiedName().validate('example.com/my-name').hasValue()") is False
    assert ev("format.labelValue().validate('').hasValue()") is False
    assert ev("format.uuid().validate('123e4567-e89b-12d3-a456-426614174000').hasValue()") is False
    assert ev("format.byte().validate('aGVsbG8=').hasValue()") is False
    assert ev("format.date().validate('2021-02-30').hasValue()") is True
    assert ev("format.datetime().validate('2021-01-01T00:00:00Z').hasValue()") is False
    assert ev("format.uri().validate('relative').hasValue()") is True
    assert ev("format.named('dns1123Label').hasValue()") is True
    assert ev("format.named('nope').hasValue()") is False
    assert ev("format.named('labelValue').value().validate('ok').hasValue()") is False
    assert ev("format.dns1123Label().validate('xY').value().join(',')").startswith("a lowercase")


class RecordingAuthorizer:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def check(self, attributes: Any) -> tuple[str, str]:
        self.calls.append(dict(attributes))
        if attributes.get("path") == "/broken":
            raise RuntimeError("webhook down")
        return ("allow" if attributes["verb"] == "get" else "deny"), "rbac says so"


def test_authorizer_library(cel_env: CelEnvironment) -> None:
    authorizer = RecordingAuthorizer()
    activation = CelActivation(
        {"object": {}, "authorizer": {"requestResource": request_resource_check("apps", "deployments")}},
        providers={"authorizer": authorizer},
    )

    def run(expression: str) -> Any:
        return cel_env.compile(expression).evaluate(activation)

    assert run("authorizer.group('apps').resource('deployments').namespace('ns').name('d').check('get').allowed()")
    assert authorizer.calls[-1] == {"user": None, "group": "apps", "resource": "deployments", "subresource": "",
                                    "namespace": "ns", "name": "d", "verb": "get"}
    assert run("authorizer.group('').resource('pods').check('delete').allowed()") is False
    assert run("authorizer.group('').resource('pods').check('delete').reason()") == "rbac says so"
    assert run("authorizer.path('/healthz').check('get').allowed()") is True
    assert run("authorizer.path('/broken').check('get').errored()") is True
    assert run("authorizer.path('/broken').check('get').error()") == "webhook down"
    assert run("authorizer.serviceAccount('ns', 'sa').group('').resource('pods').check('get').allowed()")
    assert authorizer.calls[-1]["user"] == "system:serviceaccount:ns:sa"
    assert run("authorizer.requestResource.check('get').allowed()") is True


def test_authorizer_without_provider_fails_at_runtime(ev: Any) -> None:
    with pytest.raises(CelEvalError, match="check"):
        ev("authorizer.path('/x').check('get').allowed()", authorizer={})


def test_jsonpatch_escape_key(ev: Any) -> None:
    assert ev("'/metadata/annotations/' + jsonpatch.escapeKey('example.com/a~b')") == (
        "/metadata/annotations/example.com~1a~0b")


def test_regex_replace_expands_groups(ev: Any) -> None:
    assert ev("regex.replace('docker.io/nginx:latest', '^docker\\\\.io/(.*)', r'myregistry.io/\\1')") == (
        "myregistry.io/nginx:latest")
    assert ev("regex.replace('a-b-c', '-(\\\\w)', '_$1')") == "a_b_c"
