"""Verification throughput and latency against a real local registry (Debian docker-registry on 127.0.0.1).

cold: no verification cache, so every verification does the registry round trips (HEAD for the tag's digest, the
`.sig` manifest, the payload blob) and the signature check; warm: the digest-bound cache answers after the HEAD.
Reports verifications/s and p50/p99 latency of single verifications for both.

Usage: .venv/bin/python bench/bench_verify.py [--images 20] [--rounds 5] [--cosign .cache/bin/cosign]
(`--cosign` signs the images with the real cosign CLI instead of Stockade's signer.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ec

from stockade.engine.engine import Engine, Request
from stockade.engine.handlers.verify_images import VerificationCache, verify_and_patch
from stockade.images.cosign import sign_image
from stockade.images.keys import public_key_pem
from stockade.images.reference import parse_reference
from stockade.images.registry import RegistryClient
from stockade.images.verify import CosignVerifier
from stockade.policy.model import KyvernoPolicy
from stockade.testing.registry import LocalRegistry


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cosign", default="", help="path of a cosign binary to sign with (default: Stockade's signer)")
    args = parser.parse_args()
    key = ec.generate_private_key(ec.SECP256R1())
    public_pem = public_key_pem(key).decode()
    with LocalRegistry() as registry, RegistryClient(**registry.client_options()) as client, tempfile.TemporaryDirectory() as keys:
        if args.cosign:
            environment = {**os.environ, "COSIGN_PASSWORD": "bench", "COSIGN_YES": "true", "HOME": keys}
            subprocess.run([args.cosign, "generate-key-pair"], cwd=keys, env=environment, check=True, capture_output=True)
            public_pem = (Path(keys) / "cosign.pub").read_text()
        images = []
        for index in range(args.images):
            ref = parse_reference(f"{registry.host}/bench/app{index}:v1")
            digest = client.push_image(ref, [f"layer-{index}".encode()])
            if args.cosign:
                subprocess.run(
                    [args.cosign, "sign", "--key", "cosign.key", "--tlog-upload=false", "--allow-http-registry", "--allow-insecure-registry", f"{ref.name()}@{digest}"],
                    cwd=keys, env=environment, check=True, capture_output=True,
                )
            else:
                sign_image(client, ref, key)
            images.append(str(ref))
        policy = KyvernoPolicy({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "bench", "uid": "u", "resourceVersion": "1"},
            "spec": {"rules": [{"name": "verify", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                                "verifyImages": [{"imageReferences": [f"{registry.host}/*"], "mutateDigest": False,
                                                  "attestors": [{"entries": [{"keys": {"publicKeys": public_pem}}]}]}]}]},
        })
        rule = policy.rules[0]
        engine = Engine()
        verifier = CosignVerifier(client)

        def run(cache: VerificationCache | None) -> tuple[float, list[float]]:
            """(verifications/s, per-verification seconds)"""
            latencies: list[float] = []
            started = time.perf_counter()
            for _ in range(args.rounds):
                for image in images:
                    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                           "spec": {"containers": [{"name": "c", "image": image}]}}
                    one = time.perf_counter()
                    outcome = verify_and_patch(engine.policy_context(policy, Request(resource=pod)), rule, verifier, cache)
                    latencies.append(time.perf_counter() - one)
                    assert outcome.rule_response is not None and outcome.rule_response.status == "pass", outcome.rule_response
            return len(latencies) / (time.perf_counter() - started), latencies

        def line(label: str, result: tuple[float, list[float]]) -> str:
            rate, latencies = result
            ordered = sorted(latencies)
            p50 = statistics.median(ordered) * 1000
            p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))] * 1000
            return f"{label:<58} {rate:8.1f} verifications/s   p50 {p50:7.2f} ms   p99 {p99:7.2f} ms"

        cold = run(None)
        cache = VerificationCache()
        run(cache)  # fill
        warm = run(cache)
        print(f"images={len(images)} rounds={args.rounds} signer={'cosign' if args.cosign else 'stockade'} verifications/run={len(cold[1])}")
        print(line("cold (no cache: HEAD + .sig manifest + payload blob)", cold))
        print(line("warm (digest-bound cache: HEAD for the tag's digest only)", warm))


if __name__ == "__main__":
    main()
