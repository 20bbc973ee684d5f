"""Serving certificates for the webhook: a self-signed CA plus a leaf, or files the user provides.

The apiserver only trusts the CA put into the webhook configurations' ``caBundle``; the leaf is renewed well before
it expires and swapped into the live ``ssl.SSLContext`` so running connections and the listener survive rotation.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
import secrets
import ssl
import stat
import tempfile
import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Protocol, Union

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from stockade.errors import StockadeError

log = logging.getLogger("stockade.webhook")

CA_VALIDITY = dt.timedelta(days=365)
SERVING_VALIDITY = dt.timedelta(days=150)
RENEW_BEFORE = dt.timedelta(days=15)


@dataclass(frozen=True)
class KeyPair:
    """PEM certificate (chain) and PEM private key."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def not_after(self) -> dt.datetime:
        return self.certificate.not_valid_after_utc


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


SigningKey = Union[ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey, ed25519.Ed25519PrivateKey]


class KeyAlgorithm(str, Enum):
    """Key algorithm of self-managed certificates (Kyverno's ``tlsKeyAlgorithm``: RSA, ECDSA or Ed25519).  Stockade
    defaults to ECDSA P-256: small keys and fast handshakes, which every API server accepts."""

    RSA = "RSA"
    ECDSA = "ECDSA"
    ED25519 = "Ed25519"

    @classmethod
    def parse(cls, text: str) -> "KeyAlgorithm":
        """Case-insensitive, as Kyverno's flag; a ValueError names the accepted values."""
        for algorithm in cls:
            if algorithm.value.upper() == text.strip().upper():
                return algorithm
        raise ValueError(f"unsupported key algorithm {text!r} (supported: RSA, ECDSA, Ed25519)")

    def new_key(self) -> SigningKey:
        if self is KeyAlgorithm.RSA:
            return rsa.generate_private_key(public_exponent=65537, key_size=2048)
        if self is KeyAlgorithm.ED25519:
            return ed25519.Ed25519PrivateKey.generate()
        return ec.generate_private_key(ec.SECP256R1())

    def matches(self, certificate: x509.Certificate) -> bool:
        """Whether ``certificate`` carries a key of this algorithm (a CA of another one is replaced)."""
        kinds = {KeyAlgorithm.RSA: rsa.RSAPublicKey, KeyAlgorithm.ECDSA: ec.EllipticCurvePublicKey, KeyAlgorithm.ED25519: ed25519.Ed25519PublicKey}
        return isinstance(certificate.public_key(), kinds[self])


def _signature_hash(key: object) -> hashes.SHA256 | None:
    """Ed25519 signs the message itself; RSA and ECDSA sign its SHA-256 digest."""
    return None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()


def _key_pem(key: SigningKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def generate_ca(
    common_name: str = "stockade-ca",
    validity: dt.timedelta = CA_VALIDITY,
    now: dt.datetime | None = None,
    algorithm: KeyAlgorithm = KeyAlgorithm.ECDSA,
) -> KeyPair:
    """A self-signed CA (a key of ``algorithm``) that may only sign leaf certificates."""
    now = now or _now()
    key = algorithm.new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, _signature_hash(key))
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue_serving_cert(
    ca: KeyPair,
    hosts: list[str],
    validity: dt.timedelta = SERVING_VALIDITY,
    now: dt.datetime | None = None,
    algorithm: KeyAlgorithm = KeyAlgorithm.ECDSA,
) -> KeyPair:
    """A server certificate (a key of ``algorithm``) for ``hosts`` (DNS names or IP addresses) signed by ``ca``;
    never outlives the CA."""
    if not hosts:
        raise ValueError("a serving certificate needs at least one host name or IP address")
    now = now or _now()
    ca_cert = ca.certificate
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    key = algorithm.new_key()
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    not_after = min(now + validity, ca_cert.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, _signature_hash(ca_key))  # type: ignore[arg-type]
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def needs_renewal(pair: KeyPair, renew_before: dt.timedelta = RENEW_BEFORE, now: dt.datetime | None = None) -> bool:
    return pair.not_after - renew_before <= (now or _now())


