"""``x509_decode``: a PEM certificate or CSR rendered like Go's ``json.Marshal(x509.Certificate)``.

Kyverno only accepts RSA keys and replaces ``PublicKey`` with ``{"N": "<decimal modulus>", "E": <exponent>}``.
Byte fields are base64 (Go's []byte JSON), times are RFC 3339 in UTC, OIDs are integer arrays, and the Go enum
values for algorithms, key usages and extended key usages are reproduced.
"""

from __future__ import annotations

import base64
import re
from datetime import datetime, timezone
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, ExtensionOID, NameOID
from stockade.errors import StockadeError


class X509Error(StockadeError, ValueError):
    pass


_PEM_BLOCK = re.compile(
    r"-----BEGIN ([^\r\n-]*)-----\r?\n((?:[^\r\n:]+:[^\r\n]*\r?\n)*\r?\n?)?([A-Za-z0-9+/=\s]*?)-----END \1-----"
)

# crypto/x509 SignatureAlgorithm values.
_SIGNATURE_ALGORITHMS = {
    "1.2.840.113549.1.1.2": 1,  # MD2WithRSA
    "1.2.840.113549.1.1.4": 2,  # MD5WithRSA
    "1.2.840.113549.1.1.5": 3,  # SHA1WithRSA
    "1.2.840.113549.1.1.11": 4,  # SHA256WithRSA
    "1.2.840.113549.1.1.12": 5,  # SHA384WithRSA
    "1.2.840.113549.1.1.13": 6,  # SHA512WithRSA
    "1.2.840.10040.4.3": 7,  # DSAWithSHA1
    "2.16.840.1.101.3.4.3.2": 8,  # DSAWithSHA256
    "1.2.840.10045.4.1": 9,  # ECDSAWithSHA1
    "1.2.840.10045.4.3.2": 10,  # ECDSAWithSHA256
    "1.2.840.10045.4.3.3": 11,  # ECDSAWithSHA384
    "1.2.840.10045.4.3.4": 12,  # ECDSAWithSHA512
    "1.2.840.113549.1.1.10": 13,  # SHA256WithRSAPSS (hash decided by parameters; 13 is the common case)
    "1.3.101.112": 16,  # PureEd25519
}

_EXT_KEY_USAGES = {
    ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE.dotted_string: 0,
    ExtendedKeyUsageOID.SERVER_AUTH.dotted_string: 1,
    ExtendedKeyUsageOID.CLIENT_AUTH.dotted_string: 2,
    ExtendedKeyUsageOID.CODE_SIGNING.dotted_string: 3,
    ExtendedKeyUsageOID.EMAIL_PROTECTION.dotted_string: 4,
    "1.3.6.1.5.5.7.3.5": 5,  # IPSECEndSystem
    "1.3.6.1.5.5.7.3.6": 6,  # IPSECTunnel
    "1.3.6.1.5.5.7.3.7": 7,  # IPSECUser
    ExtendedKeyUsageOID.TIME_STAMPING.dotted_string: 8,
    ExtendedKeyUsageOID.OCSP_SIGNING.dotted_string: 9,
    "1.3.6.1.4.1.311.10.3.3": 10,  # MicrosoftServerGatedCrypto
    "2.16.840.1.113730.4.1": 11,  # NetscapeServerGatedCrypto
    "1.3.6.1.4.1.311.2.1.22": 12,  # MicrosoftCommercialCodeSigning
    "1.3.6.1.4.1.311.61.1.1": 13,  # MicrosoftKernelCodeSigning
}

_NAME_FIELDS = (
    ("Country", NameOID.COUNTRY_NAME),
    ("Organization", NameOID.ORGANIZATION_NAME),
    ("OrganizationalUnit", NameOID.ORGANIZATIONAL_UNIT_NAME),
    ("Locality", NameOID.LOCALITY_NAME),
    ("Province", NameOID.STATE_OR_PROVINCE_NAME),
    ("StreetAddress", NameOID.STREET_ADDRESS),
    ("PostalCode", NameOID.POSTAL_CODE),
)


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _oid(dotted: str) -> list[int]:
    return [int(part) for part in dotted.split(".")]


def _time(moment: datetime) -> str:
    utc = moment.astimezone(timezone.utc) if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


def _name(name: x509.Name) -> dict[str, Any]:
    """pkix.Name: multi-valued fields as arrays (null when absent), single ones as strings, plus Names."""
    result: dict[str, Any] = {}
    for field, oid in _NAME_FIELDS:
        values = [str(attribute.value) for attribute in name.get_attributes_for_oid(oid)]
        result[field] = values or None
    serials = name.get_attributes_for_oid(NameOID.SERIAL_NUMBER)
    common_names = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    result["SerialNumber"] = str(serials[-1].value) if serials else ""
    result["CommonName"] = str(common_names[-1].value) if common_names else ""
    result["Names"] = [
        {"Type": _oid(attribute.oid.dotted_string), "Value": str(attribute.value)} for attribute in name
    ] or None
    result["ExtraNames"] = None
    return result


