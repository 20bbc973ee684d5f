"""ImageValidatingPolicy verifications per second against a local registry, cold (fresh cache) and warm cache.

Each evaluation is one Pod with one tagged image: resolve the tag's digest (HEAD), then, cold, fetch the `.sig`
manifest and payload and check the signature; warm, the cache (keyed by the resolved digest) answers.

Usage: .venv/bin/python bench/bench_ivpol.py [--images 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import time

from cryptography.hazmat.primitives.asymmetric import ec

from stockade.celpolicy import CelPolicy, CelPolicyEvaluator
from stockade.celpolicy.imagevalidating import ImageValidatingEvaluator
from stockade.celpolicy.request import AdmissionInput
from stockade.engine.handlers.verify_images import VerificationCache
from stockade.images.cosign import sign_image
from stockade.images.keys import public_key_pem
from stockade.images.reference import parse_reference
from stockade.images.registry import RegistryClient
from stockade.images.verify import CosignVerifier
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
            ref = parse_reference(f"{registry.host}/bench/ivp{index}:v1")
            client.push_image(ref, [f"ivp-layer-{index}".encode()])
            sign_image(client, ref, key)
            images.append(str(ref))
        policy = CelPolicy({
            "apiVersion": "policies.kyverno.io/v1beta1", "kind": "ImageValidatingPolicy", "metadata": {"name": "bench"},
            "spec": {
                "validationConfigurations": {"verifyDigest": False},
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
                "attestors": [{"name": "key", "cosign": {"key": {"data": public_key_pem(key).decode()}, "ctlog": {"insecureIgnoreTlog": True}}}],
                "validations": [{"expression": "images.containers.map(i, verifyImageSignatures(i, [attestors.key])).all(e, e > 0)"}],
            },
        })
        verifier = CosignVerifier(client)

        def run(evaluator: ImageValidatingEvaluator) -> float:
            started = time.perf_counter()
            for _ in range(args.rounds):
                for image in images:
                    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                           "spec": {"containers": [{"name": "c", "image": image}]}}
                    response = evaluator.validate(policy, AdmissionInput(object=pod, operation="CREATE"))
                    assert response.rules[0].status == "pass", response.rules[0].message
            return float(args.rounds * len(images) / (time.perf_counter() - started))

        cold = run(ImageValidatingEvaluator(CelPolicyEvaluator(), verifier, VerificationCache(max_entries=0)))
        warm_evaluator = ImageValidatingEvaluator(CelPolicyEvaluator(), verifier, VerificationCache())
        run(warm_evaluator)  # fill
        warm = run(warm_evaluator)
        print(f"images={len(images)} rounds={args.rounds}")
        print(f"cold (HEAD + .sig manifest + payload blob per image): {cold:8.1f} verifications/s")
        print(f"warm cache (HEAD to resolve the tag's digest only):    {warm:8.1f} verifications/s")


if __name__ == "__main__":
    main()
