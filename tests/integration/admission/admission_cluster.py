"""Helpers for the admission-feature tests: raw API calls (optionally impersonating a user) and a webhook server
running in this process, registered against the shared test apiserver.

The server runs in-process (not as `stockade serve`) so a test can attach the components under test (Event
recorder, role resolver) to it directly.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from stockade.controllers.registration import WebhookRegistrar, discovery_resolver
from stockade.kube.connection import load_api_client
from stockade.controllers.webhookconfig import WebhookTarget, build_configurations, build_policy_validation_configuration
from stockade.testing.apiserver import ControlPlane
from stockade.webhook.certs import CertificateManager
from stockade.webhook.policystore import PolicyStore
from stockade.webhook.server import ServerConfig, ServerState, WebhookServer

KUBECTL = Path(__file__).resolve().parents[3] / ".cache" / "bin" / "kubectl"
NAMESPACE = "stockade-admission-test"


def pod(name: str, labels: dict[str, str] | None = None) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}


class Api:
    """Just enough REST: status and decoded body; ``user`` impersonates (the admin token may)."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, user: str = "") -> tuple[int, dict[str, Any]]:
        status, answer, _ = self.plane.request(method, path, body, user=user)
        return status, answer

    def ensure(self, path: str, body: dict[str, Any]) -> None:
        status, answer = self.request("POST", path, body)
        assert status in (200, 201, 409), answer


class InProcessWebhook:
    """A WebhookServer on 127.0.0.1 with policies from ``policy_dir``, registered (resource webhooks and the
    policy-validation webhook) until ``stop()``, which removes every stockade webhook configuration."""

    def __init__(self, plane: ControlPlane, policy_dir: Path, workdir: Path) -> None:
        self.api_client = load_api_client(str(plane.kubeconfig))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.certs = CertificateManager(hosts=["127.0.0.1", "localhost"], directory=workdir / "certs")
        self.store = PolicyStore([str(policy_dir)])
        self.store.load()
        self.state = ServerState(store=self.store)
        self.server = WebhookServer(self.state, self.certs, ServerConfig(host="127.0.0.1", port=0, reload_interval=3600))
        self._call(self.server.start())
        self.registrar = WebhookRegistrar(self.api_client)

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=60)

    def register(self) -> None:
        target = WebhookTarget(url=f"https://127.0.0.1:{self.server.port}")
        snapshot = self.store.snapshot
        assert snapshot is not None
        mutating, validating = build_configurations(
            snapshot.policies, target, self.certs.ca_bundle, discovery_resolver(self.api_client), excluded_namespaces=["kube-system"], cel_policies=snapshot.cel_policies
        )
        self.registrar.apply(mutating, validating, build_policy_validation_configuration(target, self.certs.ca_bundle))

    def stop(self) -> None:
        try:
            self.registrar.remove_all()
        finally:
            self._call(self.server.stop())
            if self.state.events is not None:
                self.state.events.close()
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
            self.loop.close()  # its self-pipe sockets; left to the garbage collector they warn at a random moment
