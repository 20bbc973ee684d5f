"""Helpers for the webhook tests: a real webhook server on 127.0.0.1 (ephemeral port) in a background event loop, and an HTTPS client for it."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import ssl
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from stockade.webhook.certs import CertificateManager
from stockade.webhook.policystore import PolicyStore
from stockade.webhook.server import ServerConfig, ServerState, WebhookServer

POLICIES = """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: require-team-label
spec:
  validationFailureAction: Enforce
  rules:
  - name: check-team
    match:
      any:
      - resources:
          kinds: [Pod]
    validate:
      message: "label 'team' is required"
      pattern:
        metadata:
          labels:
            team: "?*"
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: disallow-latest
spec:
  validationFailureAction: Audit
  rules:
  - name: no-latest
    match:
      any:
      - resources:
          kinds: [Pod]
    validate:
      message: "using a mutable image tag e.g. 'latest' is not allowed"
      pattern:
        spec:
          containers:
          - image: "!*:latest"
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: add-managed-label
spec:
  failurePolicy: Ignore
  rules:
  - name: add-label
    match:
      any:
      - resources:
          kinds: [Pod]
    mutate:
      patchStrategicMerge:
        metadata:
          labels:
            stockade.io/managed: "true"
"""


def pod(name: str = "web", labels: dict[str, str] | None = None, image: str = "nginx:1.27") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "default"}
    if labels is not None:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": [{"name": "c", "image": image}]}}


def review(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None) -> dict[str, Any]:
    metadata = (obj or old or {}).get("metadata", {})
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": metadata.get("namespace", ""),
            "name": metadata.get("name", ""),
            "operation": operation,
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": old,
            "dryRun": False,
        },
    }


class WebhookClient:
    """Keep-alive HTTPS client that trusts the server's CA and checks the host name."""

    def __init__(self, port: int, ca_pem: bytes) -> None:
        self.port = port
        self.context = ssl.create_default_context(cadata=ca_pem.decode())
        self.connection = http.client.HTTPSConnection("127.0.0.1", port, context=self.context, timeout=10)

    def request(self, method: str, path: str, body: bytes | None = None, content_type: str = "application/json", headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        sent = {"Content-Type": content_type} if body is not None else {}
        self.connection.request(method, path, body=body, headers={**sent, **(headers or {})})
        response = self.connection.getresponse()
        return response.status, response.read()

    def post_review(self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
        status, data = self.request("POST", path, json.dumps(body).encode(), headers=headers)
        assert status == 200, data
        return json.loads(data)

    def close(self) -> None:
        self.connection.close()


class RunningServer:
    def __init__(self, server: WebhookServer, loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
        self.server = server
        self.loop = loop
        self.thread = thread

    def call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=30)

    def client(self) -> WebhookClient:
        return WebhookClient(self.server.port, self.server.certs.ca_bundle)

    def stop(self) -> None:
        self.call(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def start_server(policy_dir: Path, certs: CertificateManager, reload_interval: float = 3600.0, metrics_port: int | None = None, **config: Any) -> RunningServer:
    """``config``: further ServerConfig fields (limits, metrics_namespaces)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    state = ServerState(store=PolicyStore([str(policy_dir)]))
    server = WebhookServer(state, certs, ServerConfig(host="127.0.0.1", port=0, reload_interval=reload_interval, metrics_port=metrics_port, **config))
    running = RunningServer(server, loop, thread)
    running.call(server.start())
    return running


def closed_by_server(sock: socket.socket, drip: bytes = b"", interval: float = 0.1, within: float = 10.0) -> bool:
    """Send ``drip`` every ``interval`` (nothing when empty) until the server closes, reading and dropping whatever
    it still sends; False if still open after ``within`` seconds."""
    sock.settimeout(interval)
    give_up = time.monotonic() + within
    while time.monotonic() < give_up:
        try:
            if drip:
                sock.sendall(drip)
            if sock.recv(65536) == b"":
                return True
        except (TimeoutError, ssl.SSLWantReadError):
            continue
        except (ConnectionError, ssl.SSLError, OSError):
            return True
    return False
