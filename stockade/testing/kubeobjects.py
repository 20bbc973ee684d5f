"""Objects the integration tests make on a real API server, over `KubeClient` raw REST (plain dicts) like the product.

Kept here because several test packages (tests/integration/kube, tests/integration/leader) need the same setup.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

from stockade.kube.client import KubeClient


@contextlib.contextmanager
def temporary_namespace(client: KubeClient, prefix: str) -> Iterator[str]:
    """A namespace of a fresh random name, deleted afterwards: the shared API server has no namespace controller, so
    a deleted namespace stays Terminating and its name must never be reused."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    client.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield name
    finally:
        client.request("DELETE", f"/api/v1/namespaces/{name}")