def server_ssl_context() -> ssl.SSLContext:
    """TLS 1.2+ server context; certificates are loaded separately so they can be replaced in place."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers("ECDHE+AESGCM:ECDHE+CHACHA20")
    return context


class CertificateFileError(StockadeError):
    """A certificate directory or file that is unsafe or unusable; names the path and the reason."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def ensure_private_directory(directory: Path, owner_uid: int | None = None) -> None:
    """Create ``directory`` (mode 0700) or accept an existing one only if we own it and nobody else may write to it:
    whoever can write there can swap our CA key for theirs."""
    expected_uid = os.geteuid() if owner_uid is None else owner_uid
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.stat(directory)
    except OSError as exc:
        raise CertificateFileError(directory, f"cannot create or inspect the certificate directory: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise CertificateFileError(directory, "is not a directory")
    if info.st_uid != expected_uid:
        raise CertificateFileError(directory, f"is owned by uid {info.st_uid}, not by us (uid {expected_uid}); refusing to keep keys there")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CertificateFileError(directory, f"is group- or world-writable (mode {stat.S_IMODE(info.st_mode):04o}); refusing to keep keys there")


def _refuse_symlink(path: Path) -> None:
    if path.is_symlink():
        raise CertificateFileError(path, "is a symbolic link; refusing to read or replace keys through it")


def write_private_file(path: Path, data: bytes) -> None:
    """Replace ``path`` atomically with ``data``, mode 0600 from the first byte: a fresh O_EXCL|O_NOFOLLOW temp file in
    the same directory, fsync, rename. Readers see the old or the new content, never half a key."""
    _refuse_symlink(path)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(temporary, flags, 0o600)
    except OSError as exc:
        raise CertificateFileError(path, f"cannot create {temporary.name}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_private_file(path: Path) -> bytes | None:
    """Content of a file we wrote, None when absent; a symlink there is refused (O_NOFOLLOW), not followed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if path.is_symlink():
            raise CertificateFileError(path, "is a symbolic link; refusing to read or replace keys through it") from None
        raise CertificateFileError(path, f"cannot read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def parse_certificates(path: Path, data: bytes) -> list[x509.Certificate]:
    """Every certificate in a PEM file, or a CertificateFileError saying what is wrong with it."""
    if not data.strip():
        raise CertificateFileError(path, "is empty, expected a PEM certificate")
    if b"-----BEGIN CERTIFICATE-----" not in data:
        kind = _pem_kind(data)
        raise CertificateFileError(path, f"holds {kind}, expected a PEM certificate (-----BEGIN CERTIFICATE-----)")
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise CertificateFileError(path, f"is not a valid PEM certificate (truncated or corrupted?): {exc}") from None


def parse_private_key(path: Path, data: bytes) -> object:
    """An unencrypted PEM private key, or a CertificateFileError saying what is wrong with it."""
    if not data.strip():
        raise CertificateFileError(path, "is empty, expected a PEM private key")
    if b"PRIVATE KEY-----" not in data:
        raise CertificateFileError(path, f"holds {_pem_kind(data)}, expected a PEM private key (-----BEGIN PRIVATE KEY-----)")
    try:
        return serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise CertificateFileError(path, "is an encrypted private key; the webhook needs an unencrypted one") from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise CertificateFileError(path, f"is not a valid PEM private key (truncated or corrupted?): {exc}") from None


def _pem_kind(data: bytes) -> str:
    marker = data.find(b"-----BEGIN ")
    if marker < 0:
        return "no PEM block"
    end = data.find(b"-----", marker + 11)
    label = data[marker + 11 : end if end > 0 else marker + 60].decode("ascii", "replace")
    return f"a {label!r} PEM block"


def parse_pair(cert_path: Path, cert_pem: bytes, key_path: Path, key_pem: bytes) -> KeyPair:
    """Check a certificate/key pair before anyone relies on it: both parse, and the key belongs to the certificate."""
    leaf = parse_certificates(cert_path, cert_pem)[0]
    key = parse_private_key(key_path, key_pem)
    public = getattr(key, "public_key", None)
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    if public is None or public().public_bytes(serialization.Encoding.DER, spki) != leaf.public_key().public_bytes(serialization.Encoding.DER, spki):
        raise CertificateFileError(key_path, f"does not belong to the certificate in {cert_path}")
    return KeyPair(cert_pem, key_pem)


def load_pair_into(context: ssl.SSLContext, pair: KeyPair) -> None:
    """``load_cert_chain`` only reads files, so the PEMs take a short trip through a private temp directory."""
    with tempfile.TemporaryDirectory(prefix="stockade-tls-") as directory:
        cert_path = Path(directory, "tls.crt")
        key_path = Path(directory, "tls.key")
        write_private_file(cert_path, pair.cert_pem)
        write_private_file(key_path, pair.key_pem)
        context.load_cert_chain(cert_path, key_path)


def write_pair(pair: KeyPair, cert_path: Path, key_path: Path) -> None:
    """Both files mode 0600, each replaced atomically so a concurrent reader never sees half a key."""
    for path, data in ((cert_path, pair.cert_pem), (key_path, pair.key_pem)):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private_file(path, data)


class CertificateManager:
    """Owns the serving ``SSLContext`` and keeps its certificate fresh.

    Two modes: *managed* (self-signed CA persisted in ``store`` (shared by replicas, e.g. a Secret) and/or
    ``directory``; on each refresh a pair another replica stored is adopted; leaf renewed ``renew_before`` expiry; CA renewed
    the same way, old CA kept in the bundle until it expires) and *user files* (``cert_file``/``key_file``, reloaded
    whenever their modification time changes).  ``on_ca_change`` is told the new bundle so webhook configurations
    can be updated.
    """

    def __init__(
        self,
        *,
        hosts: list[str] | None = None,
        directory: Path | None = None,
        cert_file: Path | None = None,
        key_file: Path | None = None,
        ca_file: Path | None = None,
        renew_before: dt.timedelta = RENEW_BEFORE,
        serving_validity: dt.timedelta = SERVING_VALIDITY,
        ca_validity: dt.timedelta = CA_VALIDITY,
        clock: Callable[[], dt.datetime] = _now,
        store: CertStore | None = None,
        algorithm: KeyAlgorithm = KeyAlgorithm.ECDSA,
    ) -> None:
        if (cert_file is None) != (key_file is None):
            raise ValueError("--tls-cert-file and --tls-key-file go together")
        self.hosts = hosts or ["localhost", "127.0.0.1"]
        self.directory = directory
        self.store = store
        self.cert_file = cert_file
        self.key_file = key_file
        self.ca_file = ca_file
        self.renew_before = renew_before
        self.serving_validity = serving_validity
        self.ca_validity = ca_validity
        self.algorithm = algorithm
        self.clock = clock
        self.context = server_ssl_context()
        self.ca: KeyPair | None = None
        self.previous_ca_pem: bytes = b""
        self.serving: KeyPair | None = None
        self._user_stamp: tuple[float, float] | None = None
        self.on_ca_change: Callable[[bytes], None] | None = None
        # managed mode: told the CA and serving pair when the serving pair changes (and once at start), e.g. to
        # publish them where Kyverno keeps its own (``serve --kyverno-tls-secrets``); a failure is logged, not raised
        self.on_pair_change: Callable[[KeyPair, KeyPair], None] | None = None

    @property
    def user_provided(self) -> bool:
        return self.cert_file is not None

    @property
    def ca_bundle(self) -> bytes:
        """What the apiserver must trust: current CA plus the previous one while it is still valid."""
        if self.user_provided:
            if self.ca_file is not None:
                return self._read_ca_file()
            return self.serving.cert_pem if self.serving else b""
        bundle = self.ca.cert_pem if self.ca else b""
        if self.previous_ca_pem:
            previous = x509.load_pem_x509_certificate(self.previous_ca_pem)
            if previous.not_valid_after_utc > self.clock():
                bundle += self.previous_ca_pem
        return bundle

    def _read_ca_file(self) -> bytes:
        assert self.ca_file is not None
        try:
            data = self.ca_file.read_bytes()
        except OSError as exc:
            raise CertificateFileError(self.ca_file, f"cannot read: {exc.strerror or exc}") from None
        parse_certificates(self.ca_file, data)
        return data

    def start(self) -> ssl.SSLContext:
        """Load or create the certificates and return the context to serve with (raises CertificateFileError)."""
        if self.directory is not None and not self.user_provided:
            ensure_private_directory(self.directory)
        if self.ca_file is not None:
            self._read_ca_file()
        self.refresh()
        return self.context

    def refresh(self) -> bool:
        """Reload or renew if needed; True when the serving certificate changed."""
        if self.user_provided:
            return self._reload_user_files()
        return self._renew_managed()

    def _reload_user_files(self) -> bool:
        """User files may be symlinks (a mounted Kubernetes Secret is); they are checked before they replace the
        pair being served, so a half-written or wrong file leaves the old certificate in place."""
        assert self.cert_file is not None and self.key_file is not None
        contents: list[bytes] = []
        stamp: list[int] = []
        for path in (self.cert_file, self.key_file):
            try:
                stamp.append(path.stat().st_mtime_ns)
                contents.append(path.read_bytes())
            except OSError as exc:
                raise CertificateFileError(path, f"cannot read: {exc.strerror or exc}") from None
        if tuple(stamp) == self._user_stamp:
            return False
        pair = parse_pair(self.cert_file, contents[0], self.key_file, contents[1])
        load_pair_into(self.context, pair)
        self.serving = pair
        self._user_stamp = (stamp[0], stamp[1])
        return True

    def _stored(self) -> tuple[dict[str, bytes], Callable[[str], Path]]:
        """What the shared store holds, falling back to the local directory; plus where each item came from."""
        for store in (self.store, DirectoryStore(self.directory) if self.directory is not None else None):
            if store is not None:
                items = store.load()
                if items.get(CA_CRT) and items.get(CA_KEY):
                    return items, getattr(store, "location", Path)
        return {}, Path

    def _adopt_stored(self) -> tuple[bool, bool]:
        """Take over a CA/pair another replica (or an earlier run) stored; returns (ca changed, serving changed)."""
        items, where = self._stored()
        if not items:
            return False, False
        ca = self._checked(items, where, CA_CRT, CA_KEY)
        ca_changed = self.ca is None or ca.cert_pem != self.ca.cert_pem
        if ca_changed:
            self.ca = ca
            self.previous_ca_pem = items.get(PREVIOUS_CA_CRT, b"")
            if self.previous_ca_pem:
                parse_certificates(where(PREVIOUS_CA_CRT), self.previous_ca_pem)
        serving_changed = False
        if items.get(TLS_CRT) and items.get(TLS_KEY):
            serving = self._checked(items, where, TLS_CRT, TLS_KEY)
            if (self.serving is None or serving.cert_pem != self.serving.cert_pem) and self._issued_by_ca(serving) and self._covers_hosts(serving):
                self.serving = serving
                serving_changed = True
        if ca_changed and not serving_changed:
            self.serving = None  # issued by another CA: re-issue below
        return ca_changed, serving_changed

    @staticmethod
    def _checked(items: dict[str, bytes], where: Callable[[str], Path], cert_name: str, key_name: str) -> KeyPair:
        """A stored pair that parses and belongs together; otherwise an error naming where it was stored."""
        return parse_pair(where(cert_name), items[cert_name], where(key_name), items[key_name])

    def _issued_by_ca(self, pair: KeyPair) -> bool:
        assert self.ca is not None
        if pair.certificate.issuer != self.ca.certificate.subject:
            return False
        pair.certificate.verify_directly_issued_by(self.ca.certificate)  # raises when the CA did not sign it
        return True

    def _covers_hosts(self, pair: KeyPair) -> bool:
        try:
            san = pair.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            return False
        present = {str(v) for v in san.get_values_for_type(x509.DNSName)} | {str(v) for v in san.get_values_for_type(x509.IPAddress)}
        return set(self.hosts) <= present

    def _renew_managed(self) -> bool:
        for attempt in range(3):
            try:
                return self._renew_managed_once()
            except StoreConflict:
                if attempt == 2:
                    raise
                log.info("certificate store changed concurrently; reloading")
        return False

    def _renew_managed_once(self) -> bool:
        previous_ca = self.ca.cert_pem if self.ca else None
        previous_serving = self.serving.cert_pem if self.serving else None
        self._adopt_stored()
        now = self.clock()
        renewed = False
        # a stored CA or leaf of another key algorithm is replaced like an expiring one (the old CA stays trusted)
        if self.ca is None or needs_renewal(self.ca, self.renew_before, now) or not self.algorithm.matches(self.ca.certificate):
            if self.ca is not None:
                self.previous_ca_pem = self.ca.cert_pem
            self.ca = generate_ca(validity=self.ca_validity, now=now, algorithm=self.algorithm)
            self.serving = None
            renewed = True
        if self.serving is None or needs_renewal(self.serving, self.renew_before, now) or not self.algorithm.matches(self.serving.certificate):
            self.serving = issue_serving_cert(self.ca, self.hosts, self.serving_validity, now, self.algorithm)
            renewed = True
        if renewed or self._needs_mirror:
            self._persist()
        changed = self.serving.cert_pem != previous_serving
        if changed or not self._loaded_once:
            load_pair_into(self.context, self.serving)
            self._loaded_once = True
            if self.on_pair_change is not None:
                try:
                    self.on_pair_change(self.ca, self.serving)
                except Exception as exc:  # publishing is a courtesy to other tools: serving goes on
                    log.warning("publishing the renewed certificates failed: %s", exc)
        if previous_ca is not None and self.ca.cert_pem != previous_ca and self.on_ca_change is not None:
            self.on_ca_change(self.ca_bundle)
        return changed

    _loaded_once = False

    @property
    def _needs_mirror(self) -> bool:
        """The local directory must hold the current pair (worker processes read it from there)."""
        if self.directory is None or self.serving is None:
            return False
        stored = DirectoryStore(self.directory).load()
        return stored.get(TLS_CRT) != self.serving.cert_pem

    def _persist(self) -> None:
        assert self.ca is not None and self.serving is not None
        items = {CA_CRT: self.ca.cert_pem, CA_KEY: self.ca.key_pem, TLS_CRT: self.serving.cert_pem, TLS_KEY: self.serving.key_pem}
        if self.previous_ca_pem:
            items[PREVIOUS_CA_CRT] = self.previous_ca_pem
        if self.store is not None:
            self.store.save(items)  # may raise StoreConflict: another replica renewed first
        if self.directory is not None:
            DirectoryStore(self.directory).save(items)


CA_CRT = "ca.crt"
CA_KEY = "ca.key"
PREVIOUS_CA_CRT = "ca-previous.crt"
TLS_CRT = "tls.crt"
TLS_KEY = "tls.key"


class StoreConflict(StockadeError):
    """Someone else wrote the store since we read it; reload and decide again."""


class CertStore(Protocol):
    """Where a managed CA and serving pair are shared (a directory, a Kubernetes Secret)."""

    def load(self) -> dict[str, bytes]: ...

    def save(self, items: dict[str, bytes]) -> None: ...


class DirectoryStore:
    """Files named after the keys, all mode 0600, none of them a symlink."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def location(self, name: str) -> Path:
        return self.directory / name

    def load(self) -> dict[str, bytes]:
        items = {}
        for name in (CA_CRT, CA_KEY, PREVIOUS_CA_CRT, TLS_CRT, TLS_KEY):
            data = read_private_file(self.directory / name)
            if data is not None:
                items[name] = data
        return items

    def save(self, items: dict[str, bytes]) -> None:
        for cert, key in ((CA_CRT, CA_KEY), (TLS_CRT, TLS_KEY)):
            write_pair(KeyPair(items[cert], items[key]), self.directory / cert, self.directory / key)
        if items.get(PREVIOUS_CA_CRT):
            write_private_file(self.directory / PREVIOUS_CA_CRT, items[PREVIOUS_CA_CRT])
