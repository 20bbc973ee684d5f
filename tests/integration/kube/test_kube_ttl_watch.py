"""Metadata-only, label-selected informers against a real kube-apiserver, and the TTL controller built on them:
expired objects go at once, a labelled object created later goes when its ttl runs out, unlabelled and unexpired
ones stay, and no resource is listed a second time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kube_objects import ConfigMaps
from stockade.controllers.clusterdata import ClusterData
from stockade.controllers.ttl import TTL_LABEL, TtlController
from stockade.kube.client import KubeClient
from stockade.kube.connection import ApiConnection
from stockade.kube.errors import NotFound
from stockade.kube.informer import Informer, RawListWatch

WAIT = 60.0
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def wait_until(condition: Callable[[], bool], timeout: float = WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def configmap(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": {"big": "x" * 1000}}


def test_metadata_only_informer_holds_labelled_objects_without_their_data(api_client: ApiConnection, namespace: str, configmaps: ConfigMaps) -> None:
    configmaps.create(configmap("labelled", {TTL_LABEL: "1h"}))
    configmaps.create(configmap("plain"))
    informer = Informer(
        RawListWatch.for_resource(api_client, "v1", "configmaps", namespace, label_selector=TTL_LABEL, metadata_only=True), name="meta", watch_timeout=10
    )
    informer.start()
    try:
        assert informer.wait_for_sync(WAIT)
        assert informer.store.keys() == [f"{namespace}/labelled"]
        stored = informer.store.get(f"{namespace}/labelled") or {}
        assert stored["kind"] == "PartialObjectMetadata" and "data" not in stored
        assert stored["metadata"]["labels"] == {TTL_LABEL: "1h"}
        configmaps.create(configmap("later", {TTL_LABEL: "2h"}))
        assert wait_until(lambda: f"{namespace}/later" in informer.store)
        assert "data" not in (informer.store.get(f"{namespace}/later") or {})
    finally:
        assert informer.stop()


def test_ttl_controller_deletes_on_expiry_from_watches(api_client: ApiConnection, configmaps: ConfigMaps) -> None:
    configmaps.create(configmap("expired", {TTL_LABEL: "2020-01-01"}))
    configmaps.create(configmap("unexpired", {TTL_LABEL: "1h"}))
    configmaps.create(configmap("unlabelled"))
    controller = TtlController(api_client, cluster_data=ClusterData(api_client, ttl_seconds=0.0))
    controller.start()
    try:
        assert wait_until(lambda: "/v1/configmaps" in controller.watched())
        assert wait_until(lambda: "expired" not in configmaps.names())
        created = time.monotonic()
        configmaps.create(configmap("short", {TTL_LABEL: "4s"}))
        assert wait_until(lambda: "short" not in configmaps.names())
        # creationTimestamp has whole seconds: gone no earlier than 3 s after we created it
        assert time.monotonic() - created >= 3.0
        assert {"unexpired", "unlabelled"} <= configmaps.names()
        informers = [informer for _, informer in controller._informers.values()]
        assert len(informers) > 10 and all(informer.relists == 1 for informer in informers)
    finally:
        controller.stop()
    assert controller.watched() == []


def test_ttl_controller_acts_only_where_the_cleanup_account_may(api_client: ApiConnection, kube_client: KubeClient, namespace: str, configmaps: ConfigMaps) -> None:
    """Kyverno's TTL manager keeps the resources its account may watch, list and delete; deletions are its own."""
    user = f"system:serviceaccount:{namespace}:cleanup"
    role = f"ttl-{namespace}"
    configmaps.create(configmap("expired", {TTL_LABEL: "2020-01-01"}))
    controller = TtlController(api_client, cluster_data=ClusterData(api_client, ttl_seconds=0.0), acting_user=user, watch_discovery=False)
    controller.start()
    try:
        controller.sync_resources()
        assert controller.watched() == []
        kube_client.request("POST", f"{RBAC}/clusterroles", {"metadata": {"name": role}, "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["watch", "list", "delete"]}]})
        kube_client.request("POST", f"{RBAC}/clusterrolebindings", {
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
        })
        assert wait_until(lambda: controller.sync_resources() or controller.watched() == ["/v1/configmaps"])
        assert wait_until(lambda: "expired" not in configmaps.names())
    finally:
        controller.stop()
        for collection in ("clusterrolebindings", "clusterroles"):
            try:
                kube_client.request("DELETE", f"{RBAC}/{collection}/{role}")
            except NotFound:
                pass  # the test failed before creating it
