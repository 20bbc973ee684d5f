"""`stockade sign` / `stockade verify`: cosign-compatible key-based signing and verification of images.

Keys are cosign's files (`cosign.key` encrypted with `COSIGN_PASSWORD`, `cosign.pub` PEM), signatures the
`sha256-<hex>.sig` layout, so images signed here verify with `cosign verify` and vice versa.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

import click

from stockade.images.auth import CredentialStore
from stockade.images.registry import RegistryClient
from stockade.errors import StockadeError


def _client(insecure: tuple[str, ...], allow_http_localhost: bool) -> RegistryClient:
    try:
        credentials = CredentialStore.from_docker_config_file()
    except Exception:  # a broken docker config must not stop anonymous use
        credentials = CredentialStore()
    return RegistryClient(credentials=credentials, insecure_registries=insecure, allow_http_localhost=allow_http_localhost)


PASSWORD_ENV = "COSIGN_PASSWORD"


class PasswordError(StockadeError, click.ClickException):
    """The password could not be read (prompts disagreed, stdin closed or not text)."""


def read_password(
    *,
    confirm: bool,
    environ: Mapping[str, str] | None = None,
    stdin: TextIO | None = None,
    prompt: Callable[[str], str] | None = None,
) -> str:
    """The private key's password, found the way cosign finds it: ``COSIGN_PASSWORD`` when set (even empty), else
    the first line of stdin when it is a pipe or file, else asked on the terminal (twice when ``confirm``)."""
    environment = os.environ if environ is None else environ
    if PASSWORD_ENV in environment:
        return environment[PASSWORD_ENV]
    stream = sys.stdin if stdin is None else stdin
    if stream is None:
        return ""
    if not stream.isatty():
        try:
            line = stream.readline()
        except (OSError, UnicodeDecodeError) as exc:
            raise PasswordError(f"cannot read the password from stdin: {exc}") from None
        return line.removesuffix("\n").removesuffix("\r")
    ask = prompt or (lambda text: str(click.prompt(text, hide_input=True, default="", show_default=False, err=True)))
    password = ask("Enter password for private key")
    if confirm and ask("Enter password for private key again") != password:
        raise PasswordError("passwords do not match")
    return password


def _annotations(values: tuple[str, ...]) -> dict[str, str]:
    result: dict[str, str] = {}
    for value in values:
        key, separator, text = value.partition("=")
        if not separator:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE", param_hint="-a/--annotations")
        result[key] = text
    return result


_insecure_option = click.option("--insecure-registry", "insecure", multiple=True, help="Registry host allowed over plain HTTP / unverified TLS.")
_localhost_option = click.option("--allow-http-localhost/--no-allow-http-localhost", default=True, show_default=True, help="Allow plain HTTP to loopback registries.")


@click.command("sign")
@click.argument("images", nargs=-1)
@click.option("--key", "key_path", type=click.Path(dir_okay=False), help="cosign private key file (cosign.key).")
@click.option("-a", "--annotations", "annotation_values", multiple=True, help="KEY=VALUE added to the signed payload.")
@click.option("--repository", default="", help="Store signatures in this repository (like COSIGN_REPOSITORY).")
@click.option("--attest-predicate", type=click.Path(exists=True, dir_okay=False), help="Attach an in-toto attestation with this predicate JSON instead of a signature.")
@click.option("--type", "predicate_type", default="custom", show_default=True, help="Predicate type (URI or cosign short name) for --attest-predicate.")
@click.option("--generate-key-pair", "generate", is_flag=True, help="Write cosign.key/cosign.pub (ECDSA P-256) into --output-dir and exit.")
@click.option("--output-dir", type=click.Path(file_okay=False), default=".", show_default=True)
@_insecure_option
@_localhost_option
def sign(
    images: tuple[str, ...],
    key_path: str | None,
    annotation_values: tuple[str, ...],
    repository: str,
    attest_predicate: str | None,
    predicate_type: str,
    generate: bool,
    output_dir: str,
    insecure: tuple[str, ...],
    allow_http_localhost: bool,
) -> None:
    """Sign IMAGES (tags are resolved to digests; the signature is bound to the digest)."""
    from stockade.images.keys import (
        KeyFileError,
        generate_key_pair,
        is_encrypted_private_key,
        load_cosign_private_key,
        write_key_pair,
    )
    from stockade.images.pem import KeyFormatError

    if generate:
        directory = Path(output_dir)
        private_path, public_path = directory / "cosign.key", directory / "cosign.pub"
        for path in (private_path, public_path):
            if os.path.lexists(path):  # checked before asking for a password; creation below is O_EXCL anyway
                raise click.ClickException(f"{path} already exists; refusing to overwrite it")
        private_pem, public_pem = generate_key_pair(read_password(confirm=True))
        try:
            write_key_pair(directory, private_pem, public_pem)
        except KeyFileError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"Private key written to {private_path}\nPublic key written to {public_path}")
        return
    if not key_path:
        raise click.UsageError("--key is required (or use --generate-key-pair)")
    if not images:
        raise click.UsageError("no image given")
    try:
        data = Path(key_path).read_bytes()
    except OSError as exc:
        raise click.ClickException(f"cannot read private key {key_path}: {exc.strerror or exc}") from None
    password = read_password(confirm=False) if is_encrypted_private_key(data) else ""
    try:
        key = load_cosign_private_key(data, password)
    except KeyFormatError as exc:
        raise click.ClickException(f"private key {key_path}: {exc}") from None
    from stockade.images.attest import attest_image
    from stockade.images.cosign import sign_image
    from stockade.images.reference import InvalidReferenceError, parse_reference
    from stockade.images.registry import RegistryError

    annotations = _annotations(annotation_values)
    with _client(insecure, allow_http_localhost) as client:
        for image in images:
            try:
                reference = parse_reference(image)
                if attest_predicate:
                    predicate = json.loads(Path(attest_predicate).read_text())
                    digest, _ = attest_image(client, reference, key, predicate_type, predicate, repository=repository)
                    click.echo(f"Attested {reference.name()}@{digest}")
                else:
                    digest, _ = sign_image(client, reference, key, annotations=annotations, repository=repository)
                    click.echo(f"Signed {reference.name()}@{digest}")
            except (InvalidReferenceError, RegistryError, ValueError) as exc:
                raise click.ClickException(f"signing {image}: {exc}") from None


@click.command("verify")
@click.argument("images", nargs=-1, required=True)
@click.option("--key", "key_ref", required=True, help="Public key file, k8s://ns/name, or KMS URI.")
@click.option("-a", "--annotations", "annotation_values", multiple=True, help="KEY=VALUE the signed payload must contain.")
@click.option("--repository", default="", help="Look for signatures in this repository.")
@click.option("--signature-algorithm", default="sha256", show_default=True)
@click.option("--attestation-type", default="", help="Verify an attestation of this predicate type instead of a signature.")
@_insecure_option
@_localhost_option
def verify(
    images: tuple[str, ...],
    key_ref: str,
    annotation_values: tuple[str, ...],
    repository: str,
    signature_algorithm: str,
    attestation_type: str,
    insecure: tuple[str, ...],
    allow_http_localhost: bool,
) -> None:
    """Verify that IMAGES carry a signature (or attestation) by KEY; exit status 1 otherwise."""
    from stockade.images.attest import predicate_type_uri
    from stockade.images.verifier_api import SignatureOptions, VerificationFailure, VerificationUnavailable
    from stockade.images.verify import CosignVerifier

    from stockade.images.keys import KeyResolver
    from stockade.images.pem import KeyFormatError

    key_text = key_ref
    if "://" not in key_ref:
        try:
            key_text = Path(key_ref).read_bytes().decode("utf-8", "replace")
        except OSError as exc:
            raise click.ClickException(f"cannot read public key {key_ref}: {exc.strerror or exc}") from None
        try:
            KeyResolver().resolve(key_text)  # a broken key file is reported before any registry is asked
        except KeyFormatError as exc:
            raise click.ClickException(f"public key {key_ref}: {exc}") from None
    attestor = {"keys": {"publicKeys": key_text, "signatureAlgorithm": signature_algorithm}}
    options = SignatureOptions(repository=repository, annotations=_annotations(annotation_values), signature_algorithm=signature_algorithm)
    failed = False
    with _client(insecure, allow_http_localhost) as client:
        verifier = CosignVerifier(client)
        for image in images:
            try:
                digest = verifier.resolve_digest(image)
                if attestation_type:
                    statements = verifier.fetch_attestations(image, digest, attestor, options, predicate_type_uri(attestation_type))
                    if not statements:
                        raise VerificationFailure(f"no attestations of type {predicate_type_uri(attestation_type)}")
                    click.echo(json.dumps(statements))
                else:
                    verifier.verify_signature(image, digest, attestor, options)
                click.echo(f"Verified {image} ({digest})", err=True)
            except (VerificationFailure, VerificationUnavailable) as exc:
                failed = True
                kind = "error" if isinstance(exc, VerificationUnavailable) else "failed"
                click.echo(f"Verification {kind} for {image}: {exc}", err=True)
    if failed:
        sys.exit(1)
