"""A policy change in the cluster is in force as soon as Kyverno's would be: `Ready` means the policy is enforced for
the very next request, and a deleted policy no longer denies a request made right after the delete returned.  The
poll is set to an hour here, so only the watch events can have done it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from policies_cluster import Api, Serve, eventually


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def serve(api: Api, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    server = Serve(api.plane, tmp_path_factory.mktemp("serve-events"), reload_interval=3600, extra_args=("--log-level", "debug"))
    try:
        server.wait_serving()
        yield server
    finally:
        code = server.stop()
        eventually(lambda: not api.managed_webhooks() or None, "webhook configurations removed on shutdown", details=server.log)
        assert code == 0, server.log()


def cluster_policy(name: str, namespace: str) -> str:
    return f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: {name}
spec:
  validationFailureAction: Enforce
  rules:
  - name: check-owner
    match:
      any:
      - resources:
          kinds: [Pod]
          namespaces: [{namespace}]
    validate:
      message: "label owner is required"
      pattern:
        metadata:
          labels:
            owner: "?*"
"""


def ready(api: Api, name: str) -> bool:
    status, body = api.request("GET", f"/apis/kyverno.io/v1/clusterpolicies/{name}")
    assert status == 200, body
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in (body.get("status") or {}).get("conditions") or [])


def test_ready_means_enforced_and_deleted_means_gone_at_once(api: Api, serve: Serve) -> None:
    namespace = unique("at-once")
    api.create_namespace(namespace)
    try:
        for cycle in range(3):
            name = unique(f"require-owner-{cycle}")
            api.apply(cluster_policy(name, namespace))
            eventually(lambda: ready(api, name) or None, f"{name} Ready", details=serve.log)
            status, body = api.create_pod(namespace, unique("pod"))  # at once: Ready means served
            assert status == 400 and "label owner is required" in body["message"], (cycle, status, body, serve.log())

            status, body = api.request("DELETE", f"/apis/kyverno.io/v1/clusterpolicies/{name}")
            assert status == 200, body
            deleted_at = time.monotonic()
            # No pause before the first try: in the passing runs the policy is gone already.  The apiserver's watch
            # delivery is outside our control on a loaded machine, so the deletion gets 2 s; the reload poll is an
            # hour away, so only the watch event can make this pass.
            while True:
                status, body = api.create_pod(namespace, unique("pod"))
                if status == 201 or time.monotonic() - deleted_at > 2.0:
                    break
                time.sleep(0.05)
            assert status == 201, (cycle, time.monotonic() - deleted_at, status, body.get("message"), serve.log()[-3000:])
    finally:
        assert api.kubectl("delete", "--ignore-not-found", "--wait=false", "namespace", namespace).returncode == 0
    assert "policies reloaded" in serve.log()
