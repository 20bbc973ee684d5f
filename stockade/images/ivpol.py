"""ImageValidatingPolicy's image functions over the one cosign verifier (`stockade.images.verify.CosignVerifier`).

An ImageValidatingPolicy names its attestors in Kyverno's policies.kyverno.io shape (``cosign: {key | keyless |
certificate, ctlog, trustedRoot, source, annotations}``, ``notary: {certs}``); this module translates each cosign
attestor into the attestor/options pair `CosignVerifier` already checks, so there is a single cosign implementation;
notary attestors go to `stockade.images.notary`.  One
`IvpolImageVerifier` serves one evaluation (one admission request): it answers ``verifyImageSignatures``,
``verifyAttestationSignatures``, ``extractPayload`` and ``getImageData`` (the ``imageVerify`` CEL provider).

Semantics follow Kyverno: the verify functions count the attestors that verified (an attestor that does not verify
counts 0; images outside ``matchImageReferences`` count 0), the transparency log is required unless
``ctlog.insecureIgnoreTlog`` (offline, the Rekor key comes from ``ctlog.rekorPubKey`` or ``trustedRoot``), and
``extractPayload`` only returns statements a verification accepted.  Stricter than Kyverno: an attestor that
cannot be used (bad PEM, no trust material) or a registry that cannot be reached is an error, never a count of 0
that a lenient expression could turn into a pass.  Results are cached per resolved digest, so a tag re-pointed
after verification is verified again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from stockade.images.attest import predicate_type_uri
from stockade.images.keys import policy_certificates
from stockade.images.notary import (
    MAX_SIGNATURE_ATTEMPTS,
    NotaryVerifier,
    referrer_payload,
    referrers,
)
from stockade.images.reference import ImageReference, InvalidReferenceError, parse_reference
from stockade.images.registry import RegistryError
from stockade.images.sigstore_trust import TrustRoot, parse_trusted_root, rekor_keys_from_pem
from stockade.images.verifier_api import InvalidAttestor, SignatureOptions, VerificationFailure, VerificationUnavailable
from stockade.images.verify import CosignVerifier

_HASH_ALGORITHMS = {"": "sha256", "sha224": "sha224", "sha256": "sha256", "sha384": "sha384", "sha512": "sha512"}
_INDEX_MEDIA_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
MAX_CONFIG_BYTES = 4 << 20


class SuccessCache(Protocol):
    """Remembers successful verifications (``stockade.engine.handlers.verify_images.VerificationCache``)."""

    def get(self, key: tuple[str, ...]) -> bool: ...

    def add(self, key: tuple[str, ...]) -> None: ...


@dataclass(frozen=True)
class _Check:
    """One way an attestor may be satisfied: a CosignVerifier attestor and its options."""

    attestor: Mapping[str, Any]
    options: SignatureOptions


def _text(value: Any) -> str:
    """A StringOrExpression (``{value: ...}``; expressions are evaluated by the policy layer) or a plain string."""
    if isinstance(value, Mapping):
        return str(value.get("value") or "")
    return str(value or "")


def _certificate_transparency(cosign: Mapping[str, Any], name: str, trust: TrustRoot | None) -> dict[str, Any] | None:
    """Trusted CT log keys for keyless certificates' embedded SCTs, or None when ``ctlog.insecureIgnoreSCT``."""
    ctlog = cosign.get("ctlog") if isinstance(cosign.get("ctlog"), Mapping) else {}
    assert isinstance(ctlog, Mapping)
    if ctlog.get("insecureIgnoreSCT"):
        return None
    keys: dict[str, Any] = {}
    if ctlog.get("ctLogPubKey"):
        keys.update(rekor_keys_from_pem(str(ctlog["ctLogPubKey"]), f"attestors[{name}].cosign.ctlog.ctLogPubKey"))
    elif trust is not None:
        keys.update(trust.ct_keys)
    if not keys:
        raise VerificationUnavailable(
            f"attestor {name}: the certificate transparency (SCT) check needs ctlog.ctLogPubKey or trustedRoot ctlogs "
            "(the public Sigstore TUF root is not fetched offline); set ctlog.insecureIgnoreSCT: true to skip it"
        )
    return keys