def _rsa_public_key(key: Any) -> dict[str, Any]:
    if not isinstance(key, rsa.RSAPublicKey):
        raise X509Error("certificate should use rsa algorithm")
    numbers = key.public_numbers()
    return {"N": str(numbers.n), "E": numbers.e}


def _extension_bytes(extension: x509.Extension[Any]) -> bytes | None:
    value = extension.value
    if isinstance(value, x509.UnrecognizedExtension):
        return value.value
    try:
        encoded: bytes = value.public_bytes()
        return encoded
    except (AttributeError, NotImplementedError, ValueError):
        return None


def _extensions(extensions: x509.Extensions) -> list[dict[str, Any]] | None:
    rendered = [
        {"Id": _oid(extension.oid.dotted_string), "Critical": extension.critical, "Value": _b64(_extension_bytes(extension))}
        for extension in extensions
    ]
    return rendered or None


def _get_extension(extensions: x509.Extensions, oid: x509.ObjectIdentifier) -> Any:
    try:
        return extensions.get_extension_for_oid(oid).value
    except x509.ExtensionNotFound:
        return None


def _url(uri: str) -> dict[str, Any]:
    from urllib.parse import urlsplit

    parts = urlsplit(uri)
    return {
        "Scheme": parts.scheme, "Opaque": "", "User": None, "Host": parts.netloc, "Path": parts.path,
        "RawPath": "", "OmitHost": False, "ForceQuery": False, "RawQuery": parts.query, "Fragment": parts.fragment,
        "RawFragment": "",
    }


def _subject_alternative_names(extensions: x509.Extensions) -> dict[str, Any]:
    names = _get_extension(extensions, ExtensionOID.SUBJECT_ALTERNATIVE_NAME)
    if names is None:
        return {"DNSNames": None, "EmailAddresses": None, "IPAddresses": None, "URIs": None}
    return {
        "DNSNames": names.get_values_for_type(x509.DNSName) or None,
        "EmailAddresses": names.get_values_for_type(x509.RFC822Name) or None,
        "IPAddresses": [str(address) for address in names.get_values_for_type(x509.IPAddress)] or None,
        "URIs": [_url(uri) for uri in names.get_values_for_type(x509.UniformResourceIdentifier)] or None,
    }


def _key_usage(extensions: x509.Extensions) -> int:
    usage = _get_extension(extensions, ExtensionOID.KEY_USAGE)
    if usage is None:
        return 0
    bits = 0
    flags = [
        usage.digital_signature, usage.content_commitment, usage.key_encipherment, usage.data_encipherment,
        usage.key_agreement, usage.key_cert_sign, usage.crl_sign,
    ]
    for position, flag in enumerate(flags):
        if flag:
            bits |= 1 << position
    if usage.key_agreement:
        if usage.encipher_only:
            bits |= 1 << 7
        if usage.decipher_only:
            bits |= 1 << 8
    return bits


