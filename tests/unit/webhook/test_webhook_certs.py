"""Self-signed CA and serving certificates; rotation swaps the certificate of a live server."""

from __future__ import annotations

import datetime as dt
import shutil
import socket
import ssl
from pathlib import Path

from cryptography import x509
from webhook_helpers import pod, review, start_server

from stockade.webhook.certs import CertificateManager, generate_ca, issue_serving_cert, needs_renewal, write_pair


def peer_certificate(port: int, ca_pem: bytes) -> x509.Certificate:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_serving_cert_is_signed_by_ca_and_names_hosts() -> None:
    ca = generate_ca()
    pair = issue_serving_cert(ca, ["svc.ns.svc", "127.0.0.1"])
    cert = pair.certificate
    cert.verify_directly_issued_by(ca.certificate)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["svc.ns.svc"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert ca.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True


def test_serving_cert_never_outlives_its_ca() -> None:
    ca = generate_ca(validity=dt.timedelta(days=10))
    pair = issue_serving_cert(ca, ["x"], validity=dt.timedelta(days=150))
    assert pair.not_after <= ca.not_after


def test_needs_renewal_window() -> None:
    now = dt.datetime.now(dt.timezone.utc)
    pair = issue_serving_cert(generate_ca(), ["x"], validity=dt.timedelta(days=20), now=now)
    assert not needs_renewal(pair, dt.timedelta(days=15), now)
    assert needs_renewal(pair, dt.timedelta(days=15), now + dt.timedelta(days=6))


def test_managed_certs_persist_and_are_reused(tmp_path: Path) -> None:
    first = CertificateManager(hosts=["127.0.0.1"], directory=tmp_path)
    first.start()
    second = CertificateManager(hosts=["127.0.0.1"], directory=tmp_path)
    second.start()
    assert second.ca_bundle == first.ca_bundle
    assert second.serving is not None and first.serving is not None
    assert second.serving.cert_pem == first.serving.cert_pem
    assert oct((tmp_path / "tls.key").stat().st_mode & 0o777) == "0o600"


def test_rotation_before_expiry_reaches_live_server(tmp_path: Path, policy_dir: Path) -> None:
    certs = CertificateManager(hosts=["127.0.0.1"], directory=tmp_path / "certs", serving_validity=dt.timedelta(days=30))
    running = start_server(policy_dir, certs)
    try:
        before = peer_certificate(running.server.port, certs.ca_bundle)
        assert certs.refresh() is False  # nothing due yet
        certs.renew_before = dt.timedelta(days=31)  # the 30-day leaf is now inside its renewal window
        assert certs.refresh() is True
        after = peer_certificate(running.server.port, certs.ca_bundle)
        assert after.serial_number != before.serial_number
        client = running.client()
        assert client.post_review("/validate", review(pod(labels={"team": "a"})))["response"]["allowed"] is True
        client.close()
    finally:
        running.stop()


def test_ca_rotation_keeps_old_ca_in_bundle_and_notifies(tmp_path: Path) -> None:
    now = [dt.datetime.now(dt.timezone.utc)]
    certs = CertificateManager(hosts=["127.0.0.1"], directory=tmp_path, ca_validity=dt.timedelta(days=40), clock=lambda: now[0])
    certs.start()
    seen: list[bytes] = []
    certs.on_ca_change = seen.append
    old_ca = certs.ca_bundle
    now[0] += dt.timedelta(days=30)
    certs.refresh()
    assert seen and seen[-1] == certs.ca_bundle
    assert certs.ca_bundle.startswith(certs.ca.cert_pem if certs.ca else b"")
    assert old_ca in certs.ca_bundle  # still valid for 10 days, so still trusted


def test_user_cert_files_reload_on_change(tmp_path: Path, policy_dir: Path) -> None:
    ca = generate_ca()
    cert_file, key_file, ca_file = tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.crt"
    write_pair(issue_serving_cert(ca, ["127.0.0.1"]), cert_file, key_file)
    ca_file.write_bytes(ca.cert_pem)
    certs = CertificateManager(cert_file=cert_file, key_file=key_file, ca_file=ca_file)
    running = start_server(policy_dir, certs)
    try:
        first = peer_certificate(running.server.port, ca.cert_pem)
        assert certs.refresh() is False
        replacement = tmp_path / "new"
        replacement.mkdir()
        write_pair(issue_serving_cert(ca, ["127.0.0.1"]), replacement / "tls.crt", replacement / "tls.key")
        shutil.copy(replacement / "tls.key", key_file)
        shutil.copy(replacement / "tls.crt", cert_file)
        assert certs.refresh() is True
        second = peer_certificate(running.server.port, ca.cert_pem)
        assert second.serial_number != first.serial_number
        assert certs.ca_bundle == ca.cert_pem
    finally:
        running.stop()


class MemoryStore:
    """A shared store with optimistic concurrency, like a Secret's resourceVersion."""

    def __init__(self) -> None:
        self.items: dict[str, bytes] = {}
        self.version = 0

    def load(self) -> dict[str, bytes]:
        return dict(self.items)

    def save(self, items: dict[str, bytes]) -> None:
        self.items = dict(items)
        self.version += 1


def test_replicas_sharing_a_store_serve_one_ca_and_adopt_renewals(tmp_path: Path) -> None:
    store = MemoryStore()
    first = CertificateManager(hosts=["127.0.0.1"], store=store, serving_validity=dt.timedelta(days=30))
    first.start()
    second = CertificateManager(hosts=["127.0.0.1"], store=store, serving_validity=dt.timedelta(days=30))
    second.start()
    assert second.ca_bundle == first.ca_bundle
    assert second.serving is not None and first.serving is not None and second.serving.cert_pem == first.serving.cert_pem
    first.renew_before = dt.timedelta(days=31)  # the first replica renews the leaf...
    assert first.refresh() is True
    assert second.refresh() is True  # ...and the second adopts it instead of issuing its own
    assert second.serving.cert_pem == first.serving.cert_pem
    assert second.ca_bundle == first.ca_bundle


def test_lost_race_rereads_the_store(tmp_path: Path) -> None:
    from stockade.webhook.certs import StoreConflict

    winner = CertificateManager(hosts=["127.0.0.1"])
    winner.start()
    assert winner.ca is not None and winner.serving is not None
    winning_items = {"ca.crt": winner.ca.cert_pem, "ca.key": winner.ca.key_pem, "tls.crt": winner.serving.cert_pem, "tls.key": winner.serving.key_pem}

    class RacingStore(MemoryStore):
        def save(self, items: dict[str, bytes]) -> None:
            if not self.items:  # someone else got there between our load and our save
                self.items = dict(winning_items)
                raise StoreConflict("changed")
            super().save(items)

    loser = CertificateManager(hosts=["127.0.0.1"], store=RacingStore())
    loser.start()
    assert loser.ca_bundle == winner.ca_bundle


def test_pair_changes_are_published_once_at_start_and_after_each_renewal(tmp_path: Path) -> None:
    """``serve --kyverno-tls-secrets`` hangs the Secret publisher here: it must see the first pair and every renewal,
    and a failing publisher must not stop serving."""
    now = [dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)]
    manager = CertificateManager(directory=tmp_path, serving_validity=dt.timedelta(days=2), renew_before=dt.timedelta(days=1), clock=lambda: now[0])
    published: list[tuple[bytes, bytes]] = []
    manager.on_pair_change = lambda ca, serving: published.append((ca.cert_pem, serving.cert_pem))
    manager.start()
    assert manager.ca is not None and manager.serving is not None
    assert published == [(manager.ca.cert_pem, manager.serving.cert_pem)]
    assert manager.refresh() is False and len(published) == 1  # nothing renewed, nothing published
    now[0] += dt.timedelta(days=1, hours=1)

    def broken(ca: object, serving: object) -> None:
        raise RuntimeError("API down")

    manager.on_pair_change = broken
    assert manager.refresh() is True  # renewed and served although publishing failed


def test_kyverno_secret_names_follow_kyvernos_layout() -> None:
    from stockade.controllers.tlssecret import kyverno_tls_secret_names

    assert kyverno_tls_secret_names("kyverno", "kyverno-svc") == ("kyverno-svc.kyverno.svc.kyverno-tls-ca", "kyverno-svc.kyverno.svc.kyverno-tls-pair")
