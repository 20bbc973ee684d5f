"""Fixtures of the policies-from-the-cluster tests; the shared control plane comes from tests/integration/conftest.py.

The CRDs are applied idempotently and left installed (other areas may use them); every policy, namespace and
webhook configuration created here is removed again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from policies_cluster import CRDS, Api, Serve, eventually

from stockade.testing.apiserver import ControlPlane

POLICY_RESOURCES = (
    "clusterpolicies.kyverno.io",
    "policies.kyverno.io",
    "validatingpolicies.policies.kyverno.io",
    "updaterequests.kyverno.io",
)


@pytest.fixture(scope="module")
def api(control_plane: ControlPlane) -> Api:
    api = Api(control_plane)
    result = api.kubectl("apply", "-f", str(CRDS))
    assert result.returncode == 0, result.stderr
    result = api.kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{name}" for name in POLICY_RESOURCES])
    assert result.returncode == 0, result.stderr
    return api


@pytest.fixture(scope="module")
def invalid_policy(api: Api) -> Iterator[str]:
    """A ClusterPolicy stored before stockade starts, so no policy-validating webhook of ours could have rejected it
    (as with policies kept from an earlier Kyverno install): a rule with two operations."""
    name = f"invalid-{uuid.uuid4().hex[:6]}"
    api.apply(
        f"""
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
          namespaces: [nowhere-{name}]
    mutate:
      patchStrategicMerge: {{metadata: {{labels: {{x: y}}}}}}
    validate:
      message: never served
      pattern:
        metadata:
          labels:
            owner: "?*"
"""
    )
    try:
        yield name
    finally:
        result = api.kubectl("delete", "--ignore-not-found", "clusterpolicy", name)
        assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def serve(api: Api, invalid_policy: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    server = Serve(api.plane, tmp_path_factory.mktemp("serve"))
    try:
        server.wait_serving()
        yield server
    finally:
        code = server.stop()
        eventually(lambda: not api.managed_webhooks() or None, "webhook configurations removed on shutdown", details=server.log)
        assert code == 0, server.log()


@pytest.fixture()
def cleanup(api: Api) -> Iterator[list[tuple[str, ...]]]:
    """Objects to delete after the test, as kubectl delete arguments (kind, name[, -n, namespace])."""
    created: list[tuple[str, ...]] = []
    yield created
    for args in reversed(created):
        result = api.kubectl("delete", "--ignore-not-found", "--wait=false", *args)
        assert result.returncode == 0, result.stderr