def _certificate(certificate: x509.Certificate) -> dict[str, Any]:
    public_key = certificate.public_key()
    rsa_key = _rsa_public_key(public_key)
    extensions = certificate.extensions
    ext_key_usage = _get_extension(extensions, ExtensionOID.EXTENDED_KEY_USAGE)
    known_usages = [_EXT_KEY_USAGES[oid.dotted_string] for oid in ext_key_usage or [] if oid.dotted_string in _EXT_KEY_USAGES]
    unknown_usages = [_oid(oid.dotted_string) for oid in ext_key_usage or [] if oid.dotted_string not in _EXT_KEY_USAGES]
    basic = _get_extension(extensions, ExtensionOID.BASIC_CONSTRAINTS)
    max_path_length = 0
    if basic is not None:
        max_path_length = -1 if basic.path_length is None else basic.path_length
    subject_key = _get_extension(extensions, ExtensionOID.SUBJECT_KEY_IDENTIFIER)
    authority_key = _get_extension(extensions, ExtensionOID.AUTHORITY_KEY_IDENTIFIER)
    access = _get_extension(extensions, ExtensionOID.AUTHORITY_INFORMATION_ACCESS)
    ocsp = [item.access_location.value for item in access or [] if item.access_method.dotted_string == "1.3.6.1.5.5.7.48.1"]
    issuers = [item.access_location.value for item in access or [] if item.access_method.dotted_string == "1.3.6.1.5.5.7.48.2"]
    crl = _get_extension(extensions, ExtensionOID.CRL_DISTRIBUTION_POINTS)
    crl_points = [
        name.value for point in crl or [] for name in (point.full_name or []) if isinstance(name, x509.UniformResourceIdentifier)
    ]
    policies = _get_extension(extensions, ExtensionOID.CERTIFICATE_POLICIES)
    result: dict[str, Any] = {
        "Raw": _b64(certificate.public_bytes(serialization.Encoding.DER)),
        "RawTBSCertificate": _b64(certificate.tbs_certificate_bytes),
        "RawSubjectPublicKeyInfo": _b64(public_key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)),
        "RawSubject": _b64(certificate.subject.public_bytes()),
        "RawIssuer": _b64(certificate.issuer.public_bytes()),
        "Signature": _b64(certificate.signature),
        "SignatureAlgorithm": _SIGNATURE_ALGORITHMS.get(certificate.signature_algorithm_oid.dotted_string, 0),
        "PublicKeyAlgorithm": 1,
        "PublicKey": rsa_key,
        "Version": certificate.version.value + 1,
        "SerialNumber": certificate.serial_number,
        "Issuer": _name(certificate.issuer),
        "Subject": _name(certificate.subject),
        "NotBefore": _time(certificate.not_valid_before_utc),
        "NotAfter": _time(certificate.not_valid_after_utc),
        "KeyUsage": _key_usage(extensions),
        "Extensions": _extensions(extensions),
        "ExtraExtensions": None,
        "UnhandledCriticalExtensions": None,
        "ExtKeyUsage": known_usages or None,
        "UnknownExtKeyUsage": unknown_usages or None,
        "BasicConstraintsValid": basic is not None,
        "IsCA": bool(basic.ca) if basic is not None else False,
        "MaxPathLen": max_path_length,
        "MaxPathLenZero": basic is not None and basic.path_length == 0,
        "SubjectKeyId": _b64(subject_key.digest) if subject_key is not None else None,
        "AuthorityKeyId": _b64(authority_key.key_identifier) if authority_key is not None else None,
        "OCSPServer": ocsp or None,
        "IssuingCertificateURL": issuers or None,
    }
    result.update(_subject_alternative_names(extensions))
    result.update({
        "PermittedDNSDomainsCritical": False,
        "PermittedDNSDomains": None,
        "ExcludedDNSDomains": None,
        "PermittedIPRanges": None,
        "ExcludedIPRanges": None,
        "PermittedEmailAddresses": None,
        "ExcludedEmailAddresses": None,
        "PermittedURIDomains": None,
        "ExcludedURIDomains": None,
        "CRLDistributionPoints": crl_points or None,
        "PolicyIdentifiers": [_oid(policy.policy_identifier.dotted_string) for policy in policies or []] or None,
        "Policies": [policy.policy_identifier.dotted_string for policy in policies or []] or None,
    })
    return result


def _certificate_request(request: x509.CertificateSigningRequest) -> dict[str, Any]:
    public_key = request.public_key()
    rsa_key = _rsa_public_key(public_key)
    result: dict[str, Any] = {
        "Raw": _b64(request.public_bytes(serialization.Encoding.DER)),
        "RawTBSCertificateRequest": _b64(request.tbs_certrequest_bytes),
        "RawSubjectPublicKeyInfo": _b64(public_key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)),
        "RawSubject": _b64(request.subject.public_bytes()),
        "Version": 0,
        "Signature": _b64(request.signature),
        "SignatureAlgorithm": _SIGNATURE_ALGORITHMS.get(request.signature_algorithm_oid.dotted_string, 0),
        "PublicKeyAlgorithm": 1,
        "PublicKey": rsa_key,
        "Subject": _name(request.subject),
        "Attributes": None,
        "Extensions": _extensions(request.extensions),
        "ExtraExtensions": None,
    }
    result.update(_subject_alternative_names(request.extensions))
    return result


def decode_pem(text: str) -> dict[str, Any]:
    match = _PEM_BLOCK.search(text)
    if match is None:
        raise X509Error("failed to decode PEM block")
    block_type, body = match.group(1), re.sub(r"\s+", "", match.group(3))
    try:
        der = base64.b64decode(body, validate=True)
    except ValueError:
        raise X509Error("failed to decode PEM block") from None
    if block_type == "CERTIFICATE":
        try:
            certificate = x509.load_der_x509_certificate(der)
        except ValueError as error:
            raise X509Error(f"x509: malformed certificate: {error}") from None
        if not isinstance(certificate.public_key(), rsa.RSAPublicKey):
            raise X509Error("certificate should use rsa algorithm")
        return _certificate(certificate)
    if block_type == "CERTIFICATE REQUEST":
        try:
            request = x509.load_der_x509_csr(der)
        except ValueError as error:
            raise X509Error(f"x509: malformed certificate request: {error}") from None
        if not isinstance(request.public_key(), rsa.RSAPublicKey):
            raise X509Error("certificate should use rsa algorithm")
        return _certificate_request(request)
    raise X509Error("PEM block neither contains a CERTIFICATE or CERTIFICATE REQUEST")
