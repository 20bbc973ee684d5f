"""Signing keys: PEM public keys, cosign's encrypted private-key files, and key providers (`k8s://`, KMS URIs).

cosign's private key file is PEM (`ENCRYPTED SIGSTORE PRIVATE KEY`, older files `ENCRYPTED COSIGN PRIVATE KEY`)
wrapping JSON `{kdf: scrypt{N,r,p,salt}, cipher: nacl/secretbox{nonce}, ciphertext}`; the plaintext is a PKCS#8 DER
key. We read and write exactly that so keys move freely between `cosign` and `stockade sign`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Union

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

from stockade.images.pem import KeyFormatError, pem_blocks, split_pem
from stockade.images.verifier_api import InvalidAttestor, VerificationFailure, VerificationUnavailable
from stockade.errors import StockadeError

PublicKey = Union[ec.EllipticCurvePublicKey, rsa.RSAPublicKey, ed25519.Ed25519PublicKey]
PrivateKey = Union[ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey, ed25519.Ed25519PrivateKey]

ENCRYPTED_KEY_PEM_TYPES = ("ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED COSIGN PRIVATE KEY")
_HASHES: dict[str, Callable[[], hashes.HashAlgorithm]] = {
    "sha224": hashes.SHA224,
    "sha256": hashes.SHA256,
    "sha384": hashes.SHA384,
    "sha512": hashes.SHA512,
}
_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 32768, 8, 1


def policy_certificates(pem: str, field_name: str) -> list[x509.Certificate]:
    """The certificates a policy field holds (an attestor's roots, cert or certChain); anything unusable there is the
    policy's error, named by field."""
    try:
        blocks = pem_blocks(pem)
    except KeyFormatError as exc:
        raise InvalidAttestor(f"{field_name}: {exc}") from None
    wrong = [kind for kind, _ in blocks if kind != "CERTIFICATE"]
    if wrong:
        raise InvalidAttestor(f"{field_name}: holds a {wrong[0]} PEM block, expected CERTIFICATE")
    try:
        return list(x509.load_pem_x509_certificates(pem.encode()))
    except ValueError as exc:
        raise InvalidAttestor(f"{field_name}: invalid certificate PEM (truncated or corrupted?): {exc}") from None


def is_encrypted_private_key(data: str | bytes) -> bool:
    """Whether a key file needs a password (so none is asked for a plain PEM key)."""
    raw = data.encode() if isinstance(data, str) else data
    return any(f"BEGIN {name}-----".encode() in raw for name in ENCRYPTED_KEY_PEM_TYPES) or b"BEGIN ENCRYPTED PRIVATE KEY-----" in raw


def load_public_key(pem: str | bytes) -> PublicKey:
    """A public key from a `PUBLIC KEY` PEM (a certificate PEM yields its subject key)."""
    data = pem.encode() if isinstance(pem, str) else pem
    pem_type = pem_blocks(data)[0][0]
    if "PRIVATE KEY" in pem_type:
        raise KeyFormatError(f"holds a {pem_type}, expected a PUBLIC KEY (never put private keys in a policy)")
    if pem_type not in ("PUBLIC KEY", "RSA PUBLIC KEY", "CERTIFICATE"):
        raise KeyFormatError(f"holds a {pem_type} PEM block, expected a PUBLIC KEY")
    try:
        if pem_type == "CERTIFICATE":
            key: Any = x509.load_pem_x509_certificate(data).public_key()
        else:
            key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise KeyFormatError(f"invalid {pem_type} PEM: {exc}") from None
    if not isinstance(key, (ec.EllipticCurvePublicKey, rsa.RSAPublicKey, ed25519.Ed25519PublicKey)):
        raise KeyFormatError(f"unsupported public key type {type(key).__name__}")
    return key


def public_key_pem(key: PublicKey | PrivateKey) -> bytes:
    public = key.public_key() if isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey, ed25519.Ed25519PrivateKey)) else key
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _hash(name: str) -> hashes.HashAlgorithm:
    factory = _HASHES.get((name or "sha256").lower())
    if factory is None:
        raise KeyFormatError(f"unsupported signature algorithm {name!r}")
    return factory()


def verify_signature(key: PublicKey, signature: bytes, payload: bytes, hash_name: str = "sha256") -> None:
    """Raise VerificationFailure unless `signature` is `key`'s signature over `payload`.

    RSA accepts PKCS#1 v1.5 and PSS, as cosign does; Ed25519 signs the raw payload.
    """
    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signature, payload, ec.ECDSA(_hash(hash_name)))
        elif isinstance(key, rsa.RSAPublicKey):
            try:
                key.verify(signature, payload, padding.PKCS1v15(), _hash(hash_name))
            except InvalidSignature:
                pss = padding.PSS(mgf=padding.MGF1(_hash(hash_name)), salt_length=padding.PSS.AUTO)
                key.verify(signature, payload, pss, _hash(hash_name))
        elif isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(signature, payload)
        else:  # pragma: no cover - load_public_key already rejects other types
            raise VerificationFailure(f"unsupported key type {type(key).__name__}")
    except InvalidSignature:
        raise VerificationFailure("invalid signature when validating ASN.1 encoded signature") from None


