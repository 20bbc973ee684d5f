"""ImageValidatingPolicy `notary` attestors against signatures made by the real notation CLI (Notary Project, JWS).

Needs `.cache/bin/notation` (`.ci/build-notation.sh`); a missing binary fails the test, it is the only independent
check of our reading of notation's envelope and referrers layout.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest

from stockade.celpolicy.testing import CelPolicyRun
from stockade.engine.match import RequestInfo
from stockade.images.reference import parse_reference
from stockade.images.registry import RegistryClient
from stockade.images.verify import CosignVerifier
from stockade.testing.registry import LocalRegistry
from stockade.testing.sigstore import FakeFulcio

REPO_ROOT = Path(__file__).resolve().parents[3]
NOTATION = Path(os.environ.get("STOCKADE_NOTATION", REPO_ROOT / ".cache" / "bin" / "notation"))
VERIFIED = [{"expression": "images.containers.map(i, verifyImageSignatures(i, [attestors.notary])).all(e, e > 0)", "message": "not signed by notary"}]


class Notation:
    """notation with its own configuration directory and a generated test signing certificate."""

    def __init__(self, home: Path) -> None:
        if not NOTATION.exists():
            pytest.fail(f"notation binary not found at {NOTATION}; build it with `.ci/build-notation.sh`")
        self.home = home
        self.env = {**os.environ, "XDG_CONFIG_HOME": str(home / "config"), "HOME": str(home)}
        self.run("cert", "generate-test", "--default", "stockade-test")
        self.certificate_pem = (home / "config" / "notation" / "localkeys" / "stockade-test.crt").read_text()

    def run(self, *args: str) -> str:
        result = subprocess.run([str(NOTATION), *args], env=self.env, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            pytest.fail(f"notation {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result.stdout


@pytest.fixture(scope="module")
def registry() -> Iterator[LocalRegistry]:
    with LocalRegistry() as local:
        yield local


@pytest.fixture(scope="module")
def client(registry: LocalRegistry) -> Iterator[RegistryClient]:
    with RegistryClient(**registry.client_options(), retries=0) as registry_client:
        yield registry_client


@pytest.fixture(scope="module")
def notation(tmp_path_factory: pytest.TempPathFactory) -> Notation:
    return Notation(tmp_path_factory.mktemp("notation"))


def _push(client: RegistryClient, registry: LocalRegistry, name: str) -> str:
    ref = parse_reference(f"{registry.host}/{name}")
    digest = client.push_image(ref, [name.encode()])
    return f"{registry.host}/{name.rsplit(':', 1)[0]}@{digest}"


def _evaluate(client: RegistryClient, certs: str, image: str) -> tuple[str, str]:
    document = {
        "apiVersion": "policies.kyverno.io/v1beta1",
        "kind": "ImageValidatingPolicy",
        "metadata": {"name": "notary"},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
            "attestors": [{"name": "notary", "notary": {"certs": {"value": certs}}}],
            "validations": VERIFIED,
        },
    }
    resource: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                                "spec": {"containers": [{"name": "c", "image": image}]}}
    run = CelPolicyRun(documents=[document], image_verifier=CosignVerifier(client))
    rules = [rule for response in run.responses(resource, "CREATE", RequestInfo(), {}) for rule in response.rules]
    assert len(rules) == 1
    return rules[0].status, rules[0].message


def test_notation_signed_image_passes(client: RegistryClient, registry: LocalRegistry, notation: Notation) -> None:
    image = _push(client, registry, "notary/signed:v1")
    notation.run("sign", "--insecure-registry", image)
    assert _evaluate(client, notation.certificate_pem, image) == ("pass", "success")


def test_unsigned_image_and_untrusted_certificate_fail(client: RegistryClient, registry: LocalRegistry, notation: Notation) -> None:
    unsigned = _push(client, registry, "notary/unsigned:v1")
    assert _evaluate(client, notation.certificate_pem, unsigned) == ("fail", "not signed by notary")
    signed = _push(client, registry, "notary/other-trust:v1")
    notation.run("sign", "--insecure-registry", signed)
    assert _evaluate(client, FakeFulcio(name="other").root_pem, signed) == ("fail", "not signed by notary")


def test_signature_of_another_image_does_not_count(client: RegistryClient, registry: LocalRegistry, notation: Notation) -> None:
    """A valid notation signature copied under the victim's referrers tag still names the other digest."""
    signed = _push(client, registry, "notary/source:v1")
    notation.run("sign", "--insecure-registry", signed)
    victim = _push(client, registry, "notary/victim:v1")
    source_repo = parse_reference(signed).repository()
    victim_repo = parse_reference(victim).repository()
    signed_digest, victim_digest = signed.split("@")[1], victim.split("@")[1]
    index_bytes, media_type, _ = client.get_manifest(source_repo.with_tag(signed_digest.replace(":", "-")))
    for entry in json.loads(index_bytes)["manifests"]:
        manifest_bytes, manifest_type, _ = client.get_manifest(source_repo.with_digest(entry["digest"]))
        manifest = json.loads(manifest_bytes)
        for descriptor in [manifest["config"], *manifest["layers"]]:
            client.push_blob(victim_repo, client.get_blob(source_repo, descriptor["digest"]))
        client.push_manifest(victim_repo.with_digest(entry["digest"]), manifest_bytes, manifest_type)
    client.push_manifest(victim_repo.with_tag(victim_digest.replace(":", "-")), index_bytes, media_type)
    assert _evaluate(client, notation.certificate_pem, victim)[0] == "fail"


