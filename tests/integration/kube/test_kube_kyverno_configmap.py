"""Kyverno's ConfigMap watch, now built on the controller runtime, against a real kube-apiserver: absent means the
defaults, creation, change and deletion reach the live configuration."""

from __future__ import annotations

import time
from collections.abc import Callable

from kube_objects import ConfigMaps
from stockade.controllers.kyvernoconfigwatch import ConfigMapWatch, LiveKyvernoConfig
from stockade.engine.kyvernoconfig import KyvernoConfig
from stockade.kube.connection import ApiConnection

WAIT = 30.0


def wait_until(condition: Callable[[], bool], timeout: float = WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_configmap_watch_follows_the_configmap(api_client: ApiConnection, namespace: str, configmaps: ConfigMaps) -> None:
    live = LiveKyvernoConfig(source=f"{namespace}/kyverno")
    changes: list[KyvernoConfig] = []
    live.listeners.append(changes.append)
    watch = ConfigMapWatch(api_client, live, namespace, "kyverno", watch_timeout=10)
    watch.start()
    try:
        assert watch.wait_synced(WAIT)
        assert live() == KyvernoConfig() and changes == []  # absent: the defaults, nothing to announce
        configmaps.create({"metadata": {"name": "other"}, "data": {"excludeGroups": "ignored"}})
        configmaps.create({"metadata": {"name": "kyverno"}, "data": {"excludeGroups": "system:nodes"}})
        assert wait_until(lambda: live().exclusions.groups == ("system:nodes",))
        configmaps.patch("kyverno", {"data": {"excludeGroups": "system:nodes,system:masters"}})
        assert wait_until(lambda: live().exclusions.groups == ("system:nodes", "system:masters"))
        configmaps.delete("kyverno")
        assert wait_until(lambda: live() == KyvernoConfig())
        assert len(changes) == 3  # the other ConfigMap never counted
    finally:
        watch.stop()
    assert not any(thread.is_alive() for thread in watch.informer._threads)
