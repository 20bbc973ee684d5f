"""Paged listing on the real API server: the background scan's objects are read a page at a time as they are
consumed, and a listing whose continue token expired (410 Gone) starts again without yielding an object twice or
losing one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kube_objects import ConfigMaps
from stockade.controllers.clusterdata import ClusterData
from stockade.controllers.webhookconfig import ApiResource
from stockade.kube.connection import ApiConnection
from stockade.kube.errors import Gone
from stockade.kube.informer import RawListWatch

CONFIGMAPS = ApiResource("", "v1", "configmaps", "ConfigMap")


class CountingConnection(ApiConnection):
    """A real connection to the same API server, counting the HTTP requests made through it."""

    def __init__(self, inner: ApiConnection) -> None:
        super().__init__(inner.config)
        self.calls = 0

    def request(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return super().request(*args, **kwargs)


def create_configmaps(configmaps: ConfigMaps, count: int, prefix: str = "cm") -> None:
    for index in range(count):
        configmaps.create({"metadata": {"name": f"{prefix}-{index:02d}"}, "data": {"i": str(index)}})


def test_objects_are_fetched_page_by_page_as_consumed(api_client: ApiConnection, namespace: str, configmaps: ConfigMaps) -> None:
    create_configmaps(configmaps, 7)
    counting = CountingConnection(api_client)
    objects = ClusterData(counting).iter_resource(CONFIGMAPS, namespace, page_size=2)
    first = next(objects)
    assert counting.calls == 1  # one page read, not the whole collection
    assert first["kind"] == "ConfigMap" and first["apiVersion"] == "v1"
    rest = list(objects)
    names = [first["metadata"]["name"], *(item["metadata"]["name"] for item in rest)]
    assert sorted(n for n in names if n.startswith("cm-")) == [f"cm-{i:02d}" for i in range(7)]
    assert len(names) == len(set(names))
    assert counting.calls >= 4  # 7 ConfigMaps (+ the namespace's root CA ConfigMap, if any) at 2 per page


class ExpiringOnce(RawListWatch):
    """The real lister whose second page, the first time, answers as an API server whose listing version was
    compacted away (410 Gone); the API server's watch cache keeps continue tokens alive too long to force it."""

    expired = False

    def pages(self) -> Iterator[tuple[list[dict[str, Any]], str]]:
        for number, page in enumerate(super().pages()):
            if number == 1 and not self.expired:
                self.expired = True
                raise Gone("The provided continue parameter is too old", status=410)
            yield page


def test_an_expired_continue_token_lists_again_without_repeats(api_client: ApiConnection, namespace: str, configmaps: ConfigMaps) -> None:
    create_configmaps(configmaps, 5)
    objects = ExpiringOnce(api_client, f"/api/v1/namespaces/{namespace}/configmaps", page_size=2).objects()
    seen = [next(objects)["metadata"]["name"], next(objects)["metadata"]["name"]]  # the first page
    create_configmaps(configmaps, 1, prefix="late")  # made after the listing began
    seen += [item["metadata"]["name"] for item in objects]
    assert len(seen) == len(set(seen))
    assert {f"cm-{i:02d}" for i in range(5)} | {"late-00"} <= set(seen)


def test_gone_on_the_first_page_is_not_retried(api_client: ApiConnection, namespace: str) -> None:
    class GoneAtOnce(RawListWatch):
        def pages(self) -> Iterator[tuple[list[dict[str, Any]], str]]:
            raise Gone("gone", status=410)
            yield from ()

    with pytest.raises(Gone):
        list(GoneAtOnce(api_client, f"/api/v1/namespaces/{namespace}/configmaps").objects())
