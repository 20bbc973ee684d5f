"""Kyverno's CRD watcher on a real API server: a policy may name a kind whose CRD comes later; creating the CRD
(and deleting it) reaches the listeners, and the webhook rules rebuilt then name the new kind only while it is served."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from kube_objects import CUSTOM_RESOURCE_DEFINITIONS
from stockade.controllers.crdwatch import CrdWatch
from stockade.controllers.registration import discovery_resolver
from stockade.controllers.webhookconfig import WebhookTarget, build_configurations
from stockade.kube.client import KubeClient
from stockade.kube.connection import ApiConnection
from stockade.kube.errors import NotFound
from stockade.policy.model import KyvernoPolicy


def crd(group: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"testresources.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "testresources", "singular": "testresource", "kind": "TestResource", "listKind": "TestResourceList"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }


def routed_resources(api_client: ApiConnection, policy: KyvernoPolicy) -> set[str]:
    """The resources our validating webhooks would be called for, as the webhook registration builds them now."""
    _mutating, validating = build_configurations(
        [policy], WebhookTarget(url="https://127.0.0.1:1/"), b"ca", discovery_resolver(api_client), excluded_namespaces=[], timeout_seconds=10
    )
    return {resource for webhook in validating.get("webhooks") or [] for rule in webhook.get("rules") or [] for resource in rule.get("resources") or []}


def test_a_crd_created_after_the_policy_reaches_the_webhook_rules_and_its_deletion_removes_it(api_client: ApiConnection, kube_client: KubeClient) -> None:
    group = f"t{uuid.uuid4().hex[:8]}.kyverno.io"
    policy = KyvernoPolicy({
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "block-replicas"},
        "spec": {"rules": [{
            "name": "replicas",
            "match": {"any": [{"resources": {"kinds": ["Deployment", "TestResource"]}}]},
            "validate": {"failureAction": "Enforce", "pattern": {"spec": {"replicas": ">0"}}},
        }]},
    })
    seen: list[set[str]] = []
    changed = threading.Event()

    def rebuild() -> None:
        seen.append(routed_resources(api_client, policy))
        changed.set()

    watch = CrdWatch(api_client, [rebuild])
    watch.start()
    try:
        before = routed_resources(api_client, policy)
        assert "testresources" not in before and "deployments" in before  # accepted, but nothing to route yet
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (watch.informer and watch.informer.has_synced()):
            time.sleep(0.1)
        kube_client.request("POST", CUSTOM_RESOURCE_DEFINITIONS, crd(group))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "testresources" not in (seen[-1] if seen else set()):
            changed.clear()
            changed.wait(1)
        assert seen and "testresources" in seen[-1], "the new kind never reached the webhook rules"
        kube_client.request("DELETE", f"{CUSTOM_RESOURCE_DEFINITIONS}/testresources.{group}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "testresources" in seen[-1]:
            changed.clear()
            changed.wait(1)
        assert "testresources" not in seen[-1], "the deleted kind stayed in the webhook rules"
    finally:
        watch.stop()
        try:
            kube_client.request("DELETE", f"{CUSTOM_RESOURCE_DEFINITIONS}/testresources.{group}")
        except NotFound:
            pass  # deleted by the test itself
