"""Kubeconfig and in-cluster loading (client-go's ``clientcmd`` rules) and the authenticated connection built from
them: merging of several files, relative paths, every kind of user credential, rotating token files, exec plugins,
and TLS (CA, client certificate, server name) against a real local HTTPS server."""

from __future__ import annotations

import base64
import datetime as dt
import http.server
import json
import os
import ssl
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from stockade.kube.client import KubeClient
from stockade.kube.config import (
    Credential,
    ExecCredential,
    ExecPlugin,
    KubeConfigError,
    TokenFileCredential,
    from_kubeconfig,
    in_cluster,
    load_rest_config,
)
from stockade.kube.connection import ApiConnection
from stockade.kube.errors import Unauthorized
from stockade.webhook.certs import KeyPair, generate_ca, issue_serving_cert


def kubeconfig(path: Path, *, clusters: dict[str, Any] | None = None, users: dict[str, Any] | None = None, contexts: dict[str, Any] | None = None, current: str | None = None) -> Path:
    document: dict[str, Any] = {"apiVersion": "v1", "kind": "Config"}
    if clusters is not None:
        document["clusters"] = [{"name": name, "cluster": body} for name, body in clusters.items()]
    if users is not None:
        document["users"] = [{"name": name, "user": body} for name, body in users.items()]
    if contexts is not None:
        document["contexts"] = [{"name": name, "context": body} for name, body in contexts.items()]
    if current is not None:
        document["current-context"] = current
    path.write_text(yaml.safe_dump(document))
    return path


def single(tmp_path: Path, user: dict[str, Any], cluster: dict[str, Any] | None = None, name: str = "config") -> Path:
    return kubeconfig(
        tmp_path / name, clusters={"c": cluster or {"server": "https://127.0.0.1:6443"}}, users={"u": user}, contexts={"x": {"cluster": "c", "user": "u"}}, current="x"
    )


# -- merging and selection ------------------------------------------------------------------------------------------


def test_the_first_file_that_names_an_entry_or_sets_the_current_context_wins(tmp_path: Path) -> None:
    first = kubeconfig(tmp_path / "first", clusters={"c": {"server": "https://first:6443"}}, users={"u": {"token": "first-token"}})
    second = kubeconfig(
        tmp_path / "second",
        clusters={"c": {"server": "https://second:6443"}, "other": {"server": "https://other:6443"}},
        users={"u": {"token": "second-token"}},
        contexts={"x": {"cluster": "c", "user": "u", "namespace": "team"}, "y": {"cluster": "other", "user": "u"}},
        current="x",
    )
    third = kubeconfig(tmp_path / "third", current="y")
    config = from_kubeconfig([str(first), str(second), str(third)])
    assert config.server == "https://first:6443" and config.namespace == "team"
    assert config.credentials.current().token == "first-token"
    assert from_kubeconfig([str(first), str(second)], context="y").server == "https://other:6443"


def test_kubeconfig_variable_lists_files_and_skips_missing_ones_while_an_explicit_file_must_exist(tmp_path: Path) -> None:
    path = single(tmp_path, {"token": "t"})
    listed = os.pathsep.join([str(tmp_path / "missing"), str(path)])
    assert load_rest_config(environ={"KUBECONFIG": listed, "HOME": str(tmp_path)}).server == "https://127.0.0.1:6443"
    with pytest.raises(KubeConfigError) as missing:
        load_rest_config(str(tmp_path / "missing"), environ={})
    assert missing.value.file == str(tmp_path / "missing")


