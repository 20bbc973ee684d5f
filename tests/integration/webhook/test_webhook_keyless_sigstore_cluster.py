"""Keyless image verification in `stockade serve` behind a real kube-apiserver, against real sigstore services.

A local OIDC issuer mints ID tokens for two e-mail identities; a real Fulcio (built by .ci/build-sigstore.sh) turns
them into code-signing certificates, logging each in a real CT log (TesseraCT) so they embed SCTs; the real cosign
signs and attests images in a local registry with them, uploading to a real Rekor (on Trillian and PostgreSQL) and
checking its SCT and SET answers itself. A ClusterPolicy (verifyImages keyless attestor) and an ImageValidatingPolicy
(cosign keyless attestor) trust only alice, with Fulcio's root (read from its API) as `roots`, the CT log's key for
the SCTs and Rekor's key for the SETs. Missing binaries fail the tests, they never skip.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from webhook_cluster import Kube, Serve, pod

from stockade.images.reference import parse_reference
from stockade.images.registry import RegistryClient
from stockade.testing.apiserver import ControlPlane
from stockade.testing.oidc import OidcIssuer
from stockade.testing.registry import LocalRegistry
from stockade.testing.sigstorestack import CtLog, Fulcio, Rekor, SigstoreUnavailable

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
    ct_log: CtLog
    rekor: Rekor
    registry: LocalRegistry
    work: Path
    root_pem: str = ""
    images: dict[str, str] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)

    def cosign(self, *args: str) -> str:
        if not COSIGN.exists():
            pytest.fail(f"cosign binary not found at {COSIGN}; build it with `.ci/build-cosign.sh`")
        # cosign checks the SCT in Fulcio's certificate and the SET in Rekor's answer with these keys
        rekor_key = self.work / "rekor-public.pem"
        rekor_key.write_text(self.rekor.public_key_pem)
        env = {
            **os.environ, "COSIGN_YES": "true", "HOME": str(self.work),
            "SIGSTORE_CT_LOG_PUBLIC_KEY_FILE": str(self.ct_log.public_key_path), "SIGSTORE_REKOR_PUBLIC_KEY": str(rekor_key),
        }
        result = subprocess.run([str(COSIGN), *args], cwd=self.work, env=env, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            pytest.fail(f"cosign {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}\n--- fulcio\n{self.fulcio.log()}\n{self.rekor.logs()}")
        return result.stdout

    def keyless(self, email: str, logged: bool = True) -> tuple[str, ...]:
        tlog = ("--rekor-url", self.rekor.url) if logged else ("--tlog-upload=false",)
        return ("--fulcio-url", self.fulcio.url, "--identity-token", self.issuer.token(email), *tlog)

    def pinned(self, label: str) -> str:
        return f"{self.images[label].rsplit(':', 1)[0]}@{self.digests[label]}"

    def sign(self, label: str, email: str, logged: bool = True) -> None:
        self.cosign("sign", *self.keyless(email, logged), *REGISTRY_FLAGS, self.pinned(label))

    def attest(self, label: str, email: str) -> None:
        predicate = self.work / "build.json"
        predicate.write_text(BUILD_PREDICATE)
        self.cosign("attest", *self.keyless(email), *REGISTRY_FLAGS, "--type", BUILD_TYPE, "--predicate", str(predicate), self.pinned(label))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("keyless-sigstore")
    with OidcIssuer() as issuer, LocalRegistry() as registry, RegistryClient(**registry.client_options(), retries=0) as client:
        fulcio = Fulcio(work, issuer)
        ct_log = CtLog(work, fulcio.ca.root_pem)
        rekor = Rekor(work)
        try:
            ct_log.start()
            fulcio.start(ct_log)
            rekor.start()
        except SigstoreUnavailable as exc:
            for service in (rekor, fulcio, ct_log):
                service.stop()
            pytest.fail(str(exc))
        try:
            found = Stack(issuer, fulcio, ct_log, rekor, registry, work, root_pem=fulcio.root_pem())
            for kind in ("legacy", "ivp"):
                for name in ("alice", "mallory", "unsigned", "unattested", "unlogged", "wrongct"):
                    label = f"{kind}-{name}"
                    # the image whose policies trust another CT log sits outside the main policies' references
                    path = f"wrongct-{kind}/image" if name == "wrongct" else f"{kind}/{name}"
                    found.images[label] = f"{registry.host}/{path}:v1"
                    found.digests[label] = client.push_image(parse_reference(found.images[label]), [f"{label} layer".encode()])
                for name, email in (("alice", ALICE), ("mallory", MALLORY)):
                    found.sign(f"{kind}-{name}", email)
                    found.attest(f"{kind}-{name}", email)
                found.sign(f"{kind}-unattested", ALICE)
                found.sign(f"{kind}-unlogged", ALICE, logged=False)
                found.sign(f"{kind}-wrongct", ALICE)
            yield found
        finally:
            for service in (rekor, fulcio, ct_log):
                service.stop()


def _indent(text: str, spaces: int) -> str:
    return "".join(" " * spaces + line + "\n" for line in text.strip().splitlines())


def _public_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def _legacy_keyless(stack: Stack, ct_key: str, indent: int) -> str:
    pad = " " * indent
    return (
        f"{pad}- entries:\n{pad}  - keyless:\n{pad}      subject: {ALICE}\n{pad}      issuer: {stack.issuer.url}\n"
        f"{pad}      roots: |-\n{_indent(stack.root_pem, indent + 8)}"
        f"{pad}      rekor:\n{pad}        url: {stack.rekor.url}\n{pad}        pubkey: |-\n{_indent(stack.rekor.public_key_pem, indent + 10)}"
        f"{pad}      ctlog:\n{pad}        pubkey: |-\n{_indent(ct_key, indent + 10)}"
    )


def _cluster_policy(stack: Stack, name: str, rule: str, images: str, ct_key: str) -> str:
    return f"""apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: {name}
