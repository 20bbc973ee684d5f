"""Fixtures of the controller-runtime tests: a fresh namespace per test on the shared apiserver, and its ConfigMaps."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kube_objects import ConfigMaps
from stockade.kube.client import KubeClient
from stockade.testing.kubeobjects import temporary_namespace


@pytest.fixture()
def namespace(kube_client: KubeClient) -> Iterator[str]:
    with temporary_namespace(kube_client, "kube") as name:
        yield name


@pytest.fixture()
def configmaps(kube_client: KubeClient, namespace: str) -> ConfigMaps:
    return ConfigMaps(kube_client, namespace)