def test_without_kubeconfig_variable_the_home_config_is_read(tmp_path: Path) -> None:
    (tmp_path / ".kube").mkdir()
    single(tmp_path / ".kube", {"token": "t"})
    assert load_rest_config(environ={"HOME": str(tmp_path)}).credentials.current().token == "t"
    with pytest.raises(KubeConfigError):
        load_rest_config(environ={"HOME": str(tmp_path / "nobody")})


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"contexts": [{"name": "x", "context": {"cluster": "absent", "user": "u"}}], "current-context": "x"}, "contexts[x].context.cluster"),
        ({"clusters": [{"name": "c", "cluster": {"server": "https://h"}}], "contexts": [{"name": "x", "context": {"cluster": "c", "user": "ghost"}}], "current-context": "x"}, "contexts[x].context.user"),
        ({"clusters": [{"name": "c", "cluster": {"server": "https://h"}}], "contexts": [{"name": "x", "context": {"cluster": "c"}}]}, "current-context"),
        ({"clusters": [{"name": "c", "cluster": {"server": "ftp://h"}}], "contexts": [{"name": "x", "context": {"cluster": "c"}}], "current-context": "x"}, "clusters[c].cluster.server"),
        ({"clusters": {"c": {}}}, "clusters"),
        ({"users": [{"user": {}}]}, "users[0]"),
        (
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://h", "certificate-authority-data": "not base64!"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c"}}],
                "current-context": "x",
            },
            "clusters[c].cluster.certificate-authority-data",
        ),
    ],
)
def test_broken_files_name_the_file_and_the_field(tmp_path: Path, document: dict[str, Any], field: str) -> None:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(KubeConfigError) as caught:
        from_kubeconfig([str(path)])
    assert caught.value.file == str(path) and caught.value.field == field
    assert str(path) in str(caught.value) and field in str(caught.value)


def test_a_file_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text("- just\n- a list\n")
    with pytest.raises(KubeConfigError) as caught:
        from_kubeconfig([str(path)])
    assert caught.value.file == str(path)


# -- credentials ----------------------------------------------------------------------------------------------------


def test_relative_paths_are_relative_to_the_file_that_names_them(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "token").write_text("from-a-file\n")
    (tmp_path / "sub" / "ca.pem").write_bytes(b"CA PEM")
    path = single(tmp_path / "sub", {"tokenFile": "token"}, {"server": "https://h:6443", "certificate-authority": "ca.pem"})
    config = from_kubeconfig([str(path)])
    assert config.ca_data == b"CA PEM"
    assert config.credentials.current().authorization() == "Bearer from-a-file"


def test_a_token_wins_over_a_token_file_and_basic_auth_is_encoded(tmp_path: Path) -> None:
    config = from_kubeconfig([str(single(tmp_path, {"token": "inline", "tokenFile": "/nonexistent"}))])
    assert config.credentials.current().authorization() == "Bearer inline"
    basic = from_kubeconfig([str(single(tmp_path, {"username": "ada", "password": "pw"}, name="basic"))])
    assert basic.credentials.current().authorization() == "Basic " + base64.b64encode(b"ada:pw").decode()


def test_a_token_file_is_read_again_when_a_minute_old_or_after_a_401(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one")
    now = [0.0]
    source = TokenFileCredential(str(token), clock=lambda: now[0])
    assert source.current().token == "one"
    token.write_text("two")
    now[0] = 59.0
    assert source.current().token == "one"
    now[0] = 60.0
    assert source.current().token == "two"
    token.write_text("three")
    source.invalidate()
    assert source.current().token == "three"


@pytest.mark.parametrize(
    ("user", "field"),
    [
        ({"auth-provider": {"name": "gcp"}}, "users[u].user.auth-provider"),
        ({"client-certificate-data": base64.b64encode(b"cert").decode()}, "users[u].user"),
        ({"exec": {"command": "x", "apiVersion": "client.authentication.k8s.io/v1alpha1"}}, "users[u].user.exec.apiVersion"),
        ({"exec": {"apiVersion": "client.authentication.k8s.io/v1"}}, "users[u].user.exec.command"),
        ({"exec": {"command": "x", "apiVersion": "client.authentication.k8s.io/v1", "interactiveMode": "Always"}}, "users[u].user.exec.interactiveMode"),
        ({"exec": {"command": "x", "apiVersion": "client.authentication.k8s.io/v1", "env": [{"name": "A"}]}}, "users[u].user.exec.env[0]"),
    ],
)
def test_unusable_users_are_refused_with_the_field(tmp_path: Path, user: dict[str, Any], field: str) -> None:
    with pytest.raises(KubeConfigError) as caught:
        from_kubeconfig([str(single(tmp_path, user))])
    assert caught.value.field == field


def write_plugin(directory: Path, answer: dict[str, Any], exit_code: int = 0) -> Path:
    """An exec credential plugin that appends its environment to ``calls.jsonl`` and prints ``answer``."""
    script = directory / "plugin.py"
    script.write_text(
        "import json, os, sys\n"
        f"with open({str(directory / 'calls.jsonl')!r}, 'a') as out:\n"
        "    out.write(json.dumps({'info': json.loads(os.environ['KUBERNETES_EXEC_INFO']), 'extra': os.environ.get('EXTRA'), 'args': sys.argv[1:]}) + '\\n')\n"
        f"print(json.dumps({answer!r}))\n"
        f"sys.exit({exit_code})\n"
    )
    return script


def calls(directory: Path) -> list[dict[str, Any]]:
    path = directory / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_an_exec_plugin_gets_its_args_env_and_cluster_info_and_its_answer_is_kept_until_it_expires(tmp_path: Path) -> None:
    expiry = "2030-01-01T00:00:00Z"
    script = write_plugin(
        tmp_path, {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": "exec-token", "expirationTimestamp": expiry}}
    )
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable, "args": [str(script), "--flag"], "env": [{"name": "EXTRA", "value": "1"}], "provideClusterInfo": True}}
    config = from_kubeconfig([str(single(tmp_path, user))])
    assert isinstance(config.credentials, ExecCredential)
    now = [dt.datetime(2029, 12, 31, tzinfo=dt.timezone.utc).timestamp()]
    config.credentials.clock = lambda: now[0]
    assert config.credentials.current().authorization() == "Bearer exec-token"
    assert config.credentials.current().token == "exec-token"
    (call,) = calls(tmp_path)
    assert call["args"] == ["--flag"] and call["extra"] == "1"
    assert call["info"]["kind"] == "ExecCredential" and call["info"]["spec"]["interactive"] is False
    assert call["info"]["spec"]["cluster"]["server"] == "https://127.0.0.1:6443"
    now[0] = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc).timestamp()
    config.credentials.current()
    assert len(calls(tmp_path)) == 2
    config.credentials.invalidate()  # a 401: the API server no longer takes it
    config.credentials.current()
    assert len(calls(tmp_path)) == 3