def sign_payload(key: PrivateKey, payload: bytes, hash_name: str = "sha256") -> bytes:
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return key.sign(payload, ec.ECDSA(_hash(hash_name)))
    if isinstance(key, rsa.RSAPrivateKey):
        return key.sign(payload, padding.PKCS1v15(), _hash(hash_name))
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.sign(payload)
    raise KeyFormatError(f"unsupported private key type {type(key).__name__}")


# -- cosign encrypted private keys ------------------------------------------------------------------------------------
def _secretbox() -> Any:
    try:
        from nacl.secret import SecretBox
    except ImportError:  # pragma: no cover - depends on the environment
        raise KeyFormatError("reading cosign key files needs PyNaCl (pip install pynacl)") from None
    return SecretBox


def _scrypt(password: bytes, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, dklen=32, maxmem=256 * 1024 * 1024)


def load_cosign_private_key(data: str | bytes, password: str | bytes) -> PrivateKey:
    """Decrypt a cosign `*.key` file (also accepts an unencrypted PKCS#8 PEM, password ignored)."""
    pem_type, body = pem_blocks(data)[0]
    if pem_type in ("PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY", "ENCRYPTED PRIVATE KEY"):
        raw = data.encode() if isinstance(data, str) else data
        secret_word = (password.encode() if isinstance(password, str) else password) if pem_type == "ENCRYPTED PRIVATE KEY" else None
        try:
            key: Any = serialization.load_pem_private_key(raw, password=secret_word)
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
            reason = "wrong password?" if pem_type == "ENCRYPTED PRIVATE KEY" else "truncated or corrupted?"
            raise KeyFormatError(f"invalid {pem_type} ({reason}): {exc}") from None
    elif pem_type in ENCRYPTED_KEY_PEM_TYPES:
        try:
            envelope = json.loads(body)
            kdf, cipher = envelope["kdf"], envelope["cipher"]
            if kdf.get("name") != "scrypt" or cipher.get("name") != "nacl/secretbox":
                raise KeyFormatError(f"unsupported key encryption {kdf.get('name')}/{cipher.get('name')}")
            params = kdf.get("params") or {}
            secret = _scrypt(
                password.encode() if isinstance(password, str) else password,
                base64.b64decode(kdf["salt"]),
                int(params.get("N", _SCRYPT_N)),
                int(params.get("r", _SCRYPT_R)),
                int(params.get("p", _SCRYPT_P)),
            )
            ciphertext = base64.b64decode(envelope["ciphertext"])
            nonce = base64.b64decode(cipher["nonce"])
        except KeyFormatError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise KeyFormatError(f"malformed encrypted private key (truncated or corrupted?): {type(exc).__name__}: {exc}") from None
        secret_box = _secretbox()
        from nacl.exceptions import CryptoError

        try:
            der = secret_box(secret).decrypt(ciphertext, nonce)
        except (CryptoError, ValueError, TypeError):
            raise KeyFormatError("decryption failed (wrong password?)") from None
        try:
            key = serialization.load_der_private_key(der, password=None)
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise KeyFormatError(f"decrypted key is not a PKCS#8 private key: {exc}") from None
    elif "PUBLIC KEY" in pem_type or pem_type == "CERTIFICATE":
        raise KeyFormatError(f"holds a {pem_type}, expected a private key (cosign.key)")
    else:
        raise KeyFormatError(f"unsupported private key PEM type {pem_type!r}")
    if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey, ed25519.Ed25519PrivateKey)):
        raise KeyFormatError(f"unsupported private key type {type(key).__name__}")
    return key


def encrypt_cosign_private_key(key: PrivateKey, password: str | bytes) -> bytes:
    """The cosign `*.key` file content for `key` (scrypt N=32768 r=8 p=1 + nacl secretbox)."""
    der = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    salt, nonce = os.urandom(32), os.urandom(24)
    secret = _scrypt(password.encode() if isinstance(password, str) else password, salt, _SCRYPT_N, _SCRYPT_R, _SCRYPT_P)
    ciphertext = _secretbox()(secret).encrypt(der, nonce).ciphertext
    envelope = {
        "kdf": {"name": "scrypt", "params": {"N": _SCRYPT_N, "r": _SCRYPT_R, "p": _SCRYPT_P}, "salt": base64.b64encode(salt).decode()},
        "cipher": {"name": "nacl/secretbox", "nonce": base64.b64encode(nonce).decode()},
        "ciphertext": base64.b64encode(ciphertext).decode(),
    }
    body = base64.encodebytes(json.dumps(envelope, separators=(",", ":")).encode()).decode()
    body = "".join(body.split())
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    pem_type = ENCRYPTED_KEY_PEM_TYPES[0]
    return ("\n".join([f"-----BEGIN {pem_type}-----", *lines, f"-----END {pem_type}-----"]) + "\n").encode()


