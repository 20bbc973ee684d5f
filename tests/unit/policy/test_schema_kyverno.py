"""The kyverno.io kinds' schemas equal Kyverno v1.19.1's CRDs in structure (stockade.policy.schema.kyverno)."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.policy.schema.crd import plural_name, render_crd
from stockade.policy.schema.kyverno import GROUP, KINDS
from stockade.policy.schema.types import KindSchema
from stockade.testing.kyvernocrds import crds, deliberate_differences, schema_differences


@pytest.fixture(scope="module")
def upstream() -> dict[tuple[str, str], dict[str, Any]]:
    # scripts/test-setup.sh fetches the module; without it this fails rather than skips
    return crds()


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
def test_schema_matches_kyverno_crd(kind: KindSchema, upstream: dict[tuple[str, str], dict[str, Any]]) -> None:
    assert sorted(schema_differences(kind, upstream[(kind.group, kind.kind)])) == deliberate_differences(kind.kind)


def test_every_kyverno_io_kind_has_a_schema(upstream: dict[tuple[str, str], dict[str, Any]]) -> None:
    theirs = sorted(kind for group, kind in upstream if group == GROUP)
    assert theirs, "no kyverno.io CRDs found upstream"
    assert sorted(kind.kind for kind in KINDS) == theirs
    assert all(kind.group == GROUP for kind in KINDS)


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
def test_rendered_crd_keeps_kyverno_name_versions_and_columns(
    kind: KindSchema, upstream: dict[tuple[str, str], dict[str, Any]]
) -> None:
    theirs = upstream[(kind.group, kind.kind)]
    ours = render_crd(kind)
    assert ours["metadata"]["name"] == plural_name(kind) == theirs["metadata"]["name"]
    versions = {v["name"]: v for v in theirs["spec"]["versions"]}
    assert {v["name"]: (v["served"], v["storage"]) for v in ours["spec"]["versions"]} == {
        name: (bool(v.get("served")), bool(v.get("storage"))) for name, v in versions.items()
    }
    storage = versions[kind.storage_version]

    def facts(columns: list[dict[str, Any]]) -> list[tuple[str, str, str, int]]:
        # names are ours to spell (deploy/crds writes them in capitals); what they show is Kyverno's
        return [(c["name"].upper(), c["type"], c["jsonPath"], c.get("priority", 0)) for c in columns]

    ours_storage = next(v for v in ours["spec"]["versions"] if v["name"] == kind.storage_version)
    assert facts(ours_storage.get("additionalPrinterColumns", [])) == facts(storage.get("additionalPrinterColumns", []))
