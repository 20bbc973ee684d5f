"""Render a ``KindSchema`` as the CustomResourceDefinition Stockade ships (``hack/gen-crds.py``)."""

from __future__ import annotations

from typing import Any

from stockade.policy.schema.types import KindSchema, Node, free_object, obj, string

PART_OF_LABEL = {"app.kubernetes.io/part-of": "stockade"}


def plural_name(kind: KindSchema) -> str:
    return f"{kind.plural}.{kind.group}"


def object_schema(kind: KindSchema, version: str) -> Node:
    """The whole object's schema for one served version: what the API server validates and prunes with."""
    spec = kind.spec(version)
    if spec is None:
        raise KeyError(f"{kind.kind} has no version {version}")
    properties: dict[str, Node] = {"apiVersion": string(), "kind": string(), "metadata": {"type": "object"}, "spec": spec}
    # status stays open: Stockade's controllers write it and keep Kyverno's fields and their own
    properties["status"] = kind.status if kind.status is not None else free_object()
    return obj(properties, required=["spec"] if kind.spec_required else [])


def render_crd(kind: KindSchema) -> dict[str, Any]:
    versions: list[dict[str, Any]] = []
    for version in [*kind.versions, *kind.unserved]:
        served = version in kind.versions
        schema_version = version if served else kind.storage_version
        entry: dict[str, Any] = {"name": version, "served": served, "storage": version == kind.storage_version}
        entry["schema"] = {"openAPIV3Schema": object_schema(kind, schema_version)}
        if kind.printer_columns:
            entry["additionalPrinterColumns"] = [dict(column) for column in kind.printer_columns]
        if kind.status_subresource:
            entry["subresources"] = {"status": {}}
        versions.append(entry)
    names: dict[str, Any] = {"kind": kind.kind, "listKind": f"{kind.kind}List", "plural": kind.plural, "singular": kind.singular or kind.kind.lower()}
    if kind.short_names:
        names["shortNames"] = list(kind.short_names)
    if kind.categories:
        names["categories"] = list(kind.categories)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": plural_name(kind), "labels": dict(PART_OF_LABEL)},
        "spec": {"group": kind.group, "names": names, "scope": kind.scope, "versions": versions},
    }