@pytest.mark.parametrize(
    ("answer", "exit_code"),
    [
        ({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": "t"}}, 3),
        ({"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential", "status": {"token": "t"}}, 0),
        ({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {}}, 0),
        ({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"clientCertificateData": "c"}}, 0),
        ({"apiVersion": "client.authentication.k8s.io/v1", "kind": "Secret"}, 0),
    ],
)
def test_a_failing_or_wrong_exec_plugin_names_the_kubeconfig_and_field(tmp_path: Path, answer: dict[str, Any], exit_code: int) -> None:
    script = write_plugin(tmp_path, answer, exit_code)
    plugin = ExecPlugin(sys.executable, (str(script),), source=str(tmp_path / "config"))
    with pytest.raises(KubeConfigError) as caught:
        ExecCredential(plugin).current()
    assert caught.value.file == str(tmp_path / "config") and caught.value.field == "users[].user.exec"


# -- in cluster -----------------------------------------------------------------------------------------------------


def test_in_cluster_uses_the_service_host_the_mounted_ca_and_a_rotating_token(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_bytes(b"CLUSTER CA")
    (tmp_path / "namespace").write_text("kyverno")
    config = in_cluster({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}, tmp_path)
    assert config.server == "https://[fd00::1]:443" and config.ca_data == b"CLUSTER CA" and config.namespace == "kyverno"
    assert config.credentials.current().token == "sa-token"
    assert isinstance(config.credentials, TokenFileCredential)
    with pytest.raises(KubeConfigError):
        in_cluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, tmp_path)


# -- the connection, against a real HTTPS server ------------------------------------------------------------------------


def client_certificate(ca: KeyPair, name: str) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), key_pem)


@dataclass
class Seen:
    requests: list[dict[str, Any]] = field(default_factory=list)
    reject_token: str = ""


