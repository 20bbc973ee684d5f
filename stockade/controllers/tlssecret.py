"""A Kubernetes Secret as the shared certificate store of several webhook replicas.

Every replica must serve a certificate the one ``caBundle`` in the webhook configurations trusts, so the CA (and the
serving pair) live in one Secret; writes carry the resourceVersion they were based on, and a lost race surfaces as
``StoreConflict`` so the loser re-reads and adopts the winner's certificates.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from stockade.controllers.kubetyped import request_body
from stockade.kube.errors import AlreadyExists, Conflict, NotFound, translated
from stockade.controllers.webhookconfig import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from stockade.webhook.certs import KeyPair, StoreConflict


class SecretStore:
    def __init__(self, api_client: Any, namespace: str, name: str) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.name = name
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
            with translated(method="GET", path=f"secrets/{self.namespace}/{self.name}"):
                secret = self.core.read_namespaced_secret(self.name, self.namespace)
        except NotFound:
            self._resource_version = None
            return {}
        metadata = secret.metadata
        self._resource_version = metadata.resource_version if metadata is not None else None
        self._labels = dict((metadata.labels if metadata is not None else None) or {})
        self._annotations = dict((metadata.annotations if metadata is not None else None) or {})
        self._type = secret.type or "Opaque"
        return {key: base64.b64decode(value) for key, value in (secret.data or {}).items()}

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
            with translated(method="PUT", path=f"secrets/{self.namespace}/{self.name}"):
                self._write(metadata, body)
        except (Conflict, AlreadyExists) as exc:
            raise StoreConflict(f"secret {self.namespace}/{self.name} changed concurrently") from exc

    def _write(self, metadata: dict[str, Any], body: dict[str, Any]) -> None:
        if self._resource_version is None:
            created = self.core.create_namespaced_secret(self.namespace, request_body(body))
            self._resource_version = created.metadata.resource_version if created.metadata is not None else None
        else:
            metadata["resourceVersion"] = self._resource_version
            replaced = self.core.replace_namespaced_secret(self.name, self.namespace, request_body(body))
            self._resource_version = replaced.metadata.resource_version if replaced.metadata is not None else None


def kyverno_tls_secret_names(namespace: str, service: str) -> tuple[str, str]:
    """The names of Kyverno's CA Secret and serving-pair Secret for its webhook Service."""
    prefix = f"{service}.{namespace}.svc"
    return f"{prefix}.kyverno-tls-ca", f"{prefix}.kyverno-tls-pair"


class KyvernoTlsSecrets:
    """Publishes the CA and serving pair as the kubernetes.io/tls Secrets Kyverno keeps its own in
    (``<service>.<namespace>.svc.kyverno-tls-ca`` and ``...-tls-pair``), for tools and tests that read them there."""

    def __init__(self, api_client: Any, namespace: str, service: str) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
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
            with translated(method="POST", path=f"secrets/{self.namespace}/{name}"):
                self.core.create_namespaced_secret(self.namespace, request_body(body))
        except AlreadyExists:
            self.core.replace_namespaced_secret(name, self.namespace, request_body(body))
