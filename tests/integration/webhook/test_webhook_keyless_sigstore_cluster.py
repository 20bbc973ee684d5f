"""Keyless image verification in `stockade serve` behind a real kube-apiserver, against real sigstore services.

A local OIDC issuer mints ID tokens for two e-mail identities; a real Fulcio (built by .ci/build-sigstore.sh) turns
them into code-signing certificates; the real cosign signs and attests images in a local registry with them. A
ClusterPolicy (verifyImages keyless attestor) and an ImageValidatingPolicy (cosign keyless attestor) trust only
alice, with Fulcio's root (read from its API) as `roots`. Missing binaries fail the tests, they never skip.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from webhook_cluster import Kube, Serve, pod

from stockade.images.reference import parse_reference
from stockade.images.registry import RegistryClient
from stockade.testing.apiserver import ControlPlane
from stockade.testing.oidc import OidcIssuer
from stockade.testing.registry import LocalRegistry
from stockade.testing.sigstorestack import Fulcio, SigstoreUnavailable

REPO_ROOT = Path(__file__).resolve().parents[3]
COSIGN = Path(os.environ.get("STOCKADE_COSIGN", REPO_ROOT / ".cache" / "bin" / "cosign"))
REGISTRY_FLAGS = ("--allow-insecure-registry", "--allow-http-registry")
ALICE = "alice@example.test"
MALLORY = "mallory@example.test"
BUILD_TYPE = "https://example.test/build/v1"
BUILD_PREDICATE = '{"builder": {"id": "stockade-ci"}}'


@dataclass
class Stack:
    """The running services, the trust material the policies name, and the images by label."""

    issuer: OidcIssuer
    fulcio: Fulcio
    registry: LocalRegistry
    work: Path
    root_pem: str = ""
    images: dict[str, str] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)

    def cosign(self, *args: str) -> str:
        if not COSIGN.exists():
            pytest.fail(f"cosign binary not found at {COSIGN}; build it with `.ci/build-cosign.sh`")
        env = {**os.environ, "COSIGN_YES": "true", "HOME": str(self.work)}
        result = subprocess.run([str(COSIGN), *args], cwd=self.work, env=env, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            pytest.fail(f"cosign {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}\n--- fulcio\n{self.fulcio.log()}")
        return result.stdout

    def keyless(self, email: str) -> tuple[str, ...]:
        # No transparency log and no CT log run here (see the module notes in the policies), so cosign neither
        # uploads to Rekor nor checks an SCT in Fulcio's answer.
        return ("--fulcio-url", self.fulcio.url, "--identity-token", self.issuer.token(email), "--tlog-upload=false", "--insecure-skip-verify=true")

    def pinned(self, label: str) -> str:
        return f"{self.images[label].rsplit(':', 1)[0]}@{self.digests[label]}"

    def sign(self, label: str, email: str) -> None:
        self.cosign("sign", *self.keyless(email), *REGISTRY_FLAGS, self.pinned(label))

    def attest(self, label: str, email: str) -> None:
        predicate = self.work / "build.json"
        predicate.write_text(BUILD_PREDICATE)
        self.cosign("attest", *self.keyless(email), *REGISTRY_FLAGS, "--type", BUILD_TYPE, "--predicate", str(predicate), self.pinned(label))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("keyless-sigstore")
    with OidcIssuer() as issuer, LocalRegistry() as registry, RegistryClient(**registry.client_options(), retries=0) as client:
        fulcio = Fulcio(work, issuer)
        try:
            fulcio.start()
        except SigstoreUnavailable as exc:
            pytest.fail(str(exc))
        try:
            found = Stack(issuer, fulcio, registry, work, root_pem=fulcio.root_pem())
            for kind in ("legacy", "ivp"):
                for name in ("alice", "mallory", "unsigned", "unattested"):
                    label = f"{kind}-{name}"
                    found.images[label] = f"{registry.host}/{kind}/{name}:v1"
                    found.digests[label] = client.push_image(parse_reference(found.images[label]), [f"{label} layer".encode()])
                found.sign(f"{kind}-alice", ALICE)
                found.attest(f"{kind}-alice", ALICE)
                found.sign(f"{kind}-mallory", MALLORY)
                found.attest(f"{kind}-mallory", MALLORY)
                found.sign(f"{kind}-unattested", ALICE)
            yield found
        finally:
            fulcio.stop()


def _indent(text: str, spaces: int) -> str:
    return "".join(" " * spaces + line + "\n" for line in text.strip().splitlines())


def _policies(stack: Stack) -> str:
    host, issuer = stack.registry.host, stack.issuer.url
    return f"""apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: keyless-images
