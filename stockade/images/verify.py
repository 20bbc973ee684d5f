"""Checks cosign signatures and attestations of an image against one Kyverno attestor entry.

`CosignVerifier` implements `stockade.images.verifier_api.ImageSignatureVerifier`: the engine handler decides
*which* attestors must agree (counts, nesting, conditions); this module answers "did this attestor sign this
digest?". Everything is offline: keys, certificates and keyless roots come from the policy (or a trusted root);
the transparency log is checked when trusted Rekor keys are configured (`SignatureOptions.rekor_keys`, a legacy
attestor's `rekor.pubkey`): the layer's Rekor bundle must carry a valid SET for an entry naming this very signature,
and keyless certificates are then checked at the logged time (`stockade.images.sigstore_trust`).

Binding to the digest is the security core: the simple-signing payload (or in-toto subject) must name the exact
manifest digest the reference resolves to, so a re-pointed tag or a signature copied from another image fails.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from stockade.goregex import GoRegexError, compile_go_regex
from stockade.images.attest import statement_covers, verify_envelope
from stockade.images.cosign import (
    ATTESTATION_SUFFIX,
    BUNDLE_ANNOTATION,
    DSSE_MEDIA_TYPE,
    SIGNATURE_SUFFIX,
    SIGNATURE_TYPE,
    SignatureLayer,
    fetch_layers,
)
from stockade.images.keys import KeyResolver, PublicKey, policy_certificates, verify_signature
from stockade.images.pem import KeyFormatError
from stockade.images.reference import ImageReference, InvalidReferenceError, parse_reference
from stockade.images.registry import RegistryClient, RegistryContentError, RegistryError
from stockade.images.sigstore_trust import (
    LogEntry,
    TrustRoot,
    check_entry_binds_signature,
    rekor_keys_from_pem,
    verify_embedded_scts,
    verify_set,
)
from stockade.images.verifier_api import InvalidAttestor, SignatureOptions, VerificationFailure, VerificationUnavailable

# Fulcio certificate extensions (OIDC issuer v1 is a raw string, v2 a DER UTF8String).
_OID_ISSUER_V1 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
_OID_ISSUER_V2 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8")
_ADDITIONAL_EXTENSIONS = {
    "githubWorkflowTrigger": "1.3.6.1.4.1.57264.1.2",
    "githubWorkflowSha": "1.3.6.1.4.1.57264.1.3",
    "githubWorkflowName": "1.3.6.1.4.1.57264.1.4",
    "githubWorkflowRepository": "1.3.6.1.4.1.57264.1.5",
    "githubWorkflowRef": "1.3.6.1.4.1.57264.1.6",
}


@dataclass(frozen=True)
class _Identity:
    """What an attestor accepts, resolved once per call: keys, or certificate rules."""

    keys: tuple[PublicKey, ...] = ()
    certificate: x509.Certificate | None = None
    chain: tuple[x509.Certificate, ...] = ()
    keyless: Mapping[str, Any] | None = None
    hash_name: str = "sha256"
    unchecked: bool = False  # attestor-less attestation entries: signature not checked
    trust: TrustRoot | None = None  # keyless roots when the attestor has no `roots`
    rekor_keys: Mapping[str, PublicKey] | None = None  # None: transparency log not checked
    ct_keys: Mapping[str, PublicKey] | None = None  # None: embedded SCTs not checked


def _load_certificates(pem: str) -> list[x509.Certificate]:
    try:
        return list(x509.load_pem_x509_certificates(pem.encode()))
    except ValueError as exc:
        raise VerificationFailure(f"invalid certificate PEM: {exc}") from None


def _extension_text(certificate: x509.Certificate, oid: x509.ObjectIdentifier) -> str | None:
    try:
        value = certificate.extensions.get_extension_for_oid(oid).value
    except x509.ExtensionNotFound:
        return None
    raw = getattr(value, "value", b"")
    if raw[:1] == b"\x0c" and len(raw) >= 2:  # DER UTF8String (short or long form length)
        length = raw[1]
        offset = 2
        if length & 0x80:
            count = length & 0x7F
            length = int.from_bytes(raw[2 : 2 + count], "big")
            offset = 2 + count
        return raw[offset : offset + length].decode("utf-8", "replace")
    return raw.decode("utf-8", "replace")


def certificate_subjects(certificate: x509.Certificate) -> list[str]:
    """The identities Fulcio puts in the SAN (email, URI, other names are ignored)."""
    try:
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [*san.get_values_for_type(x509.RFC822Name), *san.get_values_for_type(x509.UniformResourceIdentifier)]


def certificate_issuer(certificate: x509.Certificate) -> str:
    return _extension_text(certificate, _OID_ISSUER_V2) or _extension_text(certificate, _OID_ISSUER_V1) or ""


def verify_chain(
    leaf: x509.Certificate, intermediates: list[x509.Certificate], roots: list[x509.Certificate], at: datetime
) -> None:
    """Raise VerificationFailure unless `leaf` chains to one of `roots` at time `at` and allows code signing."""
    from cryptography.x509.verification import (
        Criticality,
        ExtensionPolicy,
        PolicyBuilder,
        Store,
        VerificationError,
    )

    if not roots:
        raise VerificationFailure("no trusted roots configured for certificate verification")
    # The client verifier insists on the clientAuth EKU; code-signing certificates carry codeSigning instead,
    # so EKU is relaxed here and checked explicitly below.
    ca_policy = ExtensionPolicy.webpki_defaults_ca().may_be_present(x509.ExtendedKeyUsage, Criticality.AGNOSTIC, None)
    ee_policy = ExtensionPolicy.webpki_defaults_ee().may_be_present(x509.ExtendedKeyUsage, Criticality.AGNOSTIC, None)
    ee_policy = ee_policy.may_be_present(x509.SubjectAlternativeName, Criticality.AGNOSTIC, None)
    builder = PolicyBuilder().store(Store(roots)).time(at).extension_policies(ca_policy=ca_policy, ee_policy=ee_policy)
    try:
        builder.build_client_verifier().verify(leaf, intermediates)
    except VerificationError as exc:
        raise VerificationFailure(f"certificate chain verification failed: {exc}") from None
    try:
        usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return
    if ExtendedKeyUsageOID.CODE_SIGNING not in usages:
        raise VerificationFailure("certificate is not valid for code signing (missing codeSigning extended key usage)")


def _matches(expected: str, pattern: str, actual: str, field: str) -> bool:
    """cosign's identity check: exact text, and/or an UNANCHORED Go regexp (``regexp.MatchString``) for *RegExp."""
    if expected and expected != actual:
        return False
    if pattern:
        try:
            regexp = compile_go_regex(pattern)
        except GoRegexError as error:
            raise VerificationFailure(f"invalid {field}: {error}") from None
        if regexp.search(actual) is None:
            return False
    return True