def test_bad_certs_in_policy_are_an_error(client: RegistryClient, registry: LocalRegistry) -> None:
    image = _push(client, registry, "notary/bad-certs:v1")
    status, message = _evaluate(client, "-----BEGIN CERTIFICATE-----\n" + base64.b64encode(b"junk").decode() + "\n-----END CERTIFICATE-----", image)
    assert status == "error" and "notary.certs" in message


def _attach_referrer(client: RegistryClient, image: str, artifact_type: str, content: dict[str, Any]) -> str:
    """Push an artifact whose subject is `image` and list it in the referrers tag index (what `oras attach` does on
    registries without the referrers API); returns the artifact's pinned reference."""
    from stockade.images.registry import OCI_IMAGE_MANIFEST

    repo = parse_reference(image).repository()
    image_digest = image.split("@")[1]
    blob = json.dumps(content).encode()
    subject_bytes, _, _ = client.get_manifest(parse_reference(image))
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_IMAGE_MANIFEST,
        "artifactType": artifact_type,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "size": 2, "digest": client.push_blob(repo, b"{}")},
        "layers": [{"mediaType": artifact_type, "size": len(blob), "digest": client.push_blob(repo, blob)}],
        "subject": {"mediaType": OCI_IMAGE_MANIFEST, "size": len(subject_bytes), "digest": image_digest},
    }
    manifest_bytes = json.dumps(manifest).encode()
    artifact_digest = client.push_manifest(repo.with_tag("sbom-" + image_digest.split(":")[1][:12]), manifest_bytes, OCI_IMAGE_MANIFEST)
    index_tag = repo.with_tag(image_digest.replace(":", "-"))
    try:
        index = json.loads(client.get_manifest(index_tag)[0])
    except Exception:  # noqa: BLE001 - no index yet
        index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []}
    index["manifests"].append({"mediaType": OCI_IMAGE_MANIFEST, "digest": artifact_digest, "size": len(manifest_bytes), "artifactType": artifact_type})
    client.push_manifest(index_tag, json.dumps(index).encode(), "application/vnd.oci.image.index.v1+json")
    return f"{image.split('@')[0]}@{artifact_digest}"


def test_notary_signed_referrer_attestation_and_extract_payload(client: RegistryClient, registry: LocalRegistry, notation: Notation) -> None:
    """Kyverno's SBOM example: a CycloneDX referrer, signed with notation, read by extractPayload."""
    image = _push(client, registry, "notary/with-sbom:v1")
    notation.run("sign", "--insecure-registry", image)
    sbom = _attach_referrer(client, image, "application/vnd.cyclonedx+json", {"bomFormat": "CycloneDX", "specVersion": "1.5"})
    validations = [
        {"expression": "images.containers.map(i, verifyAttestationSignatures(i, attestations.sbom, [attestors.notary])).all(e, e > 0)", "message": "no signed SBOM"},
        {"expression": "images.containers.map(i, extractPayload(i, attestations.sbom).bomFormat == 'CycloneDX').all(e, e)", "message": "not CycloneDX"},
    ]
    document = {
        "apiVersion": "policies.kyverno.io/v1beta1",
        "kind": "ImageValidatingPolicy",
        "metadata": {"name": "notary"},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
            "attestors": [{"name": "notary", "notary": {"certs": {"value": notation.certificate_pem}}}],
            "attestations": [{"name": "sbom", "referrer": {"type": "application/vnd.cyclonedx+json"}}],
            "validations": validations,
        },
    }
    resource: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                                "spec": {"containers": [{"name": "c", "image": image}]}}

    def status() -> tuple[str, str]:
        run = CelPolicyRun(documents=[document], image_verifier=CosignVerifier(client))
        rules = [rule for response in run.responses(resource, "CREATE", RequestInfo(), {}) for rule in response.rules]
        return rules[0].status, rules[0].message

    assert status() == ("fail", "no signed SBOM")  # the SBOM is attached but not signed yet
    notation.run("sign", "--insecure-registry", sbom)
    assert status() == ("pass", "success")
