"""Our own release image end to end: built without a daemon (hack/build-image.sh), pushed to a real registry,
signed by the real cosign, verified by `stockade verify` and by a verifyImages ClusterPolicy in `stockade serve`,
and pinned by digest in the Helm chart. A missing tool fails the test, naming it: CI installs all of them."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from stockade.testing.registry import LocalRegistry

REPO_ROOT = Path(__file__).resolve().parents[3]
BIN = Path(os.environ.get("STOCKADE_PEERS_BIN", "/work/main/.cache/bin"))
COSIGN_PASSWORD = "own-image"


def tool(name: str) -> str:
    """Path of a tool, from PATH or the peers' bin directory; fails (never skips) when absent."""
    found = shutil.which(name) or (str(BIN / name) if (BIN / name).exists() else None)
    if found is None:
        pytest.fail(f"{name} not found: run scripts/test-setup.sh (apt-get install mmdebstrap umoci skopeo; .ci/build-*.sh)")
    return found


def run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(args), cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        pytest.fail(f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def admission_review(image: str) -> bytes:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
           "spec": {"containers": [{"name": "stockade", "image": image}]}}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
                                   "namespace": "default", "name": "web", "operation": "CREATE",
                                   "userInfo": {"username": "alice"}, "object": pod}}).encode()


class Serve:
    """A `stockade serve` process on 127.0.0.1 with one policy directory."""

    def __init__(self, policies: Path, cert_dir: Path, registry_host: str) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.cert_dir = cert_dir
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from stockade.cli.main import main; main()", "serve", str(policies), "--host", "127.0.0.1",
             "--port", str(self.port), "--cert-dir", str(cert_dir), "--log-level", "warning",
             "--insecure-registry", registry_host],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.process.stderr.read() if self.process.stderr else ""
            if (cert_dir / "ca.crt").exists():
                try:
                    if self.call("GET", "/health/readiness")[0] == 200:
                        return
                except OSError:
                    pass
            time.sleep(0.2)
        self.stop()
        raise AssertionError("stockade serve did not become ready")

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, dict[str, Any]]:
        context = ssl.create_default_context(cafile=str(self.cert_dir / "ca.crt"))
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=60)
        try:
            connection.request(method, path, body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()


def test_own_image_built_pushed_signed_verified_and_pinned(tmp_path: Path) -> None:
    for name in ("mmdebstrap", "umoci"):
        tool(name)
    skopeo, cosign, helm = tool("skopeo"), tool("cosign"), tool("helm")

    layout = tmp_path / "oci"
    build = run(str(REPO_ROOT / "hack" / "build-image.sh"), str(layout), "test", cwd=REPO_ROOT)
    built_digest = build.stdout.strip().splitlines()[-1]
    assert built_digest.startswith("sha256:")
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((layout / "blobs" / "sha256" / built_digest.split(":", 1)[1]).read_text())
    image_config = json.loads((layout / "blobs" / "sha256" / manifest["config"]["digest"].split(":", 1)[1]).read_text())
    assert image_config["config"]["Entrypoint"] == ["stockade"]
    assert image_config["config"]["User"] == "65532:65532"
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
    assert image_config["config"]["Labels"]["org.opencontainers.image.revision"] == commit
    assert len(manifest["layers"]) == 2 and index["manifests"]

    with LocalRegistry() as registry:
        repository = f"{registry.host}/stockade/stockade"
        digest_file = tmp_path / "pushed.digest"
        run(skopeo, "copy", "--dest-tls-verify=false", "--digestfile", str(digest_file), f"oci:{layout}:test", f"docker://{repository}:test")
        pushed = digest_file.read_text().strip()
        assert pushed == built_digest
        # an unsigned image with the same repository layout, to be denied
        run(skopeo, "copy", "--dest-tls-verify=false", f"oci:{layout}:test", f"docker://{registry.host}/stockade/unsigned:test")

        keys = tmp_path / "keys"
        keys.mkdir()
        cosign_env = {"COSIGN_PASSWORD": COSIGN_PASSWORD, "COSIGN_YES": "true", "HOME": str(keys)}
        run(cosign, "generate-key-pair", cwd=keys, env=cosign_env)
        run(cosign, "sign", "--key", "cosign.key", "--tlog-upload=false", "--allow-insecure-registry", "--allow-http-registry",
            f"{repository}@{pushed}", cwd=keys, env=cosign_env)
        public_key = (keys / "cosign.pub").read_text()

        stockade = [sys.executable, "-c", "from stockade.cli.main import main; main()"]
        verified = subprocess.run([*stockade, "verify", "--key", str(keys / "cosign.pub"), f"{repository}@{pushed}"],
                                  capture_output=True, text=True, timeout=120)
        assert verified.returncode == 0, verified.stderr
        unsigned = subprocess.run([*stockade, "verify", "--key", str(keys / "cosign.pub"), f"{registry.host}/stockade/unsigned:test"],
                                  capture_output=True, text=True, timeout=120)
        assert unsigned.returncode == 1, unsigned.stderr

        policies = tmp_path / "policies"
        policies.mkdir()
        (policies / "verify-stockade.yaml").write_text(json.dumps({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "verify-stockade"},
            "spec": {"validationFailureAction": "Enforce", "webhookTimeoutSeconds": 30, "rules": [{
                "name": "signed-release", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "verifyImages": [{"imageReferences": [f"{registry.host}/stockade/*"], "mutateDigest": False,
                                  "attestors": [{"entries": [{"keys": {"publicKeys": public_key, "rekor": {"ignoreTlog": True},
                                                                       "ctlog": {"ignoreSCT": True}}}]}]}]}]}}))
        server = Serve(policies, tmp_path / "certs", registry.host)
        try:
            status, body = server.call("POST", "/validate", admission_review(f"{repository}@{pushed}"))
            assert status == 200 and body["response"]["allowed"] is True, body
            status, body = server.call("POST", "/validate", admission_review(f"{registry.host}/stockade/unsigned:test"))
            assert status == 200 and body["response"]["allowed"] is False, body
        finally:
            server.stop()

    rendered = run(helm, "template", "stockade", str(REPO_ROOT / "deploy" / "helm" / "stockade"),
                   "--set", f"image.repository={repository}", "--set", f"image.digest={pushed}").stdout
    assert f"image: {repository}@{pushed}" in rendered
    assert f"{repository}:" not in rendered.replace(f"{repository}@", "")