class CosignVerifier:
    """Offline cosign verification over a RegistryClient. Thread-safe if the client is."""

    def __init__(
        self,
        client: RegistryClient,
        *,
        key_resolver: KeyResolver | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.client = client
        self.key_resolver = key_resolver or KeyResolver()
        self._clock = clock or (lambda: datetime.now(timezone.utc))

    # -- ImageSignatureVerifier --------------------------------------------------------------------------------------
    def resolve_digest(self, image: str) -> str:
        reference = self._reference(image)
        try:
            return self.client.resolve_digest(reference)
        except RegistryContentError as exc:  # oversized, tampered or non-manifest answers: the image fails
            raise VerificationFailure(f"failed to resolve digest of {image}: {exc}") from None
        except RegistryError as exc:
            raise VerificationUnavailable(f"failed to resolve digest of {image}: {exc}") from None

    def verify_signature(self, image: str, digest: str, attestor: Mapping[str, Any], options: SignatureOptions) -> None:
        identity = self._identity(attestor, options)
        layers = self._layers(image, digest, SIGNATURE_SUFFIX, options)
        if not layers:
            raise VerificationFailure("no signatures found")  # cosign's ErrNoSignaturesFound text, which Kyverno passes on
        problems: list[str] = []
        for layer in layers:
            try:
                self._check_signature_layer(layer, digest, identity, options)
                return
            except VerificationFailure as exc:
                problems.append(str(exc))
        raise VerificationFailure(_summarise(problems))

    def fetch_attestations(
        self, image: str, digest: str, attestor: Mapping[str, Any], options: SignatureOptions, predicate_type: str
    ) -> list[dict[str, Any]]:
        identity = self._identity(attestor, options) if _has_identity(attestor) else _Identity(unchecked=True)
        layers = self._layers(image, digest, ATTESTATION_SUFFIX, options)
        if not layers:
            raise VerificationFailure(f"no attestations found for {image}")
        statements: list[dict[str, Any]] = []
        problems: list[str] = []
        for layer in layers:
            try:
                statement = self._check_attestation_layer(layer, digest, identity)
            except VerificationFailure as exc:
                problems.append(str(exc))
                continue
            if statement.get("predicateType") == predicate_type:
                statements.append(statement)
        if not statements and problems:
            raise VerificationFailure(_summarise(problems))
        return statements

    # -- helpers ---------------------------------------------------------------------------------------------------
    @staticmethod
    def _reference(image: str) -> ImageReference:
        try:
            return parse_reference(image)
        except InvalidReferenceError as exc:
            raise VerificationFailure(str(exc)) from None

    def _layers(self, image: str, digest: str, suffix: str, options: SignatureOptions) -> list[SignatureLayer]:
        reference = self._reference(image)
        try:
            return fetch_layers(self.client, reference, digest, suffix, options.repository)
        except RegistryContentError as exc:  # too many layers, oversized or tampered content: the image fails
            raise VerificationFailure(f"refusing {'signatures' if suffix == SIGNATURE_SUFFIX else 'attestations'} of {image}: {exc}") from None
        except RegistryError as exc:
            raise VerificationUnavailable(f"failed to fetch {'signatures' if suffix == SIGNATURE_SUFFIX else 'attestations'} of {image}: {exc}") from None
        except ValueError as exc:
            raise VerificationFailure(f"malformed signature manifest for {image}: {exc}") from None

    def _identity(self, attestor: Mapping[str, Any], options: SignatureOptions) -> _Identity:
        identity = self._identity_material(attestor, options)
        rekor_keys = options.rekor_keys
        entry: Any = next((attestor[name] for name in ("keys", "certificates", "keyless") if isinstance(attestor.get(name), Mapping)), {})
        rekor = entry.get("rekor") if isinstance(entry, Mapping) else None
        if isinstance(rekor, Mapping) and rekor.get("pubkey") and not rekor.get("ignoreTlog"):
            rekor_keys = {**(rekor_keys or {}), **rekor_keys_from_pem(str(rekor["pubkey"]), "rekor.pubkey")}
        # A keyless entry's custom CT log key (Kyverno's ctlog.pubkey): its certificates' embedded SCTs must verify
        # with it unless ctlog.ignoreSCT. Without a key the public log's would be used, which is not fetched offline.
        ct_keys = options.ct_keys
        ctlog = entry.get("ctlog") if isinstance(entry, Mapping) and identity.keyless is not None else None
        if isinstance(ctlog, Mapping) and ctlog.get("pubkey") and not ctlog.get("ignoreSCT"):
            ct_keys = {**(ct_keys or {}), **rekor_keys_from_pem(str(ctlog["pubkey"]), "ctlog.pubkey")}
        trust = options.trust_root if isinstance(options.trust_root, TrustRoot) else None
        return _Identity(
            identity.keys, identity.certificate, identity.chain, identity.keyless, identity.hash_name, identity.unchecked,
            trust, rekor_keys, ct_keys,
        )

    def _identity_material(self, attestor: Mapping[str, Any], options: SignatureOptions) -> _Identity:
        hash_name = str(attestor.get("signatureAlgorithm") or options.signature_algorithm or "sha256")
        keys = attestor.get("keys")
        if isinstance(keys, Mapping):
            hash_name = str(keys.get("signatureAlgorithm") or hash_name)
            source = str(keys.get("publicKeys") or "")
            secret = keys.get("secret")
            if not source and isinstance(secret, Mapping):
                source = f"k8s://{secret.get('namespace', '')}/{secret.get('name', '')}"
            if not source and keys.get("kms"):
                source = str(keys["kms"])
            if not source:
                raise VerificationFailure("keys attestor needs publicKeys, secret or kms")
            field = "publicKeys" if keys.get("publicKeys") else "secret" if isinstance(secret, Mapping) else "kms"
            try:
                return _Identity(keys=tuple(self.key_resolver.resolve(source)), hash_name=hash_name)
            except KeyFormatError as exc:
                raise InvalidAttestor(f"{field}: {exc}") from None
        certificates = attestor.get("certificates")
        if isinstance(certificates, Mapping):
            cert_pem = str(certificates.get("cert") or "")
            chain_pem = str(certificates.get("certChain") or "")
            certificate = policy_certificates(cert_pem, "cert")[0] if cert_pem else None
            chain = tuple(policy_certificates(chain_pem, "certChain")) if chain_pem else ()
            return _Identity(certificate=certificate, chain=chain, hash_name=hash_name)
        keyless = attestor.get("keyless")
        if isinstance(keyless, Mapping):
            if keyless.get("roots"):
                policy_certificates(str(keyless["roots"]), "roots")
            return _Identity(keyless=keyless, hash_name=hash_name)
        raise VerificationFailure("attestor has none of keys, certificates or keyless")

    @staticmethod
    def _logged_entry(layer: SignatureLayer, identity: _Identity) -> LogEntry | None:
        """The layer's Rekor entry (SET checked), or None when no log is required."""
        if identity.rekor_keys is None:
            return None
        bundle = layer.annotations.get(BUNDLE_ANNOTATION, "")
        if not bundle:
            raise VerificationFailure("signature has no Rekor bundle, and the transparency log is required")
        return verify_set(bundle, identity.rekor_keys)

    def _signing_keys(self, layer: SignatureLayer, identity: _Identity, entry: LogEntry | None) -> list[PublicKey]:
        """Keys that may have signed the layer; certificates are checked at the logged time when there is one."""
        at = entry.integrated_time if entry is not None else self._clock()
        if identity.keys:
            return list(identity.keys)
        layer_chain = _load_certificates(layer.chain_pem) if layer.chain_pem else []
        if identity.keyless is not None:
            if not layer.certificate_pem:
                raise VerificationFailure("keyless verification: signature carries no certificate")
            leaf = _load_certificates(layer.certificate_pem)[0]
            roots_pem = str(identity.keyless.get("roots") or "")
            if roots_pem:
                trusted = policy_certificates(roots_pem, "roots")
                roots = [c for c in trusted if c.issuer == c.subject]
                intermediates = [c for c in trusted if c.issuer != c.subject]
            elif identity.trust is not None and identity.trust.roots:
                roots, intermediates = list(identity.trust.roots), list(identity.trust.intermediates)
            else:
                raise VerificationUnavailable(
                    "keyless verification needs `roots` or a trustedRoot in the policy (public Fulcio roots are not fetched offline)"
                )
            intermediates += [c for c in layer_chain if c.issuer != c.subject]
            verify_chain(leaf, intermediates, roots, at)
            if identity.ct_keys is not None:
                issuer = next((c for c in [*intermediates, *roots] if c.subject == leaf.issuer), None)
                if issuer is None:
                    raise VerificationFailure("certificate transparency: the certificate's issuer is not in its chain")
                verify_embedded_scts(leaf, issuer, identity.ct_keys)
            self._check_keyless_identity(leaf, identity.keyless)
            return [_public_key(leaf)]
        # certificates attestor
        signing_certificate = identity.certificate
        if signing_certificate is None:
            if not layer.certificate_pem:
                raise VerificationFailure("certificate verification: no certificate in the policy or the signature")
            signing_certificate = _load_certificates(layer.certificate_pem)[0]
        elif layer.certificate_pem and _load_certificates(layer.certificate_pem)[0] != signing_certificate:
            raise VerificationFailure("signature certificate does not match the policy certificate")
        if identity.chain:
            roots = [c for c in identity.chain if c.issuer == c.subject]
            intermediates = [c for c in identity.chain if c.issuer != c.subject]
            verify_chain(signing_certificate, intermediates, roots, at)
        return [_public_key(signing_certificate)]

    @staticmethod
    def _check_keyless_identity(leaf: x509.Certificate, keyless: Mapping[str, Any]) -> None:
        subject, subject_re = str(keyless.get("subject") or ""), str(keyless.get("subjectRegExp") or "")
        issuer, issuer_re = str(keyless.get("issuer") or ""), str(keyless.get("issuerRegExp") or "")
        subjects = certificate_subjects(leaf)
        if (subject or subject_re) and not any(_matches(subject, subject_re, s, "subjectRegExp") for s in subjects):
            # Kyverno's wording (cpol cosign matchCertificateData): the expected value, then the SANs joined by ", "
            raise VerificationFailure(f"subject mismatch: expected {subject or subject_re}, received {', '.join(subjects)}")
        actual_issuer = certificate_issuer(leaf)
        if (issuer or issuer_re) and not _matches(issuer, issuer_re, actual_issuer, "issuerRegExp"):
            raise VerificationFailure(f"issuer mismatch: expected {issuer or issuer_re}, received {actual_issuer}")
        for name, expected in (keyless.get("additionalExtensions") or {}).items():
            oid = _ADDITIONAL_EXTENSIONS.get(str(name), str(name))
            try:
                actual = _extension_text(leaf, x509.ObjectIdentifier(oid))
            except ValueError:
                raise VerificationFailure(f"unknown certificate extension {name!r}") from None
            if actual != str(expected):
                raise VerificationFailure(f"certificate extension {name} mismatch: expected {expected!r}, got {actual!r}")

    def _check_signature_layer(self, layer: SignatureLayer, digest: str, identity: _Identity, options: SignatureOptions) -> None:
        if not layer.signature:
            raise VerificationFailure("signature layer has no signature annotation")
        entry = self._logged_entry(layer, identity)
        keys = self._signing_keys(layer, identity, entry)
        signer: PublicKey | None = None
        for key in keys:
            try:
                verify_signature(key, layer.signature, layer.payload, identity.hash_name)
                signer = key
                break
            except VerificationFailure:
                continue
        if signer is None:
            raise VerificationFailure("invalid signature when validating ASN.1 encoded signature")
        if entry is not None:
            check_entry_binds_signature(
                entry, signature=layer.signature, payload=layer.payload, certificate_pem=layer.certificate_pem, key=signer, dsse=False
            )
        try:
            payload = json.loads(layer.payload)
            critical = payload["critical"]
            signed_digest = critical["image"]["docker-manifest-digest"]
            signed_type = critical["type"]
        except (ValueError, KeyError, TypeError):
            raise VerificationFailure("signature payload is not a cosign simple-signing document") from None
        if signed_type != SIGNATURE_TYPE:
            raise VerificationFailure(f"signature payload has unexpected type {signed_type!r}")
        if signed_digest != digest:
            raise VerificationFailure(f"signature is for digest {signed_digest}, not {digest}")
        optional = payload.get("optional") or {}
        for key_name, expected in options.annotations.items():
            if str(optional.get(key_name)) != str(expected) or key_name not in optional:
                raise VerificationFailure(f"annotation mismatch: {key_name}={expected!r} not in signature payload")

    def _check_attestation_layer(self, layer: SignatureLayer, digest: str, identity: _Identity) -> dict[str, Any]:
        if layer.media_type != DSSE_MEDIA_TYPE:
            raise VerificationFailure(f"attestation layer has media type {layer.media_type!r}")
        entry = None if identity.unchecked else self._logged_entry(layer, identity)
        keys = [] if identity.unchecked else self._signing_keys(layer, identity, entry)
        statement = verify_envelope(layer.payload, keys, identity.hash_name)
        if entry is not None:
            check_entry_binds_signature(entry, signature=b"", payload=layer.payload, certificate_pem=layer.certificate_pem, key=None, dsse=True)
        if not statement_covers(statement, digest):
            raise VerificationFailure(f"attestation subject does not match digest {digest}")
        return statement


def _public_key(certificate: x509.Certificate) -> PublicKey:
    key = certificate.public_key()
    return key  # type: ignore[return-value]


def _has_identity(attestor: Mapping[str, Any]) -> bool:
    return any(isinstance(attestor.get(name), Mapping) for name in ("keys", "certificates", "keyless"))


def _summarise(problems: list[str]) -> str:
    unique = list(dict.fromkeys(problems))
    return "; ".join(unique) if unique else "no matching signatures"
