"""Kyverno's ``x509.decode(pem)``: a map view of an RSA certificate or CSR with Go's x509 field names."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from stockade.cel.functions import Library

if TYPE_CHECKING:
    from cryptography import x509

# cryptography is imported where a certificate is decoded: its native library stays out of the processes whose
# policies never call x509.decode.


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _name(name: x509.Name) -> dict[str, Any]:
    from cryptography import x509

    def values(oid: x509.ObjectIdentifier) -> list[str] | None:
        found = [str(attribute.value) for attribute in name.get_attributes_for_oid(oid)]
        return found or None

    common = name.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    serial = name.get_attributes_for_oid(x509.NameOID.SERIAL_NUMBER)
    return {
        "Country": values(x509.NameOID.COUNTRY_NAME),
        "Organization": values(x509.NameOID.ORGANIZATION_NAME),
        "OrganizationalUnit": values(x509.NameOID.ORGANIZATIONAL_UNIT_NAME),
        "Locality": values(x509.NameOID.LOCALITY_NAME),
        "Province": values(x509.NameOID.STATE_OR_PROVINCE_NAME),
        "StreetAddress": values(x509.NameOID.STREET_ADDRESS),
        "PostalCode": values(x509.NameOID.POSTAL_CODE),
        "SerialNumber": str(serial[0].value) if serial else "",
        "CommonName": str(common[0].value) if common else "",
    }


def _public_key(key: Any) -> dict[str, Any]:
    from cryptography.hazmat.primitives.asymmetric import rsa

    if not isinstance(key, rsa.RSAPublicKey):
        raise ValueError("certificate should use rsa algorithm")
    numbers = key.public_numbers()
    return {"N": str(numbers.n), "E": numbers.e}


def _sans(extensions: x509.Extensions) -> tuple[list[str] | None, list[str] | None, list[str] | None]:
    from cryptography import x509

    try:
        names = extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None, None, None
    dns = names.get_values_for_type(x509.DNSName) or None
    emails = names.get_values_for_type(x509.RFC822Name) or None
    ips = [str(address) for address in names.get_values_for_type(x509.IPAddress)] or None
    return dns, emails, ips


def _decode(pem: str) -> dict[str, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    data = pem.encode()
    if b"-----BEGIN CERTIFICATE-----" in data:
        certificate = x509.load_pem_x509_certificate(data)
        dns, emails, ips = _sans(certificate.extensions)
        try:
            constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints)
            is_ca, basic_valid = constraints.value.ca, True
            max_path = constraints.value.path_length if constraints.value.path_length is not None else -1
        except x509.ExtensionNotFound:
            is_ca, basic_valid, max_path = False, False, -1
        return {
            "Raw": _b64(certificate.public_bytes(serialization.Encoding.DER)),
            "RawTBSCertificate": _b64(certificate.tbs_certificate_bytes),
            "Signature": _b64(certificate.signature),
            "PublicKey": _public_key(certificate.public_key()),
            "SerialNumber": certificate.serial_number,
            "Issuer": _name(certificate.issuer),
            "Subject": _name(certificate.subject),
            "NotBefore": certificate.not_valid_before_utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "NotAfter": certificate.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "BasicConstraintsValid": basic_valid,
            "IsCA": is_ca,
            "MaxPathLen": max_path,
            "DNSNames": dns,
            "EmailAddresses": emails,
            "IPAddresses": ips,
        }
    if b"-----BEGIN CERTIFICATE REQUEST-----" in data:
        request = x509.load_pem_x509_csr(data)
        dns, emails, ips = _sans(request.extensions)
        return {
            "Raw": _b64(request.public_bytes(serialization.Encoding.DER)),
            "RawTBSCertificateRequest": _b64(request.tbs_certrequest_bytes),
            "Signature": _b64(request.signature),
            "PublicKey": _public_key(request.public_key()),
            "Subject": _name(request.subject),
            "DNSNames": dns,
            "EmailAddresses": emails,
            "IPAddresses": ips,
        }
    raise ValueError("failed to decode PEM block" if b"-----BEGIN" not in data
                     else "PEM block neither contains a CERTIFICATE or CERTIFICATE REQUEST")


def build_x509() -> Library:
    library = Library("kyverno.x509")
    library.add("x509.decode", ("string",), "dyn", _decode)
    return library