spec:
  webhookTimeoutSeconds: 30
  rules:
  - name: {rule}
    match:
      any:
      - resources:
          kinds: [Pod]
    verifyImages:
    - imageReferences: ["{images}"]
      failureAction: Enforce
      attestors:
{_legacy_keyless(stack, ct_key, 6)}      attestations:
      - type: {BUILD_TYPE}
        attestors:
{_legacy_keyless(stack, ct_key, 8)}        conditions:
        - all:
          - key: "{{{{ builder.id }}}}"
            operator: Equals
            value: stockade-ci
"""


def _image_validating_policy(stack: Stack, name: str, images: str, ct_key: str) -> str:
    return f"""apiVersion: policies.kyverno.io/v1beta1
kind: ImageValidatingPolicy
metadata:
  name: {name}
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
  - glob: "{images}"
  attestors:
  - name: alice
    cosign:
      keyless:
        identities:
        - subject: {ALICE}
          issuer: {stack.issuer.url}
        roots: |
{_indent(stack.root_pem, 10)}      ctlog:
        url: {stack.rekor.url}
        rekorPubKey: |
{_indent(stack.rekor.public_key_pem, 10)}        ctLogPubKey: |
{_indent(ct_key, 10)}  attestations:
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


def _policies(stack: Stack) -> str:
    """Policies trusting the stack's CT log, and policies for the wrongct-* images trusting another CT log key."""
    host, ct_key, other_ct_key = stack.registry.host, stack.ct_log.public_key_pem, _public_pem(ec.generate_private_key(ec.SECP256R1()))
    return "---\n".join([
        _cluster_policy(stack, "keyless-images", "verify-keyless", f"{host}/legacy/*", ct_key),
        _cluster_policy(stack, "keyless-other-ctlog", "verify-other-ctlog", f"{host}/wrongct-legacy/*", other_ct_key),
        _image_validating_policy(stack, "keyless-ivpol", f"{host}/ivp/*", ct_key),
        _image_validating_policy(stack, "keyless-ivpol-other-ctlog", f"{host}/wrongct-ivp/*", other_ct_key),
    ])


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


SIGNATURE_FAILED = "'failed to verify image {image}: .attestors[0].entries[0].keyless: "


@pytest.mark.parametrize(
    ("label", "policy", "rule", "expected"),
    [
        ("legacy-mallory", "keyless-images", "verify-keyless", SIGNATURE_FAILED + f"subject mismatch: expected {ALICE}, received {MALLORY}'"),
        ("legacy-unsigned", "keyless-images", "verify-keyless", SIGNATURE_FAILED + "no signatures found'"),
        # Kyverno's imageverifier wording for a failed attestations entry (the cause after "error:" is ours)
        ("legacy-unattested", "keyless-images", "verify-keyless", "'image attestations verification failed, verifiedCount: 0, requiredCount: 1, error: "),
        # cosign's own causes here depend on online Rekor/TUF look-ups; ours name the missing Rekor entry and the SCT
        ("legacy-unlogged", "keyless-images", "verify-keyless", SIGNATURE_FAILED + "signature has no Rekor bundle, and the transparency log is required'"),
        ("legacy-wrongct", "keyless-other-ctlog", "verify-other-ctlog", SIGNATURE_FAILED + "no embedded SCT is from a trusted CT log'"),
    ],
)
def test_cluster_policy_denies_other_identities_unsigned_unattested_unlogged_and_untrusted_ct(
    keyless_serve: Serve, kube: Kube, stack: Stack, label: str, policy: str, rule: str, expected: str
) -> None:
    status, body, name = _create(kube, label, stack.images[label])
    assert status == 400, (body, keyless_serve.log())
    message = " ".join(str(body["message"]).split())  # the block message wraps long lines
    assert 'admission webhook "mutate.stockade.svc-fail" denied the request' in message
    assert f"resource Pod/default/{name} was blocked due to the following policies" in message
    assert f"{policy}: {rule}: " + expected.format(image=stack.images[label]) in message


@pytest.mark.parametrize(
    ("label", "policy", "reason"),
    [
        ("ivp-mallory", "keyless-ivpol", "image is not signed by alice"),
        ("ivp-unsigned", "keyless-ivpol", "image is not signed by alice"),
        ("ivp-unattested", "keyless-ivpol", "image has no build attestation from alice"),
        ("ivp-unlogged", "keyless-ivpol", "image is not signed by alice"),
        ("ivp-wrongct", "keyless-ivpol-other-ctlog", "image is not signed by alice"),
    ],
)
def test_image_validating_policy_denies_other_identities_unsigned_unattested_unlogged_and_untrusted_ct(
    keyless_serve: Serve, kube: Kube, stack: Stack, label: str, policy: str, reason: str
) -> None:
    status, body, _ = _create(kube, label, stack.images[label])
    assert status == 400, (body, keyless_serve.log())
    assert str(body["message"]) == f'admission webhook "ivpol.validate.stockade.svc-fail-finegrained-{policy}" denied the request: Policy {policy} failed: {reason}'