def generate_key_pair(password: str | bytes) -> tuple[bytes, bytes]:
    """(encrypted private key file, public key PEM) for a fresh ECDSA P-256 key, like `cosign generate-key-pair`."""
    key = ec.generate_private_key(ec.SECP256R1())
    return encrypt_cosign_private_key(key, password), public_key_pem(key)


class KeyFileError(StockadeError, OSError):
    """A key file that cannot be created where asked (exists already, symlink, permission)."""


def _create_exclusive(path: Path, data: bytes, mode: int) -> None:
    """Create `path` with `mode` from the start; never replaces or follows anything already there."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, mode)
    except FileExistsError:
        raise KeyFileError(f"{path} already exists; refusing to overwrite it") from None
    except OSError as exc:
        raise KeyFileError(f"cannot create {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def write_key_pair(directory: Path, private_pem: bytes, public_pem: bytes) -> tuple[Path, Path]:
    """`cosign.key` (mode 0600 at creation) and `cosign.pub` (0644) in `directory`; neither may exist yet."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KeyFileError(f"cannot create {directory}: {exc.strerror or exc}") from None
    private_path, public_path = directory / "cosign.key", directory / "cosign.pub"
    _create_exclusive(private_path, private_pem, 0o600)
    try:
        _create_exclusive(public_path, public_pem, 0o644)
    except KeyFileError:
        private_path.unlink()  # half a key pair is worse than none
        raise
    return private_path, public_path


# -- key providers --------------------------------------------------------------------------------------------------
SecretGetter = Callable[[str, str], Mapping[str, Any]]
KMS_SCHEMES = ("awskms://", "gcpkms://", "azurekms://", "hashivault://")


class KeyResolver:
    """Turns a policy's `publicKeys` value (PEM, `k8s://ns/name`, a KMS URI) into public keys.

    Secrets and KMS access are injected, so the verifier works offline and tests need no cluster. A KMS scheme
    without a registered provider is an *error* (never silently skipped).
    """

    def __init__(
        self,
        *,
        secret_getter: SecretGetter | None = None,
        kms_providers: Mapping[str, Callable[[str], bytes]] | None = None,
    ) -> None:
        self._secret_getter = secret_getter
        self._kms = dict(kms_providers or {})

    def resolve(self, reference: str) -> list[PublicKey]:
        text = reference.strip()
        if not text:
            raise KeyFormatError("empty, expected a PEM public key, k8s://<namespace>/<name> or a KMS URI")
        if text.startswith("k8s://"):
            return [load_public_key(pem) for pem in split_pem(self._secret_key(text)) or [self._secret_key(text)]]
        for scheme in KMS_SCHEMES:
            if text.startswith(scheme):
                provider = self._kms.get(scheme.rstrip(":/"))
                if provider is None:
                    raise VerificationUnavailable(f"key provider {scheme.rstrip(':/')} is not configured for {text}")
                try:
                    return [load_public_key(provider(text))]
                except KeyFormatError as exc:
                    raise VerificationUnavailable(f"key from {text}: {exc}") from None
        blocks = split_pem(text)
        if not blocks:
            if "-----BEGIN " in text:
                pem_blocks(text)  # says why the block is unusable (truncated, ...)
            raise KeyFormatError("no PEM public key found (expected -----BEGIN PUBLIC KEY-----, k8s://, or a KMS URI)")
        return [load_public_key(block) for block in blocks]

    def _secret_key(self, uri: str) -> str:
        parts = uri[len("k8s://") :].split("/")
        if len(parts) != 2 or not all(parts):
            raise KeyFormatError(f"invalid secret reference {uri!r}, expected k8s://<namespace>/<name>")
        if self._secret_getter is None:
            raise VerificationUnavailable(f"cannot read {uri}: no Kubernetes secret access configured")
        try:
            secret = self._secret_getter(parts[0], parts[1])
        except VerificationUnavailable:
            raise
        except Exception as exc:  # the getter talks to a cluster; any failure there is "unavailable"
            raise VerificationUnavailable(f"cannot read secret {parts[0]}/{parts[1]}: {exc}") from None
        string_data = secret.get("stringData") or {}
        data = secret.get("data") or {}
        if "cosign.pub" in string_data:
            return str(string_data["cosign.pub"])
        if "cosign.pub" in data:
            return base64.b64decode(data["cosign.pub"]).decode()
        raise VerificationFailure(f"secret {parts[0]}/{parts[1]} has no cosign.pub key")
