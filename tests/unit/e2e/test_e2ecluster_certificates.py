"""The e2e control plane authenticates client certificates signed by its CA and signs approved CSRs with it, as a
kind cluster does: Kyverno's suite creates users through CertificateSigningRequests (validating-policies
context/resource/post) and calls the API server with their certificates."""

from __future__ import annotations

from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from stockade.testing.e2ecluster import E2EControlPlane


def test_the_cluster_ca_key_is_kept_and_client_certificates_are_accepted(tmp_path: Path) -> None:
    plane = E2EControlPlane(workdir=tmp_path)
    plane._write_credentials()
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    key = serialization.load_pem_private_key((tmp_path / "ca.key").read_bytes(), password=None)
    assert ca.public_key().public_numbers() == key.public_key().public_numbers()  # type: ignore[union-attr]
    assert (tmp_path / "ca.key").stat().st_mode & 0o077 == 0
    assert f"--client-ca-file={tmp_path / 'ca.crt'}" in plane.apiserver_args()
