"""The policies.kyverno.io kinds' schemas equal Kyverno v1.19.1's CRDs in structure."""

from typing import Any

import pytest

from stockade.policy.schema.celpolicies import GROUP, KINDS
from stockade.policy.schema.types import KindSchema
from stockade.testing import kyvernocrds


@pytest.fixture(scope="module")
def upstream() -> dict[tuple[str, str], dict[str, Any]]:
    # scripts/test-setup.sh fetches the module; without it this fails rather than skips
    return kyvernocrds.crds()


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
def test_kind_schema_equals_upstream_crd(kind: KindSchema, upstream: dict[tuple[str, str], dict[str, Any]]) -> None:
    assert kyvernocrds.schema_differences(kind, upstream[(kind.group, kind.kind)]) == []


def test_every_upstream_policies_crd_has_a_kind_schema(upstream: dict[tuple[str, str], dict[str, Any]]) -> None:
    ours = {(kind.group, kind.kind) for kind in KINDS}
    theirs = {key for key in upstream if key[0] == GROUP}
    assert theirs - ours == set()
    assert ours - theirs == set()
