"""The ``images`` variable: every container image of a resource, parsed, keyed by container name."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

_CONTAINER_KEYS = ("initContainers", "containers", "ephemeralContainers")


def pod_spec_paths(kind: str) -> tuple[tuple[str, ...], str] | None:
    """Where the pod spec lives for a kind, and its JSON-pointer prefix."""
    if kind == "Pod":
        return ("spec",), "/spec"
    if kind == "CronJob":
        return ("spec", "jobTemplate", "spec", "template", "spec"), "/spec/jobTemplate/spec/template/spec"
    if kind in ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "ReplicationController", "Job"):
        return ("spec", "template", "spec"), "/spec/template/spec"
    return None


def _dig(resource: dict[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = resource
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def extract_images(resource: dict[str, Any], default_registry: str = "docker.io", registry_mutation: bool = True) -> dict[str, dict[str, dict[str, Any]]]:
    """``{containers: {name: info}, initContainers: {...}, ephemeralContainers: {...}}`` for pod-bearing kinds."""
    location = pod_spec_paths(str(resource.get("kind", "")))
    if location is None:
        return {}
    path, pointer = location
    spec = _dig(resource, path)
    if not isinstance(spec, dict):
        return {}
    images: dict[str, dict[str, dict[str, Any]]] = {}
    for key in _CONTAINER_KEYS:
        containers = spec.get(key)
        if not isinstance(containers, list):
            continue
        for index, container in enumerate(containers):
            if not isinstance(container, dict) or not isinstance(container.get("image"), str):
                continue
            info = _image_info(container["image"], f"{pointer}/{key}/{index}/image", default_registry, registry_mutation)
            if info is not None:
                images.setdefault(key, {})[str(container.get("name", ""))] = info
    return images


@lru_cache(maxsize=8192)
def _image_info(image: str, pointer: str, default_registry: str, registry_mutation: bool = True) -> dict[str, Any] | None:
    """Parsed image details; cached because the same images recur across requests (callers must not mutate)."""
    from stockade.images.reference import InvalidReferenceError, image_info

    try:
        return image_info(image, pointer, default_registry, registry_mutation)
    except InvalidReferenceError:
        return None
