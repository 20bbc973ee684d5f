"""A Kubernetes Secret as the shared certificate store of several webhook replicas.

Every replica must serve a certificate the one ``caBundle`` in the webhook configurations trusts, so the CA (and the
serving pair) live in one Secret; writes carry the resourceVersion they were based on, and a lost race surfaces as
``StoreConflict`` so the loser re-reads and adopts the winner's certificates.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from stockade.kube.client import KubeClient
from stockade.kube.errors import AlreadyExists, Conflict, NotFound
from stockade.controllers.webhookconfig import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from stockade.webhook.certs import KeyPair, StoreConflict


class SecretStore:
    def __init__(self, api_client: Any, namespace: str, name: str) -> None:
        self.client = KubeClient(api_client, timeout=None)
        self.namespace = namespace
        self.name = name
        self.path = f"{secrets_path(namespace)}/{name}"
        self._resource_version: str | None = None
        # what others (Helm, the chart) put on the Secret survives our writes: labels, annotations, type
        self._labels: dict[str, str] = {}
        self._annotations: dict[str, str] = {}
        self._type = "Opaque"

    def location(self, key: str) -> Path:
        """How errors name an item of this Secret."""
        return Path(f"secret {self.namespace}/{self.name}", key)

    def load(self) -> dict[str, bytes]:
        try:
            secret = self.client.request("GET", self.path)
        except NotFound:
            self._resource_version = None
            return {}
        metadata = secret.get("metadata") or {}
        self._resource_version = metadata.get("resourceVersion")
        self._labels = dict(metadata.get("labels") or {})
        self._annotations = dict(metadata.get("annotations") or {})
        self._type = secret.get("type") or "Opaque"
        return {key: base64.b64decode(value) for key, value in (secret.get("data") or {}).items()}

    def save(self, items: dict[str, bytes]) -> None:
        metadata: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": {**self._labels, MANAGED_BY_LABEL: MANAGED_BY_VALUE},
        }
        if self._annotations:
            metadata["annotations"] = dict(self._annotations)
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": self._type,
            "metadata": metadata,
            "data": {key: base64.b64encode(value).decode() for key, value in items.items()},
        }
        try:
            self._write(metadata, body)
        except (Conflict, AlreadyExists) as exc:
            raise StoreConflict(f"secret {self.namespace}/{self.name} changed concurrently") from exc

    def _write(self, metadata: dict[str, Any], body: dict[str, Any]) -> None:
        if self._resource_version is None:
            written = self.client.request("POST", secrets_path(self.namespace), body)
        else:
            metadata["resourceVersion"] = self._resource_version
            written = self.client.request("PUT", self.path, body)
        self._resource_version = (written.get("metadata") or {}).get("resourceVersion")


def secrets_path(namespace: str) -> str:
    """The REST path of the Secrets of ``namespace``."""
    return f"/api/v1/namespaces/{namespace}/secrets"


def kyverno_tls_secret_names(namespace: str, service: str) -> tuple[str, str]:
    """The names of Kyverno's CA Secret and serving-pair Secret for its webhook Service."""
    prefix = f"{service}.{namespace}.svc"
    return f"{prefix}.kyverno-tls-ca", f"{prefix}.kyverno-tls-pair"


class KyvernoTlsSecrets:
    """Publishes the CA and serving pair as the kubernetes.io/tls Secrets Kyverno keeps its own in
    (``<service>.<namespace>.svc.kyverno-tls-ca`` and ``...-tls-pair``), for tools and tests that read them there."""

    def __init__(self, api_client: Any, namespace: str, service: str) -> None:
        self.client = KubeClient(api_client, timeout=None)
        self.namespace = namespace
        self.service = service

    def publish(self, ca: KeyPair, serving: KeyPair) -> None:
        ca_name, pair_name = kyverno_tls_secret_names(self.namespace, self.service)
        self._upsert(ca_name, ca)
        self._upsert(pair_name, serving)

    def _upsert(self, name: str, pair: KeyPair) -> None:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": self.namespace, "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}},
            "data": {"tls.crt": base64.b64encode(pair.cert_pem).decode(), "tls.key": base64.b64encode(pair.key_pem).decode()},
        }
        try:
            self.client.request("POST", secrets_path(self.namespace), body)
        except AlreadyExists:
            self.client.request("PUT", f"{secrets_path(self.namespace)}/{name}", body)
