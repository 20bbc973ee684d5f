"""Against a real kube-apiserver: the registrar waits for the server's watch cache (the one its own webhook informer
is fed from) after removing a webhook configuration, as after writing one."""

from __future__ import annotations

import uuid
from typing import Any

from stockade.controllers.registration import VALIDATING, WEBHOOKS_PATH, WebhookRegistrar
from stockade.kube.connection import load_api_client
from stockade.kube.client import KubeClient
from stockade.kube.errors import KubeError
from stockade.testing.apiserver import ControlPlane


class Recording:
    """The registrar's client, noting each call and how it ended (the answer's type, or the error's)."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.calls: list[tuple[str, str, dict[str, str], str]] = []

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        query = dict(kwargs.get("query") or {})
        try:
            answer = self.client.request(method, path, body, **kwargs)
        except KubeError as exc:
            self.calls.append((method, path, query, type(exc).__name__))
            raise
        self.calls.append((method, path, query, str((answer or {}).get("kind") or "") if isinstance(answer, dict) else ""))
        return answer


def test_removing_the_last_webhooks_waits_until_the_cache_no_longer_serves_the_configuration(control_plane: ControlPlane) -> None:
    name = f"stockade-wait-{uuid.uuid4().hex[:6]}"
    registrar = WebhookRegistrar(load_api_client(str(control_plane.kubeconfig)))
    recording = Recording(registrar.client)
    registrar.client = recording  # type: ignore[assignment]
    hook = {
        "name": "wait.stockade.io",
        "clientConfig": {"url": "https://127.0.0.1:1/validate"},
        "rules": [{"apiGroups": ["stockade.test"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["nothings"]}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "failurePolicy": "Ignore",
    }
    body = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": name}, "webhooks": [hook]}
    path = f"{WEBHOOKS_PATH}/{VALIDATING}/{name}"
    try:
        registrar.apply_validating(body)
        recording.calls.clear()
        registrar.apply_validating({**body, "webhooks": []})  # nothing left to serve: the configuration is deleted
    finally:
        control_plane.request("DELETE", path)
    [(_, _, _, deleted), (_, _, listed_at, _), (_, _, awaited_at, outcome)] = [c for c in recording.calls if c[0] != "GET" or c[2]]
    assert deleted == "Status" and listed_at == {"fieldSelector": f"metadata.name={name}"}
    # the read at the list's resourceVersion is answered by the cache, which holds the delete: NotFound, not a
    # "Too large resource version" timeout (which a version past the store's would give)
    assert "resourceVersion" in awaited_at and outcome == "NotFound", recording.calls
