"""Self-managed certificates in each of Kyverno's key algorithms (tlsKeyAlgorithm: RSA, ECDSA, Ed25519): the CA and
the serving certificate carry a key of the chosen algorithm, the chain verifies, a real TLS handshake succeeds
against a client that trusts only the CA, and a stored pair of another algorithm is replaced."""

from __future__ import annotations

import socket
import ssl
import tempfile
import threading
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from stockade.webhook.certs import CertificateManager, KeyAlgorithm, generate_ca, issue_serving_cert, load_pair_into, server_ssl_context

KEY_TYPES = {KeyAlgorithm.RSA: rsa.RSAPublicKey, KeyAlgorithm.ECDSA: ec.EllipticCurvePublicKey, KeyAlgorithm.ED25519: ed25519.Ed25519PublicKey}


def handshake(server_context: ssl.SSLContext, ca_pem: bytes) -> str:
    """Serve one TLS connection on 127.0.0.1 and connect as a client trusting only ``ca_pem``; the peer's version."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept() -> None:
        connection, _ = listener.accept()
        with server_context.wrap_socket(connection, server_side=True) as tls:
            tls.recv(1)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    with tempfile.NamedTemporaryFile(suffix=".pem") as ca_file:
        ca_file.write(ca_pem)
        ca_file.flush()
        client = ssl.create_default_context(cafile=ca_file.name)
        with socket.create_connection(("127.0.0.1", port)) as raw, client.wrap_socket(raw, server_hostname="localhost") as tls:
            version = str(tls.version())
            tls.send(b"x")
    thread.join(5)
    listener.close()
    return version


@pytest.mark.parametrize("algorithm", list(KeyAlgorithm))
def test_ca_and_serving_certificate_use_the_chosen_algorithm_and_serve_tls(algorithm: KeyAlgorithm) -> None:
    ca = generate_ca(algorithm=algorithm)
    serving = issue_serving_cert(ca, ["localhost", "127.0.0.1"], algorithm=algorithm)
    assert isinstance(ca.certificate.public_key(), KEY_TYPES[algorithm])
    assert isinstance(serving.certificate.public_key(), KEY_TYPES[algorithm])
    serving.certificate.verify_directly_issued_by(ca.certificate)
    context = server_ssl_context()
    load_pair_into(context, serving)
    assert handshake(context, ca.cert_pem).startswith("TLS")


@pytest.mark.parametrize("text, expected", [("rsa", KeyAlgorithm.RSA), ("ECDSA", KeyAlgorithm.ECDSA), ("ed25519", KeyAlgorithm.ED25519)])
def test_algorithm_names_are_read_like_kyvernos_flag(text: str, expected: KeyAlgorithm) -> None:
    assert KeyAlgorithm.parse(text) is expected


def test_an_unknown_algorithm_is_refused_with_the_accepted_ones() -> None:
    with pytest.raises(ValueError, match="supported: RSA, ECDSA, Ed25519"):
        KeyAlgorithm.parse("DSA")


def test_a_stored_pair_of_another_algorithm_is_replaced_and_its_ca_kept_in_the_bundle(tmp_path: Path) -> None:
    first = CertificateManager(hosts=["localhost"], directory=tmp_path)
    first.refresh()
    assert first.ca is not None and isinstance(first.ca.certificate.public_key(), ec.EllipticCurvePublicKey)
    old_ca = first.ca.cert_pem
    second = CertificateManager(hosts=["localhost"], directory=tmp_path, algorithm=KeyAlgorithm.ED25519)
    second.refresh()
    assert second.ca is not None and second.serving is not None
    assert isinstance(second.ca.certificate.public_key(), ed25519.Ed25519PublicKey)
    assert isinstance(second.serving.certificate.public_key(), ed25519.Ed25519PublicKey)
    assert old_ca in second.ca_bundle and second.ca.cert_pem in second.ca_bundle
