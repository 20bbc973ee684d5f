"""Verifications per second against a local registry: cold (no cache, full registry round trips) and warm cache.

Usage: .venv/bin/python bench/bench_verify.py [--images 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import time

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
    args = parser.parse_args()
    key = ec.generate_private_key(ec.SECP256R1())
    with LocalRegistry() as registry, RegistryClient(**registry.client_options()) as client:
        images = []
        for index in range(args.images):
            ref = parse_reference(f"{registry.host}/bench/app{index}:v1")
            client.push_image(ref, [f"layer-{index}".encode()])
            sign_image(client, ref, key)
            images.append(str(ref))
        policy = KyvernoPolicy({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "bench", "uid": "u", "resourceVersion": "1"},
            "spec": {"rules": [{"name": "verify", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                                "verifyImages": [{"imageReferences": [f"{registry.host}/*"], "mutateDigest": False,
                                                  "attestors": [{"entries": [{"keys": {"publicKeys": public_key_pem(key).decode()}}]}]}]}]},
        })
        rule = policy.rules[0]
        engine = Engine()
        verifier = CosignVerifier(client)

        def run(cache: VerificationCache | None) -> float:
            started = time.perf_counter()
            for _ in range(args.rounds):
                for image in images:
                    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                           "spec": {"containers": [{"name": "c", "image": image}]}}
                    outcome = verify_and_patch(engine.policy_context(policy, Request(resource=pod)), rule, verifier, cache)
                    assert outcome.rule_response is not None and outcome.rule_response.status == "pass", outcome.rule_response
            return args.rounds * len(images) / (time.perf_counter() - started)

        cold = run(None)
        cache = VerificationCache()
        run(cache)  # fill
        warm = run(cache)
        print(f"images={len(images)} rounds={args.rounds}")
        print(f"cold (no cache, HEAD + .sig manifest + payload blob per image): {cold:8.1f} verifications/s")
        print(f"warm cache (HEAD to resolve the tag's digest only):            {warm:8.1f} verifications/s")


if __name__ == "__main__":
    main()