def _transparency(cosign: Mapping[str, Any], name: str, trust: TrustRoot | None) -> dict[str, Any] | None:
    """Trusted Rekor keys, or None when the log is ignored (``ctlog.insecureIgnoreTlog``)."""
    ctlog = cosign.get("ctlog") if isinstance(cosign.get("ctlog"), Mapping) else {}
    assert isinstance(ctlog, Mapping)
    if ctlog.get("insecureIgnoreTlog"):
        return None
    keys: dict[str, Any] = {}
    if ctlog.get("rekorPubKey"):
        keys.update(rekor_keys_from_pem(str(ctlog["rekorPubKey"]), f"attestors[{name}].cosign.ctlog.rekorPubKey"))
    elif trust is not None:
        keys.update(trust.rekor_keys)
    if not keys:
        raise VerificationUnavailable(
            f"attestor {name}: the transparency log check needs ctlog.rekorPubKey or trustedRoot (the public Sigstore "
            "TUF root is not fetched offline); set ctlog.insecureIgnoreTlog: true to skip it"
        )
    return keys


def cosign_checks(attestor: Mapping[str, Any]) -> list[_Check]:
    """The CosignVerifier attestor/options pairs for one IVP cosign attestor; any one verifying satisfies it."""
    name = str(attestor.get("name") or "")
    cosign = attestor.get("cosign")
    if not isinstance(cosign, Mapping):
        raise InvalidAttestor(f"attestor {name}: has neither cosign nor notary")
    trust: TrustRoot | None = None
    trusted_root = _text(cosign.get("trustedRoot"))
    if trusted_root:
        try:
            trust = parse_trusted_root(trusted_root)
        except InvalidAttestor as exc:
            raise InvalidAttestor(f"attestor {name}: cosign.{exc}") from None
    elif isinstance(cosign.get("tuf"), Mapping):
        raise VerificationUnavailable(f"attestor {name}: cosign.tuf needs a TUF mirror, which is not contacted offline; use cosign.trustedRoot")
    rekor_keys = _transparency(cosign, name, trust)
    source = cosign.get("source") if isinstance(cosign.get("source"), Mapping) else {}
    assert isinstance(source, Mapping)
    if source.get("tagPrefix"):
        raise VerificationUnavailable(f"attestor {name}: cosign.source.tagPrefix is not supported")
    annotations = {str(k): str(v) for k, v in (cosign.get("annotations") or {}).items()}
    options = SignatureOptions(
        repository=str(source.get("repository") or ""), annotations=annotations, trust_root=trust, rekor_keys=rekor_keys
    )
    key = cosign.get("key")
    if isinstance(key, Mapping):
        algorithm = _HASH_ALGORITHMS.get(str(key.get("hashAlgorithm") or "").lower())
        if algorithm is None:
            raise InvalidAttestor(f"attestor {name}: cosign.key.hashAlgorithm {key.get('hashAlgorithm')!r} is not one of sha224, sha256, sha384, sha512")
        data, kms = _text(key.get("data")), str(key.get("kms") or "")
        if not data and not kms:
            raise InvalidAttestor(f"attestor {name}: cosign.key needs data or kms")
        keys = {"publicKeys": data} if data else {"kms": kms}
        return [_Check({"keys": {**keys, "signatureAlgorithm": algorithm}}, options)]
    certificate = cosign.get("certificate")
    if isinstance(certificate, Mapping):
        cert, chain = _text(certificate.get("cert")), _text(certificate.get("certChain"))
        if not cert and not chain:
            raise InvalidAttestor(f"attestor {name}: cosign.certificate needs cert or certChain")
        return [_Check({"certificates": {"cert": cert, "certChain": chain}}, options)]
    keyless = cosign.get("keyless")
    if isinstance(keyless, Mapping):
        options = dataclasses.replace(options, ct_keys=_certificate_transparency(cosign, name, trust))
        identities = [i for i in keyless.get("identities") or [] if isinstance(i, Mapping)]
        if not identities:
            raise InvalidAttestor(f"attestor {name}: cosign.keyless needs at least one identity")
        checks = []
        for identity in identities:
            if identity.get("subjectExpression"):
                raise InvalidAttestor(f"attestor {name}: keyless identity subjectExpression must be evaluated before verification")
            legacy = {
                key_name: str(identity.get(key_name) or "")
                for key_name in ("subject", "issuer", "subjectRegExp", "issuerRegExp")
            }
            legacy["roots"] = str(keyless.get("roots") or "")
            legacy_keyless: dict[str, Any] = {**legacy, "additionalExtensions": dict(keyless.get("additionalExtensions") or {})}
            checks.append(_Check({"keyless": legacy_keyless}, options))
        return checks
    raise InvalidAttestor(f"attestor {name}: cosign needs one of key, keyless or certificate")


def _digest_key(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:32]