@dataclass
class TlsServer:
    port: int
    ca: KeyPair
    seen: Seen


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[TlsServer]:
    """HTTPS on 127.0.0.1 with a certificate for ``api.internal`` only, asking for (not requiring) a client certificate."""
    ca = generate_ca()
    serving = issue_serving_cert(ca, ["api.internal"])
    seen = Seen()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            peer = self.connection.getpeercert()  # type: ignore[attr-defined]
            subject = dict(item[0] for item in peer["subject"]) if peer else {}
            seen.requests.append({"authorization": self.headers.get("Authorization"), "client": subject.get("commonName"), "path": self.path})
            status = 401 if seen.reject_token and self.headers.get("Authorization") == f"Bearer {seen.reject_token}" else 200
            body = json.dumps({"kind": "Status", "code": 401, "reason": "Unauthorized"} if status == 401 else {"kind": "NamespaceList", "items": []}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    (tmp_path / "server.pem").write_bytes(serving.cert_pem)
    (tmp_path / "server.key").write_bytes(serving.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "server.pem", tmp_path / "server.key")
    context.load_verify_locations(cadata=ca.cert_pem.decode())
    context.verify_mode = ssl.CERT_OPTIONAL
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield TlsServer(httpd.server_address[1], ca, seen)
    httpd.shutdown()
    httpd.server_close()
    thread.join(10)


def test_ca_data_client_certificate_data_and_the_tls_server_name_reach_the_server(tls_server: TlsServer, tmp_path: Path) -> None:
    client = client_certificate(tls_server.ca, "system:admin")
    path = single(
        tmp_path,
        {"client-certificate-data": base64.b64encode(client.cert_pem).decode(), "client-key-data": base64.b64encode(client.key_pem).decode()},
        {"server": f"https://127.0.0.1:{tls_server.port}", "certificate-authority-data": base64.b64encode(tls_server.ca.cert_pem).decode(), "tls-server-name": "api.internal"},
    )
    connection = ApiConnection(load_rest_config(str(path), environ={}))
    try:
        assert KubeClient(connection).request("GET", "/api/v1/namespaces", query={"limit": "1"}) == {"kind": "NamespaceList", "items": []}
    finally:
        connection.close()
    assert tls_server.seen.requests == [{"authorization": None, "client": "system:admin", "path": "/api/v1/namespaces?limit=1"}]


def test_a_server_certificate_for_another_name_is_refused_unless_verification_is_off(tls_server: TlsServer, tmp_path: Path) -> None:
    ca = base64.b64encode(tls_server.ca.cert_pem).decode()
    wrong_name = ApiConnection(from_kubeconfig([str(single(tmp_path, {"token": "t"}, {"server": f"https://127.0.0.1:{tls_server.port}", "certificate-authority-data": ca}))]))
    insecure = ApiConnection(from_kubeconfig([str(single(tmp_path, {"token": "t"}, {"server": f"https://127.0.0.1:{tls_server.port}", "insecure-skip-tls-verify": True}, name="insecure"))]))
    try:
        from stockade.kube.errors import Unreachable

        with pytest.raises(Unreachable):
            KubeClient(wrong_name, timeout=5).request("GET", "/api")
        assert tls_server.seen.requests == []
        KubeClient(insecure, timeout=5).request("GET", "/api")
        assert [r["authorization"] for r in tls_server.seen.requests] == ["Bearer t"]
    finally:
        wrong_name.close()
        insecure.close()


def test_a_401_makes_a_rotating_token_be_read_again(tls_server: TlsServer, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("old")
    tls_server.seen.reject_token = "old"
    path = single(tmp_path, {"tokenFile": str(token)}, {"server": f"https://127.0.0.1:{tls_server.port}", "certificate-authority-data": base64.b64encode(tls_server.ca.cert_pem).decode(), "tls-server-name": "api.internal"})
    connection = ApiConnection(from_kubeconfig([str(path)]))
    try:
        with pytest.raises(Unauthorized):
            KubeClient(connection).request("GET", "/api")
        token.write_text("new")  # the kubelet rotated it; the minute has not passed, but the 401 forces a re-read
        KubeClient(connection).request("GET", "/api")
    finally:
        connection.close()
    assert [r["authorization"] for r in tls_server.seen.requests] == ["Bearer old", "Bearer new"]


def test_a_client_certificate_from_an_exec_plugin_is_presented(tls_server: TlsServer, tmp_path: Path) -> None:
    client = client_certificate(tls_server.ca, "from-exec")
    status = {"clientCertificateData": client.cert_pem.decode(), "clientKeyData": client.key_pem.decode()}
    script = write_plugin(tmp_path, {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status})
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable, "args": [str(script)]}}
    cluster = {"server": f"https://127.0.0.1:{tls_server.port}", "certificate-authority-data": base64.b64encode(tls_server.ca.cert_pem).decode(), "tls-server-name": "api.internal"}
    connection = ApiConnection(from_kubeconfig([str(single(tmp_path, user, cluster))]))
    try:
        KubeClient(connection).request("GET", "/api")
        KubeClient(connection).request("GET", "/api")
    finally:
        connection.close()
    assert [r["client"] for r in tls_server.seen.requests] == ["from-exec", "from-exec"]
    assert len(calls(tmp_path)) == 1  # no expiry: the answer is kept
    assert Credential(client_cert=b"c", client_key=b"k").authorization() == ""
