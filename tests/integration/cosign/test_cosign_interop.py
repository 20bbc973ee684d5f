"""Interop with the real cosign CLI: cosign signs → stockade verifies, stockade signs → cosign verifies.

Needs `.cache/bin/cosign` (build it with `.ci/build-cosign.sh`). Missing binary is a failure, not a skip: these
tests are the only independent check that our layout and key files match cosign's.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from stockade.images.keys import generate_key_pair
from stockade.images.reference import parse_reference
from stockade.images.registry import RegistryClient
from stockade.images.verifier_api import SignatureOptions, VerificationFailure, VerificationUnavailable
from stockade.images.verify import CosignVerifier
from stockade.testing.registry import LocalRegistry

REPO_ROOT = Path(__file__).resolve().parents[3]
COSIGN = Path(os.environ.get("STOCKADE_COSIGN", REPO_ROOT / ".cache" / "bin" / "cosign"))
STOCKADE = REPO_ROOT / ".venv" / "bin" / "stockade"
PASSWORD = "interop-pass"
OPTIONS = SignatureOptions()


def cosign(*args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    if not COSIGN.exists():
        pytest.fail(f"cosign binary not found at {COSIGN}; build it with `.ci/build-cosign.sh` (go install from the Go module proxy)")
    env = {**os.environ, "COSIGN_PASSWORD": PASSWORD, "COSIGN_YES": "true", "HOME": str(cwd or Path.cwd())}
    result = subprocess.run([str(COSIGN), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        pytest.fail(f"cosign {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


REGISTRY_FLAGS = ("--allow-insecure-registry", "--allow-http-registry")


@pytest.fixture(scope="module")
def registry() -> Iterator[LocalRegistry]:
    with LocalRegistry() as local:
        yield local


@pytest.fixture(scope="module")
def client(registry: LocalRegistry) -> Iterator[RegistryClient]:
    with RegistryClient(**registry.client_options(), retries=0) as registry_client:
        yield registry_client


@pytest.fixture(scope="module")
def cosign_keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("cosign-keys")
    cosign("generate-key-pair", cwd=directory)
    return directory


def push(client: RegistryClient, registry: LocalRegistry, name: str) -> tuple[str, str]:
    ref = parse_reference(f"{registry.host}/{name}")
    return str(ref), client.push_image(ref, [name.encode()])


def test_cosign_signs_stockade_verifies(client: RegistryClient, registry: LocalRegistry, cosign_keys: Path) -> None:
    image, digest = push(client, registry, "interop/cosign-signed:v1")
    cosign("sign", "--key", "cosign.key", "--tlog-upload=false", *REGISTRY_FLAGS, f"{image.rsplit(':', 1)[0]}@{digest}", cwd=cosign_keys)
    attestor = {"keys": {"publicKeys": (cosign_keys / "cosign.pub").read_text()}}
    CosignVerifier(client).verify_signature(image, digest, attestor, OPTIONS)
    _, other_public = generate_key_pair("x")
    with pytest.raises(VerificationFailure):
        CosignVerifier(client).verify_signature(image, digest, {"keys": {"publicKeys": other_public.decode()}}, OPTIONS)


def test_cosign_attests_stockade_reads_statement(client: RegistryClient, registry: LocalRegistry, cosign_keys: Path) -> None:
    image, digest = push(client, registry, "interop/cosign-attested:v1")
    predicate = cosign_keys / "predicate.json"
    predicate.write_text('{"scanner": "trivy", "critical": 0}')
    cosign("attest", "--key", "cosign.key", "--tlog-upload=false", *REGISTRY_FLAGS, "--type", "https://example.com/scan/v1",
           "--predicate", str(predicate), f"{image.rsplit(':', 1)[0]}@{digest}", cwd=cosign_keys)
    attestor = {"keys": {"publicKeys": (cosign_keys / "cosign.pub").read_text()}}
    statements = CosignVerifier(client).fetch_attestations(image, digest, attestor, OPTIONS, "https://example.com/scan/v1")
    assert statements and statements[0]["predicate"]["scanner"] == "trivy"


def test_cosign_key_file_readable_by_stockade_sign(client: RegistryClient, registry: LocalRegistry, cosign_keys: Path, tmp_path: Path) -> None:
    image, digest = push(client, registry, "interop/stockade-signed:v1")
    env = {**os.environ, "COSIGN_PASSWORD": PASSWORD}
    signed = subprocess.run([str(STOCKADE), "sign", "--key", str(cosign_keys / "cosign.key"), image], env=env, capture_output=True, text=True, timeout=60)
    assert signed.returncode == 0, signed.stderr
    verified = cosign("verify", "--key", "cosign.pub", "--insecure-ignore-tlog", *REGISTRY_FLAGS, image, cwd=cosign_keys, check=False)
    assert verified.returncode == 0, verified.stderr
    assert digest in verified.stdout


def test_stockade_generated_keys_work_with_cosign(client: RegistryClient, registry: LocalRegistry, tmp_path: Path) -> None:
    env = {**os.environ, "COSIGN_PASSWORD": PASSWORD}
    generated = subprocess.run([str(STOCKADE), "sign", "--generate-key-pair", "--output-dir", str(tmp_path)], env=env, capture_output=True, text=True, timeout=60)
    assert generated.returncode == 0, generated.stderr
    image, digest = push(client, registry, "interop/stockade-keys:v1")
    cosign("sign", "--key", str(tmp_path / "cosign.key"), "--tlog-upload=false", *REGISTRY_FLAGS, f"{image.rsplit(':', 1)[0]}@{digest}", cwd=tmp_path)
    verified = subprocess.run([str(STOCKADE), "verify", "--key", str(tmp_path / "cosign.pub"), image], capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0, verified.stderr
    unsigned, _ = push(client, registry, "interop/unsigned:v1")
    refused = subprocess.run([str(STOCKADE), "verify", "--key", str(tmp_path / "cosign.pub"), unsigned], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "no signatures found" in refused.stderr


def test_cosign_rejects_stockade_signature_of_other_key(client: RegistryClient, registry: LocalRegistry, cosign_keys: Path, tmp_path: Path) -> None:
    image, _ = push(client, registry, "interop/wrong-key:v1")
    private_pem, _ = generate_key_pair(PASSWORD)
    (tmp_path / "other.key").write_bytes(private_pem)
    env = {**os.environ, "COSIGN_PASSWORD": PASSWORD}
    assert subprocess.run([str(STOCKADE), "sign", "--key", str(tmp_path / "other.key"), image], env=env, capture_output=True, timeout=60).returncode == 0
    verified = cosign("verify", "--key", "cosign.pub", "--insecure-ignore-tlog", *REGISTRY_FLAGS, image, cwd=cosign_keys, check=False)
    assert verified.returncode != 0


def test_registry_down_is_an_error() -> None:
    with RegistryClient(insecure_registries=["127.0.0.1:9"], retries=0, timeout=2) as dead:
        with pytest.raises(VerificationUnavailable):
            CosignVerifier(dead).verify_signature("127.0.0.1:9/app:v1", "sha256:" + "1" * 64, {"keys": {"publicKeys": generate_key_pair("x")[1].decode()}}, OPTIONS)