@dataclass
class IvpolImageVerifier:
    """Answers the image functions of one ImageValidatingPolicy evaluation (see module docstring)."""

    verifier: CosignVerifier
    attestations: Mapping[str, Mapping[str, Any]]
    image_matches: Callable[[str], bool] = lambda _image: True
    cache: SuccessCache | None = None
    cache_scope: str = ""
    verified_images: dict[str, bool] = field(default_factory=dict)
    _digests: dict[str, str] = field(default_factory=dict)
    _statements: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    _pending: dict[tuple[str, str], list[Any]] = field(default_factory=dict)

    # -- the CEL provider ----------------------------------------------------------------------------------------
    def verify_image_signatures(self, image: str, attestors: list[Any]) -> int:
        if not self.image_matches(image):
            return 0
        digest = self.digest(image)
        key = self._cache_key("verifyImageSignatures", "", attestors, digest)
        if self.cache is not None and attestors and self.cache.get(key):
            self.verified_images[image] = True
            return len(attestors)
        count = 0
        for attestor in attestors:
            attestor = _attestor(attestor)
            if isinstance(attestor.get("notary"), Mapping):
                count += self._notary_verified(image, digest, attestor)
                continue
            for check in cosign_checks(attestor):
                try:
                    self.verifier.verify_signature(image, digest, check.attestor, check.options)
                except VerificationFailure:
                    continue
                count += 1
                break
        self._record(image, attestors, count, key)
        return count

    def verify_attestation_signatures(self, image: str, attestation: str, attestors: list[Any]) -> int:
        if not self.image_matches(image):
            return 0
        predicate_type = self._attestation_type(attestation)
        digest = self.digest(image)
        key = self._cache_key("verifyAttestationSignatures", attestation, attestors, digest)
        if self.cache is not None and attestors and self.cache.get(key):
            # the statements are read again only if extractPayload asks for them
            self._pending[(image, attestation)] = list(attestors)
            self.verified_images[image] = True
            return len(attestors)
        return self._verify_attestations(image, attestation, predicate_type, digest, attestors, key)

    def _verify_attestations(
        self, image: str, attestation: str, predicate_type: str, digest: str, attestors: list[Any], key: tuple[str, ...]
    ) -> int:
        count = 0
        kind, _, wanted = predicate_type.partition(":")
        for attestor in attestors:
            attestor = _attestor(attestor)
            if isinstance(attestor.get("notary"), Mapping):
                if kind != "referrer":
                    raise VerificationUnavailable(f"attestor {attestor.get('name')}: notary verifier only supports OCI 1.1 referrers as attestations")
                count += self._notary_referrer_verified(image, attestation, digest, wanted, attestor)
                continue
            if kind != "intoto":
                continue  # Kyverno: the cosign verifier only supports in-toto attestations, so it does not count
            for check in cosign_checks(attestor):
                try:
                    statements = self.verifier.fetch_attestations(image, digest, check.attestor, check.options, wanted)
                except VerificationFailure:
                    continue
                if not statements:
                    continue
                self._statements[(image, attestation)] = statements
                count += 1
                break
        self._record(image, attestors, count, key)
        return count

    def extract_payload(self, image: str, attestation: str) -> Any:
        predicate_type = self._attestation_type(attestation)
        pending = self._pending.pop((image, attestation), None)
        if pending is not None and (image, attestation) not in self._statements:
            digest = self.digest(image)
            key = self._cache_key("verifyAttestationSignatures", attestation, pending, digest)
            self._verify_attestations(image, attestation, predicate_type, digest, pending, key)
        statements = self._statements.get((image, attestation))
        if not statements:
            raise VerificationFailure(
                f"failed to get payload: attestation {attestation} of {image} cannot be read before verifyAttestationSignatures verified it"
            )
        return statements[0]

    def get_image_data(self, image: str) -> Mapping[str, Any]:
        reference = _reference(image)
        client = self.verifier.client
        try:
            manifest_bytes, media_type, digest = client.get_manifest(reference.with_digest(self.digest(image)))
            manifest = json.loads(manifest_bytes)
            data: dict[str, Any] = {}
            if media_type in _INDEX_MEDIA_TYPES or isinstance(manifest.get("manifests"), list):
                data["imageIndex"] = manifest
                children = [m for m in manifest.get("manifests") or [] if isinstance(m, Mapping)]
                chosen = next((m for m in children if (m.get("platform") or {}).get("architecture") == "amd64"), children[0] if children else None)
                if chosen is None:
                    raise VerificationFailure(f"image index of {image} lists no manifests")
                manifest_bytes, _, _ = client.get_manifest(reference.with_digest(str(chosen.get("digest"))))
                manifest = json.loads(manifest_bytes)
            config_descriptor = manifest.get("config") or {}
            if int(config_descriptor.get("size") or 0) > MAX_CONFIG_BYTES:
                raise VerificationFailure(f"image config of {image} is larger than {MAX_CONFIG_BYTES} bytes")
            config = json.loads(client.get_blob(reference.repository(), str(config_descriptor.get("digest")))) if config_descriptor.get("digest") else {}
        except RegistryError as exc:
            raise VerificationUnavailable(f"failed to get imagedata of {image}: {exc}") from None
        except (ValueError, TypeError, AttributeError) as exc:
            raise VerificationFailure(f"failed to get imagedata of {image}: malformed manifest: {exc}") from None
        data.update(
            {
                "image": image,
                "resolvedImage": f"{reference.name()}@{digest}",
                "registry": reference.registry,
                "repository": reference.path,
                "identifier": reference.identifier(),
                "tag": reference.tag or "",
                "digest": digest,
                "manifest": manifest,
                "config": config,
            }
        )
        return data

    # -- helpers -------------------------------------------------------------------------------------------------
    def digest(self, image: str) -> str:
        """The digest `image` resolves to, once per evaluation (so every function sees the same manifest)."""
        digest = self._digests.get(image)
        if digest is None:
            digest = self._digests[image] = self.verifier.resolve_digest(image)
        return digest

    def _attestation_type(self, attestation: str) -> str:
        """``intoto:<predicate type URI>`` or ``referrer:<artifact type>``."""
        entry = self.attestations.get(attestation)
        if entry is None:
            raise InvalidAttestor(f"attestation not found in policy: {attestation}")
        intoto = entry.get("intoto")
        if isinstance(intoto, Mapping) and intoto.get("type"):
            return "intoto:" + predicate_type_uri(str(intoto["type"]))  # cosign's short names (cyclonedx, ...)
        referrer = entry.get("referrer")
        if isinstance(referrer, Mapping) and referrer.get("type"):
            return f"referrer:{referrer['type']}"
        raise InvalidAttestor(f"attestation {attestation}: needs intoto.type or referrer.type")

    def _notary_referrer_verified(self, image: str, attestation: str, digest: str, artifact_type: str, attestor: Mapping[str, Any]) -> int:
        """1 when a referrer of `artifact_type` carries a notation signature trusted by the attestor (its content
        becomes the attestation's payload), else 0."""
        reference = _reference(image)
        notary = NotaryVerifier(self.verifier.client)
        for descriptor in referrers(self.verifier.client, reference, digest, artifact_type)[:MAX_SIGNATURE_ATTEMPTS]:
            try:
                notary.verify(reference, str(descriptor.get("digest")), self._notary_trust(attestor))
            except VerificationFailure:
                continue
            self._statements[(image, attestation)] = [referrer_payload(self.verifier.client, reference, descriptor)]
            return 1
        return 0

    @staticmethod
    def _notary_trust(attestor: Mapping[str, Any]) -> list[Any]:
        notary = attestor.get("notary")
        assert isinstance(notary, Mapping)
        field_name = f"attestor {attestor.get('name')}: notary.certs"
        certs = _text(notary.get("certs"))
        if not certs:
            raise InvalidAttestor(f"{field_name}: no certificates")
        return policy_certificates(certs, field_name)

    def _notary_verified(self, image: str, digest: str, attestor: Mapping[str, Any]) -> int:
        """1 when a notation signature of the digest verifies under the attestor's ``notary.certs``, else 0."""
        trusted = self._notary_trust(attestor)
        try:
            NotaryVerifier(self.verifier.client).verify(_reference(image), digest, trusted)
        except VerificationFailure:
            return 0
        return 1

    def _cache_key(self, function: str, qualifier: str, attestors: list[Any], digest: str) -> tuple[str, ...]:
        return ("ivpol", self.cache_scope, function, qualifier, _digest_key(attestors), digest)

    def _record(self, image: str, attestors: list[Any], count: int, key: tuple[str, ...]) -> None:
        if attestors:  # Kyverno: verified once by any call of the request stays verified
            self.verified_images[image] = self.verified_images.get(image, False) or count > 0
        if self.cache is not None and attestors and count == len(attestors):
            self.cache.add(key)


def _attestor(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidAttestor(f"attestor must be a map (an entry of `attestors`), got {type(value).__name__}")
    return value


def _reference(image: str) -> ImageReference:
    try:
        return parse_reference(image)
    except InvalidReferenceError as exc:
        raise VerificationFailure(str(exc)) from None


__all__ = ["IvpolImageVerifier", "SuccessCache", "cosign_checks"]