spec:
  webhookTimeoutSeconds: 30
  rules:
  - name: verify-keyless
    match:
      any:
      - resources:
          kinds: [Pod]
    verifyImages:
    - imageReferences: ["{host}/legacy/*"]
      failureAction: Enforce
      attestors:
      - entries:
        - keyless:
            subject: {ALICE}
            issuer: {issuer}
            roots: |-
{_indent(stack.root_pem, 14)}            # No Rekor and no CT log run in this test: the signatures carry no SET and the certificates no SCT.
            rekor:
              url: https://rekor.sigstore.dev  # required by Kyverno's validation; never contacted with ignoreTlog
              ignoreTlog: true
            ctlog:
              ignoreSCT: true
      attestations:
      - type: {BUILD_TYPE}
        attestors:
        - entries:
          - keyless:
              subject: {ALICE}
              issuer: {issuer}
              roots: |-
{_indent(stack.root_pem, 16)}              rekor:
                url: https://rekor.sigstore.dev
                ignoreTlog: true
              ctlog:
                ignoreSCT: true
        conditions:
        - all:
          - key: "{{{{ builder.id }}}}"
            operator: Equals
            value: stockade-ci
---
apiVersion: policies.kyverno.io/v1beta1
kind: ImageValidatingPolicy
metadata:
  name: keyless-ivpol
spec:
  webhookConfiguration:
    timeoutSeconds: 30
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [pods]
  matchImageReferences:
  - glob: "{host}/ivp/*"
  attestors:
  - name: alice
    cosign:
      keyless:
        identities:
        - subject: {ALICE}
          issuer: {issuer}
        roots: |
{_indent(stack.root_pem, 10)}      # No Rekor and no CT log run in this test (see the ClusterPolicy above).
      ctlog:
        insecureIgnoreTlog: true
        insecureIgnoreSCT: true
  attestations:
  - name: build
    intoto:
      type: {BUILD_TYPE}
  validations:
  - expression: >-
      images.containers.map(i, verifyImageSignatures(i, [attestors.alice])).all(e, e > 0)
    message: image is not signed by alice
  - expression: >-
      images.containers.map(i, verifyAttestationSignatures(i, attestations.build, [attestors.alice])).all(e, e > 0)
    message: image has no build attestation from alice
"""


@pytest.fixture(scope="module")
def keyless_serve(control_plane: ControlPlane, kube: Kube, stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    work = tmp_path_factory.mktemp("keyless-serve")
    policies = work / "policies"
    policies.mkdir()
    (policies / "keyless.yaml").write_text(_policies(stack))
    server = Serve(control_plane, policies, work, extra_args=("--insecure-registry", stack.registry.host, "--no-policy-reports"))
    try:
        server.wait_registered(kube)
        yield server
    finally:
        server.stop()


def _create(kube: Kube, label: str, image: str) -> tuple[int, dict[str, object], str]:
    name = f"{label}-{uuid.uuid4().hex[:6]}"
    status, body, _ = kube.request("POST", "/api/v1/namespaces/default/pods", pod(name, image=image))
    return status, body, name


@pytest.mark.parametrize("kind", ["legacy", "ivp"])
def test_image_signed_and_attested_by_the_trusted_identity_is_admitted_and_pinned(keyless_serve: Serve, kube: Kube, stack: Stack, kind: str) -> None:
    status, body, _ = _create(kube, kind, stack.images[f"{kind}-alice"])
    assert status == 201, (body, keyless_serve.log())
    spec = body["spec"]
    assert isinstance(spec, dict)
    assert spec["containers"][0]["image"] == f"{stack.images[f'{kind}-alice']}@{stack.digests[f'{kind}-alice']}"


@pytest.mark.parametrize(
    ("label", "reason"),
    [("legacy-mallory", f"subject mismatch: expected {ALICE}, received {MALLORY}"), ("legacy-unsigned", "no signatures found")],
)
def test_cluster_policy_denies_other_identities_and_unsigned_images(keyless_serve: Serve, kube: Kube, stack: Stack, label: str, reason: str) -> None:
    status, body, name = _create(kube, label, stack.images[label])
    assert status == 400, (body, keyless_serve.log())
    message = " ".join(str(body["message"]).split())  # the block message wraps long lines
    assert 'admission webhook "mutate.stockade.svc-fail" denied the request' in message
    assert f"resource Pod/default/{name} was blocked due to the following policies" in message
    assert f"keyless-images: verify-keyless: 'failed to verify image {stack.images[label]}: .attestors[0].entries[0].keyless: {reason}'" in message


@pytest.mark.parametrize(
    ("label", "reason"),
    [("ivp-mallory", "image is not signed by alice"), ("ivp-unsigned", "image is not signed by alice"), ("ivp-unattested", "image has no build attestation from alice")],
)
def test_image_validating_policy_denies_other_identities_unsigned_and_unattested_images(
    keyless_serve: Serve, kube: Kube, stack: Stack, label: str, reason: str
) -> None:
    status, body, _ = _create(kube, label, stack.images[label])
    assert status == 400, (body, keyless_serve.log())
    assert str(body["message"]) == f'admission webhook "ivpol.validate.stockade.svc-fail-finegrained-keyless-ivpol" denied the request: Policy keyless-ivpol failed: {reason}'
