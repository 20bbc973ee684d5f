"""The Flux kinds' schemas equal the CRDs Stockade ships in deploy/flux/crds.yaml."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from stockade.policy.schema.crd import object_schema, render_crd
from stockade.policy.schema.flux import KINDS
from stockade.policy.schema.types import KindSchema
from stockade.testing.kyvernocrds import differences

CRDS_FILE = Path(__file__).resolve().parents[3] / "deploy" / "flux" / "crds.yaml"


def shipped() -> dict[tuple[str, str], dict[str, Any]]:
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for document in yaml.safe_load_all(CRDS_FILE.read_text()):
        if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
            found[(document["spec"]["group"], document["spec"]["names"]["kind"])] = document
    return found


SHIPPED = shipped()


def test_every_shipped_flux_crd_has_a_kind_schema() -> None:
    assert sorted(SHIPPED) == sorted((kind.group, kind.kind) for kind in KINDS)


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
def test_identity_and_versions_match(kind: KindSchema) -> None:
    theirs = SHIPPED[(kind.group, kind.kind)]["spec"]
    ours = render_crd(kind)["spec"]
    assert ours["names"] == theirs["names"]
    assert ours["scope"] == theirs["scope"]

    def versions(spec: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [(v["name"], v["served"], v["storage"], v.get("additionalPrinterColumns"), v.get("subresources")) for v in spec["versions"]]

    assert versions(ours) == versions(theirs)


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
def test_spec_schema_equals_shipped(kind: KindSchema) -> None:
    for version in SHIPPED[(kind.group, kind.kind)]["spec"]["versions"]:
        theirs = version["schema"]["openAPIV3Schema"]
        ours = object_schema(kind, version["name"])
        assert list(differences(ours["properties"]["spec"], theirs["properties"]["spec"], "spec")) == []
        # and the whole object: top-level required, open status with its default
        assert list(differences(ours, theirs)) == []
